{{/*
Drain protection (values anchor.drainGuard, on for etcd and kube-apiserver): the kubelet evicts no
static pod, so no PodDisruptionBudget can speak for one. Each anchor keeps a guard pod on its node
(<component>-guard-<node>: no token, no privilege, the anchor's image running `kube-anchor guard`)
whose readiness probe is its static pod's, and this budget over the guards keeps minAvailable one
below the nodes the release's DaemonSets select (the anchors set it; the chart leaves it out so
that an upgrade does not put it back). An eviction-based drain (kubectl drain, kured,
cluster-autoscaler, Cluster API) of a second node therefore waits until the first node's static
pod is healthy again and the node is uncordoned (its guard comes back only then).
*/}}
{{- define "kube-anchor-lib.drainGuard" -}}
{{- if .Values.anchor.drainGuard }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "kube-anchor-lib.drainGuardName" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  selector:
    matchLabels:
      kube-anchor.io/drain-guard: {{ .Values.component.name }}
  # A guard that is not ready (its static pod unhealthy) may go only while the others keep the
  # budget: a drain never takes a second node down to evict a sick one's guard.
  unhealthyPodEvictionPolicy: IfHealthyBudget
{{- end }}
{{- end -}}

{{- define "kube-anchor-lib.drainGuardName" -}}
{{- printf "%s-guard" (include "kube-anchor-lib.fullname" .) -}}
{{- end -}}
