{{/*
The anchor DaemonSet, written once for every component chart. With .Values.perNode set, one
DaemonSet per listed node (pinned by kubernetes.io/hostname), each mounting only that node's
credentials next to the shared ones.
*/}}

{{- define "kube-anchor-lib.daemonset" -}}
{{- include "kube-anchor-lib.validate" . -}}
{{- if .Values.perNode }}
{{- range $nodeName, $node := .Values.perNode }}
---
{{ include "kube-anchor-lib.daemonsetFor" (dict "root" $ "nodeName" $nodeName "node" $node) }}
{{- end }}
{{- else }}
{{ include "kube-anchor-lib.daemonsetFor" (dict "root" . "nodeName" "" "node" (dict)) }}
{{- end }}
{{- end -}}

{{- define "kube-anchor-lib.daemonsetFor" -}}
{{- $r := .root -}}
{{- $v := $r.Values -}}
{{- $full := include "kube-anchor-lib.fullname" $r -}}
{{- $name := $full -}}
{{- if .nodeName }}{{ $name = printf "%s-%s" $full .nodeName | trunc 63 | trimSuffix "-" }}{{ end -}}
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ $name }}
  namespace: {{ $r.Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" $r | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "kube-anchor-lib.selectorLabels" $r | nindent 6 }}
      kube-anchor.io/daemonset: {{ $name }}
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      # One node at a time, and only once its new static pod really runs (readiness).
      maxUnavailable: 1
      maxSurge: 0
  template:
    metadata:
      labels:
        {{- include "kube-anchor-lib.labels" $r | nindent 8 }}
        kube-anchor.io/daemonset: {{ $name }}
        {{- with $v.podLabels }}
        {{- $taken := append (keys (include "kube-anchor-lib.labels" $r | fromYaml)) "kube-anchor.io/daemonset" }}
        {{- include "kube-anchor-lib.podExtra" (dict "given" . "field" "podLabels" "taken" $taken "why" "the DaemonSet selects its pods by them, the anchors find each other by them") | nindent 8 }}
        {{- end }}
      annotations:
        # The inputs this pod may apply (any input change rolls the DaemonSet; inputs refreshed
        # under a running pod wait for its replacement).
        kube-anchor.io/expect-inputs: {{ include "kube-anchor-lib.expectInputs" . | quote }}
        {{- with $v.podAnnotations }}
        {{- include "kube-anchor-lib.podExtra" (dict "given" . "field" "podAnnotations" "taken" (list "kube-anchor.io/expect-inputs") "why" "the inputs the anchor may apply") | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "kube-anchor-lib.serviceAccountName" $r }}
      {{- with $v.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      # Works before any CNI is up, and reaches the component's loopback health endpoint.
      hostNetwork: true
      dnsPolicy: ClusterFirstWithHostNet
      priorityClassName: system-node-critical
      terminationGracePeriodSeconds: {{ $v.anchor.terminationGracePeriodSeconds }}
      nodeSelector:
        {{- with $v.nodeSelector }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
        {{- if .nodeName }}
        kubernetes.io/hostname: {{ .nodeName }}
        {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      tolerations:
        {{- toYaml $v.tolerations | nindent 8 }}
      containers:
        - name: anchor
          image: {{ include "kube-anchor-lib.image" $v.image | quote }}
          imagePullPolicy: {{ $v.image.pullPolicy }}
          command: [kube-anchor]
          args: [run]
          env:
            - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
            - {name: NODE_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
            - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
            - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
            - {name: KUBE_ANCHOR_CONFIG, value: {{ printf "%s/anchor.yaml" (include "kube-anchor-lib.configDir" $r) | quote }}}
            - {name: KUBE_ANCHOR_HOST_ROOT, value: /host}
            - {name: KUBE_ANCHOR_STATE_DIR, value: {{ $v.anchor.stateDir | quote }}}
            - {name: KUBE_ANCHOR_ALLOWED_ROOTS, value: {{ join "," $v.anchor.allowedRoots | quote }}}
            - {name: KUBE_ANCHOR_EXPECT_INPUTS, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['kube-anchor.io/expect-inputs']"}}}
            - {name: KUBE_ANCHOR_HEALTH_SOCKET, value: /run/kube-anchor/health.sock}
            {{- if $v.anchor.port }}
            - {name: KUBE_ANCHOR_LISTEN, value: {{ printf "127.0.0.1:%d" (int $v.anchor.port) | quote }}}
            {{- end }}
            - {name: KUBE_ANCHOR_RESYNC_PERIOD, value: {{ $v.anchor.resyncPeriod | quote }}}
            - {name: KUBE_ANCHOR_TRIAL_PERIOD, value: {{ $v.anchor.trialPeriod | quote }}}
            - {name: KUBE_ANCHOR_CRASH_LOOP_THRESHOLD, value: {{ $v.anchor.crashLoopThreshold | quote }}}
            {{- with $v.anchor.certificateExpiryWarning }}
            - {name: KUBE_ANCHOR_CERTIFICATE_EXPIRY_WARNING, value: {{ . | quote }}}
            {{- end }}
            {{- if hasKey $v.anchor "keepRevisions" }}
            - {name: KUBE_ANCHOR_KEEP_REVISIONS, value: {{ $v.anchor.keepRevisions | quote }}}
            {{- end }}
            - {name: KUBE_ANCHOR_CLEANUP, value: {{ $v.anchor.cleanup | quote }}}
            - {name: KUBE_ANCHOR_PRESTOP_TIMEOUT, value: {{ $v.anchor.preStopTimeout | quote }}}
            - {name: KUBE_ANCHOR_QUORUM_GUARD, value: {{ $v.anchor.quorumGuard | default "auto" | quote }}}
            - {name: KUBE_ANCHOR_LOG_FORMAT, value: {{ $v.anchor.logFormat | quote }}}
            {{- with $v.anchor.healthURL }}
            {{- /* ${NODE_IP} as in the manifest; the kubelet expands $(NODE_IP) from the env above. */}}
            - {name: KUBE_ANCHOR_HEALTH_URL, value: {{ . | replace "${NODE_IP}" "$(NODE_IP)" | replace "${NODE_NAME}" "$(NODE_NAME)" | quote }}}
            {{- end }}
            {{- with $v.anchor.healthCAFile }}
            - {name: KUBE_ANCHOR_HEALTH_CA_FILE, value: {{ printf "%s/%s" (include "kube-anchor-lib.secretDir" $r) . | quote }}}
            {{- end }}
            {{- /* The peers are asked at healthURL's port and path: no URL, nothing to ask. */}}
            {{- if and $v.anchor.apiServerMargin $v.anchor.healthURL }}
            - {name: KUBE_ANCHOR_API_SERVER_MARGIN, value: "true"}
            {{- end }}
            {{- /* On unless the values turn it off (kube-anchor's default). */}}
            {{- if eq (toString $v.anchor.skewGate) "false" }}
            - {name: KUBE_ANCHOR_SKEW_GATE, value: "false"}
            {{- end }}
            {{- if $v.anchor.drainGuard }}
            - {name: KUBE_ANCHOR_DRAIN_GUARD, value: {{ include "kube-anchor-lib.drainGuardName" $r | quote }}}
            - {name: KUBE_ANCHOR_GUARD_IMAGE, value: {{ include "kube-anchor-lib.image" $v.image | quote }}}
            {{- end }}
            {{- with $v.anchor.beforeRemove }}
            - {name: KUBE_ANCHOR_BEFORE_REMOVE, value: {{ . | quote }}}
            {{- end }}
            {{- /* The socket's directory is mounted at the same place under /host. */}}
            {{- with $v.anchor.dependsOn }}
            - {name: KUBE_ANCHOR_DEPENDS_ON, value: {{ join "," . | replace "${NODE_IP}" "$(NODE_IP)" | quote }}}
            {{- end }}
            {{- with $v.anchor.clientChecks }}
            - {name: KUBE_ANCHOR_CLIENT_CHECKS, value: {{ toJson . | replace "${NODE_IP}" "$(NODE_IP)" | quote }}}
            {{- end }}
            - {name: KUBE_ANCHOR_RUNTIME_ENDPOINT, value: {{ $v.anchor.runtimeEndpoint | default "none" | quote }}}
            {{- with $v.anchor.apiServers }}
            - {name: KUBE_ANCHOR_API_SERVERS, value: {{ join "," . | quote }}}
            {{- end }}
          lifecycle:
            preStop:
              exec:
                # Removes the component only on a real decommission (see kube-anchor pre-stop).
                command: [kube-anchor, pre-stop]
          # Over a socket in the pod's own emptyDir: two anchors of one component on a node (a
          # renamed release, a perNode toggle) never fight over a host port.
          readinessProbe:
            exec: {command: [kube-anchor, probe, readyz, --timeout, 4s]}
            timeoutSeconds: 5
            periodSeconds: 5
            failureThreshold: 2
          livenessProbe:
            exec: {command: [kube-anchor, probe, healthz, --timeout, 4s]}
            timeoutSeconds: 5
            initialDelaySeconds: 10
            periodSeconds: 10
            failureThreshold: 6
          securityContext:
            # Root to write root-owned files; CHOWN to give a file its configured owner, and
            # DAC_READ_SEARCH to read it back (drift, status, the check before a removal): root
            # without it cannot read another user's private file. The minimum, proven by
            # tests/least_privilege.rs.
            runAsUser: 0
            readOnlyRootFilesystem: true
            allowPrivilegeEscalation: false
            capabilities:
              drop: [ALL]
              add: [CHOWN, DAC_READ_SEARCH]
          resources:
            {{- toYaml $v.anchor.resources | nindent 12 }}
          volumeMounts:
            - {name: run, mountPath: /run/kube-anchor}
            - {name: config, mountPath: {{ include "kube-anchor-lib.configDir" $r }}, readOnly: true}
            - {name: credentials, mountPath: {{ include "kube-anchor-lib.secretDir" $r }}, readOnly: true}
            {{- range $i, $dir := include "kube-anchor-lib.hostDirs" $r | fromJsonArray }}
            - {name: host-{{ $i }}, mountPath: {{ printf "/host%s" $dir }}}
            {{- end }}
            {{- with include "kube-anchor-lib.runtimeSocketDir" $r }}
            - {name: runtime, mountPath: {{ printf "/host%s" . }}, readOnly: true}
            {{- end }}
      volumes:
        - name: run
          emptyDir: {medium: Memory, sizeLimit: 1Mi}
        - name: config
          configMap: {name: {{ $full }}}
        - name: credentials
          projected:
            defaultMode: 0400
            sources:
              - secret: {name: {{ $full }}}
              {{- if .nodeName }}
              - secret: {name: {{ printf "%s-%s" $full .nodeName | trunc 63 | trimSuffix "-" }}}
              {{- end }}
        {{- range $i, $dir := include "kube-anchor-lib.hostDirs" $r | fromJsonArray }}
        - name: host-{{ $i }}
          hostPath: {path: {{ $dir }}, type: DirectoryOrCreate}
        {{- end }}
        {{- with include "kube-anchor-lib.runtimeSocketDir" $r }}
        # A directory, not the socket: a runtime restart makes a new socket file, which a mount of
        # the old one would never see. DirectoryOrCreate: an empty directory on a node of another
        # runtime is harmless, a missing one would keep the pod from starting.
        - name: runtime
          hostPath: {path: {{ . }}, type: DirectoryOrCreate}
        {{- end }}
{{- end -}}
