//! Prometheus metrics of the anchor daemon, all labelled with the component.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub(crate) struct Metrics {
    registry: Registry,
    /// Files written because the inputs changed.
    pub writes: Counter,
    /// Files rewritten because the node drifted from what was written.
    pub repairs: Counter,
    pub rollbacks: Counter,
    pub sync_errors: Counter,
    pub last_sync: Gauge<f64, AtomicU64>,
    pub converged: Gauge,
    pub last_known_good_failing: Gauge,
    /// 1 when the container runtime answered the last look, 0 when it could not be asked
    /// (missing, refused, hung, garbage) or is never asked (`--runtime-endpoint none`).
    pub runtime_observed: Gauge,
    /// `spec.etcdMember`: one series for this node's member (ID, role, peer URL, last join
    /// and leave results as labels).
    pub etcd_member: Family<Vec<(String, String)>, Gauge>,
    /// 1 while the etcd join is not finished (waiting, or a learner not promoted yet).
    pub etcd_join_pending: Gauge,
    /// 1 while a leave this node's pre-stop asked for has not happened (see `LeaveIntent`).
    pub etcd_leave_pending: Gauge,
    /// Entries this node's learner lacks of the leader's log (0: not a learner; -1: unknown).
    pub etcd_learner_behind_entries: Gauge,
    /// 1 while a new version waits because the cluster cannot afford the restart it makes.
    pub restart_waits_for_margin: Gauge,
    /// 1 while a new version waits because it would break the version skew policy.
    pub restart_waits_for_skew: Gauge,
    /// 1 while a new version waits for its images to be on the node (pulling, or a pull failed).
    pub restart_waits_for_images: Gauge,
    /// 1 while an operator holds this anchor (`kube-anchor pause`, or the Node's annotation).
    pub paused: Gauge,
    /// Scheduled etcd snapshots (`snapshots.schedule`): the slot length (0: none scheduled), when
    /// this node last wrote one that verified and its size, and the attempts that failed.
    pub etcd_snapshot_interval: Gauge,
    pub etcd_snapshot_last_success: Gauge,
    pub etcd_snapshot_last_bytes: Gauge,
    pub etcd_snapshot_failures: Counter,
    /// This node's etcd member's database (`defrag` in the config): its size and the part in
    /// use, as of the last look; the defrags done here and the last one's length.
    pub etcd_db_size: Gauge,
    pub etcd_db_size_in_use: Gauge,
    pub etcd_defrags: Counter,
    pub etcd_defrag_failures: Counter,
    pub etcd_defrag_last_duration: Gauge<f64, AtomicU64>,
    /// 1 while this member is above the defrag thresholds and waits for its turn (the log says
    /// why).
    pub etcd_defrag_waiting: Gauge,
    /// The earliest notAfter of the certificates in each credential file, by path.
    pub certificate_expiry: Family<Vec<(String, String)>, Gauge>,
    /// 1 for each credential renewed on the node and kept, by path, until the config carries it.
    pub renewed_on_node: Family<Vec<(String, String)>, Gauge>,
}

