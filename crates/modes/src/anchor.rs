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
use crate::{etcd_defrag, etcd_snapshots};
use kube_anchor_core::change::DATA_LINK;
use kube_anchor_core::desired::Desired;
use kube_anchor_core::drain_guard as guard;
use kube_anchor_core::hostpath::HostPath;
use kube_anchor_core::ledger::{BadVersion, Ledger};
use kube_anchor_core::lifecycle::LkgFailure;
use kube_anchor_core::machine::{Anchor, Effect, EvaluateFacts, FirstWriteAnswer, Input, Note, Settings, SyncFacts};
use kube_anchor_core::margin::MarginFacts;
use kube_anchor_core::pause::Pause;
use kube_anchor_core::pinned::{MAX_MARKER_BYTES, PinnedInputs};
use kube_anchor_core::plan::Notice;
use kube_anchor_core::rollout::TurnEnd;
use kube_anchor_core::runtime::RuntimeView;
use kube_anchor_core::skew::SkewFacts;
use kube_anchor_core::trial::{MirrorPod, VersionView};
use kube_anchor_core::turn::Answer;
use kube_anchor_host::watch::{DirRole, DirWatcher, Stale};
use kube_anchor_k8s::anchor_status;
use kube_anchor_k8s::client_check::ClientCheck;
use kube_anchor_k8s::cri::{RuntimeObserver, StaticPodRef};
use kube_anchor_k8s::direct::HealthCheck;
use kube_anchor_k8s::drain_guard;
use kube_anchor_k8s::kubeapi::{self, EventSink};

/// How often the version on trial (or one not converged yet) is looked at.
const TRIAL_TICK: Duration = Duration::from_secs(1);
/// How often the inputs are read again when a volume swapped `..data` while they were read.
const MAX_INPUT_READS: usize = 5;

/// Why a sync pass is run again at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Again {
    /// The rollout turn was given: an etcd member hands its leadership off first.
    TurnGiven,
    /// The Lease has no word against a first write.
    FirstWriteCleared,
}

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
    rx: watch::Receiver<anchor_status::LastHeard>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StatusWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The Node's pause annotation, read every [`NODE_PAUSE_REREAD`] by a task of its own, so that
