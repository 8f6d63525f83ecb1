{{- define "kube-anchor-lib.notes" -}}
{{- $full := include "kube-anchor-lib.fullname" . -}}
kube-anchor keeps {{ .Values.component.name }} on every selected node as a static pod
({{ .Values.component.manifestPath }}).

Watch the rollout; it advances one node at a time, and only once that node's new static pod
runs the version written (the anchor's readiness):

  kubectl -n {{ .Release.Namespace }} rollout status daemonset/{{ $full }}{{ if .Values.perNode }}-<node>{{ end }}

Why a node is not ready, and what each anchor wrote:

  kubectl -n {{ .Release.Namespace }} get pods -l app.kubernetes.io/instance={{ .Release.Name }} -o wide
  kubectl -n {{ .Release.Namespace }} describe pod <anchor pod>      # readiness message, RolledBack events
  kubectl -n {{ .Release.Namespace }} exec <anchor pod> -- kube-anchor status

`helm uninstall` removes the static pod and its files from the nodes (the anchors' preStop hook
sees the DaemonSet go); an upgrade, a reboot or an API outage never does. The anchors'
ServiceAccount and RBAC outlive the release (the hooks need them to prove the decommission);
once the anchor pods are gone:
{{ if .Values.serviceAccount.create }}
  kubectl -n {{ .Release.Namespace }} delete serviceaccount {{ include "kube-anchor-lib.serviceAccountName" . }}
{{- end }}
  kubectl -n {{ .Release.Namespace }} delete rolebinding,role {{ $full }}
  kubectl delete clusterrolebinding,clusterrole {{ $full }}
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy {{ $full }}-anchorstatus
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy {{ $full }}-rollout-lease
{{- if .Values.anchor.drainGuard }}
  kubectl delete validatingadmissionpolicybinding,validatingadmissionpolicy {{ $full }}-drain-guard
{{- end }}
  kubectl delete anchorstatuses -l kube-anchor.io/component={{ .Values.component.name }}   # not after a rename: the new release's anchors publish them
{{- $guard := toString .Values.anchor.quorumGuard }}
{{- $quorum := or (eq $guard "on") (and (eq $guard "auto") (has .Values.component.name (list "etcd" "kube-apiserver"))) }}
{{- $lastCopy := or (eq $guard "last-copy") (and (eq $guard "auto") (has .Values.component.name (list "kube-scheduler" "kube-controller-manager"))) }}
{{- if or $quorum $lastCopy }}

{{ if $quorum -}}
{{ .Values.component.name }} needs a quorum: the hooks keep it on a node while removing it would
leave fewer than a quorum of Ready copies (a Warning Event DecommissionHeld says so).
{{- else -}}
{{ .Values.component.name }} cannot be brought back by the cluster once every copy is gone: the
hooks keep it on a node while no other Ready copy would remain (a Warning Event
DecommissionHeld says so).
{{- end }}
To really take it off every node, annotate its Nodes first (a DaemonSet's own annotation is gone
with it once `helm uninstall` has deleted it; the Node's lifts the guard for every kube-anchor
component there, so remove it afterwards):

  kubectl annotate node <node> kube-anchor.io/decommission=true
  helm uninstall -n {{ .Release.Namespace }} {{ .Release.Name }}
  kubectl annotate node <node> kube-anchor.io/decommission-
{{- end }}

{{- if .Values.anchor.drainGuard }}

Drains: each node has a guard pod ({{ .Values.component.name }}-guard-<node>) whose readiness is
the static pod's, and the PodDisruptionBudget {{ include "kube-anchor-lib.drainGuardName" . }} lets one be
unavailable. `kubectl drain` of a second node waits until the first node's static pod is healthy
again and that node is uncordoned (`kubectl uncordon`: its guard comes back only then).

{{- end }}

A version that failed its trial is not written again; after fixing the cause elsewhere:

  kubectl -n {{ .Release.Namespace }} exec <anchor pod> -- kube-anchor retry
{{- end -}}