impl Metrics {
    pub(crate) fn new(component: &str) -> Self {
        let mut m = Self::unregistered(component);
        let registry = &mut m.registry;
        registry.register("writes", "Files written because the inputs changed", m.writes.clone());
        registry.register("repairs", "Files rewritten because the node drifted", m.repairs.clone());
        registry.register(
            "rollbacks",
            "Rollbacks to the last-known-good version",
            m.rollbacks.clone(),
        );
        registry.register("sync_errors", "Syncs that failed", m.sync_errors.clone());
        registry.register(
            "last_successful_sync_timestamp_seconds",
            "Unix time of the last sync that left the node as wanted",
            m.last_sync.clone(),
        );
        registry.register(
            "converged",
            "1 when the static pod runs what was written",
            m.converged.clone(),
        );
        registry.register(
            "last_known_good_failing",
            "1 when the last-known-good version, held in place of a bad one, fails as well",
            m.last_known_good_failing.clone(),
        );
        registry.register(
            "runtime_observed",
            "1 when the container runtime answered the last look at the static pod, 0 when it could not be asked",
            m.runtime_observed.clone(),
        );
        registry.register(
            "etcd_member_info",
            "This node's etcd member: member_id, role (learner or voter), peer_url, last_join, last_leave",
            m.etcd_member.clone(),
        );
        registry.register(
            "etcd_join_pending",
            "1 while this node's etcd join is not finished",
            m.etcd_join_pending.clone(),
        );
        registry.register(
            "etcd_leave_pending",
            "1 while a decommission has asked this node's etcd member to leave and it has not left (refused, or etcd unreachable)",
            m.etcd_leave_pending.clone(),
        );
        registry.register(
            "etcd_learner_behind_entries",
            "Entries this node's etcd learner lacks of the leader's log, as the leader records it (0 when not a learner, -1 when the leader cannot be asked)",
            m.etcd_learner_behind_entries.clone(),
        );
        registry.register(
            "restart_waits_for_margin",
            "1 while a new version waits because the cluster cannot afford the restart it makes (an etcd voter down or behind)",
            m.restart_waits_for_margin.clone(),
        );
        registry.register(
            "restart_waits_for_skew",
            "1 while a new version waits because writing it would break the Kubernetes version skew policy beside this node's other components (a controller newer than the API server, API servers two minors apart)",
            m.restart_waits_for_skew.clone(),
        );
        registry.register(
            "restart_waits_for_images",
            "1 while a new version waits for its images to be on the node before its restart (being pulled through the container runtime, or a pull failed: ImagePullFailed Events)",
            m.restart_waits_for_images.clone(),
        );
        registry.register(
            "paused",
            "1 while an operator holds this anchor (kube-anchor pause on the node, or the Node annotation kube-anchor.io/paused): it writes, repairs, rolls back, joins and removes nothing",
            m.paused.clone(),
        );
        registry.register(
            "etcd_snapshot_interval_seconds",
            "The schedule of etcd snapshots: one snapshot of the cluster per this many seconds, taken by the healthy members' nodes in turn (0: none scheduled)",
            m.etcd_snapshot_interval.clone(),
        );
        registry.register(
            "etcd_snapshot_last_success_timestamp_seconds",
            "Unix time at which this node last wrote a scheduled etcd snapshot whose integrity hash verified (0: none since the anchor started and none on the node)",
            m.etcd_snapshot_last_success.clone(),
        );
        registry.register(
            "etcd_snapshot_last_size_bytes",
            "Size of the newest scheduled etcd snapshot this node wrote",
            m.etcd_snapshot_last_bytes.clone(),
        );
        registry.register(
            "etcd_snapshot_failures",
            "Scheduled etcd snapshots this node was to take and could not (EtcdSnapshotFailed Events say why)",
            m.etcd_snapshot_failures.clone(),
        );
        registry.register(
            "etcd_db_size_bytes",
            "Size of this node's etcd member's database file, as of the anchor's last look (defrag configured)",
            m.etcd_db_size.clone(),
        );
        registry.register(
            "etcd_db_size_in_use_bytes",
            "The part of this node's etcd member's database in use; the rest is free pages a defrag gives back",
            m.etcd_db_size_in_use.clone(),
        );
        registry.register(
            "etcd_defrags",
            "Defrags of this node's etcd member the anchor made (EtcdDefragmented Events give sizes and lengths)",
            m.etcd_defrags.clone(),
        );
        registry.register(
            "etcd_defrag_failures",
            "Defrags of this node's etcd member that failed (EtcdDefragFailed Events say why)",
            m.etcd_defrag_failures.clone(),
        );
        registry.register(
            "etcd_defrag_last_duration_seconds",
            "How long the last defrag of this node's etcd member took",
            m.etcd_defrag_last_duration.clone(),
        );
        registry.register(
            "etcd_defrag_waiting",
            "1 while this node's etcd member is above the defrag thresholds and waits for its turn (another member first, one unhealthy or behind, a learner, a rollout turn held)",
            m.etcd_defrag_waiting.clone(),
        );
        registry.register(
            "certificate_expiry_timestamp_seconds",
            "Unix time at which the earliest certificate of a credential file (also one embedded in a kubeconfig) expires",
            m.certificate_expiry.clone(),
        );
        registry.register(
            "credential_renewed_on_node",
            "1 for a credential file renewed on the node (kubeadm certs renew) and kept until the config carries the renewal",
            m.renewed_on_node.clone(),
        );
        m
    }

