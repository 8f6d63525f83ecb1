{{/*
The anchor config and the static pod manifest: no secrets here, so they go to a ConfigMap.
The component chart defines "<chart>.pod", its static pod manifest.
*/}}

{{- define "kube-anchor-lib.anchorConfig" -}}
apiVersion: kube-anchor.io/v1alpha1
kind: Anchor
metadata:
  name: {{ .Values.component.name }}
spec:
  variables: [NODE_NAME, NODE_IP]
  files:
{{- range .Values.files }}
    # Relative to this file: the Secret volume sits next to the config volume.
    - source: ../secrets/{{ .name }}
      path: {{ .path }}
      mode: {{ .mode | quote }}
{{- with .owner }}
      owner: {{ . | quote }}
{{- end }}
{{- if .template }}
      template: true
{{- end }}
{{- end }}
  manifest:
    source: pod.yaml
    path: {{ .Values.component.manifestPath }}
{{- with .Values.component.droppedServingNames }}
  droppedServingNames: {{ toJson . }}
{{- end }}
{{- $m := .Values.membership | default dict }}
{{- if $m.enabled }}
{{- $c := .Values.component }}
  etcdMember:
    endpoints: {{ toJson $m.endpoints }}
    name: ${NODE_NAME}
    peerURL: https://${NODE_IP}:2380
    clientURL: https://${NODE_IP}:2379
    clientCA: ../secrets/{{ $m.clientCA }}
    clientCert: ../secrets/{{ $m.clientCert }}
    clientKey: ../secrets/{{ $m.clientKey }}
    dataDir: {{ $c.dataDir }}
{{- with $m.snapshots }}
    snapshots: {keep: {{ .keep | int }}, maxBytes: {{ .maxBytes | int64 }}
{{- with .schedule }}{{ if .every }}, schedule: {every: {{ .every | quote }}, keep: {{ .keep | int }}}{{ end }}{{ end -}}
    }
{{- end }}
{{- with $m.defrag }}{{ if .every }}
    defrag: {every: {{ .every | quote }}, minBytes: {{ .minBytes | int64 }}, minFreePercent: {{ .minFreePercent | int }}}
{{- end }}{{ end }}
{{- with $m.learnerCatchUpTimeout }}
    learnerCatchUpTimeout: {{ . | quote }}
{{- end }}
{{- if hasKey $m "handOffLeadership" }}
    handOffLeadership: {{ $m.handOffLeadership }}
{{- end }}
{{- if and $c.initialCluster (eq $c.initialClusterState "new") }}
    # Only the nodes named here may start a new cluster; any other node joins as a learner.
    initialCluster: {{ $c.initialCluster | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kube-anchor-lib.configData" -}}
anchor.yaml: |
{{ include "kube-anchor-lib.anchorConfig" . | indent 2 }}
pod.yaml: |
{{ include (printf "%s.pod" .Chart.Name) . | indent 2 }}
{{- end -}}

{{/* Credentials shared by every node: base64 data of the Secret. */}}
{{- define "kube-anchor-lib.secretData" -}}
{{- range include "kube-anchor-lib.credentialNames" . | fromJsonArray }}
{{- if hasKey $.Values.credentials . }}
{{ . }}: {{ index $.Values.credentials . | b64enc }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kube-anchor-lib.nodeSecretData" -}}
{{- $node := .node -}}
{{- range $name, $content := $node.credentials }}
{{ $name }}: {{ $content | b64enc }}
{{- end }}
{{- end -}}

{{/*
Input revision markers (see kube-anchor's `--expect-inputs`): each input object carries the hash
of its own data under a dot-key, and the pod template names the markers it was rendered with.
An anchor applies only inputs whose markers match its own pod's, so the kubelet refreshing the
volumes of running pods on `helm upgrade` does not reach every node at once: a node's inputs
change only when the DaemonSet rollout replaces its anchor pod.
*/}}
{{- define "kube-anchor-lib.configHash" -}}{{ include "kube-anchor-lib.configData" . | sha256sum }}{{- end -}}
{{- define "kube-anchor-lib.secretHash" -}}{{ include "kube-anchor-lib.secretData" . | sha256sum }}{{- end -}}
{{- define "kube-anchor-lib.nodeSecretHash" -}}{{ include "kube-anchor-lib.nodeSecretData" . | sha256sum }}{{- end -}}

{{/* The pod's expectation: PATH=HASH of each marker its volumes carry. Takes the daemonsetFor dict. */}}
{{- define "kube-anchor-lib.expectInputs" -}}
{{- $r := .root -}}
{{- $markers := list (printf "%s/.inputs-config=%s" (include "kube-anchor-lib.configDir" $r) (include "kube-anchor-lib.configHash" $r)) -}}
{{- $markers = append $markers (printf "%s/.inputs-secret=%s" (include "kube-anchor-lib.secretDir" $r) (include "kube-anchor-lib.secretHash" $r)) -}}
{{- if .nodeName -}}
{{- $markers = append $markers (printf "%s/.inputs-node-secret=%s" (include "kube-anchor-lib.secretDir" $r) (include "kube-anchor-lib.nodeSecretHash" (dict "node" .node))) -}}
{{- end -}}
{{- join "," $markers -}}
{{- end -}}

{{- define "kube-anchor-lib.configmap" -}}
{{- include "kube-anchor-lib.validate" . -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "kube-anchor-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
data:
  {{- include "kube-anchor-lib.configData" . | nindent 2 }}
  .inputs-config: {{ include "kube-anchor-lib.configHash" . }}
{{- end -}}

{{- define "kube-anchor-lib.secrets" -}}
{{- include "kube-anchor-lib.validate" . -}}
apiVersion: v1
kind: Secret
metadata:
  name: {{ include "kube-anchor-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
type: Opaque
data:
  {{- include "kube-anchor-lib.secretData" . | nindent 2 }}
  .inputs-secret: {{ include "kube-anchor-lib.secretHash" . | b64enc }}
{{- range $nodeName, $node := .Values.perNode }}
---
apiVersion: v1
kind: Secret
metadata:
  name: {{ printf "%s-%s" (include "kube-anchor-lib.fullname" $) $nodeName | trunc 63 | trimSuffix "-" }}
  namespace: {{ $.Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" $ | nindent 4 }}
    kube-anchor.io/node: {{ $nodeName }}
type: Opaque
data:
  {{- include "kube-anchor-lib.nodeSecretData" (dict "node" $node) | nindent 2 }}
  .inputs-node-secret: {{ include "kube-anchor-lib.nodeSecretHash" (dict "node" $node) | b64enc }}
{{- end }}
{{- end -}}
