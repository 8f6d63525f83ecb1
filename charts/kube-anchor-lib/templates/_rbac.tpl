{{/* Exactly what the anchor calls: its pod, DaemonSet and Node, and the list of every anchor pod
and DaemonSet of its component in any namespace (pre-stop: is another anchor still here, does a
quorum remain); mirror pods (run); Events on its pod; and, in its own namespace only (a Role),
the component's rollout Lease. No secrets, no configmaps, no writes but Events and the Lease.

Kept on `helm uninstall` (resource-policy keep): the anchors' preStop hooks run after Helm has
deleted the release's objects, and need this identity to prove the decommission (and to give
back a rollout turn); a deleted ServiceAccount's tokens are refused, which the hook must treat
as "no evidence" and keep the static pod. Remove these objects once the anchor pods are gone
(see NOTES). */}}
{{- define "kube-anchor-lib.rbac" -}}
{{- $full := include "kube-anchor-lib.fullname" . -}}
{{- if .Values.serviceAccount.create }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "kube-anchor-lib.serviceAccountName" . }}
  namespace: {{ .Release.Namespace }}
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
---
{{- end }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ $full }}
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
rules:
  - apiGroups: [""]
    resources: [pods]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [nodes]
    verbs: [get]
  - apiGroups: [apps]
    resources: [daemonsets]
    verbs: [get, list]
  - apiGroups: ["", events.k8s.io]
    resources: [events]
    verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ $full }}
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ $full }}
subjects:
  - kind: ServiceAccount
    name: {{ include "kube-anchor-lib.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
---
# The component's rollout Lease, kube-anchor-<component> in the anchors' own namespace: one node
# at a time across its DaemonSets. (A create names no object, so it cannot be limited to one.)
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ $full }}
  namespace: {{ .Release.Namespace }}
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
rules:
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    resourceNames: [{{ printf "kube-anchor-%s" .Values.component.name }}]
    verbs: [get, update]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ $full }}
  namespace: {{ .Release.Namespace }}
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ $full }}
subjects:
  - kind: ServiceAccount
    name: {{ include "kube-anchor-lib.serviceAccountName" . }}
    namespace: {{ .Release.Namespace }}
{{- end -}}
