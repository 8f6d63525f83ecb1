//! A deterministic simulation of a full-cluster reboot that runs the project's own decision
//! functions ([`checkpoint::decide`], [`decommission::decide`]) inside a model of the cluster.
//! Time is virtual (one-second steps; checkpointers act every 5 s); every duration is drawn from
//! a seeded generator, so the same seed gives the same trajectories. design.md lists each
//! assumption and where its numbers come from.

#![forbid(unsafe_code)]

pub mod fleet;
pub mod scenarios;

use std::time::Duration;

use kube_anchor_core::checkpoint::{self, Action, Checkpoints, Generation, Local, LocalView, Observation, Parent};
use kube_anchor_core::decommission::{
    self, Anchors, CleanupMode, DaemonSetFacts, DaemonSetRef, Decision, Evidence, Lookup, NodeFacts, NodeSelection,
    PodFacts, QuorumGuard, ThisPod,
};

/// The control-plane components that are DaemonSet pods (with checkpoints) or static pods
/// (anchor). etcd is a static pod under every policy.
pub const COMPONENTS: [&str; 3] = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];
const APISERVER: usize = 0;
const KCM: usize = 1;
const SCHEDULER: usize = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// bootkube's pod-checkpointer: a checkpoint is removed once its parent has been gone from
    /// the API for the grace period, whatever runs locally (timers also run while the API is down).
    Bootkube { grace_s: u64 },
    /// kube-anchor's checkpointer state machine.
    Guarded,
    /// Static manifests kept on disk by kube-anchor anchors with guarded pre-stop.
    Anchor,
}

impl Policy {
    pub fn name(self) -> String {
        match self {
            Policy::Bootkube { grace_s } => format!("bootkube-{}m", grace_s / 60),
            Policy::Guarded => "guarded".into(),
            Policy::Anchor => "anchor".into(),
        }
    }

    pub fn all() -> [Policy; 4] {
        [
            Policy::Bootkube { grace_s: 60 },
            Policy::Bootkube { grace_s: 300 },
            Policy::Guarded,
            Policy::Anchor,
        ]
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// All nodes return; images cached.
    Baseline,
    /// Images must be pulled again: container starts take 20–60 s.
    ColdImages,
    /// One node never returns (a quorum still does).
    NodeLost,
    /// The scheduler takes 1–7 minutes to place pods (informer sync on a slow etcd, a stuck
    /// leader election).
    SlowScheduler,
    /// Every serving API server crashes now and then for 5–20 s.
    FlappingApiserver,
}

impl Variant {
    pub fn all() -> [Variant; 5] {
        [
            Variant::Baseline,
            Variant::ColdImages,
            Variant::NodeLost,
            Variant::SlowScheduler,
            Variant::FlappingApiserver,
        ]
    }

    pub fn name(self) -> &'static str {
        match self {
            Variant::Baseline => "baseline",
            Variant::ColdImages => "cold-images",
            Variant::NodeLost => "node-lost",
            Variant::SlowScheduler => "slow-scheduler",
            Variant::FlappingApiserver => "flapping-apiserver",
        }
    }
}

/// splitmix64: small, seedable, and the same on every platform.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64)
    }
    fn secs(&mut self, lo: f64, hi: f64) -> u64 {
        self.uniform(lo, hi).round() as u64
    }
}

/// Timing assumptions (seconds), see design.md.
const HORIZON: u64 = 1800;
const LEASE: u64 = 15; // leader-election lease duration (kcm and scheduler defaults)
const RETRY: u64 = 2; // leader-election retry period
const TICK: u64 = 5; // checkpointer interval
/// kube-controller-manager's first read through the API (the ConfigMap of its delegated
/// authentication, `extension-apiserver-authentication`) waits this long for an answer (the
/// client timeout of its authentication options); without one, or refused by an API server just
/// back whose authorizer has not caught up, it exits.
const API_READ_TIMEOUT: u64 = 10;

/// The kubelet's crash-loop back-off before a container's next start, after `exits` earlier
/// exits of it: none after the first, then 10 s doubling up to 5 minutes (`backOffPeriod`,
/// `MaxContainerBackOff`). Its state lives in the kubelet's memory, so a node's reboot resets it;
/// a static pod and a DaemonSet pod of the same component are separate pods, with separate
/// back-offs.
pub fn crash_loop_back_off_s(exits: u32) -> u64 {
    match exits {
        0 => 0,
        n => (10u64 << (n - 1).min(5)).min(300),
    }
}

/// A container's restarts under the kubelet's crash-loop back-off.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct CrashLoop {
    exits: u32,
    /// No start before this second.
    hold_until: u64,
}

impl CrashLoop {
    fn exited(&mut self, t: u64) {
        self.hold_until = t + crash_loop_back_off_s(self.exits);
        self.exits += 1;
    }

