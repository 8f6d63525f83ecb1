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
