{{/* Names and labels shared by every kube-anchor chart. */}}

{{/* The name of the release's objects: <release>-anchor, nameOverride in place of "anchor", or
fullnameOverride. Names only: the labels stay (the anchors find each other by them). */}}
{{- define "kube-anchor-lib.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (.Values.nameOverride | default "anchor") | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kube-anchor-lib.labels" -}}
app.kubernetes.io/name: kube-anchor
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ .Values.component.name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "kube-anchor-lib.selectorLabels" -}}
app.kubernetes.io/name: kube-anchor
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kube-anchor-lib.serviceAccountName" -}}
{{- default (include "kube-anchor-lib.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{/* Where the pod sees its inputs. */}}
{{- define "kube-anchor-lib.configDir" -}}/etc/kube-anchor/config{{- end -}}
{{- define "kube-anchor-lib.secretDir" -}}/etc/kube-anchor/secrets{{- end -}}

{{/*
The host directories the anchor writes to: the parent of every file, of the manifest, and the
state dir; with etcd membership, the data dir too (the anchor reads whether it holds a member,
and a decommission saves and removes it). Each becomes one narrow hostPath mount under /host.
*/}}
{{- define "kube-anchor-lib.hostDirs" -}}
{{- $dirs := list (dir .Values.component.manifestPath) .Values.anchor.stateDir -}}
{{- range .Values.files -}}
{{- $dirs = append $dirs (dir .path) -}}
{{- end -}}
{{- if and .Values.membership .Values.membership.enabled .Values.component.dataDir -}}
{{- $dirs = append $dirs .Values.component.dataDir -}}
{{- end -}}
{{- $dirs = $dirs | uniq | sortAlpha -}}
{{- /* A directory below another mounted one is already there. */ -}}
{{- $mounts := list -}}
{{- range $d := $dirs -}}
{{- $covered := false -}}
{{- range $other := $dirs -}}
{{- if and (ne $d $other) (hasPrefix (printf "%s/" $other) $d) -}}{{- $covered = true -}}{{- end -}}
{{- end -}}
{{- if not $covered -}}{{- $mounts = append $mounts $d -}}{{- end -}}
{{- end -}}
{{- $mounts | toJson -}}
{{- end -}}

{{/*
Labels or annotations the values add to a pod (podLabels, podAnnotations), as YAML lines; none
may set one the chart sets itself. Takes (dict "given" <map> "field" "podLabels" "taken" <list>
"why" "<what the chart's own are for>").
*/}}
{{- define "kube-anchor-lib.podExtra" -}}
{{- $clash := list -}}
{{- range $key := keys .given | sortAlpha }}{{ if has $key $.taken }}{{ $clash = append $clash $key }}{{ end }}{{ end -}}
{{- if $clash -}}
{{- fail (printf "%s: %s: the chart sets these itself (%s); %s may only add others" .field (join ", " $clash) .why .field) -}}
{{- end -}}
{{- toYaml .given -}}
{{- end -}}

{{/* The image reference: pinned by digest when one is given (tools/image.sh prints it). */}}
{{- define "kube-anchor-lib.image" -}}
{{- if .digest -}}
{{- printf "%s@%s" .repository .digest -}}
{{- else -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}
{{- end -}}

{{/* A probe host in a flow mapping: an address as is (the manifest stays byte-identical to
earlier releases), "${NODE_IP}" quoted. */}}
{{- define "kube-anchor-lib.probeHost" -}}
{{- if regexMatch "^[0-9.]+$" . }}{{ . }}{{ else }}{{ quote . }}{{ end -}}
{{- end -}}

{{/*
A component's command-line flags, one "- --name=value" line each: the chart's fixed flags in
their order, each replaced in place by component.extraArgs of the same name or left out when
listed in component.omitArgs, then the other extraArgs by name. So a flag appears at most once,
and values can state any command line (e.g. one taken over from kubeadm by `kube-anchor import`).
Takes (dict "component" .Values.component "fixed" (list "--name=value" ...)).
*/}}
{{- define "kube-anchor-lib.args" -}}
{{- $extra := .component.extraArgs | default dict -}}
{{- $omit := .component.omitArgs | default list -}}
{{- $names := list -}}
{{- $args := list -}}
{{- range .fixed -}}
{{- $name := regexReplaceAll "^--([^=]*)=.*$" . "${1}" -}}
{{- $names = append $names $name -}}
{{- if hasKey $extra $name -}}
{{- $args = append $args (printf "--%s=%v" $name (index $extra $name)) -}}
{{- else if not (has $name $omit) -}}
{{- $args = append $args . -}}
{{- end -}}
{{- end -}}
{{- range $name, $value := $extra -}}
{{- if not (has $name $names) -}}
{{- $args = append $args (printf "--%s=%v" $name $value) -}}
{{- end -}}
{{- end -}}
{{- range $args }}
- {{ . }}
{{- end -}}
{{- end -}}

{{/*
The directory of anchor.runtimeEndpoint on the host ("" when the runtime is not asked).
*/}}
{{- define "kube-anchor-lib.runtimeSocketDir" -}}
{{- with .Values.anchor.runtimeEndpoint }}{{ trimPrefix "unix://" . | dir }}{{ end }}
{{- end -}}
