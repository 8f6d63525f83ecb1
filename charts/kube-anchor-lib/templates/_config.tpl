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
{{- if .template }}
      template: true
{{- end }}
{{- end }}
  manifest:
    source: pod.yaml
    path: {{ .Values.component.manifestPath }}
{{- end -}}

{{- define "kube-anchor-lib.configData" -}}
anchor.yaml: |
{{ include "kube-anchor-lib.anchorConfig" . | indent 2 }}
pod.yaml: |
{{ include (printf "%s.pod" .Chart.Name) . | indent 2 }}
{{- end -}}

{{/* Credentials shared by every node: base64 data of the Secret. */}}
{{- define "kube-anchor-lib.secretData" -}}
{{- range .Values.files }}
{{- if hasKey $.Values.credentials .name }}
{{ .name }}: {{ index $.Values.credentials .name | b64enc }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "kube-anchor-lib.nodeSecretData" -}}
{{- $node := .node -}}
{{- range $name, $content := $node.credentials }}
{{ $name }}: {{ $content | b64enc }}
{{- end }}
{{- end -}}

{{- define "kube-anchor-lib.configmap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "kube-anchor-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
data:
  {{- include "kube-anchor-lib.configData" . | nindent 2 }}
{{- end -}}

{{- define "kube-anchor-lib.secrets" -}}
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
{{- end }}
{{- end -}}
