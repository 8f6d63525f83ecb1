//! `kube-anchor checkpointer`: the guarded, bootkube-compatible pod checkpointer.
//!
//! Every `--interval` (and on pod changes) it observes, per owner of annotated parent pods on
//! this node: the parents in the API (one watch, `spec.nodeName=<node>`), the pods the kubelet
//! really runs (`/pods`; a failed query is "unknown", never "nothing runs"), whether the owner
//! still wants this node, and the checkpoints on disk; feeds them to [`checkpoint::decide`]; and
//! carries out the actions with the same atomic writer as every other mode.
//!
//! Two copies run on a node: the DaemonSet pod, and its own checkpoint (a static pod, always
//! active, so that after a cold reboot a checkpointer starts from disk with no API). One acts at
//! a time, through an exclusive lock in the state dir. The DaemonSet copy holds a second lock,
//! `checkpointer-daemonset`, for as long as it lives; the static copy, while it holds the main
//! lock, hands it over as soon as it sees that one taken, and waits for the DaemonSet copy to be
//! gone before it competes again.

use crate::output::out;
use std::collections::{BTreeMap, BTreeSet};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use std::sync::atomic::AtomicU64;

use crate::cli::{CheckpointerAction, CheckpointerArgs, CheckpointerPreStopArgs, CheckpointerRunArgs};
use crate::metrics::Metrics;
use crate::server::{self, Shared};
use kube_anchor_core::checkpoint::{self, Action, Checkpoints, Generation, Local, LocalView, Observation, Parent};
use kube_anchor_core::config::{FileMode, Owner, Role};
use kube_anchor_core::decommission::{self, Decision, Lookup};
use kube_anchor_core::desired::DesiredFile;
use kube_anchor_core::digest::sha256_hex;
use kube_anchor_core::hostpath::{AllowedRoots, HostPath};
use kube_anchor_core::pause::{self, Pause};
use kube_anchor_core::plan::{Op, WriteReason};
use kube_anchor_core::pod_status;
use kube_anchor_core::sanitize::{self, CHECKPOINT_OF_ANNOTATION, Layout, SourceKind};
use kube_anchor_core::staticpod;
use kube_anchor_host::hostfs::{Follow, HostFs, MAX_INPUT_BYTES, read_regular};
use kube_anchor_k8s::direct::KubeletClient;
use kube_anchor_k8s::kubeapi::{self, API_TIMEOUT};

/// Checkpoint data is private: 0700 directories.
const DIR_MODE: u32 = 0o700;
/// A checkpointed volume's own directory, the root of its mount in the copy's container: the
/// pod's user enters it as it enters a kubelet volume (its files keep the pod's owner and mode;
/// the 0700 parents keep every other user of the node out).
const VOLUME_DIR_MODE: u32 = 0o755;
const MANIFEST_MODE: FileMode = FileMode(0o600);

pub(crate) async fn main(args: CheckpointerArgs) -> anyhow::Result<ExitCode> {
    match args.action {
        Some(CheckpointerAction::Sanitize { node, file }) => sanitize_command(node.as_deref(), file.as_deref()),
        Some(CheckpointerAction::PreStop(args)) => pre_stop(*args).await,
        None => run(args.run).await.map(|()| ExitCode::SUCCESS),
    }
}

fn sanitize_command(node: Option<&str>, file: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let text = match file {
        Some(p) if p.as_os_str() != "-" => {
            let bytes =
                read_regular(p, MAX_INPUT_BYTES, Follow::Yes).with_context(|| format!("reading {}", p.display()))?;
            String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", p.display()))?
        }
        _ => std::io::read_to_string(std::io::stdin()).context("reading stdin")?,
    };
    let source = file.map(|p| p.display().to_string()).unwrap_or_else(|| "stdin".into());
    let document = kube_anchor_core::yaml::document(&text).with_context(|| format!("{source}: not a Pod"))?;
    let pod: Pod = serde_yaml_ng::from_value(document).with_context(|| format!("{source}: not a Pod"))?;
    let checkpoint =
        sanitize::sanitize(&pod, &Layout::default()).with_context(|| format!("{source}: cannot be checkpointed"))?;
    out!("{}", String::from_utf8_lossy(&checkpoint.to_json()));
    eprintln!("# file: {}", checkpoint.file_name());
    if let Some(node) = node {
        eprintln!(
            "# runs as mirror pod {}-{}",
            checkpoint.pod.metadata.name.as_deref().unwrap_or_default(),
            node.to_lowercase()
        );
    }
    for m in &checkpoint.materials {
        let sources: Vec<String> = m.sources.iter().map(|s| format!("{:?} {}", s.kind, s.name)).collect();
        eprintln!(
            "# volume {}: {} (mode {:04o}, owner {}:{}) from {}",
            m.volume,
            m.dir,
            m.mode,
            m.owner.0,
            m.owner.1,
            sources.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Clone)]
struct Paths {
    inactive: HostPath,
    manifests: HostPath,
    layout: Layout,
}

impl Paths {
    fn inactive_file(&self, stem: &str) -> HostPath {
        self.inactive
            .join(&format!("{stem}.json"))
            .expect("a checkpoint file name")
    }
    fn active_file(&self, stem: &str) -> HostPath {
        self.manifests
            .join(&format!("{stem}.json"))
            .expect("a checkpoint file name")
    }
}

/// What the checkpointer remembers about one generation beyond the state machine's view.
#[derive(Debug, Clone)]
struct GenerationFiles {
    namespace: String,
    pod: String,
}

/// The preStop hook of the DaemonSet copy: the same evidence as the anchors' pre-stop (own pod
/// -> its DaemonSet -> that DaemonSet, and the Node); on a decommission, the marker, then a
/// bounded wait while the copy holding the lock retires what the checkpointer manages.
async fn pre_stop(args: CheckpointerPreStopArgs) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + args.timeout;
    let remaining = || deadline.saturating_duration_since(Instant::now());
    let (fs, state_dir, paths) = host(&args.run)?;
    let identity = &args.run.identity;
    let client = match tokio::time::timeout(
        remaining(),
        kubeapi::client(
            identity.kubeconfig(),
            &identity.api_servers,
            &kubeapi::user_agent("checkpointer pre-stop", identity.node_name.as_deref()),
        ),
    )
    .await
    {
        Ok(Ok(Some(client))) => Ok(client),
        Ok(Ok(None)) => Err("no API client configured".to_owned()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out building the client".to_owned()),
    };
    // The anchors' rule, with the same double look; the checkpointer has no guard.
    let this = identity.this_pod();
    let evidence_until = deadline.checked_sub(REPORT_TIME).unwrap_or_else(Instant::now);
    let decision = kube_anchor_k8s::evidence::decide_with_evidence(
        args.cleanup.into(),
        kube_anchor_core::decommission::Guard::None,
        args.confirm_interval,
        this.as_ref(),
        &client,
        CHECKPOINTER_COMPONENT,
        None,
        evidence_until,
        // No anchor depends on the checkpointer: nothing to wait for.
        &|_| kube_anchor_core::decommission::FilesHere::Nothing,
    )
    .await;
    let reason = match decision {
        Decision::Keep(reason) | Decision::Held(reason) => {
            tracing::info!(decision = "keep", %reason, "checkpointer pre-stop: the checkpoints stay");
            return Ok(ExitCode::SUCCESS);
        }
        Decision::Remove(reason) => reason,
    };
    tracing::warn!(decision = "remove", %reason, "checkpointer pre-stop: the checkpointer leaves this node; retiring what it manages");
    let marker = Marker {
        reason: reason.clone(),
        at: humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
        pod: identity.pod_name.clone(),
    };
    marker.store(&fs, &state_dir)?;
    // The copy holding the lock does the work; wait for it, keeping time to report.
    let mut left = remaining_checkpoints(&fs, &paths);
    while !left.is_empty() && remaining() > REPORT_TIME {
        tokio::time::sleep(args.run.interval.min(Duration::from_secs(1))).await;
        left = remaining_checkpoints(&fs, &paths);
    }
    if left.is_empty() {
        tracing::info!("checkpointer pre-stop: every checkpoint retired");
        return Ok(ExitCode::SUCCESS);
    }
    let note = format!(
        "the checkpointer left this node ({reason}) but could not retire {} yet (an active copy waits for its owner's pod to run Ready here, or for its owner to leave the node): {}",
        left.len(),
        left.join(", ")
    );
    tracing::warn!(left = ?left, "{note}");
    if let (Ok(client), Some(pod), Some(namespace)) = (&client, &identity.pod_name, &identity.pod_namespace) {
        kubeapi::EventSink::new(client.clone(), namespace, pod)
            .publish(true, "CheckpointsLeft", "Decommission", note)
            .await;
    }
    Ok(ExitCode::from(1))
}

/// Kept free at the end of the pre-stop timeout for the report.
const REPORT_TIME: Duration = Duration::from_secs(3);

/// Checkpoint file stems still in the inactive directory.
fn remaining_checkpoints(fs: &HostFs, paths: &Paths) -> Vec<String> {
    let Ok(dir) = fs
        .resolve(&paths.inactive_file("x"))
        .map(|p| p.parent().expect("dir").to_path_buf())
    else {
        return Vec::new();
    };
    let mut left: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (!name.starts_with('.'))
                .then(|| name.strip_suffix(".json").map(str::to_owned))
                .flatten()
        })
        .collect();
    left.sort();
    left
}

