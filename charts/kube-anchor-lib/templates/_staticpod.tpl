{{/* Parts of the components' static pods, written once for every component chart. */}}

{{/* The component's image: <image>@<digest> when component.digest pins it, else <image>:<tag>.
Takes (dict "component" .Values.component "tag" "<the version's tag>"). */}}
{{- define "kube-anchor-lib.componentImage" -}}
{{- if .component.digest -}}
{{- printf "%s@%s" .component.image .component.digest -}}
{{- else -}}
{{- printf "%s:%s" .component.image .tag -}}
{{- end -}}
{{- end -}}

{{/*
The component container's kubelet probes, as kubeadm writes them (cmd/kubeadm/app/util/staticpod:
LivenessProbe, ReadinessProbe, StartupProbe with kubeadm's default 4-minute control-plane
timeout): the timing of each over these defaults from component.probes.<kind>, field by field;
the endpoint is the chart's. Takes (dict "component" .Values.component "liveness" "<httpGet flow
mapping>" "readiness" "…" "startup" "…"); a kind given no endpoint has no probe, and timing set
for it is refused.
*/}}
{{- define "kube-anchor-lib.probes" -}}
{{- $defaults := dict
    "liveness" (dict "initialDelaySeconds" 10 "timeoutSeconds" 15 "periodSeconds" 10 "failureThreshold" 8)
    "readiness" (dict "timeoutSeconds" 15 "periodSeconds" 1 "failureThreshold" 3)
    "startup" (dict "initialDelaySeconds" 10 "timeoutSeconds" 15 "periodSeconds" 10 "failureThreshold" 24) -}}
{{- $given := .component.probes | default dict -}}
{{- range $kind := list "liveness" "readiness" "startup" }}
{{- $httpGet := index $ $kind }}
{{- $timing := index $given $kind | default dict }}
{{- if $httpGet }}
{{ $kind }}Probe:
  httpGet: {{ $httpGet }}
{{- range $field := list "initialDelaySeconds" "timeoutSeconds" "periodSeconds" "successThreshold" "failureThreshold" }}
{{- if hasKey $timing $field }}
  {{ $field }}: {{ index $timing $field | int }}
{{- else if hasKey (index $defaults $kind) $field }}
  {{ $field }}: {{ index $defaults $kind $field }}
{{- end }}
{{- end }}
{{- else if hasKey $given $kind }}
{{- fail (printf "component.probes.%s: %s has no %s probe (as kubeadm's pod has none)" $kind $.component.name $kind) }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The component container's hostPath volumes, in kubeadm's HostPathMount shape: the chart's own
(own: a list of (dict "name" "hostPath" "mountPath" "readOnly" "pathType")), then
component.extraVolumes. A name or a mountPath used twice is refused. JSON list, each with
readOnly (default false) and pathType (default DirectoryOrCreate). Takes (dict "component"
.Values.component "own" <list>).
*/}}
{{- define "kube-anchor-lib.hostPathMounts" -}}
{{- $all := list -}}
{{- $names := dict -}}
{{- $paths := dict -}}
{{- $own := .own | default list -}}
{{- $extra := .component.extraVolumes | default list -}}
{{- range $i, $m := concat $own $extra }}
{{- $at := printf "the chart's volume %s" $m.name }}
{{- if ge $i (len $own) }}{{ $at = printf "component.extraVolumes[%d]" (sub $i (len $own)) }}{{ end }}
{{- $path := clean $m.mountPath }}
{{- if hasKey $names $m.name }}
{{- fail (printf "%s: the volume name %s is taken by %s" $at $m.name (get $names $m.name)) }}
{{- end }}
{{- if hasKey $paths $path }}
{{- fail (printf "%s: the mountPath %s is taken by %s" $at $path (get $paths $path)) }}
{{- end }}
{{- $_ := set $names $m.name $at }}
{{- $_ := set $paths $path $at }}
{{- $all = append $all (dict "name" $m.name "hostPath" $m.hostPath "mountPath" $m.mountPath "readOnly" (default false $m.readOnly) "pathType" (default "DirectoryOrCreate" $m.pathType)) }}
{{- end }}
{{- toJson $all -}}
{{- end -}}

{{/* A path in a flow mapping: as it is when it needs no quotes (the manifests stay as they were),
else quoted. */}}
{{- define "kube-anchor-lib.flowPath" -}}
{{- if regexMatch "^/[-/._a-zA-Z0-9]*$" . }}{{ . }}{{ else }}{{ toJson . }}{{ end -}}
{{- end -}}

{{/* The volumeMounts of the component container (see kube-anchor-lib.hostPathMounts). */}}
{{- define "kube-anchor-lib.volumeMounts" -}}
volumeMounts:
{{- range include "kube-anchor-lib.hostPathMounts" . | fromJsonArray }}
  - {name: {{ .name }}, mountPath: {{ include "kube-anchor-lib.flowPath" .mountPath }}{{ if .readOnly }}, readOnly: true{{ end }}}
{{- end }}
{{- end -}}

{{/* The volumes of the static pod (see kube-anchor-lib.hostPathMounts). */}}
{{- define "kube-anchor-lib.volumes" -}}
volumes:
{{- range include "kube-anchor-lib.hostPathMounts" . | fromJsonArray }}
  - name: {{ .name }}
    hostPath: {path: {{ include "kube-anchor-lib.flowPath" .hostPath }}, type: {{ .pathType }}}
{{- end }}
{{- end -}}
