//! Anchor mode (`kube-anchor run`): the container of a per-component DaemonSet.
//!
//! Keeps the node in sync with the mounted inputs (on change notification, plus a periodic
//! resync), proves through `/readyz` that the static pod runs the version written, and rolls a
//! version that fails its trial back to the last-known-good one. Works with no API at all: the
//! files are still kept in sync; only the proof waits. A signal drains; it never deletes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use tokio::sync::watch;

use crate::cli::RunArgs;
use crate::engine::{ApplyReport, Engine, EngineError, Inputs, now_rfc3339};
use crate::metrics::Metrics;
use crate::server::{self, Shared};
use crate::shutdown;
use kube_anchor_core::change::DATA_LINK;
use kube_anchor_core::desired::Desired;
use kube_anchor_core::hostpath::HostPath;
use kube_anchor_core::ledger::BadVersion;
use kube_anchor_core::lifecycle::{LkgAction, LkgCheck, LkgEvaluated, Version, VersionAction, VersionEvent};
use kube_anchor_core::pinned::{MAX_MARKER_BYTES, PinnedInputs};
use kube_anchor_core::plan::Notice;
use kube_anchor_core::runtime::{Local, RuntimeView};
use kube_anchor_core::trial::{Assessment, MirrorPod, VersionView, assess};
use kube_anchor_core::turn::{Answer, Turn, TurnAction, TurnEvent};
use kube_anchor_host::watch::{DirRole, DirWatcher};
use kube_anchor_k8s::anchor_status;
use kube_anchor_k8s::cri::{RuntimeObserver, StaticPodRef};
use kube_anchor_k8s::direct::HealthCheck;
use kube_anchor_k8s::kubeapi::{self, EventSink};

/// How often the version on trial (or one not converged yet) is looked at.
const TRIAL_TICK: Duration = Duration::from_secs(1);
/// How often the inputs are read again when a volume swapped `..data` while they were read.
const MAX_INPUT_READS: usize = 5;