/// The component name the pod-checkpointer chart labels its pods with
/// (`app.kubernetes.io/component`): another checkpointer DaemonSet that wants this node (a
/// renamed release) keeps the checkpoints, as another anchor keeps a component.
const CHECKPOINTER_COMPONENT: &str = pause::CHECKPOINTER;

/// The checkpointer's own metrics (prefix `kube_anchor_`, label `component`).
#[derive(Clone, Default)]
struct CheckpointerMetrics {
    lock_held: Gauge,
    paused: Gauge,
    passes: Counter,
    failed_actions: Counter,
    last_pass: Gauge<f64, AtomicU64>,
    kubelet_unknown: Gauge,
    runtime_unknown: Gauge,
    checkpoints: Gauge,
    active: Gauge,
    actions: Family<ActionLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    action: &'static str,
}

impl CheckpointerMetrics {
    fn register(&self, into: &mut Metrics) {
        into.register(
            "checkpointer_paused",
            "1 while an operator holds the checkpointer on this node (kube-anchor pause --component pod-checkpointer, or the Node annotation kube-anchor.io/paused)",
            self.paused.clone(),
        );
        into.register(
            "checkpointer_lock_held",
            "1 while this copy holds the checkpointer lock and acts",
            self.lock_held.clone(),
        );
        into.register(
            "checkpointer_runtime_unknown",
            "1 when the last look at the container runtime failed (nothing is confirmed running by it)",
            self.runtime_unknown.clone(),
        );
        into.register(
            "checkpointer_passes",
            "Passes over this node's checkpoints",
            self.passes.clone(),
        );
        into.register(
            "checkpointer_failed_actions",
            "Checkpoint actions that failed (retried)",
            self.failed_actions.clone(),
        );
        into.register(
            "checkpointer_last_pass_timestamp_seconds",
            "Unix time of the last pass",
            self.last_pass.clone(),
        );
        into.register(
            "checkpointer_kubelet_unknown",
            "1 when the last kubelet /pods query failed (what runs here is unknown)",
            self.kubelet_unknown.clone(),
        );
        into.register(
            "checkpoints",
            "Checkpoint generations on disk",
            self.checkpoints.clone(),
        );
        into.register(
            "checkpoints_active",
            "Checkpoints in the kubelet's manifest directory",
            self.active.clone(),
        );
        into.register(
            "checkpoint_actions",
            "Checkpoint actions carried out, by action",
            self.actions.clone(),
        );
    }
}

/// Which copy of the checkpointer this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CopyRole {
    /// The DaemonSet pod.
    DaemonSet,
    /// Its checkpoint, run by the kubelet from the manifest directory.
    Static,
}

/// Why a turn with the lock ended.
enum TurnEnd {
    Drain,
    /// The static copy saw its DaemonSet copy alive and gave it the lock.
    HandOver,
}

/// Everything a turn needs, set up once.
struct Setup {
    node: String,
    role: CopyRole,
    fs: HostFs,
    state_dir: HostPath,
    paths: Paths,
    cfg: checkpoint::Config,
    boot_id: String,
    pod: Option<(String, String)>,
    checkpoint_of: Option<String>,
    shared: std::sync::Arc<Shared>,
    metrics: CheckpointerMetrics,
    /// The container runtime: a pod counts as running here only while it shows it running.
    runtime: Option<kube_anchor_k8s::cri::RuntimeObserver>,
}

/// The node side both verbs work on: the writer, the state dir and the checkpoint paths.
fn host(args: &CheckpointerRunArgs) -> anyhow::Result<(HostFs, HostPath, Paths)> {
    let state_dir = HostPath::parse(&args.node.state_dir)?;
    let paths = Paths {
        inactive: HostPath::parse(&args.inactive_dir)?,
        manifests: HostPath::parse(&args.manifest_dir)?,
        layout: Layout {
            secrets: HostPath::parse(&args.secrets_dir)?,
            configmaps: HostPath::parse(&args.configmaps_dir)?,
        },
    };
    // The same rule as the anchors': the state dir is not `/` and holds no allowed root.
    let roots = args
        .node
        .allowed_roots
        .iter()
        .map(|r| HostPath::parse(r))
        .collect::<Result<Vec<_>, _>>()?;
    let fs = HostFs::new(
        &args.node.host_root,
        AllowedRoots::with_state_dir(state_dir.clone(), roots)?,
    )?
    .with_dir_mode(DIR_MODE);
    for dir in [
        &paths.inactive,
        &paths.manifests,
        &paths.layout.secrets,
        &paths.layout.configmaps,
    ] {
        fs.roots().check(&dir.join("x")?)?;
    }
    Ok((fs, state_dir, paths))
}

