{{/*
What the values schema cannot say, checked before anything renders: every problem at once, in one
failure. Each component chart adds its own through "<chart>.problems" (a JSON list of messages).
*/}}
{{- define "kube-anchor-lib.validate" -}}
{{- $problems := include (printf "%s.problems" .Chart.Name) . | fromJsonArray -}}
{{- $problems = concat $problems (include "kube-anchor-lib.credentialProblems" . | fromJsonArray) -}}
{{- if $problems -}}
{{- fail (printf "values of %s:\n- %s" .Chart.Name (join "\n- " $problems)) -}}
{{- end -}}
{{- end -}}

{{/*
The names of the credentials the anchor reads: every file it writes (files[].name), the etcd
client credentials of membership when enabled, and the health endpoint's CA. JSON list.
*/}}
{{- define "kube-anchor-lib.credentialNames" -}}
{{- $names := list -}}
{{- range .Values.files }}{{ $names = append $names .name }}{{ end -}}
{{- $m := .Values.membership | default dict -}}
{{- if $m.enabled }}{{ $names = concat $names (list $m.clientCA $m.clientCert $m.clientKey) }}{{ end -}}
{{- with .Values.anchor.healthCAFile }}{{ $names = append $names . }}{{ end -}}
{{- uniq $names | toJson -}}
{{- end -}}

{{/*
Every key of credentials and of perNode.<node>.credentials must be such a name (a typo would
otherwise leave the file it meant without content), and every name must have its content: in
credentials, or in the credentials of every node of perNode. JSON list of messages.
*/}}
{{- define "kube-anchor-lib.credentialProblems" -}}
{{- $names := include "kube-anchor-lib.credentialNames" . | fromJsonArray -}}
{{- $shared := .Values.credentials | default dict -}}
{{- $perNode := .Values.perNode | default dict -}}
{{- $problems := list -}}
{{- $unknown := list -}}
{{- range $key := keys $shared | sortAlpha }}
{{- if not (has $key $names) }}{{ $unknown = append $unknown (printf "credentials.%s" $key) }}{{ end }}
{{- end -}}
{{- range $node := keys $perNode | sortAlpha }}
{{- range $key := keys ((index $perNode $node).credentials | default dict) | sortAlpha }}
{{- if not (has $key $names) }}{{ $unknown = append $unknown (printf "perNode.%s.credentials.%s" $node $key) }}{{ end }}
{{- end }}
{{- end -}}
{{- if $unknown -}}
{{- $problems = append $problems (printf "%s: no such credential; the names are %s (those of files, membership's clientCA, clientCert and clientKey when enabled, and anchor.healthCAFile)" (join ", " $unknown) (join ", " $names)) -}}
{{- end -}}
{{- $missing := list -}}
{{- $example := "" -}}
{{- range $name := $names }}
{{- if not (hasKey $shared $name) }}
{{- $lacking := list }}
{{- range $node := keys $perNode | sortAlpha }}
{{- if not (hasKey ((index $perNode $node).credentials | default dict) $name) }}{{ $lacking = append $lacking $node }}{{ end }}
{{- end }}
{{- if or (not $perNode) (eq (len $lacking) (len $perNode)) }}
{{- $missing = append $missing $name }}
{{- $example = $example | default (printf "credentials.%s" ($name | replace "." "\\.")) }}
{{- else if $lacking }}
{{- $missing = append $missing (printf "%s (nodes %s)" $name (join ", " $lacking)) }}
{{- $example = $example | default (printf "perNode.%s.credentials.%s" (first $lacking) ($name | replace "." "\\.")) }}
{{- end }}
{{- end }}
{{- end -}}
{{- if $missing -}}
{{- $problems = append $problems (printf "no content for %s: each goes in credentials, or in the credentials of every node of perNode (e.g. --set-file '%s=<file>')" (join ", " $missing) $example) -}}
{{- end -}}
{{- toJson $problems -}}
{{- end -}}
