{{/* Exactly what the anchor calls: its pod, DaemonSet and Node, and the list of every anchor pod
and DaemonSet of its component in any namespace (pre-stop: is another anchor still here, does a
quorum remain); mirror pods (run); Events on its pod; and, in its own namespace only (a Role),
the component's rollout Lease; and its own node's AnchorStatus (a ValidatingAdmissionPolicy keeps
each anchor to its node's). No secrets, no configmaps, no writes but Events, the Lease and the
AnchorStatus.

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
  # Its node's AnchorStatus (the library chart's CRD): RBAC cannot name one object per node,
  # so the ValidatingAdmissionPolicy below lets each anchor write only its own node's object of
  # its own component. Reading the others is harmless (no secrets in them).
  - apiGroups: [kube-anchor.io]
    resources: [anchorstatuses]
    verbs: [get, list, watch, create, patch]
  # kube-apiserver's word on whether it still reaches etcd (the etcd chart's client check):
  # a status line, no data. Anonymous users may read /readyz but not its checks.
  - nonResourceURLs: [/readyz/etcd]
    verbs: [get]
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
# Each anchor writes the AnchorStatus of its own node and component only. A pod's ServiceAccount
# token is bound to the pod, and the API server gives the user of such a token the pod's node as
# the extra authentication.kubernetes.io/node-name; every anchor of the release shares the
# ServiceAccount, so that node is what tells them apart. A token bound to no pod is refused.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $full }}-anchorstatus
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [kube-anchor.io]
        apiVersions: ["*"]
        operations: [CREATE, UPDATE]
        resources: [anchorstatuses]
  matchConditions:
    - name: this-release-anchors
      expression: {{ printf "request.userInfo.username == 'system:serviceaccount:%s:%s'" .Release.Namespace (include "kube-anchor-lib.serviceAccountName" .) | quote }}
  validations:
    - expression: >-
        has(request.userInfo.extra) &&
        'authentication.kubernetes.io/node-name' in request.userInfo.extra &&
        object.status.node == request.userInfo.extra['authentication.kubernetes.io/node-name'][0]
      message: an anchor writes only the AnchorStatus of its own node (with its pod's ServiceAccount token, which names the node)
    - expression: {{ printf "object.status.component == '%s' && object.metadata.name == object.status.node + '.' + object.status.component" .Values.component.name | quote }}
      message: {{ printf "an anchor of %s writes only AnchorStatus <node>.%s" .Values.component.name .Values.component.name | quote }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $full }}-anchorstatus
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  policyName: {{ $full }}-anchorstatus
  validationActions: [Deny]
---
# The control plane's rollout Lease, kube-anchor-control-plane in the anchors' own namespace: one
# node at a time across every component's DaemonSets; and the component's own, kube-anchor-<component>,
# which earlier anchors held the turn on (read, and given back). (A create names no object, so it
# cannot be limited to one.)
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
    resourceNames: [kube-anchor-control-plane, {{ printf "kube-anchor-%s" .Values.component.name }}]
    verbs: [get, update]
  - apiGroups: [coordination.k8s.io]
    resources: [leases]
    verbs: [create]
  {{- if .Values.anchor.drainGuard }}
  # Its node's drain guard (see _drainguard.tpl); the ValidatingAdmissionPolicy below keeps each
  # anchor to its own node's, in the one shape the anchor builds. And the budget's minAvailable.
  - apiGroups: [""]
    resources: [pods]
    verbs: [create, delete]
  - apiGroups: [policy]
    resources: [poddisruptionbudgets]
    resourceNames: [{{ include "kube-anchor-lib.drainGuardName" . }}]
    verbs: [get, patch]
  {{- end }}
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
---
# The rollout Leases decide which node may restart a component, so, as for AnchorStatus, each
# anchor writes them only for its own node (the node its pod-bound token names): it takes a turn
# only for itself and gives back only its own; the components a holder rolls out change only with
# its own writes; a failure it records names its own node. Clearing a failure record is any
# node's (one that runs the revision converged proves the record wrong).
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $full }}-rollout-lease
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [coordination.k8s.io]
        apiVersions: ["*"]
        operations: [CREATE, UPDATE]
        resources: [leases]
        resourceNames: [kube-anchor-control-plane, {{ printf "kube-anchor-%s" .Values.component.name }}]
  matchConditions:
    - name: this-release-anchors
      expression: {{ printf "request.userInfo.username == 'system:serviceaccount:%s:%s'" .Release.Namespace (include "kube-anchor-lib.serviceAccountName" .) | quote }}
  variables:
    - name: node
      expression: >-
        has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra
        ? request.userInfo.extra['authentication.kubernetes.io/node-name'][0] : ''
    - name: oldHolder
      expression: >-
        oldObject != null && has(oldObject.spec) && has(oldObject.spec.holderIdentity) ? oldObject.spec.holderIdentity : ''
    - name: newHolder
      expression: "has(object.spec) && has(object.spec.holderIdentity) ? object.spec.holderIdentity : ''"
    - name: oldAnnotations
      expression: >-
        oldObject != null && has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}
    - name: newAnnotations
      expression: "has(object.metadata.annotations) ? object.metadata.annotations : {}"
  validations:
    - expression: variables.node != ''
      message: an anchor writes the rollout Lease only with its pod's ServiceAccount token, which names its node
    - expression: >-
        variables.newHolder == variables.oldHolder || variables.newHolder == variables.node ||
        (variables.newHolder == '' && variables.oldHolder == variables.node)
      message: an anchor takes the rollout turn only for its own node and gives back only its own
    - expression: >-
        variables.oldHolder == variables.node || variables.newHolder == variables.node ||
        (('kube-anchor.io/turn-components' in variables.newAnnotations) == ('kube-anchor.io/turn-components' in variables.oldAnnotations) &&
         (!('kube-anchor.io/turn-components' in variables.newAnnotations) ||
          variables.newAnnotations['kube-anchor.io/turn-components'] == variables.oldAnnotations['kube-anchor.io/turn-components']))
      message: only the node that holds the rollout turn changes the components it rolls out
    - expression: >-
        variables.newAnnotations.all(k, !k.startsWith('kube-anchor.io/failed-on.') ||
          variables.newAnnotations[k] == variables.node ||
          (k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.newAnnotations[k]))
      message: a failure an anchor records on the rollout Lease names its own node
    - expression: >-
        variables.newAnnotations.all(k, !k.startsWith('kube-anchor.io/failed-revision.') ||
          (k in variables.oldAnnotations && variables.oldAnnotations[k] == variables.newAnnotations[k]) ||
          ('kube-anchor.io/failed-on.' + k.substring(31) in variables.newAnnotations &&
           variables.newAnnotations['kube-anchor.io/failed-on.' + k.substring(31)] == variables.node))
      message: a failed revision an anchor records on the rollout Lease is one that failed on its own node
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $full }}-rollout-lease
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  policyName: {{ $full }}-rollout-lease
  validationActions: [Deny]
{{- if .Values.anchor.drainGuard }}
---
# Creating pods in the release's namespace is a wide grant; this keeps it to what the drain guard
# is: each anchor creates and deletes only its own node's guard (the node its pod-bound token
# names), bound to that node, the chart's image running `kube-anchor guard`, with no token, no
# volume, no host namespace and no privilege.
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: {{ $full }}-drain-guard
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: ["*"]
        operations: [CREATE, DELETE]
        resources: [pods]
  matchConditions:
    - name: this-release-anchors
      expression: {{ printf "request.userInfo.username == 'system:serviceaccount:%s:%s'" .Release.Namespace (include "kube-anchor-lib.serviceAccountName" .) | quote }}
  variables:
    - name: node
      expression: >-
        has(request.userInfo.extra) && 'authentication.kubernetes.io/node-name' in request.userInfo.extra
        ? request.userInfo.extra['authentication.kubernetes.io/node-name'][0] : ''
    - name: pod
      expression: "request.operation == 'DELETE' ? oldObject : object"
  validations:
    - expression: {{ printf "variables.node != '' && variables.pod.metadata.name == '%s-guard-' + variables.node" .Values.component.name | quote }}
      message: {{ printf "an anchor creates and deletes only its own node's drain guard, %s-guard-<node>" .Values.component.name | quote }}
    - expression: >-
        request.operation == 'DELETE' || (
        has(object.spec.nodeName) && object.spec.nodeName == variables.node &&
        has(object.spec.automountServiceAccountToken) && !object.spec.automountServiceAccountToken &&
        (!has(object.spec.volumes) || object.spec.volumes.size() == 0) &&
        (!has(object.spec.hostNetwork) || !object.spec.hostNetwork) &&
        (!has(object.spec.hostPID) || !object.spec.hostPID) &&
        (!has(object.spec.hostIPC) || !object.spec.hostIPC) &&
        (!has(object.spec.initContainers) || object.spec.initContainers.size() == 0) &&
        (!has(object.spec.ephemeralContainers) || object.spec.ephemeralContainers.size() == 0) &&
        has(object.spec.securityContext) && has(object.spec.securityContext.runAsNonRoot) && object.spec.securityContext.runAsNonRoot &&
        object.spec.containers.size() == 1 &&
        object.spec.containers.all(c, c.image == {{ include "kube-anchor-lib.image" .Values.image | squote }} &&
          has(c.command) && c.command == ['kube-anchor', 'guard'] && !has(c.args) &&
          has(c.securityContext) && has(c.securityContext.allowPrivilegeEscalation) && !c.securityContext.allowPrivilegeEscalation &&
          (!has(c.securityContext.privileged) || !c.securityContext.privileged) &&
          (!has(c.securityContext.capabilities) || !has(c.securityContext.capabilities.add))))
      message: a drain guard is bound to its anchor's node and runs the chart's image as `kube-anchor guard`, with no token, volume, host namespace or privilege
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $full }}-drain-guard
  annotations:
    helm.sh/resource-policy: keep
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
spec:
  policyName: {{ $full }}-drain-guard
  validationActions: [Deny]
{{- end }}
{{- end -}}