async fn run(args: CheckpointerRunArgs) -> anyhow::Result<()> {
    let node = args
        .identity
        .node_name
        .clone()
        .context("--node-name (NODE_NAME) is required")?;
    let (fs, state_dir, paths) = host(&args)?;
    let checkpoint_of = args.checkpoint_of.clone().filter(|s| !s.is_empty());
    let role = if checkpoint_of.is_some() {
        CopyRole::Static
    } else {
        CopyRole::DaemonSet
    };
    // A procfs file reads as a regular file of size 0; the bound holds while reading.
    let boot_id = match read_regular(&args.boot_id_file, 4096, Follow::Yes) {
        Ok(id) => String::from_utf8_lossy(&id).trim().to_owned(),
        Err(e) => {
            // Without a boot id every start looks like a new boot: a blind copy then activates
            // checkpoints, the safe direction.
            tracing::warn!(file = %args.boot_id_file.display(), error = %e, "cannot read the boot id");
            String::new()
        }
    };
    let metrics = CheckpointerMetrics::default();
    let setup = Setup {
        node,
        role,
        fs,
        state_dir,
        paths,
        cfg: checkpoint::Config {
            ready_window: args.ready_window,
            stable_window: args.stable_window,
            handoff_timeout: args.handoff_timeout,
            retire_grace: args.retire_grace,
            max_backoff: args.handoff_timeout.saturating_mul(10),
        },
        boot_id,
        pod: args.identity.pod_name.clone().zip(args.identity.pod_namespace.clone()),
        checkpoint_of,
        shared: {
            let mut registry = Metrics::unregistered(CHECKPOINTER_COMPONENT);
            metrics.register(&mut registry);
            Shared::new(registry)
        },
        metrics,
        runtime: kube_anchor_k8s::cri::RuntimeObserver::new(&args.node.host_root, args.runtime.endpoint()),
    };
    // Over a socket in the pod's own emptyDir: the DaemonSet copy and its static copy share the
    // host network and must never fight over a port.
    server::start(
        args.endpoints.health_socket.as_deref(),
        args.endpoints.listen,
        setup.shared.clone(),
    )
    .await?;
    let (draining, abort) = crate::shutdown::install()?;
    abort.around(serve(setup, role, draining, &args)).await?
}

/// The checkpointer's work once set up: the locks, then turns until it drains.
async fn serve(
    setup: Setup,
    role: CopyRole,
    mut draining: tokio::sync::watch::Receiver<bool>,
    args: &CheckpointerRunArgs,
) -> anyhow::Result<()> {
    let mut api = ApiLink::new(
        args.identity.kubeconfig().map(ToOwned::to_owned),
        args.identity.api_servers.clone(),
        setup.node.clone(),
    );
    let kubelet = KubeletClient::new(
        &args.kubelet_url,
        kubeapi::bearer_token(args.identity.kubeconfig()).await,
        args.kubelet_ca_file.as_deref(),
    )?;
    // The DaemonSet copy says it is alive for as long as it runs.
    let _alive = match role {
        CopyRole::DaemonSet => Some(blocking_lock(&setup, DAEMONSET_LOCK, &mut draining).await?),
        CopyRole::Static => None,
    };
    let started = Instant::now();
    loop {
        tracing::info!(role = ?setup.role, "waiting for the checkpointer lock");
        // Ready while standing by: the copy holding the lock does the work.
        setup
            .shared
            .update(|s| (s.ready, s.reason) = (true, "standby: the other copy holds the lock".into()));
        setup.metrics.lock_held.set(0);
        let Some(lock) = wait_lock(&setup, MAIN_LOCK, &mut draining).await? else {
            return Ok(());
        };
        tracing::info!(node = %setup.node, role = ?setup.role, "checkpointer lock held; starting");
        setup.metrics.lock_held.set(1);
        setup
            .shared
            .update(|s| (s.ready, s.reason) = (false, "first pass running".into()));
        let end = turn(&setup, &mut api, &kubelet, &mut draining, started, args).await;
        setup.metrics.lock_held.set(0);
        drop(lock);
        match end {
            TurnEnd::Drain => {
                setup.shared.update(|s| s.draining = true);
                tracing::info!("checkpointer draining; checkpoints stay on disk");
                return Ok(());
            }
            TurnEnd::HandOver => {
                tracing::info!("the DaemonSet copy runs: lock handed over; standing by until it is gone");
                // Wait until the DaemonSet copy is gone before competing for the lock again.
                let Some(gone) = wait_lock(&setup, DAEMONSET_LOCK, &mut draining).await? else {
                    return Ok(());
                };
                drop(gone);
            }
        }
    }
}

const MAIN_LOCK: &str = "checkpointer";
const DAEMONSET_LOCK: &str = "checkpointer-daemonset";

async fn blocking_lock(
    setup: &Setup,
    name: &'static str,
    draining: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<std::fs::File> {
    wait_lock(setup, name, draining)
        .await?
        .context("draining before the checkpointer started")
}

/// The lock file `<state-dir>/v1/<name>.lock`, opened (created when missing).
fn lock_file(setup: &Setup, name: &str) -> anyhow::Result<std::fs::File> {
    open_lock_file(&setup.fs, &setup.state_dir, name)
}

fn open_lock_file(fs: &HostFs, state_dir: &HostPath, name: &str) -> anyhow::Result<std::fs::File> {
    Ok(fs.open_lock_file(state_dir, name)?.1)
}

/// Waits for an exclusive lock (polled, so that a drain never waits on a blocked thread);
/// `None` when asked to drain meanwhile.
async fn wait_lock(
    setup: &Setup,
    name: &'static str,
    draining: &mut tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<std::fs::File>> {
    let file = lock_file(setup, name)?;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => {}
            Err(std::fs::TryLockError::Error(e)) => return Err(e).context(format!("locking {name}.lock")),
        }
        tokio::select! {
            _ = tokio::time::sleep(LOCK_POLL) => {}
            _ = draining.changed() => return Ok(None),
        }
    }
}

const LOCK_POLL: Duration = Duration::from_millis(200);

/// Is the DaemonSet copy alive (its lock taken)? Errors read as "no" (keep working).
fn daemonset_copy_alive(setup: &Setup) -> bool {
    setup
        .fs
        .lock_held(&setup.state_dir, DAEMONSET_LOCK)
        .is_ok_and(|held| held.is_some())
}

/// One stretch of work with the lock held.
/// Why `kube-anchor pause --component pod-checkpointer` holds the checkpointer on this node (the
/// state dir's marker: no API needed).
fn paused_on_node(setup: &Setup) -> Option<String> {
    match setup.fs.read_ledger(&setup.state_dir, pause::CHECKPOINTER) {
        Ok(Ok(ledger)) => Pause::of(ledger.paused.as_ref(), None, None).map(|p| p.describe(pause::CHECKPOINTER)),
        _ => None,
    }
}

/// Why the Node's pause annotation holds the checkpointer, asked only before a pass acts (a
/// steady checkpointer asks the API nothing); no answer holds nothing.
async fn paused_by_node(setup: &Setup, api: &ApiLink) -> Option<String> {
    let client = api.client()?;
    match kubeapi::node_pause(client, &setup.node).await {
        Ok(annotation) => {
            Pause::of(None, Some(&setup.node), annotation.as_deref()).map(|p| p.describe(pause::CHECKPOINTER))
        }
        Err(e) => {
            tracing::debug!(error = %e, "cannot read this node's pause annotation");
            None
        }
    }
}

