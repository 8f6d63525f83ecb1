// Command kube is a multi-call binary holding the real Kubernetes components kube-anchor's
// tests run against: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubeadm
// (whose certificate, kubeconfig and manifest phases make the files `kube-anchor import` reads) and a
// kubelet whose container runtime is either the fake CRI runtime of Kubernetes' own scale tests
// (kubemark) or a runtime whose containers are real processes (procruntime.go), and the real
// kubelet (node-kubelet: cmd/kubelet as a node runs it, for the containerd nodes).
//
// The component is chosen from the name the binary is called by (tools/bin/kube-apiserver is
// a link to it) or, failing that, from the first argument.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kubeadm "k8s.io/kubernetes/cmd/kubeadm/app"
	kubeadmerrors "k8s.io/kubernetes/cmd/kubeadm/app/util/errors"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

var commands = map[string]func() *cobra.Command{
	"kube-apiserver":          apiserver.NewAPIServerCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
	"kubelet":                 newKubeletCommand,
	"node-kubelet":            func() *cobra.Command { return kubeletapp.NewKubeletCommand(context.Background()) },
}

func main() {
	// The first process of a process-runtime container: no cobra, no flags, as little as can be
	// between the fork and the container's exec.
	if len(os.Args) > 1 && os.Args[1] == "container-init" {
		containerInit(os.Args[2:])
		return
	}
	name := filepath.Base(os.Args[0])
	if _, ok := commands[name]; !ok && name != "kubectl" && name != "kubeadm" && len(os.Args) > 1 {
		name = os.Args[1]
		os.Args = os.Args[1:]
	}
	if name == "kubectl" {
		command := kubectl.NewDefaultKubectlCommand()
		if err := cli.RunNoErrOutput(command); err != nil {
			kubectlutil.CheckErr(err)
		}
		return
	}
	if name == "kubeadm" {
		// kubeadm's own main: it sets up its flags on the process-wide flag sets itself.
		kubeadmerrors.HandleError(kubeadm.Run())
		return
	}
	newCommand, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "usage: kube {kube-apiserver|kube-controller-manager|kube-scheduler|kubectl|kubeadm|kubelet|node-kubelet} [flags]\n")
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
