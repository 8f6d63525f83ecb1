{{/*
prometheus-operator's PrometheusRule with the anchor's alerts for this component (values
`prometheusRule`, off by default). Every expression selects the chart's own component, so each
chart brings the alerts of what it installs. The node is the scrape's `instance`: the anchor's
own series carry only `component` (and `path` for a file).
*/}}
{{- define "kube-anchor-lib.prometheusRule" -}}
{{- $p := .Values.prometheusRule -}}
{{- if $p.enabled -}}
{{- $c := printf "component=%q" .Values.component.name -}}
{{- $warn := include "kube-anchor-lib.seconds" .Values.anchor.certificateExpiryWarning -}}
{{- $critical := include "kube-anchor-lib.seconds" $p.certificateExpiryCritical -}}
{{- $stale := include "kube-anchor-lib.seconds" $p.syncStaleAfter -}}
{{- $extra := $p.alertLabels -}}
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "kube-anchor-lib.fullname" . }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "kube-anchor-lib.labels" . | nindent 4 }}
    {{- with $p.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  groups:
    - name: kube-anchor-{{ .Values.component.name }}
      rules:
        - alert: KubeAnchorCertificateExpiresSoon
          expr: kube_anchor_certificate_expiry_timestamp_seconds{ {{- $c -}} } - time() < {{ $warn }}
          for: 10m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A certificate of {{ .Values.component.name }} expires within {{ .Values.anchor.certificateExpiryWarning }}.
            description: {{`'{{ $labels.path }} on {{ $labels.instance }} expires in {{ $value | humanizeDuration }}: renew it in the chart''s credentials (kube-anchor check-expiration on the node lists every certificate).'`}}
        - alert: KubeAnchorCertificateExpiresVerySoon
          expr: kube_anchor_certificate_expiry_timestamp_seconds{ {{- $c -}} } - time() < {{ $critical }}
          for: 10m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "critical" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A certificate of {{ .Values.component.name }} expires within {{ $p.certificateExpiryCritical }}, or has expired.
            description: {{`'{{ $labels.path }} on {{ $labels.instance }} expires in {{ $value | humanizeDuration }} (negative: expired); the component stops being trusted then.'`}}
        - alert: KubeAnchorRolledBack
          expr: increase(kube_anchor_rollbacks_total{ {{- $c -}} }[1h]) > 0
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: kube-anchor rolled {{ .Values.component.name }} back to its last-known-good version.
            description: {{`'The anchor on {{ $labels.instance }} rolled {{ $labels.component }} back within the last hour: the version pushed failed on that node and is held back (RolledBack Event; kube-anchor status on the node).'`}}
        - alert: KubeAnchorLastKnownGoodFailing
          expr: kube_anchor_last_known_good_failing{ {{- $c -}} } == 1
          for: 5m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "critical" "extra" $extra) | nindent 12 }}
          annotations:
            summary: {{ .Values.component.name }} fails in its last-known-good version too.
            description: {{`'On {{ $labels.instance }} the version {{ $labels.component }} was rolled back to fails as well: the node has no working version of it.'`}}
        - alert: KubeAnchorNotSyncing
          expr: time() - kube_anchor_last_successful_sync_timestamp_seconds{ {{- $c -}} } > {{ $stale }}
          for: 5m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: The {{ .Values.component.name }} anchor has not synced for {{ $p.syncStaleAfter }}.
            description: {{`'The anchor on {{ $labels.instance }} has not left the node as wanted for {{ $value | humanizeDuration }} (refused inputs, a failing write, a pending etcd join): its readiness message and logs say why.'`}}
        - alert: KubeAnchorNotConverged
          expr: kube_anchor_converged{ {{- $c -}} } == 0
          for: 15m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: {{ .Values.component.name }} does not run the version its anchor wrote.
            description: {{`'On {{ $labels.instance }} the static pod of {{ $labels.component }} has not run the version written for 15 minutes (kube-anchor status on the node).'`}}
        - alert: KubeAnchorEtcdLeaveHeld
          expr: kube_anchor_etcd_leave_pending{ {{- $c -}} } == 1
          for: 15m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A decommission asked an etcd member to leave and it has not.
            description: {{`'The etcd member on {{ $labels.instance }} was asked to leave by a decommission and is still a member (quorum short, the last voter, or etcd unreachable): MembershipHeld Event; kube-anchor status on the node.'`}}
        - alert: KubeAnchorRestartWaitsForMargin
          expr: kube_anchor_restart_waits_for_margin{ {{- $c -}} } == 1
          for: 15m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A new {{ .Values.component.name }} version waits because the cluster cannot afford its restart now.
            description: {{`'On {{ $labels.instance }} a new version of {{ $labels.component }} has waited 15 minutes: restarting it would leave etcd without a quorum (another voter does not answer, has no leader or is behind) or clients without an API server (no other kube-apiserver answers its /readyz) (RestartWaitsForMargin Event; the anchor''s readiness message names the node).'`}}
        - alert: KubeAnchorVersionSkewHeld
          expr: kube_anchor_restart_waits_for_skew{ {{- $c -}} } == 1
          for: 15m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A new {{ .Values.component.name }} version waits because it would break the version skew policy.
            description: {{`'On {{ $labels.instance }} a new version of {{ $labels.component }} has waited 15 minutes: beside the node''s other components it would break the Kubernetes version skew policy (a controller newer than the API server, API servers two minors apart). Upgrade in the policy''s order: kube-apiserver first, then the controllers (VersionSkewHeld Event; the anchor''s readiness message says which).'`}}
        - alert: KubeAnchorImageNotPulled
          expr: kube_anchor_restart_waits_for_images{ {{- $c -}} } == 1
          for: 15m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A new {{ .Values.component.name }} version waits for an image the node cannot pull.
            description: {{`'On {{ $labels.instance }} a new version of {{ $labels.component }} has waited 15 minutes for its image, which the container runtime has not pulled (ImagePullFailed Events name the image and the error). Nothing was restarted; fix the image reference or the registry.'`}}
        # Scheduled etcd snapshots: the newest any node holds, against the schedule.
        - alert: KubeAnchorEtcdSnapshotStale
          expr: (time() - max by (component) (kube_anchor_etcd_snapshot_last_success_timestamp_seconds{ {{- $c -}} })) > 2 * max by (component) (kube_anchor_etcd_snapshot_interval_seconds{ {{- $c -}} }) and max by (component) (kube_anchor_etcd_snapshot_interval_seconds{ {{- $c -}} }) > 0
          for: 15m
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: No node has taken a scheduled etcd snapshot for two schedule periods.
            description: {{`'The newest scheduled snapshot of {{ $labels.component }} on any node is more than twice the schedule old. Each etcd anchor logs why it did not take its slots (EtcdSnapshotFailed Events); kube-anchor status on a node lists and checks its snapshots.'`}}
        - alert: KubeAnchorEtcdSnapshotFailed
          expr: increase(kube_anchor_etcd_snapshot_failures_total{ {{- $c -}} }[1h]) > 0
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A scheduled etcd snapshot failed within the last hour.
            description: {{`'On {{ $labels.instance }} a scheduled snapshot of {{ $labels.component }} failed (EtcdSnapshotFailed Event: the member unhealthy, the snapshot above membership.snapshots.maxBytes, a full disk, a damaged transfer). The snapshots already on the node were kept; the anchor retries within the slot.'`}}
        # A pause is for the length of a repair; one left for a day holds rollouts and repairs
        # on that node (and, holding a turn, on the others).
        - alert: KubeAnchorPausedLong
          expr: kube_anchor_paused{ {{- $c -}} } == 1
          for: 24h
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "warning" "extra" $extra) | nindent 12 }}
          annotations:
            summary: The {{ .Values.component.name }} anchor has been paused for a day.
            description: {{`'The anchor of {{ $labels.component }} on {{ $labels.instance }} has been paused for 24 hours (kube-anchor pause on the node, or the Node annotation kube-anchor.io/paused): it writes, repairs and rolls back nothing there. kube-anchor resume on the node, or remove the annotation.'`}}
        - alert: KubeAnchorCredentialRenewedOnNode
          expr: kube_anchor_credential_renewed_on_node{ {{- $c -}} } == 1
          for: 1h
          labels:
            {{- include "kube-anchor-lib.alertLabels" (dict "severity" "info" "extra" $extra) | nindent 12 }}
          annotations:
            summary: A credential renewed on the node is not in the chart's values yet.
            description: {{`'{{ $labels.path }} on {{ $labels.instance }} was renewed on the node and is kept until the values carry it: copy it into the chart''s credentials (README, "Certificate rotation").'`}}
{{- end -}}
{{- end -}}

{{/* An alert's labels: its severity and the values' alertLabels. */}}
{{- define "kube-anchor-lib.alertLabels" -}}
severity: {{ .severity }}
{{- with .extra }}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* A duration of the values' form (the schema's `duration`: 720h, 1h30m, 90s, 500ms) in whole
seconds, for PromQL. */}}
{{- define "kube-anchor-lib.seconds" -}}
{{- $total := 0 -}}
{{- range $part := regexFindAll "[0-9]+(ms|s|m|h)" . -1 -}}
{{- $n := regexFind "^[0-9]+" $part | atoi -}}
{{- $unit := regexFind "[a-z]+$" $part -}}
{{- if eq $unit "h" }}{{ $total = add $total (mul $n 3600) }}
{{- else if eq $unit "m" }}{{ $total = add $total (mul $n 60) }}
{{- else if eq $unit "s" }}{{ $total = add $total $n }}
{{- else }}{{ $total = add $total (div $n 1000) }}
{{- end -}}
{{- end -}}
{{- $total -}}
{{- end -}}