async fn turn(
    setup: &Setup,
    api: &mut ApiLink,
    kubelet: &KubeletClient,
    draining: &mut tokio::sync::watch::Receiver<bool>,
    started: Instant,
    args: &CheckpointerRunArgs,
) -> TurnEnd {
    let mut machine = Machine {
        fs: setup.fs.clone(),
        paths: setup.paths.clone(),
        states: BTreeMap::new(),
        files: BTreeMap::new(),
        local_ready_since: BTreeMap::new(),
        refused: BTreeSet::new(),
        memory: Memory::load(&setup.fs, &setup.state_dir, &setup.boot_id),
        self_owner: None,
        left_reported: BTreeSet::new(),
        held_by_node: None,
    };
    machine.load_from_disk(started.elapsed());
    // The hold in force (`kube-anchor pause` on the node), as last logged.
    let mut paused: Option<String> = None;
    if let Some(of) = &setup.checkpoint_of {
        machine.self_owner = machine.owner_of_checkpoint(of);
    }
    if setup.role == CopyRole::DaemonSet
        && let Some(marker) = Marker::load(&setup.fs, &setup.state_dir)
        && marker.pod.as_deref() != setup.pod.as_ref().map(|p| p.0.as_str())
    {
        // A new DaemonSet pod: the checkpointer is back on this node.
        tracing::info!(reason = %marker.reason, pod = ?marker.pod, "lifting the decommission marker of an earlier pod");
        if let Err(e) = Marker::remove(&setup.fs, &setup.state_dir) {
            tracing::error!(error = %e, "cannot lift the decommission marker");
        }
    }
    loop {
        if setup.role == CopyRole::Static && daemonset_copy_alive(setup) {
            return TurnEnd::HandOver;
        }
        api.ensure().await;
        let decommissioned = Marker::load(&setup.fs, &setup.state_dir).is_some();
        let now_paused = paused_on_node(setup);
        if now_paused != paused {
            match &now_paused {
                Some(why) => tracing::warn!(reason = %why, "paused: checkpointing, activating and removing nothing"),
                None => tracing::info!("resumed"),
            }
            paused = now_paused;
        }
        setup.shared.update(|s| s.sync_started = Some(Instant::now()));
        let failed = machine
            .step(setup, started.elapsed(), api, kubelet, decommissioned, paused.is_some())
            .await;
        setup
            .metrics
            .paused
            .set(i64::from(paused.is_some() || machine.held_by_node.is_some()));
        let m = &setup.metrics;
        m.passes.inc();
        m.last_pass.set(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
        );
        m.checkpoints
            .set(machine.states.values().map(|s| s.generations.len() as i64).sum());
        m.active.set(
            machine
                .states
                .values()
                .flat_map(|s| &s.generations)
                .filter(|g| g.active)
                .count() as i64,
        );
        setup.shared.update(|s| {
            s.sync_started = None;
            (s.ready, s.reason) = match failed {
                0 => (true, String::new()),
                n => (
                    false,
                    format!("{n} checkpoint action(s) failed in the last pass; retrying"),
                ),
            };
        });
        tokio::select! {
            _ = tokio::time::sleep(args.interval) => {}
            Some(()) = api.wake.recv() => {}
            _ = draining.changed() => {
                setup.shared.update(|s| s.draining = true);
                return TurnEnd::Drain;
            }
        }
    }
}

/// The API, when there is a client: a reflector on this node's pods whose stream tells whether
/// the API is reachable. A client that cannot be built (no kubeconfig, an in-cluster config
/// without its service-account files — as in the static copy) is no API, retried now and then.
struct ApiLink {
    node: String,
    lazy: kubeapi::LazyClient,
    store: Option<kube::runtime::reflector::Store<Pod>>,
    api_ok: Option<tokio::sync::watch::Receiver<bool>>,
    wake: tokio::sync::mpsc::Receiver<()>,
    wake_tx: tokio::sync::mpsc::Sender<()>,
}

const CLIENT_RETRY: Duration = Duration::from_secs(30);

impl ApiLink {
    fn new(kubeconfig: Option<std::path::PathBuf>, api_servers: Vec<http::Uri>, node: String) -> Self {
        let (wake_tx, wake) = tokio::sync::mpsc::channel(1);
        let agent = kubeapi::user_agent("checkpointer", Some(&node));
        Self {
            node,
            lazy: kubeapi::LazyClient::new(kubeconfig, api_servers, agent, CLIENT_RETRY),
            store: None,
            api_ok: None,
            wake,
            wake_tx,
        }
    }

    async fn ensure(&mut self) {
        let client = match self.lazy.connect().await {
            kubeapi::Connect::Built(client) => client,
            kubeapi::Connect::Unchanged => return,
            kubeapi::Connect::NotConfigured => {
                tracing::debug!("no API client configured; working from the node alone");
                return;
            }
            kubeapi::Connect::Failed { error, .. } => {
                tracing::warn!(%error, "no API client; working from the node alone, retrying later");
                return;
            }
        };
        let (store, stream) = kubeapi::pods_on_node(&client, &self.node);
        let (api_ok_tx, api_ok) = tokio::sync::watch::channel(false);
        let wake_tx = self.wake_tx.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let _ = api_ok_tx.send(event.is_ok());
                let _ = wake_tx.try_send(());
            }
        });
        self.store = Some(store);
        self.api_ok = Some(api_ok);
    }

    fn client(&self) -> Option<&kube::Client> {
        self.lazy.client()
    }

    fn reachable(&self) -> bool {
        match (&self.api_ok, &self.store) {
            (Some(ok), Some(store)) => {
                *ok.borrow() && futures::FutureExt::now_or_never(store.wait_until_ready()).is_some()
            }
            _ => false,
        }
    }

    fn pods(&self) -> Vec<std::sync::Arc<Pod>> {
        self.store.as_ref().map(|s| s.state()).unwrap_or_default()
    }
}

/// What the checkpointer remembers across restarts in `<state-dir>/v1/checkpointer-memory.json`
/// (0600): the owners seen running on this node since it booted (so that a copy that cannot ask
/// the kubelet knows whether one may run), and its own owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Memory {
    boot_id: String,
    seen: BTreeSet<String>,
    self_owner: Option<String>,
}

impl Memory {
    fn path(state_dir: &HostPath) -> HostPath {
        state_dir.join("v1/checkpointer-memory.json").expect("a valid name")
    }

    /// The seen set only counts within the same boot.
    fn load(fs: &HostFs, state_dir: &HostPath, boot_id: &str) -> Self {
        let stored: Option<Memory> = fs
            .read(&Self::path(state_dir))
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let mut memory = stored.unwrap_or_default();
        if memory.boot_id != boot_id || boot_id.is_empty() {
            memory.seen.clear();
            memory.boot_id = boot_id.to_owned();
        }
        memory
    }

    fn store(&self, fs: &HostFs, state_dir: &HostPath) {
        let bytes = serde_json::to_vec(self).expect("serializes");
        if let Err(e) = fs.write_file(&Self::path(state_dir), &bytes, MANIFEST_MODE, Role::Manifest) {
            tracing::warn!(error = %e, "cannot record what runs on this node");
        }
    }
}

/// `<state-dir>/v1/checkpointer.decommissioned`: written by the pre-stop hook on a proved
/// decommission; whichever copy holds the lock then retires what the checkpointer manages.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Marker {
    reason: String,
    at: String,
    pod: Option<String>,
}

impl Marker {
    fn path(state_dir: &HostPath) -> HostPath {
        state_dir.join("v1/checkpointer.decommissioned").expect("a valid name")
    }

