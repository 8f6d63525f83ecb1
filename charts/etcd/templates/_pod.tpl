{{/* The static pod manifest the anchor renders (${NODE_NAME}, ${NODE_IP}) and writes. */}}
{{- define "etcd.pod" -}}
{{- $c := .Values.component -}}
{{- $mounts := dict "component" $c "own" (list
    (dict "name" "data" "hostPath" $c.dataDir "mountPath" $c.dataDir)
    (dict "name" "pki" "hostPath" "/etc/kubernetes/pki/etcd" "mountPath" "/etc/kubernetes/pki/etcd" "readOnly" true)) -}}
apiVersion: v1
kind: Pod
metadata:
  name: {{ $c.name }}
  namespace: {{ $c.namespace }}
  labels: {component: etcd, tier: control-plane}
spec:
  hostNetwork: true
  priorityClassName: system-node-critical
  securityContext: {seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: etcd
      image: {{ include "kube-anchor-lib.componentImage" (dict "component" $c "tag" (trimPrefix "v" $c.version)) }}
      command:
        - etcd
        {{- /* The same member list on every node (etcd.problems refuses it empty or per node). */}}
        {{- $initial := list (printf "--initial-cluster=%s" $c.initialCluster) (printf "--initial-cluster-state=%v" $c.initialClusterState) }}
        {{- if .Values.membership.enabled }}
        {{- /* Recorded by the anchor when this node joined or bootstrapped; never changes after. */}}
        {{- $initial = list "--initial-cluster=${ETCD_INITIAL_CLUSTER}" "--initial-cluster-state=${ETCD_INITIAL_CLUSTER_STATE}" }}
        {{- end }}
        {{- include "kube-anchor-lib.args" (dict "component" $c "fixed" (concat (list
            "--name=${NODE_NAME}"
            (printf "--data-dir=%v" $c.dataDir)
            "--advertise-client-urls=https://${NODE_IP}:2379"
            (printf "--listen-client-urls=%s" (include "etcd.listenClientURLs" .))
            "--initial-advertise-peer-urls=https://${NODE_IP}:2380"
            "--listen-peer-urls=https://${NODE_IP}:2380"
            (printf "--listen-metrics-urls=http://%s:2381" $c.localAddress)
          ) $initial (list
            "--client-cert-auth=true"
            "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt"
            "--cert-file=/etc/kubernetes/pki/etcd/server.crt"
            "--key-file=/etc/kubernetes/pki/etcd/server.key"
            "--peer-client-cert-auth=true"
            "--peer-trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt"
            "--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt"
            "--peer-key-file=/etc/kubernetes/pki/etcd/peer.key"
        ))) | trim | nindent 8 }}
      {{- $host := include "kube-anchor-lib.probeHost" $c.localAddress }}
      {{- /* Started once it serves local reads (/livez), not /readyz as kubeadm's: /readyz fails
      on a learner and without a quorum, and a member joining as a learner (membership) or
      waiting for the others after a full-cluster reboot must not be restarted for it. */}}
      {{- include "kube-anchor-lib.probes" (dict "component" $c
          "liveness" (printf "{host: %s, path: /livez, port: 2381, scheme: HTTP}" $host)
          "readiness" (printf "{host: %s, path: /readyz, port: 2381, scheme: HTTP}" $host)
          "startup" (printf "{host: %s, path: /livez, port: 2381, scheme: HTTP}" $host)) | trim | nindent 6 }}
      resources:
        {{- toYaml $c.resources | nindent 8 }}
      {{- include "kube-anchor-lib.volumeMounts" $mounts | nindent 6 }}
  {{- include "kube-anchor-lib.volumes" $mounts | nindent 2 }}
{{- end -}}


{{/* The local client URL, and the node's own unless it is the same address. */}}
{{- define "etcd.listenClientURLs" -}}
{{- $local := .Values.component.localAddress -}}
{{- if eq $local "${NODE_IP}" -}}
https://${NODE_IP}:2379
{{- else -}}
https://{{ $local }}:2379,https://${NODE_IP}:2379
{{- end -}}
{{- end -}}


{{/*
What the values schema cannot say of this chart (see kube-anchor-lib.validate). etcd reads the
initial member list only to create a member whose data dir is empty, and a node starts a new
cluster from it: a list that is missing or differs per node (a variable) would have each node of
a fresh install start a cluster of its own.
*/}}
{{- define "etcd.problems" -}}
{{- $c := .Values.component -}}
{{- $problems := list -}}
{{- $value := $c.initialCluster | default "" | toString -}}
{{- $from := "component.initialCluster" -}}
{{- with $c.extraArgs }}{{ if hasKey . "initial-cluster" }}
{{- $value = index . "initial-cluster" | toString -}}
{{- $from = "component.extraArgs.initial-cluster" -}}
{{- end }}{{ end -}}
{{- $omitted := has "initial-cluster" ($c.omitArgs | default list) -}}
{{- if contains "${" $value -}}
{{- $problems = append $problems (printf "%s %q names a variable: the member list must be the same on every node (with a variable each node's differs, and each starts a cluster of its own); write every member as name=https://ip:2380, comma-separated" $from $value) -}}
{{- else if and (not $value) (not $omitted) (not .Values.membership.enabled) -}}
{{- $problems = append $problems "component.initialCluster is required while membership.enabled is false: every member of the cluster as name=https://ip:2380, comma-separated, the same on every node (e.g. cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380,cp-3=https://10.0.0.13:2380); or membership.enabled=true, to have the anchors add each node to the cluster. Without it each node would start an etcd cluster of its own." -}}
{{- end -}}
{{- toJson $problems -}}
{{- end -}}