/// an API that does not answer never holds up a sync or an evaluation. `None` until the first
/// answer; a failed read keeps the last one.
struct NodePauseWatch {
    rx: watch::Receiver<Option<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl NodePauseWatch {
    fn start(client: kube::Client, node: String, component: String) -> Self {
        let (tx, rx) = watch::channel(None);
        let task = tokio::spawn(async move {
            loop {
                match kubeapi::node_pause(&client, &node).await {
                    Ok(annotation) => {
                        tx.send_if_modified(|seen| {
                            let changed = seen.as_ref() != Some(&annotation);
                            *seen = Some(annotation.clone());
                            changed
                        });
                    }
                    Err(e) => {
                        tracing::debug!(%component, error = %e, "cannot read this node's pause annotation; keeping the last answer")
                    }
                }
                tokio::time::sleep(NODE_PAUSE_REREAD).await;
            }
        });
        NodePauseWatch { rx, task }
    }
}

impl Drop for NodePauseWatch {
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
    /// The health URLs of the `--depends-on` components that name one.
    dependency_health: BTreeMap<String, HealthCheck>,
    /// `--client-checks`: the component's clients on this node, asked as they ask.
    client_checks: Vec<ClientCheck>,
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
    /// The decisions (`kube_anchor_core::machine`): the version settled, on trial or held back
    /// from a known-bad one, the judgement of a last-known-good version held in place of a bad
    /// one, and the rollout turn this node holds (or one an earlier process held, not looked at
    /// yet) and a version waiting for one.
    machine: Anchor,
    input_error: Option<String>,
    started: Instant,
    input_dirs: BTreeSet<PathBuf>,
    /// What the last syncs read of the inputs, kept while no event says it changed.
    known: KnownReads,
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
    /// The last rollout Lease error logged at warn (the same one again is logged at debug).
    lease_error: Option<String>,
    /// The Node's pause annotation as last read.
    node_pause: Option<NodePauseWatch>,
    /// An evaluation saw the pause lifted, another writer's version on the node, or the kubelet
    /// replacing static pods again after a version was put back before it started: sync at once.
    resync_now: bool,
    /// The last version another writer was found to have put on the node (synced for once).
    other_writer_seen: Option<String>,
    /// This node's `AnchorStatus` as the API shows it, once there is a client and a node name.
    status_watch: Option<StatusWatch>,
    /// When the `AnchorStatus` was last written, what, and the watch's generation then (see
    /// `anchor_status::LastHeard`); and a write held back until [`STATUS_MIN_INTERVAL`] has passed.
    status_written: Option<Instant>,
    status_published: Option<(kube_anchor_core::node_status::NodeStatus, u64)>,
    status_due: Option<tokio::time::Instant>,
    /// The last failed write's error (logged at warn once).
    status_error: Option<String>,
    /// When this node's drain guard is looked at next (`--drain-guard`).
    guard_due: Option<tokio::time::Instant>,
    /// The last drain guard error (logged at warn once).
    guard_error: Option<String>,
    /// The images of a waiting version being pulled, or whose pull failed.
    pulls: BTreeMap<String, ImagePull>,
    /// When this node looks next whether a scheduled etcd snapshot is due (`None`: none
    /// scheduled), the one being taken, the slot whose failure was announced, and the last
    /// error of a look (logged at warn once).
    snapshot_due: Option<tokio::time::Instant>,
    snapshot_task: Option<(u64, SnapshotTask)>,
    snapshot_failed_slot: Option<u64>,
    /// The slot of the last attempt, the attempts at it, and when the last began.
    snapshot_attempts: Option<(u64, u32, Instant)>,
    snapshot_error: Option<String>,
    /// The newest scheduled snapshot on the node, for `AnchorStatus`.
    snapshot_newest: Option<String>,
    /// When this node looks next whether its etcd member is defragmented (`None`: no `defrag`
    /// in the config), the defrag under way, and why the member waits (logged when it changes).
    defrag_due: Option<tokio::time::Instant>,
    defrag_task: Option<DefragTask>,
    defrag_waits: Option<String>,
    /// The rollout turn this node took for its member's defrag, until it is given back.
    defrag_turn: bool,
}

/// A scheduled etcd snapshot being taken (`None`: its slot ended before it began).
type SnapshotTask = tokio::task::JoinHandle<Result<Option<etcd_snapshots::Taken>, String>>;

/// A defrag of this node's etcd member under way.
type DefragTask = tokio::task::JoinHandle<Result<etcd_defrag::Defragged, String>>;

/// One image pull through the container runtime (`Daemon::images_not_ready`).
enum ImagePull {
    Running(tokio::task::JoinHandle<Result<(), String>>),
    /// Failed for a reason the anchor takes as the node's: tried again after [`PULL_RETRY`].
    Failed {
        why: String,
        at: Instant,
    },
    /// Refused the anchor's pull for want of credentials: the kubelet may have some (a
    /// credential provider) that the runtime's own configuration does not; not a hold.
    Denied,
}

/// What a sync takes from the syncs before it instead of reading again (design.md,
/// "Event-driven sync"): the inputs, until an event touches an input directory; the host files'
/// observations are kept by `HostFs`, each until an event names its file. All of it is read
/// afresh at every `--resync-period`, and whenever events were lost or a watch was missing.
#[derive(Default)]
struct KnownReads {
    /// The inputs as last read, all from one generation of every volume.
    inputs: Option<Inputs>,
    /// When everything was last read and observed afresh; `None`: at the next sync.
    full_at: Option<tokio::time::Instant>,
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
/// How often the Node's pause annotation is read again, and a paused anchor looks whether its
/// pause was lifted.
const NODE_PAUSE_REREAD: Duration = Duration::from_secs(10);
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

/// How soon an image whose pull failed is pulled again.
const PULL_RETRY: Duration = Duration::from_secs(30);

/// How often the drain guard, the Node's cordon and the budget are looked at: an uncordoned
/// node gets its guard back within this.
const GUARD_PERIOD: Duration = Duration::from_secs(10);

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
    // Held until the process ends: `remove` on this node refuses while it is (the next sync
    // would write the files back).
    let _presence = engine.hold_anchor_presence(&component)?;
    // The kubelet's pre-start step, where installed, runs this version's code (its ledger
    // reading included), not the one installed with it.
    match engine.refresh_pre_start_binary(crate::cli::VERSION, || std::fs::read("/proc/self/exe")) {
        Ok(true) => tracing::info!("kubelet pre-start step: its binary is this anchor's now"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "kubelet pre-start step: cannot refresh its binary"),
    }
    let (draining, abort) = shutdown::install().context("installing signal handlers")?;
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
    let dependency_health = args
        .depends_on
        .iter()
        .filter_map(|d| d.health_url.as_deref().map(|url| (d.component.clone(), url)))
        .map(|(component, url)| HealthCheck::new(url, None).map(|check| (component, check)))
        .collect::<Result<BTreeMap<_, _>, _>>()?;
    let client_checks = args
        .client_checks
        .0
        .iter()
        .map(|spec| ClientCheck::new(spec.clone(), &args.node.host_root, args.identity.kubeconfig()))
        .collect();
    let runtime = RuntimeObserver::new(&args.node.host_root, args.runtime.endpoint());
    let watcher = DirWatcher::new().context("starting inotify")?;
    let api = kubeapi::LazyClient::new(
        args.identity.kubeconfig().map(ToOwned::to_owned),
        args.identity.api_servers.clone(),
        kubeapi::user_agent(&format!("run {component}"), args.identity.node_name.as_deref()),
        Duration::ZERO,
    );
    // Only an anchor pod (node and namespace from the downward API) with an API has a rollout
    // Lease; a `run` outside a cluster is alone with its node.
    let in_fleet = api_wanted && args.identity.node_name.is_some() && args.identity.pod_namespace.is_some();
    let machine = Anchor::new(Settings {
        component: component.clone(),
        trial_period: args.trial_period,
        crash_loop_threshold: args.crash_loop_threshold,
        in_fleet,
        client_checks: !args.client_checks.0.is_empty(),
        // Set at every sync (`spec.etcdMember` in the config, or `--api-server-margin`).
        restart_needs_margin: args.api_server_margin,
        skew_gate: args.skew_gate,
        // Where the runtime can be asked.
        image_gate: args.runtime.endpoint() != kube_anchor_k8s::cri::RuntimeEndpoint::Disabled,
    });
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
        dependency_health,
        client_checks,
        runtime,
        watcher,
        mirror: None,
        written: None,
        accepted: None,
        awaiting_rollout: None,
        machine,
        input_error: None,
        started: Instant::now(),
        input_dirs: BTreeSet::new(),
        known: KnownReads::default(),
        member_record: None,
        membership_pending: None,
        learner_watch: None,
        rollout_lease: None,
        lease_error: None,
        node_pause: None,
        resync_now: false,
        other_writer_seen: None,
        status_watch: None,
        status_written: None,
        status_published: None,
        status_due: None,
        status_error: None,
        guard_due: Some(tokio::time::Instant::now()),
        guard_error: None,
        pulls: BTreeMap::new(),
        snapshot_due: Some(tokio::time::Instant::now()),
        snapshot_task: None,
        snapshot_failed_slot: None,
        snapshot_attempts: None,
        snapshot_error: None,
        snapshot_newest: None,
        defrag_due: Some(tokio::time::Instant::now()),
        defrag_task: None,
        defrag_waits: None,
        defrag_turn: false,
    };
    abort
        .around(async {
            daemon.connect().await;
            daemon.run(draining).await;
        })
        .await?;
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
                if std::mem::take(&mut self.resync_now) {
                    break;
                }
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
                            self.known.full_at = None;
                        }
                        break;
                    }
                    // Deadlines from the last sync: evaluations in between must not push them back.
                    // The resync's from the last one: syncs on events read only what changed.
                    _ = tokio::time::sleep_until(self.known.full_at.unwrap_or(synced) + self.args.resync_period) => break,
                    _ = sleep_until_opt(self.membership_pending.as_ref().map(|_| synced + MEMBERSHIP_RETRY)) => break,
                    _ = sleep_until_opt(self.machine.waits_for_lease().then_some(synced + TURN_RETRY)) => break,
                    _ = sleep_until_opt(self.credential_drift_since.map(|since| since + CREDENTIAL_SETTLE)) => break,
                    true = mirror_changed => self.evaluate().await,
                    true = status_changed => self.publish_status().await,
                    _ = sleep_until_opt(self.status_due) => self.publish_status().await,
                    _ = sleep_until_opt(self.guard_due) => self.keep_drain_guard().await,
                    _ = sleep_until_opt(self.snapshot_due) => self.keep_etcd_snapshots().await,
                    _ = sleep_until_opt(self.defrag_due) => self.keep_etcd_defragmented().await,
                    _ = sleep_opt(tick) => self.evaluate().await,
                    _ = sleep_until_opt(release_code_at) => {
                        release_code_at = None;
                        let bytes = kube_anchor_host::memory::release_read_only_pages();
                        tracing::debug!(bytes, "idle: code and constant data released from the resident set");
                        continue;
                    }
                    _ = draining.changed() => {
                        self.shared.update(|s| s.draining = true);
                        tracing::info!(component = %self.component, "drained; exiting (files stay on the node)");
                        return;
                    }
                }
                // Released once since the last sync: the evaluation or status report just done
                // gives back the code it mapped, so the resident set stays small between them
                // (mapping it again next time costs minor faults, no IO).
                if release_code_at.is_none() {
                    kube_anchor_host::memory::release_read_only_pages();
                }
            }
        }
    }

    /// Periodic evaluation is needed only while a version is on trial or not converged, or a
    /// rollout turn is held (it is given back from an evaluation), and (slower) to keep checking
    /// a health URL.
    fn evaluation_interval(&self) -> Option<Duration> {
        if self.machine.paused.is_some() {
            Some(NODE_PAUSE_REREAD) // to see the pause lifted
        } else if self.api.client().is_none() && self.health.is_none() && self.runtime.is_none() {
            None // nothing to learn by looking again
        } else if self.machine.busy() {
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
        self.node_pause = self
            .args
            .identity
            .node_name
            .clone()
            .map(|node| NodePauseWatch::start(client.clone(), node, self.component.clone()));
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
        self.forget_stale();
        self.membership_step().await;
        // Again when the pass's effects call for it: the turn given (the leadership handed off
        // first), the clients of the version on the node recorded before a new one is written.
        let mut effects = self.sync_pass();
        for _ in 0..2 {
            match self.carry_out_turn(effects).await {
                None => {
                    effects = Vec::new();
                    break;
                }
                Some(Again::TurnGiven) => self.hand_off_leadership().await,
                // Nothing of the component runs here to hand off.
                Some(Again::FirstWriteCleared) => {}
            }
            effects = self.sync_pass();
        }
        self.carry_out_turn(effects).await;
        // A change that landed between reading a directory and watching it went unseen.
        if self.watch_dirs() {
            self.known.full_at = None;
            self.sync_pass();
            self.watch_dirs();
        }
        self.evaluate().await;
        // Once due: a version waiting for the Lease syncs every 2 s.
        if self.guard_due.is_some_and(|due| due <= tokio::time::Instant::now()) {
            self.keep_drain_guard().await;
        }
    }

    /// What the cluster shows before this node's component restarts for a new version: for an
    /// etcd member (`spec.etcdMember`) the member list and each other voter's own status; for a
    /// kube-apiserver (`--api-server-margin`) the other nodes' API servers.
    async fn margin_facts(&mut self) -> MarginFacts {
        if self.args.api_server_margin {
            let (Some(client), Some(node), Some(url)) = (
                self.api.client(),
                self.args.identity.node_name.as_deref(),
                self.args.health_url.as_deref(),
            ) else {
                return MarginFacts::Unknown("no API server answers: the other anchors cannot be listed".into());
            };
            return kube_anchor_k8s::margin::api_server_peers(
                client,
                &self.component,
                node,
                url,
                self.args.health_ca_file.as_deref(),
            )
            .await;
        }
        // The inputs the sync just read (kept while no event says they changed).
        let pinned = self.args.expect_inputs.clone();
        let inputs = match self.load_inputs(&pinned) {
            Ok(inputs) => inputs,
            Err(e) => return MarginFacts::Unknown(format!("the config cannot be read: {e}")),
        };
        match &inputs.anchor.etcd_member {
            Some(member) => crate::etcd_member::margin_facts(&inputs, member).await,
            None => MarginFacts::Unknown("the config names no etcd member".into()),
        }
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

    /// A full sync (every input read again) at once, as soon as the evaluation returns.
    fn sync_fully_now(&mut self) {
        self.known.full_at = None;
        self.resync_now = true;
    }

    /// Why an operator holds this anchor (the node's `pause`, or the Node's annotation).
    fn pause(&self, ledger: &Ledger) -> Option<String> {
        let annotation = self.node_pause.as_ref().and_then(|w| w.rx.borrow().clone().flatten());
        Pause::of(
            ledger.paused.as_ref(),
            self.args.identity.node_name.as_deref(),
            annotation.as_deref(),
        )
        .map(|p| p.describe(&self.component))
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
        // Read as the sync reads them, and kept for it: one read of the inputs per sync.
        let pinned = self.args.expect_inputs.clone();
        let inputs = match self.load_inputs(&pinned) {
            Ok(inputs) if inputs.anchor.etcd_member.is_some() => inputs,
            _ => {
                self.membership_pending = None;
                return; // no membership, or the sync reports the bad config
            }
        };
        // Decommissioned on this node: its preStop hook removed the member, and this daemon,
        // still draining until the kubelet stops it, must not add it back as a learner. Only an
        // explicit `apply` or `bootstrap` takes the component back. Held by an operator: no
        // member is added, promoted or given up.
        if self
            .engine
            .ledger(&self.component)
            .is_ok_and(|l| l.decommissioned.is_some() || self.pause(&l).is_some())
        {
            self.membership_pending = None;
            return;
        }
        self.give_up_earlier_leave();
        match crate::etcd_member::join_step(
            &self.engine,
            &inputs,
            kube_anchor_core::membership::Founding::Never,
            false,
        )
        .await
        {
            Ok(report) => {
                if report.pending && self.membership_pending.as_deref() != Some(report.summary.as_str()) {
                    tracing::info!(component = %self.component, membership = %report.summary, "etcd join not finished");
                }
                self.shared
                    .metrics
                    .set_etcd_member(report.record.as_ref(), report.pending);
                self.watch_learner(
                    crate::etcd_member::LearnerReport::of(&report).as_ref(),
                    inputs.anchor.etcd_member.as_ref(),
                );
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

    /// Drops what events say may have changed since it was read: the inputs when an input
    /// directory was touched, the observation of each managed file an event named; everything
    /// when events were lost, an input directory is not watched, or the resync is due.
    fn forget_stale(&mut self) {
        let resync_due = self
            .known
            .full_at
            .is_none_or(|at| at.elapsed() >= self.args.resync_period);
        let inputs_watched = self.watcher.watches_all(self.input_dirs.iter());
        match self.watcher.take_touched().stale(resync_due, inputs_watched) {
            Stale::Everything => {
                self.known.inputs = None;
                self.engine.fs.forget_all_observed();
                self.known.full_at = Some(tokio::time::Instant::now());
            }
            Stale::Some { inputs, managed } => {
                if inputs {
                    self.known.inputs = None;
                }
                self.engine.fs.forget_observed(managed.iter().map(PathBuf::as_path));
            }
        }
    }

    /// One pass of the files; what the machine asks of the rollout Lease is returned, for the
    /// async caller.
    fn sync_pass(&mut self) -> Vec<Effect> {
        self.forget_stale();
        self.shared.update(|s| s.sync_started = Some(Instant::now()));
        let mut lease_effects = Vec::new();
        let mut result = self.sync_files(&mut lease_effects);
        if let (Err(EngineError::Decommissioned { .. }), Some(pod)) = (&result, &self.args.identity.pod_name) {
            // Another anchor pod of this component (an old DaemonSet of a renamed release, say)
            // decommissioned it; this pod is alive and still wants it. Our own pod's marker stays.
            match self.engine.recommission(&self.component, Some(pod)) {
                Ok(true) => {
                    tracing::warn!(component = %self.component, "lifted a decommission marker another anchor pod set; keeping the component on the node");
                    result = self.sync_files(&mut lease_effects);
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
            // Paused between the machine's look at the ledger and the write: nothing written.
            Err(EngineError::Paused { .. }) => {}
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
        lease_effects
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
                // An etcd member's new version restarts a voter, a kube-apiserver's a server
                // clients use: the cluster must afford it.
                self.machine.settings.restart_needs_margin =
                    inputs.anchor.etcd_member.is_some() || self.args.api_server_margin;
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
        if let Some(inputs) = self.known.inputs.as_ref().filter(|i| i.unchanged()) {
            return Ok(inputs.clone());
        }
        let mut attempt = 1;
        loop {
            let dirs = self.input_dirs.clone();
            let before = volume_generations(&dirs);
            let inputs = Inputs::load(&self.args.config, self.engine.roots())?;
            self.input_dirs = input_dirs(&self.args.config, &inputs, pinned);
            if self.input_dirs == dirs && volume_generations(&dirs) == before {
                // Kept only while every input directory is watched (else no event would say
                // it changed).
                if self.watcher.watches_all(self.input_dirs.iter()) {
                    self.known.inputs = Some(inputs.clone());
                }
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

    /// Feeds the machine a sync and carries out what it asks of the node (writes); what it asks
    /// of the rollout Lease goes to `lease_effects`, for the async caller (also when the sync
    /// fails). A refusal comes back as the credentials error.
    fn sync_files(&mut self, lease_effects: &mut Vec<Effect>) -> Result<(), EngineError> {
        // An input that cannot be read or rendered stops a new version, not the repair of the
        // one accepted before (a stuck volume must not leave a deleted manifest deleted); it is
        // reported once the rest is done.
        let (desired, input_failure) = match self.load_desired() {
            Ok(desired) => (desired, None),
            Err(e) if e.is_input() => (None, Some(e)),
            Err(e) => return Err(e),
        };
        if let Some(d) = &desired {
            self.accepted = Some(d.clone());
        }
        let ledger = self.engine.ledger(&self.component)?;
        // The version to write unless it is a known-bad one: the inputs', else what this pod
        // accepted before.
        let candidate = desired.as_ref().or(self.accepted.as_ref());
        // The last-known-good snapshot is read only when it may be written: in place of a bad
        // version or one put back before the kubelet started, or after a container restart with
        // nothing accepted yet.
        let needs_last_known_good =
            ledger.last_known_good.is_some() && candidate.is_none_or(|c| ledger.may_hold_back(&c.content_hash));
        let last_known_good = if needs_last_known_good {
            self.engine.last_known_good(&self.component)?
        } else {
            None
        };
        let mut refusal = match candidate {
            Some(c) if !(ledger.bad_version(&c.content_hash).is_some() && last_known_good.is_some()) => {
                self.engine.check_credentials_with(c, &ledger).err()
            }
            _ => None,
        };
        // A static pod kube-anchor did not write (a kubeadm node taken over by the charts) runs
        // too: replacing it waits for the turn like an upgrade.
        let unrecorded_manifest = ledger.content_hash.is_none()
            && candidate.is_some_and(|c| {
                let manifest = c.manifest();
                matches!(self.engine.fs.read(&manifest.path), Ok(Some(content)) if content != manifest.content)
            });
        let effects = self.machine.step(Input::Sync(SyncFacts {
            desired: desired.as_ref().map(|d| d.content_hash.as_str()),
            desired_refused: refusal.as_ref().map(ToString::to_string),
            ledger: &ledger,
            last_known_good: last_known_good.as_ref().map(|d| d.content_hash.as_str()),
            unrecorded_manifest,
            paused: self.pause(&ledger),
            now: self.monotonic(),
        }));
        let mut failed = None;
        for effect in effects {
            match effect {
                // Reported once the rest is done: whether an earlier process held the turn is
                // still asked.
                Effect::Refused { .. } => failed = refusal.take(),
                Effect::Write { version } => {
                    let Some(target) = [desired.as_ref(), self.accepted.as_ref(), last_known_good.as_ref()]
                        .into_iter()
                        .flatten()
                        .find(|d| d.content_hash == version)
                        .cloned()
                        // The version on the node taken up in place while another waits (its
                        // revision snapshot).
                        .or_else(|| {
                            (ledger.content_hash.as_deref() == Some(version.as_str()))
                                .then(|| self.engine.revision(&self.component, &version).ok())
                                .flatten()
                        })
                    else {
                        // Never: the machine writes one of the versions it was given.
                        tracing::error!(component = %self.component, content_hash = %version, "asked to write a version this pod does not have; not writing");
                        self.machine.step(Input::Written {
                            done: false,
                            now: self.monotonic(),
                        });
                        continue;
                    };
                    let written = self.write(&target, ledger.content_hash.as_deref());
                    let notes = self.machine.step(Input::Written {
                        done: written.is_ok(),
                        now: self.monotonic(),
                    });
                    if let Err(e) = written {
                        failed = Some(e);
                        continue;
                    }
                    notes.into_iter().for_each(|n| self.log_effect(n));
                    self.ensure_mirror_watch(&target);
                    self.written = Some(target);
                }
                Effect::Log(_) => self.log_effect(effect),
                other => lease_effects.push(other),
            }
        }
        failed.or(input_failure).map_or(Ok(()), Err)
    }

    /// Writes (or repairs) `target`; `previous`: the version the ledger recorded before.
    fn write(&mut self, target: &Desired, previous: Option<&str>) -> Result<(), EngineError> {
        // A credential changed on the node is repaired only once the node has been left alone
        // for CREDENTIAL_SETTLE: it may be the first half of a renewal (`plan::hold_credential_drift`).
        let repairing = previous == Some(target.content_hash.as_str());
        let hold = repairing
            && self
                .credential_drift_since
                .is_none_or(|since| since.elapsed() < CREDENTIAL_SETTLE);
        let report = self.engine.apply_as_anchor(target, self.args.prune, hold)?;
        self.credential_drift_since = if report.held.is_empty() {
            None
        } else {
            tracing::info!(component = %self.component, files = ?report.held.iter().map(ToString::to_string).collect::<Vec<_>>(), settle = ?CREDENTIAL_SETTLE, "credential changed on the node: repaired once it settles, unless it is a renewal");
            Some(self.credential_drift_since.unwrap_or_else(tokio::time::Instant::now))
        };
        self.note_renewals(&report);
        let written = report.written.len() as u64;
        if written > 0 {
            if repairing {
                self.shared.metrics.repairs.inc_by(written);
                tracing::warn!(component = %self.component, files = ?report.written.iter().map(|(p, _)| p.to_string()).collect::<Vec<_>>(), "repaired drift");
            } else {
                self.shared.metrics.writes.inc_by(written);
                tracing::info!(component = %self.component, content_hash = %target.content_hash, files = written, "wrote a new version");
            }
        }
        Ok(())
    }

    fn log_effect(&self, effect: Effect) {
        let component = &self.component;
        match effect {
            Effect::Log(Note::Waiting { version }) => {
                tracing::info!(%component, content_hash = %version, "new version: waiting for this node's turn to roll it out");
            }
            Effect::Log(Note::OnTrial { version }) => {
                tracing::info!(%component, content_hash = %version, trial = %humantime::format_duration(self.args.trial_period), "version on trial");
            }
            Effect::Log(Note::Resumed { version }) => {
                let lease = self
                    .rollout_lease
                    .as_ref()
                    .map(|l| l.name().to_owned())
                    .unwrap_or_default();
                tracing::info!(%component, content_hash = %version, %lease, "this node holds the rollout turn for the version on trial: keeping it");
            }
            Effect::Log(Note::TurnGiven { version, lease }) => {
                tracing::info!(%component, content_hash = %version, lease = lease.as_str(), "this node's turn: rolling out");
            }
            Effect::Log(Note::NotYet { why }) => {
                tracing::info!(%component, reason = %why, "not this node's turn yet");
            }
            Effect::Log(Note::NoMargin { why }) => {
                tracing::warn!(%component, reason = %why, "not restarting: the cluster cannot afford it now");
            }
            Effect::Log(Note::SkewHeld { why }) => {
                tracing::warn!(%component, reason = %why, "not restarting: the version skew policy does not allow this version here yet");
            }
            Effect::Log(Note::ImagesNotReady { why }) => {
                tracing::info!(%component, reason = %why, "not restarting before the new version's images are on the node");
            }
            Effect::Log(Note::NoMarginCanExist { version, why }) => {
                tracing::info!(%component, content_hash = %version, reason = %why, "no restart margin can exist here: going ahead, judged by this node's own evidence");
            }
            Effect::Log(Note::ConvergedAgain) => {
                tracing::info!(%component, "last-known-good runs converged again");
            }
            Effect::Log(Note::Paused { why }) => {
                tracing::warn!(%component, reason = %why, "paused: writing, repairing, rolling back, joining and removing nothing");
            }
            Effect::Log(Note::Unpaused) => {
                tracing::info!(%component, "resumed: syncing again");
            }
            Effect::Log(Note::StillStopping { version, why }) => {
                tracing::warn!(%component, content_hash = %version, reason = %why, "the previous version is not being replaced");
            }
            Effect::Log(Note::TurnGivenUp { version }) => {
                tracing::error!(%component, content_hash = %version, "giving the rollout turn back: the version failed its trial and the last-known-good one it went back to fails too; this node runs nothing good (other nodes restart only where the cluster affords it)");
            }
            other => tracing::debug!(%component, effect = ?other, "not a log line"),
        }
    }

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
        let ledger = self.engine.ledger(&self.component).ok();
        let paused = ledger.as_ref().and_then(|l| self.pause(l));
        self.shared.metrics.paused.set(i64::from(paused.is_some()));
        // A pause lifted: the sync it held back runs now.
        if paused.is_none() && self.machine.paused.is_some() {
            self.sync_fully_now();
        }
        // Another writer put another version on the node (the kubelet's pre-start step, a
        // one-shot verb; their commits wake no watch): sync before judging what is not there.
        // Once per version so found: a sync that writes nothing (the turn, a pause) is no loop;
        // found again after the node was back on this process's version (a second put-back).
        if let (Some(on_node), Some(written)) = (ledger.as_ref().and_then(|l| l.content_hash.as_deref()), &self.written)
        {
            if on_node == written.content_hash {
                self.other_writer_seen = None;
            } else if self.other_writer_seen.as_deref() != Some(on_node) {
                tracing::info!(component = %self.component, written = %written.content_hash, %on_node, "another version was written on the node; syncing");
                self.other_writer_seen = Some(on_node.to_owned());
                self.sync_fully_now();
                return;
            }
        }
        let mut facts = EvaluateFacts {
            view: VersionView {
                api_configured: self.api_wanted,
                mirror: None,
                health: None,
                runtime: None,
                runtime_restarts: 0,
                dependency_down: None,
                clients: Vec::new(),
                clients_reconnecting: false,
            },
            dependency_looked: false,
            input_error: self.input_error.clone(),
            pending: None,
            paused,
            now: self.monotonic(),
        };
        if let Some(written) = self.written.clone() {
            facts.view = self.observe(&written).await;
            // A process that never saw its own inputs cannot tell whether it is an old pod whose
            // inputs moved on (restarted container) or a new one whose inputs have not arrived
            // yet; being Ready as the latter would let the rollout move on before this node is
            // updated.
            let unproven = match (&self.accepted, &self.awaiting_rollout) {
                (None, Some(why)) => Some(why.clone()),
                _ => None,
            };
            facts.pending = unproven.or_else(|| self.membership_pending.clone());
        } else {
            // Nothing written: only the reason changes.
            facts.pending = self.awaiting_rollout.clone();
            for effect in self.machine.step(Input::Evaluate(facts)) {
                if let Effect::Ready { ready, reason } = effect {
                    self.shared.update(|s| (s.ready, s.reason) = (ready, reason));
                }
            }
            return;
        }
        let mut effects = self.machine.step(Input::Evaluate(facts.clone()));
        if effects == [Effect::LookAtDependency] {
            facts.view.dependency_down = self.dependency_down().await;
            facts.dependency_looked = true;
            effects = self.machine.step(Input::Evaluate(facts));
        }
        for effect in effects {
            match effect {
                Effect::Promote { .. } => {
                    if let Some(written) = self.written.clone() {
                        self.promote(&written).await;
                    }
                }
                Effect::RollBack { reason, .. } => {
                    if let Some(written) = self.written.clone() {
                        self.rollback(&written, reason).await;
                    }
                }
                Effect::LkgFailing { note } => {
                    tracing::error!(component = %self.component, "{note}");
                    self.publish(true, "LastKnownGoodFailing", note).await;
                }
                Effect::RecordLkgFailing { failing, if_different } => self.record_lkg_failing(failing, if_different),
                Effect::RecordClientsServed { clients } => self.record_clients_served(clients),
                Effect::Ready { ready, reason } => self.shared.update(|s| (s.ready, s.reason) = (ready, reason)),
                Effect::Resync => self.sync_fully_now(),
                other => self.log_effect(other),
            }
        }
        self.shared.metrics.converged.set(i64::from(self.machine.converged));
        if self.machine.turn.waiting.is_none() {
            self.shared.metrics.restart_waits_for_margin.set(0);
            self.shared.metrics.restart_waits_for_skew.set(0);
            self.shared.metrics.restart_waits_for_images.set(0);
            // Nothing waits for them any more.
            self.pulls.retain(|_, pull| matches!(pull, ImagePull::Running(_)));
        }
        self.shared
            .metrics
            .last_known_good_failing
            .set(i64::from(self.machine.lkg.failing().is_some()));
        self.keep_or_give_back_turn().await;
        self.publish_status().await;
    }

    /// What the mirror pod, the health URL and the container runtime show of `written`.
    async fn observe(&self, written: &Desired) -> VersionView {
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
        VersionView {
            api_configured: self.api_wanted,
            mirror,
            health,
            runtime,
            runtime_restarts: 0,
            dependency_down: None,
            clients: self.ask_clients().await,
            clients_reconnecting: false,
        }
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
        let mut status = kube_anchor_core::node_status::NodeStatus::of(
            &ledger,
            kube_anchor_core::node_status::Daemon {
                node,
                pod: self.args.identity.pod_name.as_deref(),
                version: &self.machine.version,
                ready: now.ready,
                reason: &now.reason,
            },
        );
        status.last_snapshot = self.snapshot_newest.clone();
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

    /// Why `desired` must wait for its images, or `None` once every image of its static pod is
    /// on the node: an image the runtime lacks is pulled in the background (`PullImage`), and
    /// the version waits while it is pulled and, after a failure (a Warning Event
    /// `ImagePullFailed` naming the image), until a pull tried again every [`PULL_RETRY`]
    /// succeeds. A runtime that cannot be asked, or that refuses the anchor's pull for want of
    /// credentials (the kubelet may have some), holds nothing: the kubelet pulls as before.
    async fn images_not_ready(&mut self, desired: &Desired) -> Option<String> {
        let runtime = self.runtime.clone()?;
        let spec = desired.pod()?.spec?;
        let images: BTreeSet<String> = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .filter_map(|c| c.image.clone())
            .collect();
        let mut waits = Vec::new();
        for image in images {
            match runtime.image_present(&image).await {
                Ok(true) => {
                    if let Some(ImagePull::Running(_)) = self.pulls.remove(&image) {
                        tracing::info!(component = %self.component, %image, "image pulled");
                    }
                    continue;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::debug!(component = %self.component, %image, error = %e, "cannot ask the runtime for the image: not waiting for it");
                    continue;
                }
            }
            let done = matches!(self.pulls.get(&image), Some(ImagePull::Running(task)) if task.is_finished());
            let finished = match done.then(|| self.pulls.remove(&image)).flatten() {
                Some(ImagePull::Running(task)) => Some(task.await.unwrap_or_else(|e| Err(e.to_string()))),
                _ => None,
            };
            match finished {
                Some(Ok(())) => {
                    tracing::info!(component = %self.component, %image, "image pulled");
                    continue;
                }
                Some(Err(why)) if pull_denied(&why) => {
                    tracing::warn!(component = %self.component, %image, error = %why, "the runtime refused the anchor's pull for want of credentials; not waiting (the kubelet pulls with its own)");
                    self.pulls.insert(image, ImagePull::Denied);
                    continue;
                }
                Some(Err(why)) => {
                    let note = format!("cannot pull image {image} on this node: {why}");
                    self.queue_event(
                        true,
                        "ImagePullFailed",
                        format!(
                            "{note}; nothing restarted, pulled again every {}",
                            humantime::format_duration(PULL_RETRY)
                        ),
                    );
                    self.pulls.insert(
                        image.clone(),
                        ImagePull::Failed {
                            why,
                            at: Instant::now(),
                        },
                    );
                    waits.push(note);
                    continue;
                }
                None => {}
            }
            match self.pulls.get(&image) {
                Some(ImagePull::Denied) => continue,
                Some(ImagePull::Running(_)) => waits.push(format!("pulling image {image} on this node")),
                Some(ImagePull::Failed { why, at }) if at.elapsed() < PULL_RETRY => {
                    waits.push(format!("cannot pull image {image} on this node: {why}"))
                }
                _ => {
                    tracing::info!(component = %self.component, %image, "pulling the new version's image before its restart");
                    let (runtime, pulled) = (runtime.clone(), image.clone());
                    let task = tokio::spawn(async move { runtime.pull_image(&pulled).await });
                    self.pulls.insert(image.clone(), ImagePull::Running(task));
                    waits.push(format!("pulling image {image} on this node"));
                }
            }
        }
        (!waits.is_empty()).then(|| waits.join("; "))
    }

    /// Keeps this node's drain guard in step (`kube_anchor_core::drain_guard`): a guard while a
    /// version of the component is on the node and its manifest has an HTTP readiness probe,
    /// none otherwise; and the budget's minAvailable.
    async fn keep_drain_guard(&mut self) {
        self.guard_due = Some(tokio::time::Instant::now() + GUARD_PERIOD);
        let (Some(budget), Some(image)) = (
            self.args.drain_guard.as_deref().filter(|b| !b.is_empty()),
            self.args.guard_image.as_deref().filter(|i| !i.is_empty()),
        ) else {
            self.guard_due = None;
            return;
        };
        let identity = &self.args.identity;
        let (Some(client), Some(node), Some(namespace), Some(anchor_pod)) = (
            self.api.client(),
            identity.node_name.as_deref(),
            identity.pod_namespace.as_deref(),
            identity.pod_name.as_deref(),
        ) else {
            return;
        };
        let place = drain_guard::GuardPlace {
            namespace: namespace.to_owned(),
            node: node.to_owned(),
            budget: budget.to_owned(),
            anchor_pod: anchor_pod.to_owned(),
            guard: guard::guard_name(&self.component, node),
        };
        let outcome = async {
            let mut observed = drain_guard::observe(client, &place).await?;
            let spec = self
                .written
                .as_ref()
                .filter(|_| observed.budget_exists)
                .and_then(|written| {
                    let manifest = written.pod()?;
                    let node_ip = written.node_ip.map(|ip| ip.to_string());
                    guard::readiness_probe(&manifest, node_ip.as_deref())
                })
                .map(|probe| guard::GuardSpec {
                    component: self.component.clone(),
                    node: node.to_owned(),
                    namespace: namespace.to_owned(),
                    image: image.to_owned(),
                    probe,
                    owner: (anchor_pod.to_owned(), observed.anchor_uid.clone()),
                });
            observed.facts.wanted = spec.as_ref().map(guard::wanted_digest);
            for action in guard::decide(&observed.facts) {
                match action {
                    guard::GuardAction::Create => {
                        let spec = spec.as_ref().expect("a guard to create is wanted");
                        drain_guard::create(client, &place, &guard::guard_pod(spec)).await?;
                        tracing::info!(component = %self.component, guard = %place.guard, "drain guard started");
                    }
                    guard::GuardAction::Replace | guard::GuardAction::Delete => {
                        drain_guard::delete(client, &place).await?;
                        tracing::info!(component = %self.component, guard = %place.guard, replaced = (action == guard::GuardAction::Replace), "drain guard deleted");
                        self.guard_due = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                    }
                    guard::GuardAction::SetMinAvailable(n) => {
                        drain_guard::set_min_available(client, &place, n).await?;
                        tracing::info!(component = %self.component, budget = %place.budget, min_available = n, "drain guard budget set");
                    }
                }
            }
            Ok::<_, drain_guard::GuardError>(())
        }
        .await;
        match outcome {
            Ok(()) => {
                if self.guard_error.take().is_some() {
                    tracing::info!(component = %self.component, "drain guard kept again");
                }
            }
            Err(e) => {
                let e = e.to_string();
                if self.guard_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(component = %self.component, error = %e, "cannot keep this node's drain guard (retrying)");
                }
                self.guard_error = Some(e);
            }
        }
    }

    /// Scheduled etcd snapshots (`spec.etcdMember.snapshots.schedule`, see
    /// [`kube_anchor_core::etcd_snapshot`]): looks whether this node takes the current slot's
    /// snapshot and, when it does, takes it on a task of its own; reports the one taken.
    async fn keep_etcd_snapshots(&mut self) {
        if let Some((slot, task)) = self.snapshot_task.take() {
            if !task.is_finished() {
                self.snapshot_task = Some((slot, task));
                self.snapshot_due = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                return;
            }
            let result = task
                .await
                .unwrap_or_else(|e| Err(format!("the snapshot task failed: {e}")));
            self.snapshot_taken(slot, result);
            if self.api_answers() {
                self.publish_unpublished().await;
            }
        }
        if self.defrag_task.is_some() {
            // The member answers nothing while it is defragmented.
            self.snapshot_due = Some(tokio::time::Instant::now() + Duration::from_secs(1));
            return;
        }
        let pinned = self.args.expect_inputs.clone();
        let Ok(inputs) = self.load_inputs(&pinned) else {
            // The sync reports a bad config; looked at again later.
            self.snapshot_due = Some(tokio::time::Instant::now() + Duration::from_secs(30));
            return;
        };
        let Some(member) = inputs.anchor.etcd_member.clone() else {
            self.snapshot_due = None;
            return;
        };
        let taker = match etcd_snapshots::Taker::of(&self.engine, &inputs, &member) {
            Ok(Some(taker)) => taker,
            Ok(None) => {
                self.shared.metrics.etcd_snapshot_interval.set(0);
                // A config pushed later may schedule some.
                self.snapshot_due = Some(tokio::time::Instant::now() + Duration::from_secs(60));
                return;
            }
            Err(e) => {
                self.snapshot_look_failed(e.to_string());
                self.snapshot_due = Some(tokio::time::Instant::now() + Duration::from_secs(30));
                return;
            }
        };
        let every = taker.schedule.every;
        self.snapshot_due = Some(tokio::time::Instant::now() + kube_anchor_core::etcd_snapshot::look_period(every));
        self.shared.metrics.etcd_snapshot_interval.set(every.as_secs() as i64);
        if self.shared.metrics.etcd_snapshot_last_success.get() == 0
            && let Ok(names) = kube_anchor_host::etcd_data::list_snapshots(&taker.dir)
            && let Some(at) = names
                .iter()
                .rev()
                .find_map(|n| kube_anchor_core::etcd_snapshot::taken_at(n))
        {
            // What an earlier anchor took here counts until this one takes its own.
            self.shared.metrics.etcd_snapshot_last_success.set(at as i64);
            self.snapshot_newest = etcd_snapshots::newest_summary(&taker.dir);
            self.status_due = Some(tokio::time::Instant::now());
        }
        let decision = match etcd_snapshots::look(&member, &taker).await {
            Ok(decision) => decision,
            Err(e) => {
                self.snapshot_look_failed(e.to_string());
                return;
            }
        };
        if self.snapshot_error.take().is_some() {
            tracing::info!(component = %self.component, "scheduled snapshots: etcd answers again");
        }
        tracing::debug!(component = %self.component, ?decision, "scheduled snapshot");
        if let kube_anchor_core::etcd_snapshot::Decision::Take { slot } = decision {
            let attempts = match self.snapshot_attempts {
                Some((s, n, at)) if s == slot => {
                    if n >= kube_anchor_core::etcd_snapshot::ATTEMPTS_PER_SLOT
                        || at.elapsed() < kube_anchor_core::etcd_snapshot::look_period(every)
                    {
                        return;
                    }
                    n + 1
                }
                _ => 1,
            };
            self.snapshot_attempts = Some((slot, attempts, Instant::now()));
            tracing::info!(component = %self.component, slot, dir = %taker.dir.display(), "taking the scheduled etcd snapshot of this slot");
            let task = tokio::spawn(async move { etcd_snapshots::take(&taker, slot).await.map_err(|e| e.to_string()) });
            self.snapshot_task = Some((slot, task));
            self.snapshot_due = Some(tokio::time::Instant::now() + Duration::from_secs(1));
        }
    }

    /// Rolling defragmentation (`spec.etcdMember.defrag`, see
    /// [`kube_anchor_core::etcd_defrag`]): looks whether this node's member is defragmented now
    /// and, when it is, does it on a task of its own; reports the one done.
    async fn keep_etcd_defragmented(&mut self) {
        let mut defragged = false;
        if let Some(task) = self.defrag_task.take() {
            if !task.is_finished() {
                self.defrag_task = Some(task);
                self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                return;
            }
            let result = task
                .await
                .unwrap_or_else(|e| Err(format!("the defrag task failed: {e}")));
            self.defragged(result);
            if self.api_answers() {
                self.publish_unpublished().await;
            }
            // The next look is a period away, after a failure too (no retry in a loop).
            defragged = true;
        }
        if self.defrag_turn
            && let Some(lease) = self.rollout_lease.clone()
        {
            match kubeapi::bounded(lease.release(TurnEnd::Neither)).await {
                Ok(()) => {
                    self.defrag_turn = false;
                    tracing::info!(component = %self.component, "gave back the rollout turn of the defrag");
                }
                Err(e) => {
                    tracing::warn!(component = %self.component, error = %e, "rollout Lease: cannot give back the defrag's turn; retrying");
                    self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(5));
                    return;
                }
            }
        }
        let pinned = self.args.expect_inputs.clone();
        let Ok(inputs) = self.load_inputs(&pinned) else {
            self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(30));
            return;
        };
        let Some(member) = inputs.anchor.etcd_member.clone() else {
            self.defrag_due = None;
            return;
        };
        let defragger = match etcd_defrag::Defragger::of(&inputs, &member) {
            Ok(Some(d)) => d,
            Ok(None) => {
                self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(60));
                return;
            }
            Err(e) => {
                tracing::warn!(component = %self.component, error = %e, "defrag: cannot read the member's settings");
                self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(30));
                return;
            }
        };
        self.defrag_due = Some(tokio::time::Instant::now() + defragger.policy.every);
        if defragged {
            return;
        }
        let members = match defragger.observe().await {
            Ok(members) => members,
            Err(e) => {
                self.defrag_waiting(Some(format!("etcd cannot be asked: {e}")));
                return;
            }
        };
        if let Some(me) = members.iter().find(|m| m.name == defragger.member_name) {
            self.shared.metrics.etcd_db_size.set(me.db_size as i64);
            self.shared.metrics.etcd_db_size_in_use.set(me.db_size_in_use as i64);
        }
        let held = self.defrag_held().await;
        let facts = kube_anchor_core::etcd_defrag::Facts {
            me: defragger.member_name.clone(),
            members,
            held,
        };
        match kube_anchor_core::etcd_defrag::decide(&facts, &defragger.policy) {
            kube_anchor_core::etcd_defrag::Decision::NotNeeded => self.defrag_waiting(None),
            kube_anchor_core::etcd_defrag::Decision::Wait(why) => {
                self.defrag_waiting(Some(why));
                // Looked at again soon: the member before it may be done in seconds.
                self.defrag_due =
                    Some(tokio::time::Instant::now() + defragger.policy.every.min(Duration::from_secs(5)));
            }
            kube_anchor_core::etcd_defrag::Decision::Defrag { hand_off } => {
                // A defrag takes the member out for a while, as a restart does: it holds the
                // rollout turn, so no other node's anchor restarts a member meanwhile.
                if let Some(lease) = self.rollout_lease.clone() {
                    match kubeapi::bounded(lease.ask(None)).await {
                        Ok(kube_anchor_core::rollout::LeaseAnswer::Take) => self.defrag_turn = true,
                        Ok(other) => {
                            self.defrag_waiting(Some(format!("the rollout turn: {other:?}")));
                            self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(5));
                            return;
                        }
                        Err(e) => {
                            self.defrag_waiting(Some(format!("the rollout Lease cannot be taken: {e}")));
                            self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(5));
                            return;
                        }
                    }
                }
                self.defrag_waiting(None);
                tracing::info!(component = %self.component, member = %defragger.member_name, hand_off, "defragmenting this node's etcd member");
                let component = self.component.clone();
                let task = tokio::spawn(async move {
                    let result = etcd_defrag::defragment(&defragger, &inputs, &member, hand_off).await;
                    // Logged as it ends (the report waits for the next look).
                    if let Ok(d) = &result {
                        tracing::info!(%component, before = d.before, after = d.after, took_seconds = d.took.as_secs_f64(), "etcd member defragmented");
                    }
                    result.map_err(|e| e.to_string())
                });
                self.defrag_task = Some(task);
                self.defrag_due = Some(tokio::time::Instant::now() + Duration::from_secs(1));
            }
        }
    }

    /// Why no member may be restarted now, as far as this node knows: an operator's pause, a
    /// version of the component rolling out here, a snapshot being taken here, a rollout turn
    /// held anywhere (the Lease, when the API answers).
    async fn defrag_held(&mut self) -> Option<String> {
        if let Some(pause) = self.engine.ledger(&self.component).ok().and_then(|l| self.pause(&l)) {
            return Some(format!("the anchor is paused ({pause})"));
        }
        // A version on trial is judged by its member's answers, which a defrag stops for a
        // while. An anchor with no source to judge by (no API, runtime or health URL) never
        // ends a trial, and nothing it could see would mislead it.
        let judges = self.api_wanted || self.runtime.is_some() || self.health.is_some();
        if self.machine.waits_for_lease() || (judges && self.machine.busy()) {
            return Some("a version of the component is rolling out on this node".into());
        }
        if self.snapshot_task.is_some() {
            return Some("a snapshot is being taken on this node".into());
        }
        if let Some(lease) = &self.rollout_lease {
            match lease.holder().await {
                Ok(Some(holder)) => return Some(format!("node {holder} holds the rollout turn")),
                Ok(None) => {}
                Err(e) => return Some(format!("the rollout Lease cannot be read: {e}")),
            }
        }
        None
    }

    fn defrag_waiting(&mut self, why: Option<String>) {
        self.shared.metrics.etcd_defrag_waiting.set(i64::from(why.is_some()));
        if why != self.defrag_waits {
            match &why {
                Some(why) => {
                    tracing::info!(component = %self.component, reason = %why, "the etcd member is above the defrag thresholds and waits")
                }
                None if self.defrag_waits.is_some() => {
                    tracing::info!(component = %self.component, "the etcd member waits for no defrag any more")
                }
                None => {}
            }
        }
        self.defrag_waits = why;
    }

    fn defragged(&mut self, result: Result<etcd_defrag::Defragged, String>) {
        let metrics = &self.shared.metrics;
        match result {
            Ok(d) => {
                metrics.etcd_defrags.inc();
                metrics.etcd_defrag_last_duration.set(d.took.as_secs_f64());
                metrics.etcd_db_size.set(d.after as i64);
                let note = format!(
                    "defragmented this node's etcd member in {:.1}s: database {} -> {} bytes ({} in use before){}",
                    d.took.as_secs_f64(),
                    d.before,
                    d.after,
                    d.in_use_before,
                    d.hand_off
                        .as_deref()
                        .map(|h| format!("; first: {h}"))
                        .unwrap_or_default()
                );
                self.queue_event(false, "EtcdDefragmented", note);
            }
            Err(e) => {
                metrics.etcd_defrag_failures.inc();
                tracing::warn!(component = %self.component, error = %e, "defrag of this node's etcd member failed");
                self.queue_event(
                    true,
                    "EtcdDefragFailed",
                    format!("the defrag of this node's etcd member failed: {e}"),
                );
            }
        }
    }

    fn snapshot_look_failed(&mut self, e: String) {
        if self.snapshot_error.as_deref() != Some(e.as_str()) {
            tracing::warn!(component = %self.component, error = %e, "scheduled snapshots: cannot tell whether one is due (retrying)");
        }
        self.snapshot_error = Some(e);
    }

    fn snapshot_taken(&mut self, slot: u64, result: Result<Option<etcd_snapshots::Taken>, String>) {
        let metrics = &self.shared.metrics;
        match result {
            Ok(None) => {
                tracing::debug!(component = %self.component, slot, "the slot ended before its snapshot began: left to the next slot's taker");
            }
            Ok(Some(taken)) => {
                metrics.etcd_snapshot_last_success.set(taken.taken_at as i64);
                metrics.etcd_snapshot_last_bytes.set(taken.record.bytes as i64);
                self.snapshot_failed_slot = None;
                let note = format!(
                    "etcd snapshot {} taken from member {} (cluster {}, revision {}, {} bytes, etcd's integrity hash verified){}",
                    taken.path.display(),
                    taken.record.member,
                    taken.record.cluster_id,
                    taken.record.revision,
                    taken.record.bytes,
                    if taken.pruned.is_empty() {
                        String::new()
                    } else {
                        format!("; removed the older {}", taken.pruned.join(", "))
                    }
                );
                tracing::info!(component = %self.component, snapshot = %taken.path.display(), revision = taken.record.revision, bytes = taken.record.bytes, pruned = taken.pruned.len(), "scheduled etcd snapshot taken");
                self.snapshot_newest = Some(etcd_snapshots::summary(&taken.record));
                self.status_due = Some(tokio::time::Instant::now());
                self.queue_event(false, "EtcdSnapshotTaken", note);
            }
            Err(e) => {
                metrics.etcd_snapshot_failures.inc();
                tracing::warn!(component = %self.component, slot, error = %e, "scheduled etcd snapshot failed; the snapshots already on the node are kept (retrying)");
                if self.snapshot_failed_slot != Some(slot) {
                    self.snapshot_failed_slot = Some(slot);
                    self.queue_event(
                        true,
                        "EtcdSnapshotFailed",
                        format!("the scheduled etcd snapshot failed (the snapshots already on the node are kept; retrying): {e}"),
                    );
                }
            }
        }
    }

    /// The first `--depends-on` component with a version on this node that the runtime shows not
    /// running or being replaced, or whose health URL answers with an error (what shows). One the node does not run, or that has
    /// no last-known-good to name its static pod yet, tells nothing; nor does a runtime that
    /// cannot be asked.
    async fn dependency_down(&self) -> Option<String> {
        for dependency in self.args.depends_on.iter().filter(|d| !d.component.is_empty()) {
            let component = &dependency.component;
            let Ok(ledger) = self.engine.ledger(component) else {
                continue;
            };
            let Some(hash) = ledger.content_hash else {
                continue;
            };
            if let (Some(observer), Ok(Some(known))) = (&self.runtime, self.engine.last_known_good(component)) {
                let pod = StaticPodRef {
                    name: known.pod_name,
                    namespace: known.pod_namespace,
                    node: self.args.identity.node_name.clone(),
                };
                let view = observer.observe(&pod).await;
                if let Some(down) = kube_anchor_core::runtime::dependency_down(component, &view, &hash) {
                    return Some(down);
                }
            }
            // Only an answer counts: a URL that nothing serves (a dependency bound to another
            // address than the one named) would excuse every failure for good. Whether it runs
            // at all is the runtime's to say (above).
            if let Some(check) = self.dependency_health.get(component)
                && let Err(failure) = check.check().await
                && failure.answered
            {
                return Some(format!("{component} fails its health check ({})", failure.reason));
            }
        }
        None
    }

    /// The input revision this pod applies ([`PinnedInputs::revision`]), which names a version
    /// across nodes whose own credentials differ.
    fn input_revision(&self) -> Option<String> {
        self.args.expect_inputs.as_ref()?.revision()
    }

    /// Carries out what a sync asks of the rollout Lease: whether an earlier process on this node
    /// left the turn held (the anchor pod replaced or restarted mid-trial: since no other node
    /// takes a turn over on a timer, this one takes it up again for the version it concerns), and
    /// the turn for a waiting version, and the Lease's word on a first write. `Some` when the
    /// caller syncs again, and why.
    async fn carry_out_turn(&mut self, effects: Vec<Effect>) -> Option<Again> {
        let mut again = None;
        let mut queue: std::collections::VecDeque<Effect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::RecoverTurn => {
                    let (Some(lease), Ok(ledger)) = (self.rollout_lease.clone(), self.engine.ledger(&self.component))
                    else {
                        continue;
                    };
                    match kubeapi::bounded(lease.held_here()).await {
                        Ok(held_here) => queue.extend(self.machine.step(Input::Recovered {
                            held_here,
                            ledger: &ledger,
                            instant: Instant::now(),
                        })),
                        Err(e) => {
                            tracing::debug!(component = %self.component, error = %e, "rollout Lease unreadable; looking again at the next sync");
                        }
                    }
                }
                Effect::GiveBackEarlierTurn => {
                    let Some(lease) = self.rollout_lease.clone() else {
                        continue;
                    };
                    match kubeapi::bounded(lease.release(TurnEnd::Neither)).await {
                        Ok(()) => queue.extend(self.machine.step(Input::EarlierGivenBack)),
                        Err(e) => {
                            tracing::warn!(component = %self.component, error = %e, "rollout Lease: cannot give back an earlier turn; retrying");
                        }
                    }
                }
                Effect::AskTurn { .. } => {
                    let answer = match &self.rollout_lease {
                        None => Answer::NoLease,
                        // The turn this node holds is its member's defrag's, not this version's.
                        Some(lease) if self.defrag_turn || self.defrag_task.is_some() => Answer::Lease {
                            lease: lease.name().to_owned(),
                            turn: Ok(kube_anchor_core::rollout::LeaseAnswer::Held {
                                by: "this node, for its etcd member's defrag".into(),
                                rolling_out: Vec::new(),
                                renewed: None,
                            }),
                        },
                        Some(lease) => Answer::Lease {
                            lease: lease.name().to_owned(),
                            turn: kubeapi::bounded(lease.ask(self.input_revision().as_deref())).await,
                        },
                    };
                    queue.extend(self.machine.step(Input::Asked {
                        answer,
                        instant: Instant::now(),
                        wall: SystemTime::now(),
                    }));
                }
                Effect::Resync => again = Some(Again::TurnGiven),
                Effect::AskFirstWrite { version } => {
                    let answer = match &self.rollout_lease {
                        None => FirstWriteAnswer::NoLease,
                        Some(lease) => FirstWriteAnswer::Lease {
                            lease: lease.name().to_owned(),
                            word: kubeapi::bounded(lease.first_write(self.input_revision().as_deref())).await,
                        },
                    };
                    for effect in self.machine.step(Input::FirstWriteAsked { version, answer }) {
                        match effect {
                            Effect::Resync => again = again.or(Some(Again::FirstWriteCleared)),
                            other => self.log_effect(other),
                        }
                    }
                }
                Effect::CheckMargin { version } => {
                    let facts = if self.machine.settings.restart_needs_margin {
                        self.margin_facts().await
                    } else {
                        MarginFacts::Unknown("no margin asked for this component".into())
                    };
                    // The version asked about is the one this pod accepted (its manifest's release).
                    let accepted = self.accepted.clone().filter(|d| d.content_hash == version);
                    let skew = match &accepted {
                        Some(desired) if self.machine.settings.skew_gate => self.engine.skew_facts(desired),
                        _ => SkewFacts::default(),
                    };
                    let images = match &accepted {
                        Some(desired) if self.machine.settings.image_gate => self.images_not_ready(desired).await,
                        _ => None,
                    };
                    let next = self.machine.step(Input::MarginChecked {
                        facts,
                        skew,
                        images,
                        instant: Instant::now(),
                        wall: SystemTime::now(),
                    });
                    // The machine asks for the turn only where the cluster affords the restart.
                    let waits = self.machine.turn.waiting.is_some()
                        && !next.iter().any(|e| matches!(e, Effect::AskTurn { .. }));
                    let skew = waits && self.machine.skew_holds();
                    let images = waits && self.machine.images_hold();
                    self.shared
                        .metrics
                        .restart_waits_for_margin
                        .set(i64::from(waits && !skew && !images));
                    self.shared.metrics.restart_waits_for_skew.set(i64::from(skew));
                    self.shared.metrics.restart_waits_for_images.set(i64::from(images));
                    queue.extend(next);
                }
                Effect::AskClients => {
                    let clients = self.ask_clients().await;
                    queue.extend(self.machine.step(Input::ClientsAsked { clients }));
                }
                Effect::RecordClientsServed { clients } => self.record_clients_served(clients),
                Effect::Log(Note::NoMargin { why }) => {
                    self.queue_event(true, "RestartWaitsForMargin", why.clone());
                    self.log_effect(Effect::Log(Note::NoMargin { why }));
                }
                Effect::Log(Note::SkewHeld { why }) => {
                    self.queue_event(true, "VersionSkewHeld", why.clone());
                    self.log_effect(Effect::Log(Note::SkewHeld { why }));
                }
                other => self.log_effect(other),
            }
        }
        again
    }

    /// Renews the turn while its version is on trial; gives it back once the node runs a
    /// last-known-good version converged, or once the turn's version is rolled back (recording
    /// the revision, so no other node tries it).
    async fn keep_or_give_back_turn(&mut self) {
        let (Some(_), Some(lease)) = (self.machine.turn.holding(), self.rollout_lease.clone()) else {
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
        let effects = self.machine.step(Input::Review {
            ledger: &ledger,
            instant: Instant::now(),
        });
        for effect in effects {
            let result = match effect {
                Effect::GiveBackTurn { version, failed, ran } => {
                    let revision = self.input_revision();
                    let end = match revision.as_deref() {
                        Some(revision) if failed => TurnEnd::Failed(revision),
                        Some(revision) if ran => TurnEnd::Ran(revision),
                        _ => TurnEnd::Neither,
                    };
                    kubeapi::bounded(lease.release(end)).await.map(|()| {
                        tracing::info!(component = %self.component, content_hash = %version, failed, "gave back the rollout turn");
                        self.machine.step(Input::GivenBack);
                    })
                }
                Effect::RenewTurn => kubeapi::bounded(lease.ask(self.input_revision().as_deref()))
                    .await
                    .map(|_| {
                        self.machine.step(Input::Renewed {
                            instant: Instant::now(),
                        });
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

    /// Every `--client-checks` client's answer, asked at once.
    async fn ask_clients(&self) -> Vec<kube_anchor_core::trial::ClientView> {
        futures::future::join_all(self.client_checks.iter().map(ClientCheck::ask)).await
    }

    fn record_clients_served(&self, clients: BTreeSet<String>) {
        tracing::info!(component = %self.component, clients = ?clients, "the clients the version on this node serves");
        if let Err(e) = self
            .engine
            .update_ledger(&self.component, |l| l.clients_served = Some(clients))
        {
            tracing::error!(component = %self.component, error = %e, "could not record the clients served");
        }
    }

    /// While the last-known-good version is kept in place of the inputs' bad one, its failure
    /// is recorded so `status` shows it too; a failure to record is logged, not fatal.
    fn record_lkg_failing(&mut self, failing: Option<LkgFailure>, if_different: bool) {
        // The first record also clears one an earlier process left (read first: no ledger
        // write at every start).
        if if_different {
            let recorded = self
                .engine
                .ledger(&self.component)
                .ok()
                .and_then(|l| l.last_known_good_failing);
            if recorded.map(|r| r.hash) == failing.as_ref().map(|f| f.hash.clone()) {
                return;
            }
        }
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
                self.machine.step(Input::NoLastKnownGood { now });
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
        match self.engine.apply_as_anchor(&lkg, false, false) {
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
        self.machine.step(Input::RolledBack {
            to: lkg.content_hash.clone(),
            note,
        });
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

/// A pull the runtime refused for want of credentials (a registry's 401 or 403, as containerd
/// and CRI-O word it), as opposed to an image that is not there or a registry not reached.
fn pull_denied(why: &str) -> bool {
    let why = why.to_ascii_lowercase();
    [
        "401 unauthorized",
        "403 forbidden",
        "authorization failed",
        "unauthorized:",
        "denied: requested access",
    ]
    .iter()
    .any(|word| why.contains(word))
}

async fn sleep_opt(d: Option<Duration>) {
    match d {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::pull_denied;

    #[test]
    fn a_pull_refused_for_credentials_is_told_from_a_missing_image() {
        // containerd's words: the anchor's pull has none of the kubelet's credentials.
        assert!(pull_denied(
            r#"Unknown: failed to pull and unpack image "registry.example/kube-apiserver:v1.36.4": failed to resolve reference "registry.example/kube-apiserver:v1.36.4": unexpected status from HEAD request to https://registry.example/v2/kube-apiserver/manifests/v1.36.4: 401 Unauthorized"#
        ));
        assert!(pull_denied(
            "pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed"
        ));
        // Not there, or not reached: the node cannot pull it, and the version waits.
        assert!(!pull_denied(
            r#"NotFound: failed to pull and unpack image "127.0.0.1:5000/kube-scheduler@sha256:0000": failed to resolve reference "127.0.0.1:5000/kube-scheduler@sha256:0000": 127.0.0.1:5000/kube-scheduler@sha256:0000: not found"#
        ));
        assert!(!pull_denied(
            "Unknown: failed to do request: Head \"https://registry.example/v2/\": dial tcp 10.0.0.1:443: connect: connection refused"
        ));
    }
}