    fn load(fs: &HostFs, state_dir: &HostPath) -> Option<Self> {
        fs.read(&Self::path(state_dir))
            .ok()
            .flatten()
            .and_then(|b| serde_json::from_slice(&b).ok())
    }

    fn store(&self, fs: &HostFs, state_dir: &HostPath) -> Result<(), kube_anchor_host::hostfs::HostFsError> {
        let bytes = serde_json::to_vec(self).expect("serializes");
        fs.write_file(&Self::path(state_dir), &bytes, MANIFEST_MODE, Role::Manifest)
    }

    fn remove(fs: &HostFs, state_dir: &HostPath) -> anyhow::Result<()> {
        remove_file(fs, &Self::path(state_dir))
    }
}

/// What one pass saw of the node.
struct Seen {
    api_reachable: bool,
    /// The pods running here by owner: the kubelet's (Ready only while the runtime, when it
    /// answers, runs them too), or with no kubelet answer the API's that the runtime runs;
    /// `None` when neither can tell.
    local: Option<BTreeMap<String, Vec<Local>>>,
    /// This node's pods as the API shows them.
    pods_here: Vec<std::sync::Arc<Pod>>,
    /// The checkpointable parents by owner, with their pods.
    parents: BTreeMap<String, Vec<(Parent, Pod)>>,
    /// The owners whose checkpoint copy the kubelet runs here (a container running); `None`
    /// when the kubelet did not answer.
    copies_running: Option<BTreeSet<String>>,
}

struct Machine {
    fs: HostFs,
    paths: Paths,
    /// By owner key.
    states: BTreeMap<String, Checkpoints>,
    /// By generation (file stem `<ns>-<pod>`).
    files: BTreeMap<String, GenerationFiles>,
    /// Pod uid -> when the kubelet was first seen running it Ready.
    local_ready_since: BTreeMap<String, Duration>,
    /// Parents (file stems) that cannot be made a valid static pod: reported once.
    refused: BTreeSet<String>,
    memory: Memory,
    /// The checkpointer's own owner, once known.
    self_owner: Option<String>,
    /// Checkpoints a decommission had to leave, reported once.
    left_reported: BTreeSet<String>,
    /// Why the Node's pause annotation held back the last actions (asked again each pass until
    /// it no longer does).
    held_by_node: Option<String>,
}

impl Machine {
    /// Rebuilds the per-owner state from the checkpoints on disk (after a restart or a reboot).
    fn load_from_disk(&mut self, now: Duration) {
        for (_, owner, stem, files, host_network) in self.read_checkpoints() {
            let active = self
                .fs
                .observe(&self.paths.active_file(&stem))
                .is_ok_and(|o| o != kube_anchor_core::plan::Observed::Missing);
            self.states.entry(owner).or_default().generations.push(Generation {
                uid: stem.clone(),
                name: stem.clone(),
                active,
                host_network,
            });
            self.files.insert(stem, files);
        }
        tracing::info!(owners = self.states.len(), generations = self.files.len(), at = ?now, "checkpoints found on disk");
    }

