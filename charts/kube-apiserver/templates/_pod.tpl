{{/* The static pod manifest the anchor renders (${NODE_NAME}, ${NODE_IP}) and writes. */}}
{{- define "kube-apiserver.pod" -}}
{{- $c := .Values.component -}}
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
      image: {{ printf "%s:%s" $c.image $c.version }}
      command:
        - kube-apiserver
        - --advertise-address=${NODE_IP}
        - --secure-port={{ $c.securePort }}
        - --allow-privileged=true
        - --authorization-mode=Node,RBAC
        - --enable-admission-plugins=NodeRestriction
        - --client-ca-file=/etc/kubernetes/pki/ca.crt
        - --tls-cert-file=/etc/kubernetes/pki/apiserver.crt
        - --tls-private-key-file=/etc/kubernetes/pki/apiserver.key
        - --kubelet-client-certificate=/etc/kubernetes/pki/apiserver-kubelet-client.crt
        - --kubelet-client-key=/etc/kubernetes/pki/apiserver-kubelet-client.key
        - --etcd-servers={{ $c.etcdServers }}
        - --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt
        - --etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt
        - --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key
        - --service-account-issuer={{ $c.serviceAccountIssuer }}
        - --service-account-key-file=/etc/kubernetes/pki/sa.pub
        - --service-account-signing-key-file=/etc/kubernetes/pki/sa.key
        - --service-cluster-ip-range={{ $c.serviceClusterIPRange }}
        - --encryption-provider-config=/etc/kubernetes/encryption/config.yaml
        {{- range $k, $v := $c.extraArgs }}
        - --{{ $k }}={{ $v }}
        {{- end }}
      livenessProbe:
        httpGet: {host: "${NODE_IP}", path: /livez, port: {{ $c.securePort }}, scheme: HTTPS}
        initialDelaySeconds: 10
        failureThreshold: 8
      readinessProbe:
        httpGet: {host: "${NODE_IP}", path: /readyz, port: {{ $c.securePort }}, scheme: HTTPS}
        periodSeconds: 1
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      volumeMounts:
        - {name: pki, mountPath: /etc/kubernetes/pki, readOnly: true}
        - {name: encryption, mountPath: /etc/kubernetes/encryption, readOnly: true}
  volumes:
    - name: pki
      hostPath: {path: /etc/kubernetes/pki, type: DirectoryOrCreate}
    - name: encryption
      hostPath: {path: /etc/kubernetes/encryption, type: DirectoryOrCreate}
{{- end -}}
