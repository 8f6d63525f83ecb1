{{/* The static pod manifest the anchor renders (${NODE_NAME}, ${NODE_IP}) and writes. */}}
{{- define "kube-controller-manager.pod" -}}
{{- $c := .Values.component -}}
{{- $mounts := dict "component" $c "own" (list
    (dict "name" "pki" "hostPath" "/etc/kubernetes/pki" "mountPath" "/etc/kubernetes/pki" "readOnly" true)
    (dict "name" "kubeconfig" "hostPath" "/etc/kubernetes/controller-manager.conf" "mountPath" "/etc/kubernetes/controller-manager.conf" "readOnly" true "pathType" "FileOrCreate")) -}}
apiVersion: v1
kind: Pod
metadata:
  name: {{ $c.name }}
  namespace: {{ $c.namespace }}
  labels: {component: kube-controller-manager, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: kube-controller-manager
      image: {{ include "kube-anchor-lib.componentImage" (dict "component" $c "tag" $c.version) }}
      command:
        - kube-controller-manager
        {{- include "kube-anchor-lib.args" (dict "component" $c "fixed" (list
            "--kubeconfig=/etc/kubernetes/controller-manager.conf"
            "--authentication-kubeconfig=/etc/kubernetes/controller-manager.conf"
            "--authorization-kubeconfig=/etc/kubernetes/controller-manager.conf"
            (printf "--bind-address=%s" $c.localAddress)
            "--client-ca-file=/etc/kubernetes/pki/ca.crt"
            (printf "--cluster-name=%v" $c.clusterName)
            "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt"
            "--cluster-signing-key-file=/etc/kubernetes/pki/ca.key"
            "--root-ca-file=/etc/kubernetes/pki/ca.crt"
            "--service-account-private-key-file=/etc/kubernetes/pki/sa.key"
            "--use-service-account-credentials=true"
            "--leader-elect=true"
        )) | trim | nindent 8 }}
      {{- $host := include "kube-anchor-lib.probeHost" $c.localAddress }}
      {{- /* No readiness probe, as kubeadm's. */}}
      {{- include "kube-anchor-lib.probes" (dict "component" $c
          "liveness" (printf "{host: %s, path: /healthz, port: 10257, scheme: HTTPS}" $host)
          "startup" (printf "{host: %s, path: /healthz, port: 10257, scheme: HTTPS}" $host)) | trim | nindent 6 }}
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      {{- include "kube-anchor-lib.volumeMounts" $mounts | nindent 6 }}
  {{- include "kube-anchor-lib.volumes" $mounts | nindent 2 }}
{{- end -}}


{{/* What the values schema cannot say of this chart (see kube-anchor-lib.validate): nothing. */}}
{{- define "kube-controller-manager.problems" -}}[]{{- end -}}