    /// The checkpoints in the inactive directory, oldest first: (mtime, owner, stem, files,
    /// hostNetwork).
    fn read_checkpoints(&self) -> Vec<(SystemTime, String, String, GenerationFiles, bool)> {
        let Ok(dir) = self
            .fs
            .resolve(&self.paths.inactive_file("x"))
            .map(|p| p.parent().expect("dir").to_path_buf())
        else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".json").filter(|_| !name.starts_with('.')) else {
                continue;
            };
            let Ok(pod) = read_regular(&entry.path(), staticpod::MAX_MANIFEST_BYTES as u64, Follow::No)
                .map_err(|_| ())
                .and_then(|b| serde_json::from_slice::<Pod>(&b).map_err(|_| ()))
            else {
                tracing::warn!(file = %entry.path().display(), "unreadable checkpoint left alone");
                continue;
            };
            let Some(owner) = sanitize::checkpoint_owner(&pod) else {
                continue;
            };
            let of = pod
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CHECKPOINT_OF_ANNOTATION))
                .cloned()
                .unwrap_or_default();
            let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
            let mtime = entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            let files = GenerationFiles {
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                pod: of,
            };
            found.push((mtime, owner, stem.to_owned(), files, host_network));
        }
        found.sort_by_key(|f| f.0);
        found
    }

    /// The owner of the checkpoint of parent pod `of`.
    fn owner_of_checkpoint(&self, of: &str) -> Option<String> {
        self.read_checkpoints()
            .into_iter()
            .find(|(_, _, _, files, _)| files.pod == of)
            .map(|(_, owner, ..)| owner)
    }

    /// One pass; returns how many actions failed.
    /// One pass: observe the node (the kubelet's pods, this node's pods in the API), then per
    /// owner decide (the pure `checkpoint::decide`) and execute what it asks.
    async fn step(
        &mut self,
        setup: &Setup,
        now: Duration,
        api: &ApiLink,
        kubelet: &KubeletClient,
        decommissioned: bool,
        paused: bool,
    ) -> u64 {
        let seen = self.observe(setup, now, api, kubelet).await;
        let client = api.client();
        // Looked up at most once per pass, and only when an owner has to be asked.
        let mut node_facts: Option<Option<decommission::NodeFacts>> = None;
        // The Node's pause annotation: asked at most once per pass, only before acting or while
        // it holds (to see it lifted).
        let mut node_held: Option<Option<String>> = None;
        if self.held_by_node.is_some() {
            node_held = Some(paused_by_node(setup, api).await);
        }
        let mut failed = 0;
        for key in self.owner_keys(&seen) {
            let wants = self.owner_wants(setup, api, &key, &seen, &mut node_facts).await;
            let mut obs = self.observation(&key, &seen, now, wants, decommissioned, paused);
            let state = self.states.get(&key).cloned().unwrap_or_default();
            tracing::debug!(owner = %key, ?state, ?obs, "deciding");
            let (mut next, mut actions) = checkpoint::decide(&state, &obs, &setup.cfg);
            if !actions.is_empty() && !obs.paused {
                let held = match &node_held {
                    Some(held) => held.clone(),
                    None => node_held.insert(paused_by_node(setup, api).await).clone(),
                };
                if let Some(why) = held {
                    obs.paused = true;
                    (next, actions) = checkpoint::decide(&state, &obs, &setup.cfg);
                    if self.held_by_node.as_ref() != Some(&why) {
                        tracing::warn!(owner = %key, reason = %why, "paused: checkpointing, activating and removing nothing");
                    }
                    self.held_by_node = Some(why);
                }
            }
            for action in actions {
                if !self.execute(setup, client, &key, &action, &seen).await {
                    // Undo the state machine's belief so the next step tries again.
                    next = checkpoint::undo(next, &action, &state);
                    if !matches!(&action, Action::Checkpoint { name, .. } if self.refused.contains(name)) {
                        failed += 1;
                    }
                }
            }
            self.record(key, next, decommissioned);
        }
        if let Some(None) = node_held
            && self.held_by_node.take().is_some()
        {
            tracing::info!("the Node's pause annotation no longer holds the checkpointer: acting again");
        }
        failed
    }

    /// What this node shows: the kubelet's own pods by owner (`None`: the kubelet did not
    /// answer, which is "unknown", never "nothing runs"), and this node's pods in the API.
    /// Keeps the seen-since-boot memory up to date.
    async fn observe(&mut self, setup: &Setup, now: Duration, api: &ApiLink, kubelet: &KubeletClient) -> Seen {
        let local_pods = match kubelet.pods().await {
            Ok(pods) => {
                setup.metrics.kubelet_unknown.set(0);
                Some(pods)
            }
            Err(e) => {
                setup.metrics.kubelet_unknown.set(1);
                tracing::warn!(error = %e, "kubelet /pods unavailable; what runs here is unknown");
                None
            }
        };
        // The second local truth: the runtime's sandboxes by pod UID. `None`: not asked, or it
        // did not answer (then the kubelet's word stands alone, as before).
        let runtime = match &setup.runtime {
            Some(observer) => match observer.running_pods().await {
                Ok(pods) => {
                    setup.metrics.runtime_unknown.set(0);
                    Some(pods)
                }
                Err(e) => {
                    setup.metrics.runtime_unknown.set(1);
                    tracing::debug!(error = %e, "container runtime unavailable");
                    None
                }
            },
            None => None,
        };
        let runs_here = |uid: &str| runtime.as_ref().map(|r| r.get(uid).copied().unwrap_or(false));
        // One view of this node's pods in the API for the whole pass.
        let pods_here = api.pods();
        let api_reachable = api.reachable();
        // What runs here: the kubelet's pods, each Ready only while the runtime (when it
        // answers) runs it too; with no kubelet answer, the API's pods on this node that the
        // runtime runs, Ready as the API shows them.
        let (source, from_runtime): (Vec<Pod>, bool) = match (&local_pods, &runtime) {
            (Some(pods), _) => (pods.clone(), false),
            (None, Some(_)) if api_reachable => (pods_here.iter().map(|p| (**p).clone()).collect(), true),
            (None, _) => (Vec::new(), false),
        };
        let local_known = local_pods.is_some() || from_runtime;
        // A running copy answers a hostNetwork replacement's readiness probe: the decision must
        // know whether one runs (`checkpoint::Observation::copy_runs`).
        // (`checkpoint_owner` names only checkpoint copies.)
        let copies_running = local_pods.as_ref().map(|pods| {
            pods.iter()
                .filter(|p| pod_status::has_running_container(p))
                .filter_map(sanitize::checkpoint_owner)
                .collect::<BTreeSet<String>>()
        });
        let mut local: BTreeMap<String, Vec<Local>> = BTreeMap::new();
        let mut seen = BTreeSet::new();
        let mut memory = self.memory.clone();
        // Owned pods only, never checkpoint copies.
        for pod in source.iter().filter(|p| !is_checkpoint_or_static(p)) {
            let (Some(key), Some(uid)) = (sanitize::controller_key(pod), pod.metadata.uid.clone()) else {
                continue;
            };
            if from_runtime && runs_here(&uid) != Some(true) {
                continue;
            }
            if let Some((name, namespace)) = &setup.pod
                && pod.metadata.name.as_ref() == Some(name)
                && pod.metadata.namespace.as_ref() == Some(namespace)
            {
                memory.self_owner = Some(key.clone());
            }
            if pod_status::phase(pod) == Some("Running") {
                memory.seen.insert(key.clone());
            }
            seen.insert(uid.clone());
            let ready = pod_status::is_running_ready(pod) && runs_here(&uid) != Some(false);
            let ready_since = ready.then(|| *self.local_ready_since.entry(uid.clone()).or_insert(now));
            if ready_since.is_none() {
                self.local_ready_since.remove(&uid);
            }
            local.entry(key).or_default().push(Local { uid, ready_since });
        }
        self.local_ready_since.retain(|uid, _| seen.contains(uid));
        if let Some((name, namespace)) = &setup.pod
            && let Some(own) = pods_here
                .iter()
                .find(|p| p.metadata.name.as_ref() == Some(name) && p.metadata.namespace.as_ref() == Some(namespace))
        {
            memory.self_owner = sanitize::controller_key(own);
        }
        if memory != self.memory {
            memory.store(&self.fs, &setup.state_dir);
            self.memory = memory;
        }
        if self.self_owner.is_none() {
            self.self_owner = self.memory.self_owner.clone();
        }
        let mut parents: BTreeMap<String, Vec<(Parent, Pod)>> = BTreeMap::new();
        if api_reachable {
            for pod in pods_here.iter().filter(|p| sanitize::is_parent(p)) {
                let Some(key) = sanitize::controller_key(pod) else {
                    continue;
                };
                let stem = file_stem(pod);
                let ready_since = ready_for(pod).map(|d| now.saturating_sub(d));
                let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
                parents.entry(key).or_default().push((
                    Parent {
                        uid: stem.clone(),
                        name: stem,
                        ready_since,
                        host_network,
                    },
                    (**pod).clone(),
                ));
            }
        }
        Seen {
            api_reachable,
            local: local_known.then_some(local),
            pods_here,
            parents,
            copies_running,
        }
    }

    /// Every owner with a checkpoint or a parent; the checkpointer's own owner last: in a
    /// decommission it goes when nothing else is left.
    fn owner_keys(&self, seen: &Seen) -> Vec<String> {
        let mut keys: Vec<String> = self
            .states
            .keys()
            .chain(seen.parents.keys())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        keys.sort_by_key(|k| Some(k) == self.self_owner.as_ref());
        keys
    }

    /// Whether the owner still wants this node (`None`: no answer).
    async fn owner_wants(
        &self,
        setup: &Setup,
        api: &ApiLink,
        key: &str,
        seen: &Seen,
        node_facts: &mut Option<Option<decommission::NodeFacts>>,
    ) -> Option<bool> {
        match (seen.api_reachable, api.client()) {
            // The owner's own pod, live on this node, is its word that it wants the node:
            // no GET per pass while everything runs (watches only in steady state).
            (true, _) if owner_has_pod_here(key, &seen.pods_here) => Some(true),
            (true, Some(c)) => {
                if node_facts.is_none() {
                    *node_facts = Some(
                        match kubeapi::lookup_cluster_scoped::<Node>(c, &setup.node, API_TIMEOUT).await {
                            Lookup::Found(n) => Some(decommission::node_facts(&n)),
                            _ => None,
                        },
                    );
                }
                owner_wants_node(c, key, node_facts.as_ref().and_then(Option::as_ref), &seen.pods_here).await
            }
            _ => None,
        }
    }

    fn observation(
        &self,
        key: &str,
        seen: &Seen,
        now: Duration,
        wants: Option<bool>,
        decommissioned: bool,
        paused: bool,
    ) -> Observation {
        Observation {
            now,
            api_reachable: seen.api_reachable,
            parents: seen
                .parents
                .get(key)
                .map(|p| p.iter().map(|(p, _)| p.clone()).collect())
                .unwrap_or_default(),
            local: match &seen.local {
                Some(local) => LocalView::Known(local.get(key).cloned().unwrap_or_default()),
                None => LocalView::Unknown {
                    seen_since_boot: self.memory.seen.contains(key),
                },
            },
            owner_wants_node: wants,
            is_self: Some(key) == self.self_owner.as_deref(),
            decommissioned,
            others_left: self.states.iter().any(|(k, s)| k != key && !s.generations.is_empty()),
            paused,
            copy_runs: seen.copies_running.as_ref().map(|owners| owners.contains(key)),
        }
    }

    /// Carries out one action; `false` when it failed (logged and counted here).
    async fn execute(
        &mut self,
        setup: &Setup,
        client: Option<&kube::Client>,
        key: &str,
        action: &Action,
        seen: &Seen,
    ) -> bool {
        tracing::info!(owner = %key, ?action, "checkpoint action");
        let result = match action {
            Action::Checkpoint { name, .. } => {
                let parent = seen
                    .parents
                    .get(key)
                    .and_then(|ps| ps.iter().find(|(p, _)| &p.name == name))
                    .map(|(_, pod)| pod.clone());
                match (parent, client) {
                    (Some(_), Some(_)) if self.refused.contains(name) => {
                        Err(anyhow::anyhow!("parent {name} cannot be checkpointed (reported)"))
                    }
                    (Some(pod), Some(c)) => match sanitize::sanitize(&pod, &self.paths.layout) {
                        Err(e) => {
                            // A parent that cannot run as a static pod: tell its owner's
                            // operator where they look (an Event on the pod), once.
                            tracing::error!(parent = %name, error = %e, "not checkpointable");
                            let sink = kubeapi::EventSink::new(
                                c.clone(),
                                pod.metadata.namespace.as_deref().unwrap_or("default"),
                                pod.metadata.name.as_deref().unwrap_or_default(),
                            );
                            sink.publish(true, "NotCheckpointable", "Checkpoint", e.to_string())
                                .await;
                            self.refused.insert(name.clone());
                            Err(e.into())
                        }
                        Ok(_) => self.checkpoint(c, &pod).await,
                    },
                    _ => Err(anyhow::anyhow!("parent {name} vanished")),
                }
            }
            Action::Activate { name } => self.activate(name),
            Action::Deactivate { name } => self.remove_file(&self.paths.active_file(name)),
            Action::Retire { name } => self.retire(name),
        };
        let kind = match action {
            Action::Checkpoint { .. } => "checkpoint",
            Action::Activate { .. } => "activate",
            Action::Deactivate { .. } => "deactivate",
            Action::Retire { .. } => "retire",
        };
        match result {
            Ok(()) => {
                setup
                    .metrics
                    .actions
                    .get_or_create(&ActionLabels { action: kind })
                    .inc();
                true
            }
            Err(_) if matches!(action, Action::Checkpoint { name, .. } if self.refused.contains(name)) => {
                tracing::debug!(owner = %key, ?action, "parent not checkpointable (already reported)");
                false
            }
            Err(e) => {
                setup.metrics.failed_actions.inc();
                tracing::error!(owner = %key, ?action, error = %crate::logging::error_chain(&e), "checkpoint action failed; will retry");
                false
            }
        }
    }

    /// Keeps the owner's next state (forgets an owner with nothing left).
    fn record(&mut self, key: String, next: Checkpoints, decommissioned: bool) {
        if decommissioned {
            for g in &next.generations {
                if self.left_reported.insert(g.name.clone()) {
                    tracing::warn!(owner = %key, checkpoint = %g.name, active = g.active, "decommissioned checkpointer: checkpoint left until its owner's pod runs Ready here or the owner no longer wants this node");
                }
            }
        }
        if next.generations.is_empty() && next.unwanted_since.is_none() {
            self.states.remove(&key);
        } else {
            self.states.insert(key, next);
        }
    }

    /// Writes a new generation: the secret and configmap files first, the inactive manifest last.
    async fn checkpoint(&mut self, client: &kube::Client, parent: &Pod) -> anyhow::Result<()> {
        let checkpoint = sanitize::sanitize(parent, &self.paths.layout)?;
        let ns = parent.metadata.namespace.clone().unwrap_or_default();
        let mut fetched = BTreeMap::new();
        for m in &checkpoint.materials {
            for s in &m.sources {
                let data = match s.kind {
                    SourceKind::Secret => match kubeapi::lookup_in::<Secret>(client, &ns, &s.name, API_TIMEOUT).await {
                        Lookup::Found(secret) => Some(
                            secret
                                .data
                                .unwrap_or_default()
                                .into_iter()
                                .map(|(k, v)| (k, v.0))
                                .collect(),
                        ),
                        Lookup::NotFound => None,
                        Lookup::Unavailable(e) => anyhow::bail!("reading Secret {ns}/{}: {e}", s.name),
                    },
                    SourceKind::ConfigMap => {
                        match kubeapi::lookup_in::<ConfigMap>(client, &ns, &s.name, API_TIMEOUT).await {
                            Lookup::Found(cm) => {
                                let mut data: BTreeMap<String, Vec<u8>> = cm
                                    .data
                                    .unwrap_or_default()
                                    .into_iter()
                                    .map(|(k, v)| (k, v.into_bytes()))
                                    .collect();
                                data.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)));
                                Some(data)
                            }
                            Lookup::NotFound => None,
                            Lookup::Unavailable(e) => anyhow::bail!("reading ConfigMap {ns}/{}: {e}", s.name),
                        }
                    }
                };
                fetched.insert((s.kind, s.name.clone()), data);
            }
        }
        let mut ops = Vec::new();
        for m in &checkpoint.materials {
            // Not the parents' 0700: a pod that does not run as root could not enter it.
            self.fs.ensure_dir(&m.dir, VOLUME_DIR_MODE)?;
            for (path, content) in sanitize::materialize(m, &fetched)? {
                ops.push(write_op(
                    path,
                    content,
                    FileMode(m.mode),
                    Some(Owner {
                        uid: m.owner.0,
                        gid: m.owner.1,
                    }),
                    Role::Credential,
                ));
            }
        }
        let stem = file_stem(parent);
        ops.push(write_op(
            self.paths.inactive_file(&stem),
            checkpoint.to_json(),
            MANIFEST_MODE,
            None,
            Role::Manifest,
        ));
        self.fs.execute(&ops).map_err(|(e, _)| e)?;
        self.files.insert(
            stem,
            GenerationFiles {
                namespace: ns,
                pod: parent.metadata.name.clone().unwrap_or_default(),
            },
        );
        Ok(())
    }

    fn activate(&self, stem: &str) -> anyhow::Result<()> {
        let content = self
            .fs
            .read(&self.paths.inactive_file(stem))?
            .with_context(|| format!("inactive checkpoint {stem} is missing"))?;
        let op = write_op(
            self.paths.active_file(stem),
            content,
            MANIFEST_MODE,
            None,
            Role::Manifest,
        );
        self.fs.execute(std::slice::from_ref(&op)).map_err(|(e, _)| e)?;
        Ok(())
    }

    fn remove_file(&self, path: &HostPath) -> anyhow::Result<()> {
        remove_file(&self.fs, path)
    }

    /// The manifest first, then the inactive copy, then its secrets and configmaps.
    fn retire(&mut self, stem: &str) -> anyhow::Result<()> {
        self.remove_file(&self.paths.active_file(stem))?;
        self.remove_file(&self.paths.inactive_file(stem))?;
        if let Some(files) = self.files.remove(stem) {
            for base in [&self.paths.layout.secrets, &self.paths.layout.configmaps] {
                let dir = base.join(&format!("{}/{}", files.namespace, files.pod))?;
                self.fs.remove_tree(&dir)?;
            }
        }
        Ok(())
    }
}

