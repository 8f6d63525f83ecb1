{{/*
What the values schema cannot say, checked before anything renders: every problem at once, in one
failure. Each component chart adds its own through "<chart>.problems" (a JSON list of messages).
*/}}
{{- define "kube-anchor-lib.validate" -}}
{{- $problems := include (printf "%s.problems" .Chart.Name) . | fromJsonArray -}}
{{- if $problems -}}
{{- fail (printf "values of %s:\n- %s" .Chart.Name (join "\n- " $problems)) -}}
{{- end -}}
{{- end -}}