    fn may_start(&self, t: u64) -> bool {
        t >= self.hold_until
    }
}

/// An API client's start (kube-controller-manager): from the second its process starts, its
/// first read through the API either succeeds (the API serves then) or ends it, at the API's
/// return (refused: the authorizer lags) or at the read's timeout, whichever comes first.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct ApiRead {
    /// When the process starts; the read is pending from then.
    process_at: Option<u64>,
    done: bool,
}

impl ApiRead {
    fn start(process_at: u64) -> Self {
        ApiRead {
            process_at: Some(process_at),
            done: false,
        }
    }

    /// Not waiting on the read (none to make, or it succeeded).
    fn ok(&self) -> bool {
        self.process_at.is_none() || self.done
    }

    /// Whether the instance exits at second `t`.
    fn exits(&mut self, t: u64, api: bool) -> bool {
        let Some(at) = self.process_at.filter(|at| !self.done && t >= *at) else {
            return false;
        };
        if t == at && api {
            self.done = true;
            return false;
        }
        t > at && (api || t >= at + API_READ_TIMEOUT)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryOutcome {
    pub recovered: bool,
    /// First time every returned node ran all components with an etcd quorum.
    pub ttr_s: Option<u64>,
    /// The earliest that moment could be: etcd quorum and the last returned node's components
    /// started straight from disk.
    pub lower_bound_s: u64,
    /// For a run that did not recover: the first component that had no running instance left.
    pub first_lost: Option<&'static str>,
}

#[derive(Debug, Clone)]
struct ApiPod {
    generation: u32,
    crash: CrashLoop,
    read: ApiRead,
    /// When the scheduler's decision lands (it must still lead then), and whether it did.
    bind_at: Option<u64>,
    bound: bool,
    running_since: Option<u64>,
    ready_since: Option<u64>,
    deleted: Option<u64>,
}

#[derive(Debug, Clone)]
struct Slot {
    // The DaemonSet pod(s) of this component on this node in the API, oldest first.
    pods: Vec<ApiPod>,
    // A copy started from disk (checkpoint, or the anchor's static pod): when it started and
    // when it is Ready (None while starting).
    copy_since: Option<u64>,
    copy_ready: Option<u64>,
    copy_wanted: bool,
    copy_crash: CrashLoop,
    copy_read: ApiRead,
    /// kube-controller-manager: it reads through the API before it serves (`ApiRead`).
    api_client: bool,
    // bootkube: its one checkpoint and the parent-gone timer.
    bootkube_checkpoint: bool,
    gone_since: Option<u64>,
    // guarded
    state: Checkpoints,
}

#[derive(Debug, Clone)]
struct NodeSim {
    returns: bool,
    kubelet_at: u64,
    etcd_at: u64,
    checkpointer_at: u64,
    /// guarded: the checkpointer's DaemonSet pod starts this long after the API is first back
    /// (the kubelet restarts the pods bound to it; nothing holds its ports); until then its
    /// static copy acts, with no API and no view of the kubelet.
    checkpointer_pod_delay: u64,
    tick_phase: u64,
    slots: Vec<Slot>,
}

/// The model's time to recovery for the anchor policy when the nodes' kubelets come back at
/// `boot_s` (seconds after the power cut), with the middle of the model's ranges for everything
/// else: etcd and each component start 5 s after the kubelet (2–8 s), a component is Ready 10 s
/// after it starts (5–15 s). Anchors start every component straight from disk, so recovery is
/// the later of an etcd quorum and the last node's components being Ready, and of each node's
/// kube-controller-manager, which exits while no API server serves and waits out the kubelet's
/// crash-loop back-off ([`api_client_ready_s`]).
pub fn anchor_recovery_estimate_s(boot_s: &[f64]) -> f64 {
    const START: f64 = 5.0;
    const READY: f64 = 10.0;
    let mut boots = boot_s.to_vec();
    boots.sort_by(|a, b| a.total_cmp(b));
    let quorum = boots.len() / 2 + 1;
    let quorum_at = boots.get(quorum - 1).copied().unwrap_or(f64::INFINITY) + START;
    let last_ready = boots.last().copied().unwrap_or(0.0) + START + READY;
    // An API server serves once it runs and etcd has a quorum.
    let api_at = quorum_at.max(boots.first().copied().unwrap_or(0.0) + START + READY);
    let controller_managers = boots
        .iter()
        .map(|&b| api_client_ready_s(b, api_at, START, READY))
        .fold(0.0, f64::max);
    // The scheduler waits for the API rather than exit: Ready once etcd has a quorum and the
    // API server answers.
    last_ready.max(quorum_at + START + READY).max(controller_managers)
}

/// When kube-controller-manager turns Ready on a node whose kubelet first starts it at
/// `first_s`, with the API serving from `api_at_s`: each start reads through the API as its
/// process starts (`start_s` later); a read before the API serves fails at the API's return
/// (refused: its authorizer lags) or after the 10 s timeout, and the process exits; the kubelet
/// starts it again after its crash-loop back-off ([`crash_loop_back_off_s`]). A node alone for
/// half a minute or more thus holds its controller-manager in a 10–20 s back-off when the
/// others return.
pub fn api_client_ready_s(first_s: f64, api_at_s: f64, start_s: f64, ready_s: f64) -> f64 {
    let mut at = first_s;
    let mut exits = 0;
    loop {
        let process = at + start_s;
        if process >= api_at_s {
            return process + ready_s;
        }
        let exit = (process + API_READ_TIMEOUT as f64).min(api_at_s);
        at = exit + crash_loop_back_off_s(exits) as f64;
        exits += 1;
    }
}

/// One trajectory.
pub fn run_trajectory(policy: Policy, nodes: usize, variant: Variant, seed: u64) -> TrajectoryOutcome {
    let mut trajectory = Trajectory::new(policy, nodes, variant, seed);
    for t in 0..=HORIZON {
        if !trajectory.step(t) {
            break;
        }
    }
    trajectory.outcome()
}

/// A container's start: 2–8 s, or 20–60 s when its image must be pulled again.
fn start_delay(variant: Variant, rng: &mut Rng) -> u64 {
    if variant == Variant::ColdImages {
        rng.secs(20.0, 60.0)
    } else {
        rng.secs(2.0, 8.0)
    }
}

/// How long the scheduler takes to place a pod.
fn schedule_delay(variant: Variant, rng: &mut Rng) -> u64 {
    if variant == Variant::SlowScheduler {
        rng.secs(60.0, 420.0)
    } else {
        rng.secs(1.0, 3.0)
    }
}

/// What every node sees in one second of a trajectory.
#[derive(Debug, Clone, Copy)]
struct Tick {
    t: u64,
    api: bool,
    /// The old pods (of before the reboot) are deleted: some time after the API is first back.
    evicting: bool,
    kcm_leads: bool,
    scheduler_leads: bool,
}

impl Slot {
    /// A component on a node just after the power cut: its DaemonSet pod still bound in the
    /// API, its checkpoint on disk, nothing running.
    fn after_power_cut(api_client: bool) -> Self {
        Slot {
            pods: vec![ApiPod {
                generation: 0,
                crash: CrashLoop::default(),
                read: ApiRead::default(),
                bind_at: None,
                bound: true,
                running_since: None,
                ready_since: None,
                deleted: None,
            }],
            copy_since: None,
            copy_ready: None,
            copy_wanted: false,
            copy_crash: CrashLoop::default(),
            copy_read: ApiRead::default(),
            api_client,
            bootkube_checkpoint: true,
            gone_since: None,
            state: Checkpoints {
                generations: vec![Generation {
                    uid: "g0".into(),
                    name: "g0".into(),
                    active: false,
                    host_network: true,
                }],
                ..Default::default()
            },
        }
    }

    /// A copy or a pod, started and Ready (an API client only once its read succeeded).
    fn running(&self, t: u64) -> bool {
        self.copy_ready.is_some_and(|r| t >= r) && self.copy_read.ok()
            || self
                .pods
                .iter()
                .any(|p| p.deleted.is_none() && p.ready_since.is_some_and(|r| t >= r) && p.read.ok())
    }

    /// A pod of the API has started (Ready or not): it holds the component's ports.
    fn pod_started(&self, t: u64) -> bool {
        self.pods
            .iter()
            .any(|p| p.deleted.is_none() && p.running_since.is_some_and(|r| t >= r))
    }

    /// The API side: old pods are deleted some time after the API is back; the DaemonSet
    /// controller (kcm) creates a replacement; the scheduler binds it; the kubelet starts it.
    fn api_side(&mut self, tick: Tick, (start, ready): (u64, u64), variant: Variant, rng: &mut Rng) {
        let Tick {
            t,
            api,
            evicting,
            kcm_leads,
            scheduler_leads,
        } = tick;
        if evicting {
            for p in self
                .pods
                .iter_mut()
                .filter(|p| p.generation == 0 && p.deleted.is_none())
            {
                p.deleted = Some(t);
            }
        }
        let live = self.pods.iter().filter(|p| p.deleted.is_none()).count();
        if live == 0 && api && kcm_leads {
            let generation = self.pods.last().map(|p| p.generation + 1).unwrap_or(1);
            self.pods.push(ApiPod {
                generation,
                crash: CrashLoop::default(),
                read: ApiRead::default(),
                bind_at: None,
                bound: false,
                running_since: None,
                ready_since: None,
                deleted: None,
            });
        }
        let copy_running = self.copy_since.is_some();
        let api_client = self.api_client;
        for p in self.pods.iter_mut().filter(|p| p.deleted.is_none() && p.generation > 0) {
            if !p.bound && p.bind_at.is_none() && api && scheduler_leads {
                p.bind_at = Some(t + schedule_delay(variant, rng));
            }
            if !p.bound && p.bind_at.is_some_and(|at| t >= at) {
                // The binding needs a scheduler and an API at that moment; else retry.
                p.bound = api && scheduler_leads;
                p.bind_at = None;
            }
            // hostNetwork: the pod cannot start while a copy holds its ports.
            if p.bound && p.running_since.is_none() && !copy_running && p.crash.may_start(t) {
                p.running_since = Some(t + start);
                p.ready_since = Some(t + start + ready);
                if api_client {
                    p.read = ApiRead::start(t + start);
                }
            }
            if copy_running && p.running_since.is_some_and(|r| t < r) {
                p.running_since = None;
                p.ready_since = None;
            }
        }
    }

    /// bootkube's checkpointer: the checkpoint goes once the parent has been gone for the grace
    /// period; the copy runs while the checkpoint is kept and no replacement runs.
    fn bootkube_checkpointer(&mut self, tick: Tick, grace_s: u64) {
        let t = tick.t;
        let parent_in_api = self.pods[0].deleted.is_none();
        // bootkube judged "gone" from its last view of the API, which goes stale (not
        // refreshed) while the API is down.
        if parent_in_api {
            self.gone_since = None;
        } else if tick.api || self.gone_since.is_some() {
            self.gone_since.get_or_insert(t);
        }
        let replacement_running = self.pod_started(t);
        if self.bootkube_checkpoint && self.gone_since.is_some_and(|g| t >= g + grace_s) {
            self.bootkube_checkpoint = false;
        }
        self.copy_wanted = self.bootkube_checkpoint && !replacement_running;
    }

    /// kube-anchor's checkpointer: the real state machine, fed what the checkpointer would see.
    fn guarded_checkpointer(&mut self, tick: Tick, daemonset_copy: bool, cfg: &checkpoint::Config) {
        let obs = self.guarded_observation(tick, daemonset_copy);
        let (next, actions) = checkpoint::decide(&self.state, &obs, cfg);
        self.state = next;
        for a in actions {
            if let Action::Retire { .. } = a {
                debug_assert!(tick.api, "guarded retired with the API down");
            }
        }
        self.copy_wanted = self.state.generations.iter().any(|g| g.active);
    }

    /// What the guarded checkpointer observes: the API and the kubelet through its DaemonSet
    /// copy, or nothing but the clock through its static copy (no credentials), which acts
    /// until the DaemonSet copy runs.
    fn guarded_observation(&self, tick: Tick, daemonset_copy: bool) -> Observation {
        let Tick { t, api, .. } = tick;
        let parents = self
            .pods
            .iter()
            .filter(|p| p.deleted.is_none() && p.generation > 0)
            .map(|p| Parent {
                uid: format!("g{}", p.generation),
                name: format!("g{}", p.generation),
                ready_since: p.ready_since.filter(|r| t >= *r).map(Duration::from_secs),
                host_network: true,
            })
            .collect();
        let local = self
            .pods
            .iter()
            .filter(|p| p.deleted.is_none() && p.generation > 0 && p.bound)
            .map(|p| Local {
                uid: format!("g{}", p.generation),
                ready_since: p.ready_since.filter(|r| t >= *r).map(Duration::from_secs),
            })
            .collect();
        if daemonset_copy {
            Observation {
                now: Duration::from_secs(t),
                api_reachable: api,
                parents: if api { parents } else { Vec::new() },
                local: LocalView::Known(local),
                owner_wants_node: api.then_some(true),
                is_self: false,
                decommissioned: false,
                others_left: false,
                paused: false,
                copy_runs: Some(self.copy_since.is_some_and(|since| t >= since)),
            }
        } else {
            Observation {
                now: Duration::from_secs(t),
                api_reachable: false,
                parents: Vec::new(),
                // After the reboot nothing was seen running yet.
                local: LocalView::Unknown { seen_since_boot: false },
                owner_wants_node: None,
                is_self: false,
                decommissioned: false,
                others_left: false,
                paused: false,
                copy_runs: None,
            }
        }
    }

    /// kube-controller-manager's instances (copy and pods) whose first read through the API
    /// fails exit at `t`; the kubelet starts each again after its crash-loop back-off.
    fn api_client_exits(&mut self, t: u64, api: bool) {
        if self.copy_read.exits(t, api) {
            self.copy_since = None;
            self.copy_ready = None;
            self.copy_read = ApiRead::default();
            self.copy_crash.exited(t);
        }
        for p in self.pods.iter_mut().filter(|p| p.deleted.is_none()) {
            if p.read.exits(t, api) {
                p.running_since = None;
                p.ready_since = None;
                p.read = ApiRead::default();
                p.crash.exited(t);
            }
        }
    }

    /// The kubelet starts the copy from disk when it is wanted and no pod holds the ports, and
    /// stops it when it is no longer wanted.
    fn start_or_stop_copy(&mut self, t: u64, start: u64, ready: u64) {
        let pod_holds_ports = self.pod_started(t);
        if self.copy_wanted && self.copy_since.is_none() && !pod_holds_ports && self.copy_crash.may_start(t) {
            self.copy_since = Some(t);
            self.copy_ready = Some(t + start + ready);
            if self.api_client {
                self.copy_read = ApiRead::start(t + start);
            }
        } else if !self.copy_wanted {
            self.copy_since = None;
            self.copy_ready = None;
        }
    }
}

/// The pre-stop hook of the anchor of component `c` on node `i`, deleted with the DaemonSet
/// pod it belongs to, decides with the real decision function: true when it removes the
/// static copy.
fn anchor_pre_stop_removes(i: usize, c: usize) -> bool {
    let this = ThisPod {
        namespace: "kube-system".into(),
        name: format!("{}-anchor-n{i}", COMPONENTS[c]),
        node: format!("n{i}"),
    };
    let evidence = Evidence {
        pod: Lookup::Found(PodFacts {
            owner: Some(DaemonSetRef {
                name: COMPONENTS[c].into(),
                uid: "ds".into(),
            }),
            deleting: true,
        }),
        daemonset: Some(Lookup::Found(DaemonSetFacts {
            namespace: "kube-system".into(),
            name: COMPONENTS[c].into(),
            uid: "ds".into(),
            deleting: false,
            selection: NodeSelection::default(),
            decommission: false,
        })),
        node: Lookup::Found(NodeFacts {
            name: format!("n{i}"),
            labels: Default::default(),
            deleting: false,
            decommission: false,
        }),
        anchors: Some(Lookup::Found(Anchors::default())),
        dependents: Some(Lookup::Found(Vec::new())),
    };
    matches!(
        decommission::decide(
            CleanupMode::Guarded,
            QuorumGuard::Auto.guard_for(COMPONENTS[c]),
            &this,
            &evidence,
        ),
        Decision::Remove(_)
    )
}

impl NodeSim {
    /// One node's reboot, drawn from `rng` (and the checkpointer's pod delay from
    /// `checkpointer_rng`). The order of the draws is part of the model: the same seed gives
    /// the same trajectory.
    fn reboot(returns: bool, variant: Variant, rng: &mut Rng, checkpointer_rng: &mut Rng) -> Self {
        let boot = rng.secs(20.0, 120.0);
        let kubelet_at = boot + rng.secs(2.0, 10.0);
        let etcd_at = kubelet_at + start_delay(variant, rng);
        let slots = (0..COMPONENTS.len()).map(|c| Slot::after_power_cut(c == KCM)).collect();
        NodeSim {
            returns,
            kubelet_at,
            etcd_at,
            checkpointer_at: kubelet_at + rng.secs(1.0, 3.0),
            checkpointer_pod_delay: start_delay(variant, checkpointer_rng),
            tick_phase: rng.next_u64() % TICK,
            slots,
        }
    }

    /// Whether component `c` runs on this node: a copy or a pod, started and Ready.
    fn running(&self, c: usize, t: u64) -> bool {
        self.slots[c].running(t)
    }
}

/// The lower bound: quorum, and every returned node's components from disk with no delay.
fn lower_bound_s(ns: &[NodeSim], delays: &[Vec<(u64, u64)>], quorum: usize) -> u64 {
    let mut etcd_times: Vec<u64> = ns.iter().filter(|n| n.returns).map(|n| n.etcd_at).collect();
    etcd_times.sort();
    let quorum_at = etcd_times.get(quorum - 1).copied().unwrap_or(u64::MAX);
    ns.iter()
        .enumerate()
        .filter(|(_, n)| n.returns)
        .map(|(i, n)| {
            (0..COMPONENTS.len())
                .map(|c| n.kubelet_at + delays[i][c].0 + delays[i][c].1)
                .max()
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0)
        .max(quorum_at)
}

/// One trajectory's state: the reboot drawn from its seed, and the cluster as it stands.
struct Trajectory {
    policy: Policy,
    variant: Variant,
    rng: Rng,
    ns: Vec<NodeSim>,
    quorum: usize,
    /// Per (node, component) start and readiness delays of any copy or pod, drawn once.
    delays: Vec<Vec<(u64, u64)>>,
    /// API up -> old parent pods deleted.
    evict_after: u64,
    /// FlappingApiserver: every API server is down until `flap_until`; the next crash is at
    /// `next_flap`.
    flap_until: u64,
    next_flap: u64,
    lower_bound_s: u64,
    api_first_up: Option<u64>,
    leader_since: [Option<u64>; 3],
    lost_at: [Option<u64>; 3],
    ttr: Option<u64>,
    cfg: checkpoint::Config,
}

impl Trajectory {
    /// The reboot: every node's boot and every start delay, drawn from `seed`.
    fn new(policy: Policy, nodes: usize, variant: Variant, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let lost_node = if variant == Variant::NodeLost {
            Some((rng.next_u64() % nodes as u64) as usize)
        } else {
            None
        };
        // A stream of its own, so that the other policies' trajectories stay those of the same seed.
        let mut checkpointer_rng = Rng::new(seed ^ 0x00C4_EC4B_0117_E5ED);
        let ns: Vec<NodeSim> = (0..nodes)
            .map(|i| NodeSim::reboot(lost_node != Some(i), variant, &mut rng, &mut checkpointer_rng))
            .collect();
        let quorum = nodes / 2 + 1;
        let delays: Vec<Vec<(u64, u64)>> = (0..nodes)
            .map(|_| {
                (0..COMPONENTS.len())
                    .map(|_| (start_delay(variant, &mut rng), rng.secs(5.0, 15.0)))
                    .collect()
            })
            .collect();
        let evict_after = rng.secs(20.0, 120.0);
        let next_flap = if variant == Variant::FlappingApiserver {
            rng.secs(60.0, 180.0)
        } else {
            u64::MAX
        };
        let lower_bound_s = lower_bound_s(&ns, &delays, quorum);
        Trajectory {
            policy,
            variant,
            rng,
            ns,
            quorum,
            delays,
            evict_after,
            flap_until: 0,
            next_flap,
            lower_bound_s,
            api_first_up: None,
            leader_since: [None; 3],
            lost_at: [None; 3],
            ttr: None,
            cfg: checkpoint::Config {
                ready_window: Duration::from_secs(30),
                stable_window: Duration::from_secs(120),
                handoff_timeout: Duration::from_secs(90),
                retire_grace: Duration::from_secs(300),
                max_backoff: Duration::from_secs(600),
            },
        }
    }

    /// Second `t`. False once nothing is left that could bring an API server back.
    fn step(&mut self, t: u64) -> bool {
        let etcd_up = self.ns.iter().filter(|n| n.returns && t >= n.etcd_at).count() >= self.quorum;
        self.crash_apiservers(t);
        let api = etcd_up && t >= self.flap_until && self.running_anywhere(APISERVER, t);
        if api {
            self.api_first_up.get_or_insert(t);
        }
        // kube-controller-manager needs the API to start at all (the others wait for it).
        for n in self.ns.iter_mut().filter(|n| n.returns && t >= n.kubelet_at) {
            n.slots[KCM].api_client_exits(t, api);
        }
        let tick = self.elect_leaders(t, api);
        for i in 0..self.ns.len() {
            let n = &self.ns[i];
            if !n.returns || t < n.kubelet_at {
                continue;
            }
            let checkpointers_act = t >= n.checkpointer_at && (t + n.tick_phase).is_multiple_of(TICK);
            self.api_side(i, tick);
            // Copies started from disk.
            match self.policy {
                Policy::Anchor => self.anchors(i, t),
                _ if checkpointers_act => self.checkpointers(i, tick),
                _ => {}
            }
            self.start_or_stop_copies(i, t);
        }
        self.record_losses(t);
        if etcd_up && self.all_running(t) {
            self.ttr.get_or_insert(t);
        }
        !self.hopeless(t, api)
    }

    /// FlappingApiserver: every serving API server crashes now and then.
    fn crash_apiservers(&mut self, t: u64) {
        if self.variant == Variant::FlappingApiserver && t >= self.next_flap {
            self.flap_until = t + self.rng.secs(5.0, 20.0);
            self.next_flap = t + self.rng.secs(60.0, 180.0);
        }
    }

    /// Component `c` runs on some returned node.
    fn running_anywhere(&self, c: usize, t: u64) -> bool {
        self.ns.iter().any(|n| n.returns && n.running(c, t))
    }

    /// Leaders: a candidate running with the API up; the old lease must expire first.
    fn elect_leaders(&mut self, t: u64, api: bool) -> Tick {
        for c in [KCM, SCHEDULER] {
            let candidate = api && self.running_anywhere(c, t);
            self.leader_since[c] = match (candidate, self.leader_since[c]) {
                (true, Some(s)) => Some(s),
                (true, None) => Some(t + LEASE + RETRY),
                (false, _) => None,
            };
        }
        Tick {
            t,
            api,
            evicting: api && self.api_first_up.is_some_and(|up| t >= up + self.evict_after),
            kcm_leads: self.leader_since[KCM].is_some_and(|s| t >= s),
            scheduler_leads: self.leader_since[SCHEDULER].is_some_and(|s| t >= s),
        }
    }

    /// The API side of every component on node `i`.
    fn api_side(&mut self, i: usize, tick: Tick) {
        for (c, s) in self.ns[i].slots.iter_mut().enumerate() {
            s.api_side(tick, self.delays[i][c], self.variant, &mut self.rng);
        }
    }

    /// The anchor policy: every copy is wanted until the anchor's pre-stop hook removes it.
    /// The anchor pods are deleted and replaced like any DaemonSet pod.
    fn anchors(&mut self, i: usize, t: u64) {
        for (c, s) in self.ns[i].slots.iter_mut().enumerate() {
            s.copy_wanted = true;
            if s.pods.first().is_some_and(|p| p.deleted == Some(t)) && anchor_pre_stop_removes(i, c) {
                s.copy_wanted = false;
            }
        }
    }

    /// The checkpointer of node `i` acts on each of its checkpoints.
    fn checkpointers(&mut self, i: usize, tick: Tick) {
        let n = &mut self.ns[i];
        // guarded: the static copy (no credentials) until the DaemonSet copy runs.
        let daemonset_copy = self
            .api_first_up
            .is_some_and(|up| tick.t >= up + n.checkpointer_pod_delay);
        for s in &mut n.slots {
            match self.policy {
                Policy::Bootkube { grace_s } => s.bootkube_checkpointer(tick, grace_s),
                Policy::Guarded => s.guarded_checkpointer(tick, daemonset_copy, &self.cfg),
                Policy::Anchor => unreachable!(),
            }
        }
    }

    fn start_or_stop_copies(&mut self, i: usize, t: u64) {
        for (c, s) in self.ns[i].slots.iter_mut().enumerate() {
            let (start, ready) = self.delays[i][c];
            s.start_or_stop_copy(t, start, ready);
        }
    }

    /// Loss bookkeeping: when each component last had no running instance anywhere.
    fn record_losses(&mut self, t: u64) {
        for c in 0..COMPONENTS.len() {
            if self.running_anywhere(c, t) {
                self.lost_at[c] = None;
            } else if t >= self.api_first_up.unwrap_or(u64::MAX) {
                self.lost_at[c].get_or_insert(t);
            }
        }
    }

    /// Every returned node runs every component.
    fn all_running(&self, t: u64) -> bool {
        self.ns
            .iter()
            .filter(|n| n.returns)
            .all(|n| (0..COMPONENTS.len()).all(|c| n.running(c, t)))
    }

    /// Nothing left that could bring an API server back: no copy wanted, no bound pod.
    fn hopeless(&self, t: u64, api: bool) -> bool {
        t > 600
            && !api
            && self.ns.iter().all(|n| {
                let s = &n.slots[APISERVER];
                !n.returns || (!s.copy_wanted && !s.pods.iter().any(|p| p.deleted.is_none() && p.bound))
            })
    }

    fn outcome(&self) -> TrajectoryOutcome {
        // Recovered means: it came back and it is still all there at the end of the horizon.
        let recovered_at_end = self.lost_at.iter().all(Option::is_none) && self.all_running(HORIZON);
        let recovered = self.ttr.is_some() && recovered_at_end;
        let first_lost = (0..COMPONENTS.len())
            .filter_map(|c| self.lost_at[c].map(|t| (t, COMPONENTS[c])))
            .min()
            .map(|(_, c)| c);
        TrajectoryOutcome {
            recovered,
            ttr_s: if recovered { self.ttr } else { None },
            lower_bound_s: self.lower_bound_s,
            first_lost: if recovered {
                None
            } else {
                first_lost.or(Some(COMPONENTS[APISERVER]))
            },
        }
    }
}

/// Results of many trajectories of one policy, size and variant.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    pub policy: String,
    pub nodes: usize,
    pub variant: &'static str,
    pub trajectories: usize,
    pub recovered: usize,
    pub recovery_rate: f64,
    pub ttr_p50_s: Option<u64>,
    pub ttr_p99_s: Option<u64>,
    /// Median of time-to-recovery over the lower bound, per trajectory.
    pub ttr_over_lower_bound_p50: Option<f64>,
    pub first_lost: std::collections::BTreeMap<&'static str, usize>,
}

pub fn summarize(policy: Policy, nodes: usize, variant: Variant, trajectories: usize, seed: u64) -> Summary {
    let mut ttrs = Vec::new();
    let mut ratios = Vec::new();
    let mut first_lost = std::collections::BTreeMap::new();
    let mut recovered = 0;
    for k in 0..trajectories {
        // Each trajectory's reboot (boot times, start delays, eviction delay) is drawn from
        // (seed, size, variant, k) first, so every policy faces the same reboots; later draws
        // (scheduling delays, API crashes) follow each policy's own course.
        let traj_seed = seed
            ^ (nodes as u64).wrapping_mul(0x100_0000_01B3)
            ^ (variant as u64).wrapping_mul(0x9E37_79B9)
            ^ (k as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
        let o = run_trajectory(policy, nodes, variant, traj_seed);
        if o.recovered {
            recovered += 1;
            let ttr = o.ttr_s.expect("recovered");
            ttrs.push(ttr);
            ratios.push(ttr as f64 / o.lower_bound_s.max(1) as f64);
        } else if let Some(c) = o.first_lost {
            *first_lost.entry(c).or_insert(0) += 1;
        }
    }
    ttrs.sort();
    ratios.sort_by(f64::total_cmp);
    let pct = |v: &[u64], p: f64| (!v.is_empty()).then(|| v[((v.len() - 1) as f64 * p).round() as usize]);
    Summary {
        policy: policy.name(),
        nodes,
        variant: variant.name(),
        trajectories,
        recovered,
        recovery_rate: if trajectories == 0 {
            0.0
        } else {
            recovered as f64 / trajectories as f64
        },
        ttr_p50_s: pct(&ttrs, 0.5),
        ttr_p99_s: pct(&ttrs, 0.99),
        ttr_over_lower_bound_p50: (!ratios.is_empty()).then(|| ratios[(ratios.len() - 1) / 2]),
        first_lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_back_off_doubles_to_five_minutes() {
        let waits: Vec<u64> = (0..9).map(crash_loop_back_off_s).collect();
        assert_eq!(waits, [0, 10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn a_controller_manager_waits_out_its_back_off() {
        // The API already serves: no exit.
        assert_eq!(api_client_ready_s(10.0, 12.0, 5.0, 10.0), 25.0);
        // It returns while the first read waits: refused, started again at once.
        assert_eq!(api_client_ready_s(10.0, 20.0, 5.0, 10.0), 35.0);
        // A node alone for 35 s (the slow self-hosted trial [18, 53, 54]): two timeouts, a
        // 10 s back-off, then the API.
        assert_eq!(api_client_ready_s(18.0, 58.0, 5.0, 10.0), 73.0);
        // Alone for 43 s ([9, 52, 57]): a third start is refused at the API's return, and the
        // 20 s back-off follows.
        assert_eq!(api_client_ready_s(9.0, 57.0, 5.0, 10.0), 92.0);
    }

    #[test]
    fn the_read_ends_at_the_timeout_or_at_the_apis_return() {
        let mut read = ApiRead::start(5);
        assert!(!read.exits(4, false), "not started yet");
        assert!(!read.exits(5, false));
        assert!(!read.exits(14, false));
        assert!(read.exits(15, false), "10 s without an answer");
        let mut read = ApiRead::start(5);
        assert!(read.exits(8, true), "refused by an API server just back");
        let mut read = ApiRead::start(5);
        assert!(!read.exits(5, true));
        assert!(!read.exits(30, false), "read before the API left: it runs on");
    }

    /// A controller-manager copy started from disk while no API serves exits and comes back
    /// only after each back-off; once the API serves, the next start turns Ready.
    #[test]
    fn a_copy_without_an_api_crash_loops() {
        let mut slot = Slot::after_power_cut(true);
        slot.pods.clear();
        slot.copy_wanted = true;
        let (start, ready) = (2, 5);
        let mut starts = Vec::new();
        let api_at = 60;
        let mut ready_at = None;
        for t in 0..200 {
            let api = t >= api_at;
            slot.api_client_exits(t, api);
            let before = slot.copy_since;
            slot.start_or_stop_copy(t, start, ready);
            if before.is_none() && slot.copy_since.is_some() {
                starts.push(t);
            }
            if ready_at.is_none() && slot.running(t) {
                ready_at = Some(t);
            }
        }
        // The processes started at 2, 14 and 36 time out with no API (back-offs 0, 10 and 20 s
        // after their exits); the fourth, at 68, reads from the API and is Ready at 73.
        assert_eq!(starts, [0, 12, 34, 66]);
        assert_eq!(ready_at, Some(73));
    }

    #[test]
    fn same_seed_same_trajectory() {
        for policy in Policy::all() {
            assert_eq!(
                run_trajectory(policy, 3, Variant::SlowScheduler, 7),
                run_trajectory(policy, 3, Variant::SlowScheduler, 7)
            );
        }
    }

    /// The guarded invariants in the model: every variant in which a quorum returns recovers,
    /// for every seed tried. A change to the state machine that reopens the race fails here.
    #[test]
    fn guarded_and_anchor_always_recover() {
        for policy in [Policy::Guarded, Policy::Anchor] {
            for nodes in [3, 5] {
                for variant in Variant::all() {
                    let s = summarize(policy, nodes, variant, 40, 1);
                    assert_eq!(s.recovered, s.trajectories, "{s:?}");
                }
            }
        }
    }

    #[test]
    fn the_timer_only_checkpointer_loses_clusters_to_the_race() {
        let s = summarize(Policy::Bootkube { grace_s: 60 }, 3, Variant::SlowScheduler, 60, 1);
        assert!(s.recovered < s.trajectories, "{s:?}");
    }
}