/// Removes one file we wrote (re-checked just before `unlink`); a missing file is success.
fn remove_file(fs: &HostFs, path: &HostPath) -> anyhow::Result<()> {
    let sha256 = match fs.observe(path)? {
        kube_anchor_core::plan::Observed::File { sha256, .. } => sha256,
        kube_anchor_core::plan::Observed::Missing => return Ok(()),
        other => anyhow::bail!("{path}: {other:?} where a file of ours was expected"),
    };
    let op = Op::Remove {
        path: path.clone(),
        role: Role::Manifest,
        expected_sha256: sha256,
    };
    fs.execute(std::slice::from_ref(&op)).map_err(|(e, _)| e)?;
    Ok(())
}

fn write_op(path: HostPath, content: Vec<u8>, mode: FileMode, owner: Option<Owner>, role: Role) -> Op {
    let sha256 = sha256_hex(&content);
    Op::Write {
        file: DesiredFile {
            path,
            content,
            mode,
            owner,
            role,
        },
        sha256,
        reason: WriteReason::Content,
    }
}

fn file_stem(pod: &Pod) -> String {
    format!(
        "{}-{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn is_checkpoint_or_static(pod: &Pod) -> bool {
    let a = pod.metadata.annotations.as_ref();
    a.is_some_and(|a| {
        a.contains_key(CHECKPOINT_OF_ANNOTATION)
            || a.get(sanitize::CONFIG_SOURCE_ANNOTATION).is_some_and(|s| s == "file")
    })
}

/// How long the API has shown the pod Running and Ready (from its Ready condition).
fn ready_for(pod: &Pod) -> Option<Duration> {
    let since: SystemTime = pod_status::ready_since(pod)?.0.into();
    Some(SystemTime::now().duration_since(since).unwrap_or_default())
}

/// Whether the API shows a pod of owner `key` on this node that is not being deleted (neither a
/// checkpoint nor a static pod).
fn owner_has_pod_here(key: &str, pods_here: &[std::sync::Arc<Pod>]) -> bool {
    pods_here.iter().any(|p| {
        p.metadata.deletion_timestamp.is_none()
            && !is_checkpoint_or_static(p)
            && sanitize::controller_key(p).as_deref() == Some(key)
    })
}

/// The fields of a Deployment or StatefulSet that say whether it still wants a node.
struct Rollout<'a> {
    deleting: bool,
    template: Option<&'a k8s_openapi::api::core::v1::PodSpec>,
    generation: Option<i64>,
    observed: Option<i64>,
    replicas: i32,
    updated: Option<i32>,
    ready: Option<i32>,
}