    pub(crate) fn set_renewed_on_node(&self, paths: &[kube_anchor_core::hostpath::HostPath]) {
        self.renewed_on_node.clear();
        for path in paths {
            self.renewed_on_node
                .get_or_create(&vec![("path".to_owned(), path.to_string())])
                .set(1);
        }
    }

    pub(crate) fn set_certificates(&self, certificates: &[kube_anchor_core::credentials::Expiry]) {
        let mut earliest = std::collections::BTreeMap::<&str, i64>::new();
        for c in certificates {
            let at = earliest.entry(&c.path).or_insert(c.not_after_seconds);
            *at = (*at).min(c.not_after_seconds);
        }
        self.certificate_expiry.clear();
        for (path, at) in earliest {
            self.certificate_expiry
                .get_or_create(&vec![("path".to_owned(), path.to_owned())])
                .set(at);
        }
    }

    pub(crate) fn set_etcd_member(&self, record: Option<&kube_anchor_core::membership::Record>, pending: bool) {
        self.etcd_member.clear();
        self.etcd_join_pending.set(i64::from(pending));
        self.etcd_leave_pending
            .set(i64::from(record.is_some_and(|r| r.leave_pending.is_some())));
        if let Some(r) = record {
            let result = |o: &Option<kube_anchor_core::membership::Attempt>| {
                o.as_ref()
                    .map(|o| format!("{}: {}", o.action, o.result))
                    .unwrap_or_default()
            };
            let labels = vec![
                ("member_id".to_owned(), r.member_id.clone().unwrap_or_default()),
                ("name".to_owned(), r.name.clone()),
                ("role".to_owned(), r.phase.as_str().to_owned()),
                ("peer_url".to_owned(), r.peer_url.clone()),
                ("last_join".to_owned(), result(&r.last_join)),
                ("last_leave".to_owned(), result(&r.last_leave)),
            ];
            self.etcd_member.get_or_create(&labels).set(1);
        }
    }

    /// The same prefix and labels with nothing registered: for a daemon with metrics of its own
    /// (the checkpointer), added with [`Metrics::register`].
    pub(crate) fn unregistered(component: &str) -> Self {
        Self {
            registry: Registry::with_prefix_and_labels(
                "kube_anchor",
                [("component".into(), component.to_owned().into())].into_iter(),
            ),
            writes: Counter::default(),
            repairs: Counter::default(),
            rollbacks: Counter::default(),
            sync_errors: Counter::default(),
            last_sync: Gauge::default(),
            converged: Gauge::default(),
            last_known_good_failing: Gauge::default(),
            runtime_observed: Gauge::default(),
            etcd_member: Family::default(),
            etcd_join_pending: Gauge::default(),
            etcd_leave_pending: Gauge::default(),
            etcd_learner_behind_entries: Gauge::default(),
            restart_waits_for_margin: Gauge::default(),
            restart_waits_for_skew: Gauge::default(),
            restart_waits_for_images: Gauge::default(),
            paused: Gauge::default(),
            etcd_snapshot_interval: Gauge::default(),
            etcd_snapshot_last_success: Gauge::default(),
            etcd_snapshot_last_bytes: Gauge::default(),
            etcd_snapshot_failures: Counter::default(),
            etcd_db_size: Gauge::default(),
            etcd_db_size_in_use: Gauge::default(),
            etcd_defrags: Counter::default(),
            etcd_defrag_failures: Counter::default(),
            etcd_defrag_last_duration: Gauge::default(),
            etcd_defrag_waiting: Gauge::default(),
            certificate_expiry: Family::default(),
            renewed_on_node: Family::default(),
        }
    }

    pub(crate) fn register(&mut self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.registry.register(name, help, metric);
    }

    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String");
        out
    }
}
