{{/* The static pod manifest the anchor renders (${NODE_NAME}, ${NODE_IP}) and writes. */}}
{{- define "kube-apiserver.pod" -}}
{{- $c := .Values.component -}}
{{- $mounts := dict "component" $c "own" (list
    (dict "name" "pki" "hostPath" "/etc/kubernetes/pki" "mountPath" "/etc/kubernetes/pki" "readOnly" true)
    (dict "name" "encryption" "hostPath" "/etc/kubernetes/encryption" "mountPath" "/etc/kubernetes/encryption" "readOnly" true)) -}}
apiVersion: v1
kind: Pod
metadata:
  name: {{ $c.name }}
  namespace: {{ $c.namespace }}
  labels: {component: kube-apiserver, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: kube-apiserver
      image: {{ include "kube-anchor-lib.componentImage" (dict "component" $c "tag" $c.version) }}
      command:
        - kube-apiserver
        {{- include "kube-anchor-lib.args" (dict "component" $c "fixed" (list
            "--advertise-address=${NODE_IP}"
            (printf "--secure-port=%v" $c.securePort)
            "--allow-privileged=true"
            "--authorization-mode=Node,RBAC"
            "--enable-admission-plugins=NodeRestriction"
            "--client-ca-file=/etc/kubernetes/pki/ca.crt"
            "--tls-cert-file=/etc/kubernetes/pki/apiserver.crt"
            "--tls-private-key-file=/etc/kubernetes/pki/apiserver.key"
            "--kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt"
            "--kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key"
            (printf "--etcd-servers=%v" $c.etcdServers)
            "--etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt"
            "--etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt"
            "--etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key"
            (printf "--service-account-issuer=%v" $c.serviceAccountIssuer)
            "--service-account-key-file=/etc/kubernetes/pki/sa.pub"
            "--service-account-signing-key-file=/etc/kubernetes/pki/sa.key"
            (printf "--service-cluster-ip-range=%v" $c.serviceClusterIPRange)
            "--encryption-provider-config=/etc/kubernetes/encryption/config.yaml"
        )) | trim | nindent 8 }}
      {{- include "kube-anchor-lib.probes" (dict "component" $c
          "liveness" (printf "{host: \"${NODE_IP}\", path: /livez, port: %v, scheme: HTTPS}" $c.securePort)
          "readiness" (printf "{host: \"${NODE_IP}\", path: /readyz, port: %v, scheme: HTTPS}" $c.securePort)
          "startup" (printf "{host: \"${NODE_IP}\", path: /livez, port: %v, scheme: HTTPS}" $c.securePort)) | trim | nindent 6 }}
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      {{- include "kube-anchor-lib.volumeMounts" $mounts | nindent 6 }}
  {{- include "kube-anchor-lib.volumes" $mounts | nindent 2 }}
{{- end -}}


{{/* What the values schema cannot say of this chart (see kube-anchor-lib.validate): nothing. */}}
{{- define "kube-apiserver.problems" -}}[]{{- end -}}