/// Does the owner still want a pod on this node? Asked only when the API shows no live pod of
/// the owner here (one that does is taken as a yes). `Some(false)` only on positive evidence:
/// - a DaemonSet (whatever its UID: one recreated under the same name is the same owner): gone
///   (404), being deleted, or no longer selecting this node (the rule pre-stop uses);
/// - a Deployment or StatefulSet: gone, being deleted, its template no longer selecting this
///   node, or all its replicas updated and Ready with none of its pods on this node (it placed
///   them elsewhere);
/// - a bare pod: no pod of that name on this node.
///
/// Anything else — another kind, an unreadable owner, an unreachable API — is unknown, and an
/// unknown owner is never retired this way.
async fn owner_wants_node(
    client: &kube::Client,
    key: &str,
    node: Option<&decommission::NodeFacts>,
    pods_here: &[std::sync::Arc<Pod>],
) -> Option<bool> {
    let mut parts = key.splitn(3, '/');
    let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
    let has_pod_here = || owner_has_pod_here(key, pods_here);
    // A Deployment or StatefulSet wants the node while it selects it and its rollout is not
    // complete (every replica updated and Ready, as the controller last observed), or while it
    // has a pod here.
    let rollout_wants = |rollout: Rollout| -> Option<bool> {
        if rollout.deleting {
            return Some(false);
        }
        let node = node?;
        let selection = decommission::NodeSelection::of(rollout.template);
        if !decommission::matches_node(&selection, &node.labels, &node.name) {
            return Some(false);
        }
        let complete = rollout.observed.is_some_and(|o| Some(o) >= rollout.generation)
            && rollout.updated.unwrap_or(0) >= rollout.replicas
            && rollout.ready.unwrap_or(0) >= rollout.replicas;
        Some(!complete || has_pod_here())
    };
    match kind {
        "DaemonSet" => match kubeapi::lookup_in::<DaemonSet>(client, namespace, name, API_TIMEOUT).await {
            Lookup::NotFound => Some(false),
            Lookup::Found(ds) => {
                let facts = decommission::daemonset_facts(&ds);
                let node = node?;
                Some(!facts.deleting && decommission::matches_node(&facts.selection, &node.labels, &node.name))
            }
            Lookup::Unavailable(_) => None,
        },
        "Deployment" => match kubeapi::lookup_in::<Deployment>(client, namespace, name, API_TIMEOUT).await {
            Lookup::NotFound => Some(false),
            Lookup::Found(d) => {
                let (spec, status) = (d.spec.as_ref()?, d.status.clone().unwrap_or_default());
                rollout_wants(Rollout {
                    deleting: d.metadata.deletion_timestamp.is_some(),
                    template: spec.template.spec.as_ref(),
                    generation: d.metadata.generation,
                    observed: status.observed_generation,
                    replicas: spec.replicas.unwrap_or(1),
                    updated: status.updated_replicas,
                    ready: status.ready_replicas,
                })
            }
            Lookup::Unavailable(_) => None,
        },
        "StatefulSet" => match kubeapi::lookup_in::<StatefulSet>(client, namespace, name, API_TIMEOUT).await {
            Lookup::NotFound => Some(false),
            Lookup::Found(ss) => {
                let (spec, status) = (ss.spec.as_ref()?, ss.status.clone().unwrap_or_default());
                rollout_wants(Rollout {
                    deleting: ss.metadata.deletion_timestamp.is_some(),
                    template: spec.template.spec.as_ref(),
                    generation: ss.metadata.generation,
                    observed: status.observed_generation,
                    replicas: spec.replicas.unwrap_or(1),
                    updated: status.updated_replicas,
                    ready: status.ready_replicas,
                })
            }
            Lookup::Unavailable(_) => None,
        },
        "Pod" => Some(has_pod_here()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock file planted as a symlink is refused: opening it would create a file wherever the
    /// link points.
    #[test]
    fn a_lock_file_that_is_a_symlink_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let state = HostPath::parse("/var/lib/kube-anchor").unwrap();
        let fs = HostFs::new(root.path(), AllowedRoots::new([state.clone()])).unwrap();
        let v1 = root.path().join("var/lib/kube-anchor/v1");
        std::fs::create_dir_all(&v1).unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::os::unix::fs::symlink(&elsewhere, v1.join(format!("{MAIN_LOCK}.lock"))).unwrap();
        assert!(open_lock_file(&fs, &state, MAIN_LOCK).is_err());
        assert!(!elsewhere.exists(), "created through the link");
        assert!(open_lock_file(&fs, &state, DAEMONSET_LOCK).is_ok());
    }
}
