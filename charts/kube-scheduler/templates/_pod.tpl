{{/* The static pod manifest the anchor renders (${NODE_NAME}, ${NODE_IP}) and writes. */}}
{{- define "kube-scheduler.pod" -}}
{{- $c := .Values.component -}}
{{- $mounts := dict "component" $c "own" (list
    (dict "name" "kubeconfig" "hostPath" "/etc/kubernetes/scheduler.conf" "mountPath" "/etc/kubernetes/scheduler.conf" "readOnly" true "pathType" "FileOrCreate")) -}}
apiVersion: v1
kind: Pod
metadata:
  name: {{ $c.name }}
  namespace: {{ $c.namespace }}
  labels: {component: kube-scheduler, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: kube-scheduler
      image: {{ include "kube-anchor-lib.componentImage" (dict "component" $c "tag" $c.version) }}
      command:
        - kube-scheduler
        {{- include "kube-anchor-lib.args" (dict "component" $c "fixed" (list
            "--kubeconfig=/etc/kubernetes/scheduler.conf"
            "--authentication-kubeconfig=/etc/kubernetes/scheduler.conf"
            "--authorization-kubeconfig=/etc/kubernetes/scheduler.conf"
            (printf "--bind-address=%s" $c.localAddress)
            "--leader-elect=true"
        )) | trim | nindent 8 }}
      {{- $host := include "kube-anchor-lib.probeHost" $c.localAddress }}
      {{- include "kube-anchor-lib.probes" (dict "component" $c
          "liveness" (printf "{host: %s, path: /livez, port: 10259, scheme: HTTPS}" $host)
          "readiness" (printf "{host: %s, path: /readyz, port: 10259, scheme: HTTPS}" $host)
          "startup" (printf "{host: %s, path: /livez, port: 10259, scheme: HTTPS}" $host)) | trim | nindent 6 }}
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      {{- include "kube-anchor-lib.volumeMounts" $mounts | nindent 6 }}
  {{- include "kube-anchor-lib.volumes" $mounts | nindent 2 }}
{{- end -}}


{{/* What the values schema cannot say of this chart (see kube-anchor-lib.validate): nothing. */}}
{{- define "kube-scheduler.problems" -}}[]{{- end -}}
