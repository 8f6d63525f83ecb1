module kube-anchor.io/tools/pause

go 1.26