struct MirrorWatch {
    namespace: String,
    name: String,
    rx: watch::Receiver<Option<MirrorPod>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MirrorWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// This node's `AnchorStatus` object as the API holds it (`kube_anchor_k8s::anchor_status`).
struct StatusWatch {
    rx: watch::Receiver<anchor_status::Observed>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Daemon {
    args: RunArgs,
    engine: Engine,
    component: String,
    shared: Arc<Shared>,
    /// A kubeconfig was given or this runs in a cluster.
    api_wanted: bool,
    /// The API client, built at the first sync that can (an unreadable kubeconfig is retried at
    /// every sync).
    api: kubeapi::LazyClient,
    events: Option<EventSink>,
    /// Events not published yet (the API was unreachable): published, oldest first, once it
    /// answers again. Bounded by [`MAX_UNPUBLISHED`].
    unpublished: Vec<PendingEvent>,
    /// When the certificates were last read, and of which version (see `scan_certificates`).
    certificates_scanned: Option<(Instant, String)>,
    /// (place, notAfter) of the certificates a `CertificateExpiresSoon` Event was made for.
    expiry_announced: BTreeSet<(String, i64)>,
    /// Renewals made on the node already announced by an Event (path and what it holds).
    renewals_announced: BTreeSet<(HostPath, String)>,
    /// When a credential changed on the node was first seen and its repair held back.
    credential_drift_since: Option<tokio::time::Instant>,
    health: Option<HealthCheck>,
    /// The container runtime, for what runs with no API; `None` with `--runtime-endpoint none`.
    runtime: Option<RuntimeObserver>,
    watcher: DirWatcher,
    mirror: Option<MirrorWatch>,
    /// What is on the node now, as far as this process wrote or adopted it.
    written: Option<Desired>,
    /// The last version built from inputs that belong to this pod (see [`kube_anchor_core::pinned`]).
    accepted: Option<Desired>,
    /// Set while the inputs belong to another revision of the pod template.
    awaiting_rollout: Option<String>,
    /// Settled, on trial, or held back from a known-bad version.
    version: Version,
    /// Judges the last-known-good version while it is held in place of a bad one.
    lkg: LkgCheck,
    input_error: Option<String>,
    converged: bool,
    started: Instant,
    input_dirs: BTreeSet<PathBuf>,
    /// `spec.etcdMember`: the membership record the manifest renders with.
    member_record: Option<kube_anchor_core::membership::Record>,
    /// Why the etcd join is not finished (a learner to promote, or waiting); retried soon.
    membership_pending: Option<String>,
    /// A learner of this node waiting for promotion: its ID, when this process first saw it
    /// (the bound's start when the record has no usable time), and when its lag was last
    /// reported.
    learner_watch: Option<LearnerWatch>,
    /// The component's rollout Lease (see [`kube_anchor_core::rollout`]), once there is a client.
    rollout_lease: Option<kubeapi::RolloutLease>,
    /// The turn this node holds to roll a version out (or one an earlier process held, not
    /// looked at yet), and a version waiting for one.
    turn: Turn,
    /// The last rollout Lease error logged at warn (the same one again is logged at debug).
    lease_error: Option<String>,
    /// This node's `AnchorStatus` as the API shows it, once there is a client and a node name.
    status_watch: Option<StatusWatch>,
    /// When the `AnchorStatus` was last written, what, and the watch's generation then (see
    /// `anchor_status::Observed`); and a write held back until [`STATUS_MIN_INTERVAL`] has passed.
    status_written: Option<Instant>,
    status_published: Option<(kube_anchor_core::node_status::NodeStatus, u64)>,
    status_due: Option<tokio::time::Instant>,
    /// The last failed write's error (logged at warn once).
    status_error: Option<String>,
}

/// An Event kept until the API answers.
struct PendingEvent {
    warning: bool,
    reason: String,
    note: String,
}

/// Events kept while the API is unreachable; the oldest go first past this.
/// How often the credentials' certificates are read again while the version stays the same.
const CERTIFICATE_SCAN_PERIOD: Duration = Duration::from_secs(3600);
const MAX_UNPUBLISHED: usize = 32;

/// How soon a version waiting for the rollout Lease asks again (a held one is renewed every
/// [`kube_anchor_core::turn::TURN_RENEW`]).
const TURN_RETRY: Duration = Duration::from_secs(2);
/// How long a credential changed on the node is left before it is repaired: long enough for a
/// renewal written file by file (kubeadm: the key, then the certificate) to complete.
const CREDENTIAL_SETTLE: Duration = Duration::from_secs(2);

/// At most one `AnchorStatus` write this often: a version on trial changes the readiness reason
/// at every look. At steady state nothing changes and nothing is written.
const STATUS_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// How soon a failed `AnchorStatus` write is tried again (no CRD, not allowed, API gone).
const STATUS_RETRY: Duration = Duration::from_secs(30);

/// How soon an unfinished etcd join is looked at again.
const MEMBERSHIP_RETRY: Duration = Duration::from_secs(2);

/// See `Anchor::learner_watch`.
struct LearnerWatch {
    id: u64,
    first_seen: Instant,
    reported: Option<Instant>,
}

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    let engine = args.node.engine()?;
    // The component name comes from the config; a config unreadable at start is an error (the
    // node is left as it is and the pod restarts). Later bad pushes are reported, not fatal.
    let component = Inputs::load(&args.config, engine.roots())?.anchor.name;
    // A new anchor pod takes back a component an earlier pod decommissioned.
    if engine.recommission(&component, args.identity.pod_name.as_deref())? {
        tracing::info!(%component, "lifted the decommission marker of an earlier pod");
    }
    let draining = shutdown::install().context("installing signal handlers")?;
    let shared = Shared::new(Metrics::new(&component));
    server::start(
        args.endpoints.health_socket.as_deref(),
        args.endpoints.listen,
        shared.clone(),
    )
    .await?;
    let api_wanted = args.identity.kubeconfig().is_some() || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    if !api_wanted {
        tracing::warn!(
            "no kubeconfig and not in a cluster: keeping files in sync, but nothing can prove the static pod runs"
        );
    }
    let health = args
        .health_url
        .as_deref()
        .map(|url| HealthCheck::new(url, args.health_ca_file.as_deref()))
        .transpose()?;
    let runtime = RuntimeObserver::new(&args.node.host_root, args.runtime.endpoint());
    let watcher = DirWatcher::new().context("starting inotify")?;
    let api = kubeapi::LazyClient::new(
        args.identity.kubeconfig().map(ToOwned::to_owned),
        args.identity.api_servers.clone(),
        kubeapi::user_agent(&format!("run {component}"), args.identity.node_name.as_deref()),
        Duration::ZERO,
    );
    let mut daemon = Daemon {
        args,
        engine,
        component,
        shared,
        api_wanted,
        api,
        events: None,
        unpublished: Vec::new(),
        certificates_scanned: None,
        expiry_announced: BTreeSet::new(),
        renewals_announced: BTreeSet::new(),
        credential_drift_since: None,
        health,
        runtime,
        watcher,
        mirror: None,
        written: None,
        accepted: None,
        awaiting_rollout: None,
        version: Version::default(),
        lkg: LkgCheck::default(),
        input_error: None,
        converged: false,
        started: Instant::now(),
        input_dirs: BTreeSet::new(),
        member_record: None,
        membership_pending: None,
        learner_watch: None,
        rollout_lease: None,
        turn: Turn::default(),
        lease_error: None,
        status_watch: None,
        status_written: None,
        status_published: None,
        status_due: None,
        status_error: None,
    };
    daemon.connect().await;
    daemon.run(draining).await;
    Ok(())
}

/// Quiet time after a sync before the daemon's code leaves its resident set.
const CODE_RELEASE_AFTER: Duration = Duration::from_secs(10);

impl Daemon {
    async fn run(mut self, mut draining: watch::Receiver<bool>) {
        loop {
            self.sync().await;
            // Once the daemon has been quiet for a while, the code of start-up and of the last
            // syncs leaves the resident set (it stays in the page cache; the next sync maps it
            // back with minor faults).
            let synced = tokio::time::Instant::now();
            let mut release_code_at = Some(synced + CODE_RELEASE_AFTER);
            loop {
                let tick = self.evaluation_interval();
                let mirror = &mut self.mirror;
                let mirror_changed = async {
                    match mirror.as_mut() {
                        Some(m) => m.rx.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                };
                let status_watch = &mut self.status_watch;
                let status_changed = async {
                    match status_watch.as_mut() {
                        Some(w) => w.rx.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                };
                // No debounce: the event that completes an update syncs at once; whatever
                // arrives during that sync is read in one go afterwards (one more sync at most).
                tokio::select! {
                    changed = self.watcher.changed() => {
                        if let Err(e) = changed {
                            tracing::error!(component = %self.component, error = %e, "reading inotify events failed; syncing on the resync period only");
                            sleep_opt(Some(self.args.resync_period)).await;
                        }
                        break;
                    }
                    // Deadlines from the last sync: evaluations in between must not push them back.
                    _ = tokio::time::sleep_until(synced + self.args.resync_period) => break,
                    _ = sleep_until_opt(self.membership_pending.as_ref().map(|_| synced + MEMBERSHIP_RETRY)) => break,
                    _ = sleep_until_opt(self.turn.waiting.as_ref().map(|_| synced + TURN_RETRY)) => break,
                    _ = sleep_until_opt(self.credential_drift_since.map(|since| since + CREDENTIAL_SETTLE)) => break,
                    true = mirror_changed => self.evaluate().await,
                    true = status_changed => self.publish_status().await,
                    _ = sleep_until_opt(self.status_due) => self.publish_status().await,
                    _ = sleep_opt(tick) => self.evaluate().await,
                    _ = sleep_until_opt(release_code_at) => {
                        release_code_at = None;
                        let bytes = kube_anchor_host::memory::release_code_pages();
                        tracing::debug!(bytes, "idle: code released from the resident set");
                    }
                    _ = draining.changed() => {
                        self.shared.update(|s| s.draining = true);
                        tracing::info!(component = %self.component, "drained; exiting (files stay on the node)");
                        return;
                    }
                }
            }
        }
    }

    /// Periodic evaluation is needed only while a version is on trial or not converged, or a
    /// rollout turn is held (it is given back from an evaluation), and (slower) to keep checking
    /// a health URL.
    fn evaluation_interval(&self) -> Option<Duration> {
        if self.api.client().is_none() && self.health.is_none() && self.runtime.is_none() {
            None // nothing to learn by looking again
        } else if self.version.trial().is_some()
            || (!self.converged && self.written.is_some())
            || self.turn.holding().is_some()
        {
            Some(TRIAL_TICK)
        } else if self.health.is_some() || self.runtime.is_some() {
            Some(self.args.health_interval)
        } else {
            None
        }
    }

    fn monotonic(&self) -> Duration {
        self.started.elapsed()
    }

    /// Builds the API client if there is none yet. A kubeconfig that is missing or unreadable
    /// (or in-cluster files not mounted yet) must not stop the file sync: no API is no
    /// evidence, and the next sync tries again.
    async fn connect(&mut self) {
        if !self.api_wanted {
            return;
        }
        let had_failed = self.api.last_error().is_some();
        let client = match self.api.connect().await {
            kubeapi::Connect::Built(client) => client,
            kubeapi::Connect::Unchanged | kubeapi::Connect::NotConfigured => return,
            kubeapi::Connect::Failed { error, repeated } => {
                if !repeated {
                    tracing::warn!(component = %self.component, %error, "no API client (keeping files in sync; retrying at every sync)");
                }
                return;
            }
        };
        if had_failed {
            tracing::info!(component = %self.component, "API client ready");
        }
        self.events = match (&self.args.identity.pod_name, &self.args.identity.pod_namespace) {
            (Some(name), Some(ns)) => Some(EventSink::new(client.clone(), ns, name)),
            _ => None,
        };
        self.status_watch = self.args.identity.node_name.as_deref().map(|node| {
            let (rx, task) = anchor_status::watch(
                client.clone(),
                &kube_anchor_core::node_status::object_name(node, &self.component),
            );
            StatusWatch { rx, task }
        });
        // Written for readers of the Lease only: kube-anchor never takes a turn over on a timer
        // (`rollout::decide`).
        let lease_duration = self.args.trial_period + Duration::from_secs(120);
        self.rollout_lease = match (&self.args.identity.node_name, &self.args.identity.pod_namespace) {
            (Some(node), Some(ns)) => Some(kubeapi::RolloutLease::new(
                client,
                ns,
                &self.component,
                node,
                lease_duration,
            )),
            _ => None,
        };
    }

    async fn sync(&mut self) {
        self.connect().await;
        self.membership_step().await;
        self.sync_pass();
        self.recover_turn().await;
        if self.take_turn().await {
            self.hand_off_leadership().await;
            self.sync_pass();
        }
        // A change that landed between reading a directory and watching it went unseen.
        if self.watch_dirs() {
            self.sync_pass();
            self.watch_dirs();
        }
        self.evaluate().await;
    }

    /// `spec.etcdMember`: this node's turn writes a new version, which restarts etcd; a member
    /// that leads hands leadership to a caught-up voter first (never holding the write up for
    /// more than [`crate::etcd_member::HAND_OFF_BUDGET`]).
    async fn hand_off_leadership(&mut self) {
        let inputs = match Inputs::load(&self.args.config, self.engine.roots()) {
            Ok(inputs) => inputs,
            Err(_) => return, // the sync reports the bad config
        };
        let Some(member) = &inputs.anchor.etcd_member else {
            return;
        };
        let report =
            crate::etcd_member::hand_off_leadership(&inputs, member, crate::etcd_member::HAND_OFF_BUDGET).await;
        if report.moved_to.is_some() {
            tracing::info!(component = %self.component, hand_off = %report.summary, "before writing the new version");
            self.queue_event(false, "LeadershipHandedOff", report.summary);
        } else if report.still_leads {
            tracing::warn!(component = %self.component, hand_off = %report.summary, "writing the new version while this member leads");
        } else {
            tracing::info!(component = %self.component, hand_off = %report.summary, "before writing the new version");
        }
    }

    /// `spec.etcdMember`: one join step (add learner, resume, promote, record) before the files
    /// are synced. Its failures write nothing and are retried.
    async fn membership_step(&mut self) {
        // Inputs of another revision of the pod template are not this pod's to act on (see
        // `kube_anchor_core::pinned`): the record on disk keeps rendering what this node has joined with.
        if let Some(pinned) = &self.args.expect_inputs
            && pinned.check(read_marker).is_err()
        {
            if let Ok(record) = crate::etcd_member::load_record(&self.engine, &self.component) {
                self.member_record = record;
            }
            return;
        }
        let inputs = match Inputs::load(&self.args.config, self.engine.roots()) {
            Ok(inputs) if inputs.anchor.etcd_member.is_some() => inputs,
            _ => {
                self.membership_pending = None;
                return; // no membership, or the sync reports the bad config
            }
        };
        // Decommissioned on this node: its preStop hook removed the member, and this daemon,
        // still draining until the kubelet stops it, must not add it back as a learner. Only an
        // explicit `apply` or `bootstrap` takes the component back.
        if self
            .engine
            .ledger(&self.component)
            .is_ok_and(|l| l.decommissioned.is_some())
        {
            self.membership_pending = None;
            return;
        }
        self.give_up_earlier_leave();
        match crate::etcd_member::join_step(&self.engine, &inputs).await {
            Ok(report) => {
                if report.pending && self.membership_pending.as_deref() != Some(report.summary.as_str()) {
                    tracing::info!(component = %self.component, membership = %report.summary, "etcd join not finished");
                }
                self.shared
                    .metrics
                    .set_etcd_member(report.record.as_ref(), report.pending);
                self.watch_learner(report.learner.as_ref(), inputs.anchor.etcd_member.as_ref());
                self.membership_pending = report.pending.then_some(report.summary);
                self.member_record = report.record;
            }
            Err(e) => {
                let message = crate::logging::error_chain(&anyhow::Error::from(e));
                tracing::warn!(component = %self.component, error = %message, "etcd membership step failed; retrying");
                self.membership_pending = Some(message);
                self.shared.metrics.etcd_join_pending.set(1);
                // The record on disk still renders the manifest of a node that has joined.
                if let Ok(record) = crate::etcd_member::load_record(&self.engine, &self.component) {
                    self.member_record = record;
                }
            }
        }
    }

    /// A learner not promoted yet: its lag in the metric, and past
    /// `spec.etcdMember.learnerCatchUpTimeout` a Warning Event saying how far behind it is,
    /// once per timeout while it lasts. The join goes on being retried; nothing is removed.
    fn watch_learner(
        &mut self,
        learner: Option<&crate::etcd_member::LearnerReport>,
        member: Option<&kube_anchor_core::config::EtcdMember>,
    ) {
        let (Some(learner), Some(member)) = (learner, member) else {
            self.learner_watch = None;
            self.shared.metrics.etcd_learner_behind_entries.set(0);
            return;
        };
        let behind = learner.progress.as_ref().ok().and_then(|p| p.behind());
        self.shared
            .metrics
            .etcd_learner_behind_entries
            .set(behind.map_or(-1, |b| i64::try_from(b).unwrap_or(i64::MAX)));
        let watch = match &mut self.learner_watch {
            Some(w) if w.id == learner.id => w,
            other => other.insert(LearnerWatch {
                id: learner.id,
                first_seen: Instant::now(),
                reported: None,
            }),
        };
        let waited = learner.waited().unwrap_or_default().max(watch.first_seen.elapsed());
        let bound = member.learner_catch_up_timeout;
        let Some(note) = kube_anchor_core::membership::learner_overdue(
            learner.id,
            learner.progress.as_ref().map_err(String::as_str),
            waited,
            bound,
        ) else {
            return;
        };
        if watch.reported.is_some_and(|at| at.elapsed() < bound) {
            return;
        }
        watch.reported = Some(Instant::now());
        tracing::warn!(component = %self.component, member_id = %format!("{:x}", learner.id), behind, "{note}");
        self.queue_event(true, "LearnerNotCatchingUp", note);
    }

    /// A leave an earlier anchor pod's pre-stop asked for and could not finish: this pod runs
    /// because the component is wanted on the node again, so the member stays, said loudly.
    /// The leave this pod's own pre-stop asks for (it runs beside this daemon) is left alone.
    fn give_up_earlier_leave(&mut self) {
        let this_pod = self.args.identity.pod_name.clone();
        let why = format!(
            "anchor pod {} runs the component on this node again",
            this_pod.as_deref().unwrap_or("(unnamed)")
        );
        match crate::etcd_member::give_up_leave(&self.engine, &self.component, &why, |intent| {
            intent.cancelled_by(this_pod.as_deref())
        }) {
            Ok(Some(intent)) => {
                let note = format!(
                    "the etcd member's leave asked by pod {} since {} ({} attempt(s){}) is cancelled: {why}",
                    intent.pod.as_deref().unwrap_or("(unnamed)"),
                    intent.since,
                    intent.attempts,
                    intent
                        .last_refusal
                        .as_deref()
                        .map(|w| format!("; last refused: {w}"))
                        .unwrap_or_default()
                );
                tracing::warn!(component = %self.component, "{note}");
                self.queue_event(true, "LeaveCancelled", note);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(component = %self.component, error = %e, "cannot read the membership record for a pending leave")
            }
        }
    }

    fn sync_pass(&mut self) {
        self.shared.update(|s| s.sync_started = Some(Instant::now()));
        let mut result = self.sync_files();
        if let (Err(EngineError::Decommissioned { .. }), Some(pod)) = (&result, &self.args.identity.pod_name) {
            // Another anchor pod of this component (an old DaemonSet of a renamed release, say)
            // decommissioned it; this pod is alive and still wants it. Our own pod's marker stays.
            match self.engine.recommission(&self.component, Some(pod)) {
                Ok(true) => {
                    tracing::warn!(component = %self.component, "lifted a decommission marker another anchor pod set; keeping the component on the node");
                    result = self.sync_files();
                }
                Ok(false) => {}
                Err(e) => result = Err(e),
            }
        }
        self.shared.update(|s| s.sync_started = None);
        match result {
            Ok(()) => {
                self.input_error = None;
                let now = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default();
                self.shared.metrics.last_sync.set(now.as_secs_f64());
                self.scan_certificates(now.as_secs() as i64);
            }
            Err(EngineError::InputsChanging { reads, .. }) => {
                // Not an error: the swap that interrupted the last read is queued and brings
                // another sync as soon as this one ends.
                tracing::debug!(component = %self.component, reads, "inputs changed while being read; waiting for the next swap's event");
            }
            Err(EngineError::MembershipPending { reason, .. }) => {
                self.input_error = Some(format!("etcd membership: {reason}"));
            }
            Err(EngineError::Decommissioned { at, reason, .. }) => {
                // pre-stop decommissioned the component: this pod is on its way out.
                self.input_error = Some(format!("decommissioned at {at} ({reason}): not writing"));
            }
            Err(EngineError::Credentials(e)) => {
                self.shared.metrics.sync_errors.inc();
                let message = format!("credentials refused, nothing written: {e}");
                // Once per refusal, not at every resync.
                if self.input_error.as_deref() != Some(message.as_str()) {
                    tracing::error!(component = %self.component, error = %e, "credentials refused; the node keeps what it has");
                    self.queue_event(true, "CredentialsRefused", e.to_string());
                }
                self.input_error = Some(message);
            }
            Err(e) => {
                self.shared.metrics.sync_errors.inc();
                let message = crate::logging::error_chain(&anyhow::Error::from(e));
                tracing::error!(component = %self.component, error = %message, "sync failed; the node keeps what it has");
                self.input_error = Some(format!("sync failed: {message}"));
            }
        }
    }

    /// The version this pod's inputs describe, or `None` while they belong to another pod
    /// template revision (see [`kube_anchor_core::pinned`]); the markers are read before and after the
    /// inputs, so a volume refreshed in between is never half taken.
    fn load_desired(&mut self) -> Result<Option<Desired>, EngineError> {
        let pinned_ok = |pinned: &Option<PinnedInputs>| match pinned {
            Some(p) => p.check(read_marker),
            None => Ok(()),
        };
        let pinned = self.args.expect_inputs.clone();
        let mismatch = match pinned_ok(&pinned) {
            Ok(()) => {
                let inputs = self.load_inputs(&pinned)?;
                if inputs.anchor.etcd_member.is_some() && self.member_record.is_none() {
                    return Err(EngineError::MembershipPending {
                        component: inputs.anchor.name.clone(),
                        reason: self
                            .membership_pending
                            .clone()
                            .unwrap_or_else(|| "not a member yet".into()),
                    });
                }
                let desired = inputs.desired(&inputs.variables(self.member_record.as_ref()))?;
                match pinned_ok(&pinned) {
                    Ok(()) => {
                        if self.awaiting_rollout.take().is_some() {
                            tracing::info!(component = %self.component, "the inputs match this pod's template again");
                        }
                        return Ok(Some(desired));
                    }
                    Err(m) => m,
                }
            }
            Err(m) => m,
        };
        if let Some(p) = &pinned {
            // Watch the marker directories even when the config cannot be read yet.
            self.input_dirs
                .extend(p.markers.iter().filter_map(|m| m.path.parent().map(Path::to_path_buf)));
        }
        let why = format!(
            "the inputs belong to another revision of this anchor ({mismatch}); they reach this node when the rollout replaces this pod"
        );
        if self.awaiting_rollout.as_deref() != Some(why.as_str()) {
            tracing::info!(component = %self.component, reason = %mismatch, "inputs changed under a running pod: keeping the version this pod applied until the rollout replaces it");
        }
        self.awaiting_rollout = Some(why);
        Ok(None)
    }

    /// Reads the config and its sources, all from one generation of every ConfigMap/Secret
    /// volume: the kubelet swaps `..data` and deletes the old generation at any moment, so a
    /// read spanning a swap could mix two generations (the config of one, a source of the
    /// next). Such a read is done again; the swap's own event brings one more sync anyway.
    fn load_inputs(&mut self, pinned: &Option<PinnedInputs>) -> Result<Inputs, EngineError> {
        let mut attempt = 1;
        loop {
            let dirs = self.input_dirs.clone();
            let before = volume_generations(&dirs);
            let inputs = Inputs::load(&self.args.config, self.engine.roots())?;
            self.input_dirs = input_dirs(&self.args.config, &inputs, pinned);
            if self.input_dirs == dirs && volume_generations(&dirs) == before {
                return Ok(inputs);
            }
            if attempt == MAX_INPUT_READS {
                return Err(EngineError::InputsChanging {
                    config: self.args.config.clone(),
                    reads: attempt,
                });
            }
            attempt += 1;
        }
    }

    fn sync_files(&mut self) -> Result<(), EngineError> {
        let desired = match self.load_desired()? {
            Some(desired) => {
                self.accepted = Some(desired.clone());
                desired
            }
            // Keep what this pod applied (drift is still repaired); after a container restart
            // only the last-known-good snapshot is at hand, and only if it is what the node runs.
            None => match &self.accepted {
                Some(accepted) => accepted.clone(),
                None => match self.current_last_known_good()? {
                    Some(lkg) => lkg,
                    None => return Ok(()),
                },
            },
        };
        let ledger = self.engine.ledger(&self.component)?;
        let (target, held_back) = match ledger.bad_version(&desired.content_hash) {
            Some(bad) => match self.engine.last_known_good(&self.component)? {
                Some(lkg) => {
                    let why = format!(
                        "the inputs are version {} which failed its trial at {} ({}); keeping last-known-good {}",
                        bad.hash, bad.at, bad.reason, lkg.content_hash
                    );
                    (lkg, Some(why))
                }
                None => (desired, None),
            },
            None => (desired, None),
        };
        if held_back.is_none() {
            // Before the rollout turn: a refused version takes no turn and goes no further.
            self.engine.check_credentials(&target)?;
        }
        let previous = ledger.content_hash.clone();
        // Replacing the version the node runs waits for this node's turn (`kube_anchor_core::rollout`);
        // until then the node keeps what it has.
        // A static pod kube-anchor did not write (a kubeadm node taken over by the charts) runs
        // too: replacing it waits for the turn like an upgrade.
        let on_node = previous.clone().or_else(|| {
            let manifest = target.manifest();
            match self.engine.fs.read(&manifest.path) {
                Ok(Some(content)) if content != manifest.content => Some("an unrecorded manifest".to_owned()),
                _ => None,
            }
        });
        // Only an anchor pod (node and namespace from the downward API) has a rollout Lease; a
        // `run` outside a cluster is alone with its node.
        let in_fleet = self.args.identity.node_name.is_some() && self.args.identity.pod_namespace.is_some();
        let turn_needed = self.api_wanted
            && in_fleet
            && kube_anchor_core::rollout::needs_turn(
                on_node.as_deref(),
                &target.content_hash,
                ledger.last_known_good.as_deref(),
            );
        let actions = self.step_turn(TurnEvent::Gate {
            version: &target.content_hash,
            needed: turn_needed,
        });
        for action in actions {
            if let TurnAction::AnnounceWaiting { version } = action {
                tracing::info!(component = %self.component, content_hash = %version, "new version: waiting for this node's turn to roll it out");
            }
        }
        if self.turn.waiting.is_some() {
            return Ok(());
        }
        // A credential changed on the node is repaired only once the node has been left alone
        // for CREDENTIAL_SETTLE: it may be the first half of a renewal (`plan::hold_credential_drift`).
        let repairing = previous.as_deref() == Some(target.content_hash.as_str());
        let hold = repairing
            && self
                .credential_drift_since
                .is_none_or(|since| since.elapsed() < CREDENTIAL_SETTLE);
        let report = self.engine.apply_holding(&target, self.args.prune, hold)?;
        self.credential_drift_since = if report.held.is_empty() {
            None
        } else {
            tracing::info!(component = %self.component, files = ?report.held.iter().map(ToString::to_string).collect::<Vec<_>>(), settle = ?CREDENTIAL_SETTLE, "credential changed on the node: repaired once it settles, unless it is a renewal");
            Some(self.credential_drift_since.unwrap_or_else(tokio::time::Instant::now))
        };
        self.note_renewals(&report);
        let written = report.written.len() as u64;
        if written > 0 {
            if previous.as_deref() == Some(target.content_hash.as_str()) {
                self.shared.metrics.repairs.inc_by(written);
                tracing::warn!(component = %self.component, files = ?report.written.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>(), "repaired drift");
            } else {
                self.shared.metrics.writes.inc_by(written);
                tracing::info!(component = %self.component, content_hash = %target.content_hash, files = written, "wrote a new version");
            }
        }
        let now = self.monotonic();
        let actions = self.step_version(VersionEvent::Written {
            hash: &target.content_hash,
            last_known_good: ledger.last_known_good.as_deref() == Some(target.content_hash.as_str()),
            held_back,
            now,
        });
        for action in actions {
            if let VersionAction::AnnounceTrial { hash } = action {
                tracing::info!(component = %self.component, content_hash = %hash, trial = %humantime::format_duration(self.args.trial_period), "version on trial");
            }
        }
        self.ensure_mirror_watch(&target);
        self.written = Some(target);
        Ok(())
    }

    /// The last-known-good version, when it is also what the ledger says the node holds.
    fn current_last_known_good(&self) -> Result<Option<Desired>, EngineError> {
        let ledger = self.engine.ledger(&self.component)?;
        match self.engine.last_known_good(&self.component)? {
            Some(lkg) if ledger.content_hash.as_deref() == Some(lkg.content_hash.as_str()) => Ok(Some(lkg)),
            _ => Ok(None),
        }
    }

    /// Returns whether a directory is watched now that was not before.
    fn watch_dirs(&mut self) -> bool {
        let mut dirs: BTreeMap<PathBuf, DirRole> =
            self.input_dirs.iter().map(|d| (d.clone(), DirRole::input())).collect();
        if let Some(written) = &self.written {
            for file in &written.files {
                if let Ok(real) = self.engine.fs.resolve(&file.path)
                    && let (Some(dir), Some(name)) = (real.parent(), real.file_name())
                {
                    dirs.entry(dir.to_path_buf())
                        .or_default()
                        .managed
                        .insert(name.to_owned());
                }
            }
        }
        self.watcher.ensure(dirs)
    }

    fn ensure_mirror_watch(&mut self, target: &Desired) {
        let (Some(client), Some(node)) = (self.api.client(), &self.args.identity.node_name) else {
            return;
        };
        let name = format!("{}-{}", target.pod_name, node.to_lowercase());
        if self
            .mirror
            .as_ref()
            .is_some_and(|m| m.name == name && m.namespace == target.pod_namespace)
        {
            return;
        }
        let (rx, task) = kubeapi::watch_mirror_pod(client.clone(), &target.pod_namespace, &name);
        self.mirror = Some(MirrorWatch {
            namespace: target.pod_namespace.clone(),
            name,
            rx,
            task,
        });
    }

    async fn evaluate(&mut self) {
        // Also with nothing written: a refusal's Event is all an operator may get.
        if !self.unpublished.is_empty() && self.api_answers() {
            self.publish_unpublished().await;
        }
        let Some(written) = self.written.clone() else {
            let reason = self
                .input_error
                .clone()
                .or_else(|| self.turn.waiting.as_ref().map(|w| w.why.clone()))
                .or_else(|| self.awaiting_rollout.clone())
                .unwrap_or_else(|| "nothing written yet".into());
            self.shared.update(|s| (s.ready, s.reason) = (false, reason));
            return;
        };
        let mirror = self.mirror.as_ref().and_then(|m| m.rx.borrow().clone());
        let health = match &self.health {
            Some(h) => Some(h.check().await),
            None => None,
        };
        let runtime = match &self.runtime {
            Some(observer) => {
                let pod = StaticPodRef {
                    name: written.pod_name.clone(),
                    namespace: written.pod_namespace.clone(),
                    node: self.args.identity.node_name.clone(),
                };
                let view = observer.observe(&pod).await;
                let observed = !matches!(view, RuntimeView::Unavailable { .. });
                self.shared.metrics.runtime_observed.set(i64::from(observed));
                Some(view)
            }
            None => None,
        };
        let mut observation = VersionView {
            api_configured: self.api_wanted,
            mirror,
            health,
            runtime,
            runtime_restarts: 0,
            dependency_down: None,
        };
        // Restarts are a trial's evidence, and only those it saw.
        match self.version.trial_mut().or(self.lkg.check_mut()) {
            Some(trial) => {
                trial.restarts_in_trial(&mut observation.mirror);
                observation.runtime_restarts = trial.runtime_restarts(observation.runtime.as_ref());
            }
            None => {
                if let Some(mirror) = observation.mirror.as_mut() {
                    mirror.forget_restarts();
                }
            }
        }
        let mut assessment = assess(&observation, &written.content_hash, self.args.crash_loop_threshold);
        // The components it needs are looked at only when there is something to excuse.
        if matches!(assessment, Assessment::NotConverged(_) | Assessment::CrashLooping(_)) {
            observation.dependency_down = self.dependency_down().await;
            if observation.dependency_down.is_some() {
                assessment = assess(&observation, &written.content_hash, self.args.crash_loop_threshold);
            }
        }
        let actions = self.step_version(VersionEvent::Assessed {
            assessment: &assessment,
            now: self.started.elapsed(),
            period: self.args.trial_period,
        });
        let mut rolled_back = false;
        for action in actions {
            match action {
                VersionAction::Promote => self.promote(&written).await,
                VersionAction::RollBack { reason } => {
                    self.rollback(&written, reason).await;
                    rolled_back = true;
                }
                VersionAction::AnnounceTrial { .. } => {} // only when written
            }
        }
        // What was assessed is the version just rolled back, not the last-known-good one now
        // held in its place: that one is judged from the next evaluation on, by its own hash.
        if !rolled_back {
            self.check_last_known_good(&written, &assessment).await;
        }
        self.converged = assessment == Assessment::Converged;
        self.shared.metrics.converged.set(i64::from(self.converged));
        let held_back = match (self.version.held_back(), self.lkg.failing()) {
            (Some(h), Some(failing)) => Some(format!("{failing}; {h}")),
            (h, _) => h.map(str::to_owned),
        };
        // A process that never saw its own inputs cannot tell whether it is an old pod whose
        // inputs moved on (restarted container) or a new one whose inputs have not arrived yet;
        // being Ready as the latter would let the rollout move on before this node is updated.
        let unproven = match (&self.accepted, &self.awaiting_rollout) {
            (None, Some(why)) => Some(why.clone()),
            _ => None,
        };
        let (ready, reason) = match (
            self.input_error
                .as_ref()
                .or(self.turn.waiting.as_ref().map(|w| &w.why))
                .or(unproven.as_ref())
                .or(self.membership_pending.as_ref()),
            &held_back,
            assessment.reason(),
        ) {
            (Some(e), _, _) => (false, e.clone()),
            (_, Some(h), _) => (false, h.clone()),
            (_, _, Some(r)) => (false, r.to_owned()),
            (None, None, None) => (true, String::new()),
        };
        self.shared.update(|s| (s.ready, s.reason) = (ready, reason));
        self.keep_or_give_back_turn().await;
        self.publish_status().await;
    }

    /// Writes this node's `AnchorStatus` when it differs from what the API holds (deleted or
    /// edited there too). While the API cannot be asked nothing is sent: the ledger keeps the
    /// state, and the watch's answer brings the write.
    async fn publish_status(&mut self) {
        self.status_due = None;
        let (Some(client), Some(node), Some(watch)) = (
            self.api.client(),
            self.args.identity.node_name.as_deref(),
            &self.status_watch,
        ) else {
            return;
        };
        let observed = watch.rx.borrow().clone();
        let Some(seen) = observed.seen else { return };
        let Ok(ledger) = self.engine.ledger(&self.component) else {
            return;
        };
        let now = self.shared.snapshot();
        let status = kube_anchor_core::node_status::NodeStatus::of(
            &ledger,
            kube_anchor_core::node_status::Daemon {
                node,
                pod: self.args.identity.pod_name.as_deref(),
                version: &self.version,
                ready: now.ready,
                reason: &now.reason,
            },
        );
        // In place; or written already and the API has said nothing since.
        if seen.as_ref() == Some(&status)
            || self.status_published.as_ref() == Some(&(status.clone(), observed.generation))
        {
            return;
        }
        let wait = match (&self.status_error, self.status_written) {
            (Some(_), Some(at)) => STATUS_RETRY.saturating_sub(at.elapsed()),
            (None, Some(at)) => STATUS_MIN_INTERVAL.saturating_sub(at.elapsed()),
            (_, None) => Duration::ZERO,
        };
        if !wait.is_zero() {
            self.status_due = Some(tokio::time::Instant::now() + wait);
            return;
        }
        self.status_written = Some(Instant::now());
        match anchor_status::publish(client.clone(), &status).await {
            Ok(()) => {
                self.status_published = Some((status.clone(), observed.generation));
                if self.status_error.take().is_some() {
                    tracing::info!(component = %self.component, "AnchorStatus written again");
                }
                tracing::debug!(component = %self.component, state = status.state.as_str(), "AnchorStatus written");
            }
            Err(e) => {
                if self.status_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(component = %self.component, error = %e, "cannot write this node's AnchorStatus (the sync goes on; retrying)");
                }
                self.status_error = Some(e);
                self.status_due = Some(tokio::time::Instant::now() + STATUS_RETRY);
            }
        }
    }

    /// The first `--depends-on` component with a version on this node that the runtime shows not
    /// running (what it shows). One the node does not run, or that has no last-known-good to
    /// name its static pod yet, or a runtime that cannot be asked, tells nothing.
    async fn dependency_down(&self) -> Option<String> {
        let observer = self.runtime.as_ref()?;
        for component in self.args.depends_on.iter().filter(|c| !c.is_empty()) {
            let Ok(ledger) = self.engine.ledger(component) else {
                continue;
            };
            let (Some(hash), Ok(Some(known))) = (ledger.content_hash, self.engine.last_known_good(component)) else {
                continue;
            };
            let pod = StaticPodRef {
                name: known.pod_name,
                namespace: known.pod_namespace,
                node: self.args.identity.node_name.clone(),
            };
            let view = observer.observe(&pod).await;
            match kube_anchor_core::runtime::judge(&view, &hash, 0, u32::MAX) {
                Local::NotRunning(what) | Local::CrashLooping(what) => {
                    return Some(format!("{component} does not run on this node ({what})"));
                }
                Local::Running | Local::PreviousStopping(_) | Local::Unknown(_) => {}
            }
        }
        None
    }

    /// The input revision this pod applies (its config marker), which names a version across
    /// nodes whose credentials differ.
    fn input_revision(&self) -> Option<String> {
        let pinned = self.args.expect_inputs.as_ref()?;
        pinned
            .markers
            .iter()
            .find(|m| m.path.file_name().is_some_and(|n| n == ".inputs-config"))
            .map(|m| m.hash.clone())
    }

    /// An earlier process on this node may have held the turn when it stopped (the anchor pod
    /// replaced or restarted mid-trial). Since no other node takes a turn over on a timer, this
    /// one takes it up again for the version it concerns: the inputs' version if it was rolled
    /// back here, else the one written; `keep_or_give_back_turn` then keeps it through the trial
    /// or gives it back (recording a rolled-back revision). Once per process, after the first
    /// answer from the API.
    async fn recover_turn(&mut self) {
        if !self.turn.needs_recovery() {
            return;
        }
        let Some(lease) = self.rollout_lease.clone() else {
            return;
        };
        let Ok(ledger) = self.engine.ledger(&self.component) else {
            return;
        };
        let accepted = self.accepted.as_ref().map(|d| d.content_hash.clone());
        let event = match kubeapi::bounded(lease.held_here()).await {
            Ok(false) => TurnEvent::NotHeldHere,
            Ok(true) => TurnEvent::HeldHere {
                ledger: &ledger,
                accepted: accepted.as_deref(),
                now: Instant::now(),
            },
            Err(e) => {
                tracing::debug!(component = %self.component, error = %e, "rollout Lease unreadable; looking again at the next sync");
                return;
            }
        };
        let actions = self.step_turn(event);
        for action in actions {
            match action {
                TurnAction::Resume { version } => {
                    tracing::info!(component = %self.component, content_hash = %version, lease = lease.name(), "this node holds the rollout turn for the version on trial: keeping it");
                }
                TurnAction::GiveBackEarlier => {
                    if let Err(e) = kubeapi::bounded(lease.release(None)).await {
                        tracing::warn!(component = %self.component, error = %e, "rollout Lease: cannot give back an earlier turn; retrying");
                        return;
                    }
                    self.step_turn(TurnEvent::EarlierGivenBack);
                }
                _ => {}
            }
        }
    }

    /// Asks for this node's turn for the version waiting for it; true when it was given.
    async fn take_turn(&mut self) -> bool {
        if self.turn.waiting.is_none() {
            return false;
        }
        let answer = match &self.rollout_lease {
            None => Answer::NoLease,
            Some(lease) => Answer::Lease {
                lease: lease.name().to_owned(),
                turn: kubeapi::bounded(lease.ask(self.input_revision().as_deref())).await,
            },
        };
        let component = self.component.clone();
        let actions = self.step_turn(TurnEvent::Asked {
            answer,
            component: &component,
            now: Instant::now(),
            wall: SystemTime::now(),
        });
        let mut given = false;
        for action in actions {
            match action {
                TurnAction::Go { version, lease } => {
                    tracing::info!(component = %self.component, content_hash = %version, lease = lease.as_str(), "this node's turn: rolling out");
                    given = true;
                }
                TurnAction::NotYet { why } => {
                    tracing::info!(component = %self.component, reason = %why, "not this node's turn yet");
                }
                _ => {}
            }
        }
        given
    }

    /// Renews the turn while its version is on trial; gives it back once the node runs a
    /// last-known-good version converged, or once the turn's version is rolled back (recording
    /// the revision, so no other node tries it).
    async fn keep_or_give_back_turn(&mut self) {
        let (Some(_), Some(lease)) = (self.turn.holding(), self.rollout_lease.clone()) else {
            return;
        };
        // Kept until the API answers again (a renewal missed then is no loss: no other node
        // takes a turn over on a timer).
        if !self.api_answers() {
            return;
        }
        let Ok(ledger) = self.engine.ledger(&self.component) else {
            return;
        };
        let runs = self
            .written
            .as_ref()
            .filter(|_| self.converged)
            .map(|w| w.content_hash.clone());
        let actions = self.step_turn(TurnEvent::Review {
            ledger: &ledger,
            runs: runs.as_deref(),
            now: Instant::now(),
        });
        for action in actions {
            let result = match action {
                TurnAction::GiveBack { version, failed } => {
                    let revision = self.input_revision().filter(|_| failed);
                    kubeapi::bounded(lease.release(revision.as_deref())).await.map(|()| {
                        tracing::info!(component = %self.component, content_hash = %version, failed, "gave back the rollout turn");
                        self.step_turn(TurnEvent::GivenBack);
                    })
                }
                TurnAction::Renew => kubeapi::bounded(lease.ask(self.input_revision().as_deref()))
                    .await
                    .map(|_| {
                        self.step_turn(TurnEvent::Renewed { now: Instant::now() });
                    }),
                _ => Ok(()),
            };
            match result {
                Err(e) if self.lease_error.as_ref() != Some(&e) => {
                    tracing::warn!(component = %self.component, error = %e, "rollout Lease: retrying");
                    self.lease_error = Some(e);
                }
                Err(e) => tracing::debug!(component = %self.component, error = %e, "rollout Lease: retrying"),
                Ok(()) => self.lease_error = None,
            }
        }
    }

    fn step_turn(&mut self, event: TurnEvent<'_>) -> Vec<TurnAction> {
        let (turn, actions) = std::mem::take(&mut self.turn).step(event);
        self.turn = turn;
        actions
    }

    fn step_version(&mut self, event: VersionEvent<'_>) -> Vec<VersionAction> {
        let (version, actions) = std::mem::take(&mut self.version).step(event);
        self.version = version;
        actions
    }

    /// While the last-known-good version is kept in place of the inputs' bad one, it is judged
    /// like a version on trial; one that fails too is reported loudly (Warning Event, metric,
    /// `/readyz` reason) rather than kept silently. It is not rolled back further: there is
    /// nothing older known to be good.
    async fn check_last_known_good(&mut self, written: &Desired, assessment: &Assessment) {
        let event = LkgEvaluated {
            held_back: self.version.held_back().is_some(),
            hash: &written.content_hash,
            assessment,
            now: self.monotonic(),
            period: self.args.trial_period,
        };
        let (lkg, actions) = std::mem::take(&mut self.lkg).step(event);
        self.lkg = lkg;
        for action in actions {
            match action {
                LkgAction::Report { note } => {
                    tracing::error!(component = %self.component, "{note}");
                    self.publish(true, "LastKnownGoodFailing", note).await;
                }
                LkgAction::ConvergedAgain => {
                    tracing::info!(component = %self.component, "last-known-good runs converged again");
                }
                LkgAction::Record { failing, if_different } => {
                    // The first record also clears one an earlier process left (read first: no
                    // ledger write at every start).
                    if if_different {
                        let recorded = self
                            .engine
                            .ledger(&self.component)
                            .ok()
                            .and_then(|l| l.last_known_good_failing);
                        if recorded.map(|r| r.hash) == failing.as_ref().map(|f| f.hash.clone()) {
                            continue;
                        }
                    }
                    // Recorded so `status` shows it too; a failure to record is logged, not fatal.
                    let record = failing.map(|f| BadVersion {
                        hash: f.hash,
                        at: now_rfc3339(),
                        reason: f.note,
                    });
                    if let Err(e) = self
                        .engine
                        .update_ledger(&self.component, |l| l.last_known_good_failing = record)
                    {
                        tracing::error!(component = %self.component, error = %e, "could not record the last-known-good state");
                    }
                }
            }
        }
        self.shared
            .metrics
            .last_known_good_failing
            .set(i64::from(self.lkg.failing().is_some()));
    }

    async fn promote(&mut self, written: &Desired) {
        match self.engine.promote(written) {
            Ok(()) => {
                tracing::info!(component = %self.component, content_hash = %written.content_hash, "survived its trial: now last-known-good");
                self.publish(
                    false,
                    "Promoted",
                    format!("{} is now last-known-good", written.content_hash),
                )
                .await;
            }
            Err(e) => {
                tracing::error!(component = %self.component, error = %e, "could not record the last-known-good version")
            }
        }
    }

    async fn rollback(&mut self, failed: &Desired, reason: String) {
        let lkg = match self.engine.last_known_good(&self.component) {
            Ok(Some(lkg)) if lkg.content_hash != failed.content_hash => lkg,
            Ok(_) => {
                // The first version on a node is never rolled back to nothing.
                tracing::warn!(component = %self.component, content_hash = %failed.content_hash, %reason, "failed its trial, but there is no last-known-good version: kept");
                let now = self.monotonic();
                self.step_version(VersionEvent::NoLastKnownGood { now });
                return;
            }
            Err(e) => {
                tracing::error!(component = %self.component, error = %e, "cannot read the last-known-good version: not rolling back");
                return;
            }
        };
        let bad = BadVersion {
            hash: failed.content_hash.clone(),
            at: now_rfc3339(),
            reason: reason.clone(),
        };
        if let Err(e) = self.engine.update_ledger(&self.component, |l| l.mark_bad(bad)) {
            tracing::error!(component = %self.component, error = %e, "could not record the bad version");
        }
        match self.engine.apply(&lkg, false) {
            Ok(report) => self.note_renewals(&report),
            Err(e) => {
                tracing::error!(component = %self.component, error = %e, "rollback to last-known-good failed; will retry at the next sync");
                return;
            }
        }
        self.shared.metrics.rollbacks.inc();
        let note = format!(
            "{} failed its trial ({reason}); rolled back to last-known-good {}",
            failed.content_hash, lkg.content_hash
        );
        tracing::warn!(component = %self.component, "{note}");
        self.publish(true, "RolledBack", note.clone()).await;
        self.step_version(VersionEvent::RolledBack { note });
        self.ensure_mirror_watch(&lkg);
        self.written = Some(lkg);
    }

    /// Publishes an Event now when the API answers, else keeps it for when it does: a rollback
    /// made while the API was down (on one node, because of the version rolled back) is
    /// reported once the API is back.
    async fn publish(&mut self, warning: bool, reason: &str, note: String) {
        if self.api_answers()
            && self.unpublished.is_empty()
            && let Some(events) = &self.events
            && events.publish(warning, reason, "Sync", note.clone()).await
        {
            return;
        }
        self.queue_event(warning, reason, note);
    }

    /// The expiry metric and `CertificateExpiresSoon` Events, from the credentials on the node:
    /// read again when the version changes and otherwise hourly, not at every sync.
    fn scan_certificates(&mut self, now: i64) {
        let version = self.engine.ledger(&self.component).ok().and_then(|l| l.content_hash);
        let version = version.unwrap_or_default();
        if self
            .certificates_scanned
            .as_ref()
            .is_some_and(|(at, v)| *v == version && at.elapsed() < CERTIFICATE_SCAN_PERIOD)
        {
            return;
        }
        self.certificates_scanned = Some((Instant::now(), version));
        let Ok(certificates) = self.engine.certificates(&self.component) else {
            return;
        };
        self.shared.metrics.set_certificates(&certificates);
        let horizon = now.saturating_add(self.args.certificate_expiry_warning.as_secs() as i64);
        for c in certificates {
            if c.not_after_seconds <= horizon && self.expiry_announced.insert((c.place.clone(), c.not_after_seconds)) {
                let when = if c.not_after_seconds <= now {
                    "expired"
                } else {
                    "expires"
                };
                let note = format!("{} ({}) {when} at {}", c.place, c.subject, c.not_after);
                tracing::warn!(component = %self.component, certificate = %c.place, not_after = %c.not_after, "certificate {when} soon");
                self.queue_event(true, "CertificateExpiresSoon", note);
            }
        }
    }

    /// A credential renewed on the node and kept: the metric, and a Warning Event once per
    /// renewal, since the node now differs from the chart's Secret until it carries the renewal.
    fn note_renewals(&mut self, report: &ApplyReport) {
        self.shared.metrics.set_renewed_on_node(&report.renewed);
        for notice in &report.notices {
            let Notice::RenewedOnNode { path, detail } = notice else {
                continue;
            };
            if self.renewals_announced.insert((path.clone(), detail.clone())) {
                tracing::warn!(component = %self.component, path = %path, "{detail}; kept until the config carries it");
                self.queue_event(
                    true,
                    "CertificateRenewedOnNode",
                    format!("{path}: {detail}; kept, not reverted: carry the renewal into the chart's Secret"),
                );
            }
        }
    }

    /// Keeps an Event for the next time the API answers (the oldest goes when the queue is full).
    fn queue_event(&mut self, warning: bool, reason: &str, note: String) {
        if self.unpublished.len() == MAX_UNPUBLISHED {
            self.unpublished.remove(0);
        }
        self.unpublished.push(PendingEvent {
            warning,
            reason: reason.into(),
            note,
        });
    }

    /// The mirror pod's watch is the anchor's sign of life from the API (without one, try).
    fn api_answers(&self) -> bool {
        self.mirror.as_ref().is_none_or(|m| m.rx.borrow().is_some())
    }

    async fn publish_unpublished(&mut self) {
        let Some(events) = &self.events else { return };
        while let Some(event) = self.unpublished.first() {
            if !events
                .publish(event.warning, &event.reason, "Sync", event.note.clone())
                .await
            {
                return;
            }
            self.unpublished.remove(0);
        }
    }
}

/// The directories whose changes mean the inputs may have changed: the config's, every
/// source's and every revision marker's (a ConfigMap/Secret volume swaps `..data` there).
fn input_dirs(config: &Path, inputs: &Inputs, pinned: &Option<PinnedInputs>) -> BTreeSet<PathBuf> {
    std::iter::once(config)
        .chain(inputs.anchor.files.iter().map(|f| f.source.as_path()))
        .chain(pinned.iter().flat_map(|p| p.markers.iter().map(|m| m.path.as_path())))
        .filter_map(|p| {
            p.parent().map(|d| {
                if d.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    d.to_path_buf()
                }
            })
        })
        .collect()
}

/// Where the `..data` link of each directory points (`None` where there is none): the
/// generation of a ConfigMap/Secret volume. Generation directories are named by time and a
/// random suffix, so a name never comes back.
fn volume_generations(dirs: &BTreeSet<PathBuf>) -> Vec<Option<PathBuf>> {
    dirs.iter()
        .map(|d| std::fs::read_link(d.join(DATA_LINK)).ok())
        .collect()
}

/// A revision marker's content: a regular file of at most [`MAX_MARKER_BYTES`].
fn read_marker(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_MARKER_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_MARKER_BYTES {
        return Err(format!("larger than {MAX_MARKER_BYTES} bytes"));
    }
    Ok(text)
}

async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
