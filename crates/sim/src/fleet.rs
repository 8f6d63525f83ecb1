//! A deterministic simulation of a control plane (etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler as static pods on 1 or 3 nodes) in which every node's anchors run the project's decision machine
//! ([`kube_anchor_core::machine::Anchor`]), etcd join step
//! ([`kube_anchor_core::join_steps::JoinStep`]) and pre-stop hook, while an operator pushes versions (good and
//! bad of every kind) and the world cuts power, restarts kubelets and re-images nodes.
//!
//! Virtual time in one-second steps; every duration the world draws comes from one seeded
//! generator, maps are ordered, and nothing reads a clock, so a seed and a list of operations
//! replay exactly. The world is modelled here and calls no project code: each rule says where it
//! comes from (design.md, "The fleet simulation"). After every step the invariants are checked
//! against the world's own state, not against what the anchors believe.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use kube_anchor_core::decommission::{
    AnchorPod, Anchors, DaemonSetFacts, DaemonSetRef, Dependent, Evidence, FilesHere, Guard, Looks, Lookup, NextLook,
    NodeFacts, NodeSelection, PodFacts, ThisPod,
};
use kube_anchor_core::drain_guard::{self, GuardAction, GuardFacts, SeenGuard};
use kube_anchor_core::history::{self, Retention};
use kube_anchor_core::join_steps::{self, JoinStart, JoinStep};
use kube_anchor_core::kubelet_start;
use kube_anchor_core::ledger::{BadVersion, Decommissioned, Interrupted, Ledger, Paused, RollbackPlan};
use kube_anchor_core::machine::{Anchor, Effect, EvaluateFacts, FirstWriteAnswer, Input, Settings, SyncFacts};
use kube_anchor_core::margin::{self, ApiServerPeer, MarginFacts, PeerAnswer};
use kube_anchor_core::membership::{
    self, Founding, LearnerProgress, Leave, LeaveFacts, Me, Member, MemberList, PeerStatus, Record,
};
use kube_anchor_core::pause::Pause;
use kube_anchor_core::prestop_steps::{Action, Hook, LeaveAnswer, Limits, MemberConfig, Observation};
use kube_anchor_core::rollout::{self, LeaseView, TurnEnd};
use kube_anchor_core::runtime::{ContainerState, LocalContainer, LocalPod, RuntimeView};
use kube_anchor_core::skew::{self, SkewFacts};
use kube_anchor_core::trial::{ClientAnswer, ClientView, HealthFailure, MirrorPod, VersionView};
use kube_anchor_core::turn::Answer;

use crate::Rng;

pub const ETCD: usize = 0;
pub const APISERVER: usize = 1;
pub const CONTROLLER_MANAGER: usize = 2;
pub const SCHEDULER: usize = 3;
pub const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];
/// The components whose charts keep drain guards (`anchor.drainGuard`, on for these two).
const GUARDED: [usize; 2] = [ETCD, APISERVER];
/// How often an anchor looks at its drain guard (`anchor.rs`, `GUARD_PERIOD`).
const GUARD_PERIOD: u64 = 10;
/// The one guard spec of this world (the digest the real anchor computes does not matter here).
const GUARD_SPEC: &str = "guard";
/// The etcd cluster was created on cp-1 alone (the values' `initialCluster`, state `new`).
const INITIAL_CLUSTER: &str = "cp-1=https://cp-1:2380";
/// The component each one's anchor names in `--depends-on` (charts/*/values.yaml `dependsOn`).
const DEPENDS_ON: [Option<usize>; 4] = [None, Some(ETCD), Some(APISERVER), Some(APISERVER)];

/// The daemon's evaluation while a version is on trial or a turn held (`TRIAL_TICK`), its
/// `--health-interval` default otherwise, and its `TURN_RETRY` while a version waits.
const TRIAL_TICK: u64 = 1;
const HEALTH_INTERVAL: u64 = 10;
const TURN_RETRY: u64 = 2;
/// The kubelet's crash-loop back-off: 10 s doubling to 5 minutes (kubelet `backOffPeriod`,
/// `MaxContainerBackOff`).
const BACKOFF_START: u64 = 10;
const BACKOFF_MAX: u64 = 300;
/// kube-apiserver exits when its post-start hooks cannot reach etcd within about 30 s of a start
/// (design.md, "Evidence").
const APISERVER_WITHOUT_ETCD: u64 = 30;
/// The kubelet kills a kube-apiserver that does not answer its liveness probe 8 times in a row
/// (the charts' `failureThreshold: 8`), each probe waiting out its 15 s timeout
/// (`timeoutSeconds: 15` over `periodSeconds: 10`: charts/kube-anchor-lib/templates/_staticpod.tpl).
const LIVENESS_KILL: u64 = 8 * 15;
/// The same probe against a kube-apiserver that answers at once, its `/livez` failing on etcd.
const LIVENESS_WITHOUT_ETCD: u64 = 8 * 10;
/// After the operator's last operation the world is left alone this long: every rollout must
/// have ended by then (three nodes × a five-minute trial, back-offs and boots).
pub const SETTLE: u64 = 40 * 60;
/// A node whose power came back counts as taken down by the world until its kubelet has run
/// this long (containers start, etcd elects, the API server syncs its informers).
const BOOT_GRACE: u64 = 120;
/// The charts' pre-stop hook: `preStopTimeout: 45s`, `quorumGuard` (`GUARDS`:
/// charts/*/values.yaml), and its `--confirm-interval` default (2 s).
const PRESTOP_TIMEOUT: u64 = 45;
const CONFIRM_INTERVAL: u64 = 2;
const GUARDS: [Guard; 4] = [Guard::Quorum, Guard::Quorum, Guard::LastCopy, Guard::LastCopy];
/// The node lifecycle controller marks a silent node's pods not Ready after
/// `--node-monitor-grace-period` (kube-controller-manager: 40 s through 1.31, 50 s since):
/// until then a powered-off node's mirror pods still read Ready.
const NODE_MONITOR_GRACE: u64 = 40;
/// podgc force-deletes the pods bound to a Node that has been gone this long
/// (`quarantineTime`, kubernetes pkg/controller/podgc/gc_controller.go).
const PODGC_QUARANTINE: u64 = 40;
/// `kube-anchor bootstrap --wait-timeout` default: how long each component may take to answer
/// its health endpoint, and a joining etcd member to be promoted.
const BOOTSTRAP_WAIT: u64 = 300;
/// The label both charts' DaemonSets select their nodes by.
const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// The cluster ID of the cluster the fleet was created as.
const MAIN_CLUSTER: u64 = 1;
/// The etcd anchor's join step again while the join is pending (`anchor.rs`, `MEMBERSHIP_RETRY`).
const MEMBERSHIP_RETRY: u64 = 2;
/// etcd promotes a learner only once its log is within 10 % of the leader's
/// (`isLearnerReady`, server/etcdserver/server.go); on the bed's small keyspace a learner that
/// runs was promotable within 1 s (docs/testing.md, lifecycle seed 1).
const LEARNER_CATCH_UP: u64 = 2;
/// etcd's `--max-learners` default: a second learner is refused.
const MAX_LEARNERS: usize = 1;
/// The minor version each component's first version has: etcd 3.5, Kubernetes 1.36.
const FIRST_MINOR: [u32; 4] = [5, 36, 36, 36];
/// kube-controller-manager's and kube-scheduler's leader election, client-go's with the
/// components' defaults (`--leader-elect-lease-duration=15s`, `--leader-elect-renew-deadline=10s`,
/// `--leader-elect-retry-period=2s`: component-base `RecommendedDefaultLeaderElectionConfiguration`):
/// a candidate takes a Lease not renewed for its duration at its next retry, and a leader that
/// could not renew within the deadline exits (`OnStoppedLeading`: "leaderelection lost").
const LEASE_DURATION: u64 = 15;
const RENEW_DEADLINE: u64 = 10;
const RETRY_PERIOD: u64 = 2;
/// [`Invariant::ControllersDown`]: how long a control plane whose API serves may go without a
/// kube-controller-manager or kube-scheduler leading (an election after a leader's restart takes
/// at most a Lease's duration and a retry).
const LEADERLESS_GRACE: u64 = 120;

/// What a version does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// A flag the binary refuses: it exits at once, every start.
    RefusedFlag,
    /// It runs, and its health URL never answers (the chart moved it).
    HealthMoved,
    /// A certificate with the wrong key: `credentials::check` refuses it, nothing is written.
    WrongKey,
    /// etcd: a serving certificate without `127.0.0.1`; kube-apiserver: one without the
    /// Service IP. Written, the component would be healthy and its clients unable to verify it;
    /// `credentials::check` refuses it (a name its clients dial).
    ServingNameDropped,
    /// kube-apiserver: the client CA replaced without the old one in a bundle. Written, every
    /// client certificate of the old CA (kubelets, controllers, admins) would be refused;
    /// `credentials::check` refuses it (the node's kubeconfigs hold such certificates).
    CaWithoutBundle,
    /// etcd: `--listen-client-urls` without `127.0.0.1`.
    ListenAddressMoved,
    /// kube-apiserver: the service-account key rotated without the old public key: every token
    /// (the anchors' included) gets 401.
    ServiceAccountKeyDropped,
    /// kube-controller-manager, kube-scheduler: a kubeconfig whose client certificate a CA signed
    /// that the API servers do not trust. The component runs and its health URL answers (it is
    /// served to anyone: `--authorization-always-allow-paths`); every API request gets 401, so it
    /// never leads.
    ClientCertUntrusted,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::RefusedFlag,
        Fault::HealthMoved,
        Fault::WrongKey,
        Fault::ServingNameDropped,
        Fault::CaWithoutBundle,
        Fault::ListenAddressMoved,
        Fault::ServiceAccountKeyDropped,
        Fault::ClientCertUntrusted,
    ];

    pub fn applies_to(self, component: usize) -> bool {
        match self {
            Fault::RefusedFlag | Fault::HealthMoved | Fault::WrongKey => true,
            // No client verifies kube-controller-manager's or kube-scheduler's serving
            // certificate (their health URLs are asked without a CA: `healthCAFile: ""`).
            Fault::ServingNameDropped => component == ETCD || component == APISERVER,
            Fault::ListenAddressMoved => component == ETCD,
            Fault::CaWithoutBundle | Fault::ServiceAccountKeyDropped => component == APISERVER,
            Fault::ClientCertUntrusted => component == CONTROLLER_MANAGER || component == SCHEDULER,
        }
    }
}

/// What the operator and the world do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `helm upgrade` with a new version of `component`, good or with `fault`; `minor_up`: a new
    /// minor version (of etcd: its cluster version is raised once every member runs it; of a
    /// Kubernetes component: the version skew policy speaks of it).
    Push {
        component: usize,
        fault: Option<Fault>,
        minor_up: bool,
    },
    /// `helm rollback`: the release goes back to the version before its current one.
    HelmRollback { component: usize },
    /// The power of `nodes` goes off for `down_for` seconds.
    PowerCut { nodes: Vec<usize>, down_for: u64 },
    /// `systemctl restart kubelet`.
    KubeletRestart { node: usize },
    /// The node is re-imaged (state dir, data dir and manifests gone) and boots again.
    Reimage { node: usize },
    /// The anchors' etcd client certificate expires: every member-list call fails its TLS
    /// handshake until the operator renews it `for_secs` later.
    ExpireAnchorEtcdCert { for_secs: u64 },
    /// etcd's database reaches its quota: the cluster raises its `NOSPACE` alarm, and every
    /// member's `/health` answers `ALARM NOSPACE` (etcd's `checkAlarms`) until the operator,
    /// having compacted and defragmented, runs `etcdctl alarm disarm` `for_secs` later. Reads
    /// go on, so each kube-apiserver stays ready.
    EtcdAlarm { for_secs: u64 },
    /// The node leaves the control plane: its label goes, neither chart's DaemonSet selects it,
    /// and its anchor pods are deleted (their preStop hooks run where the anchors run).
    Deselect { node: usize },
    /// `kubectl label node … node-role.kubernetes.io/control-plane=`: the charts' DaemonSets
    /// select the node (again), if its Node object exists.
    Select { node: usize },
    /// `kubectl delete node`: the Node object goes, and its labels with it. A kubelet that starts
    /// again registers a new one, with none of the labels the operator set (NodeRestriction keeps
    /// a kubelet from setting `node-role.kubernetes.io/*`).
    DeleteNode { node: usize },
    /// The node's power goes off for `down_for` seconds, and at its boot etcd's data disk
    /// (`/var/lib/etcd`, a disk of its own) is mounted `mount_after` seconds after the kubelet
    /// starts (a cloud volume attached late, a `nofail` mount, a LUKS unlock).
    LateDataDisk {
        node: usize,
        down_for: u64,
        mount_after: u64,
    },
    /// The node's kube-apiserver stops answering for `for_secs` seconds (SIGSTOP, then SIGCONT,
    /// as the bed's lifecycle run does to a hung server): connections open, no answer comes.
    HangApiServer { node: usize, for_secs: u64 },
    /// `kubectl drain`, then a reboot (by hand, or as kured or a machine rollout runs them): the node is
    /// cordoned, its evictable pods are evicted (the anchors are DaemonSet pods, which a drain
    /// skips, and a static pod's mirror cannot be evicted: only the drain guards, through the
    /// Eviction API and their budget, which may refuse; kubectl retries every 5 s until every
    /// one is gone), and its power goes off for `down_for` seconds. It is uncordoned once its
    /// kubelet posts its status again (kured does so once the node is back).
    Drain { node: usize, down_for: u64 },
    /// The power of the node holding `component`'s rollout turn goes off for `down_for` seconds
    /// (nothing happens when no node holds it).
    CutTurnHolder { component: usize, down_for: u64 },
    /// The operator deletes the control plane's rollout Lease, taking its silent holder for gone
    /// (the anchors' `/readyz` advises it for a holder gone for good).
    DeleteLease,
    /// The operator runs `verb` for `component` on `node`.
    Verb { node: usize, component: usize, verb: Verb },
    /// `node`'s etcd disk becomes too slow for a learner to catch up (a throttled cloud volume
    /// behind a leader's snapshot): from now on a learner there never does.
    SlowDisk { node: usize },
    /// The network between `nodes` and the other nodes fails for `for_secs` seconds (a switch
    /// port, a top-of-rack switch, a firewall rule pushed by mistake): `nodes` reach each other,
    /// the rest reach each other, every node reaches itself (loopback). Nothing stops: each side
    /// goes on with what it can reach. `nodes` are the ones the world took away.
    Partition { nodes: Vec<usize>, for_secs: u64 },
    /// The node holding `component`'s rollout turn is cut off from the others for `for_secs`
    /// seconds ([`Op::Partition`]; nothing happens when no node holds it).
    CutOffTurnHolder { component: usize, for_secs: u64 },
    /// `kube-anchor pause --component` on `node`, and `kube-anchor resume` `for_secs` later (once
    /// the node is up to run it): meanwhile its anchor of `component` writes, repairs, rolls back,
    /// joins and removes nothing (`Ledger::paused`).
    Pause {
        node: usize,
        component: usize,
        for_secs: u64,
    },
}

/// A one-shot verb an operator runs on a node (over ssh, as runbooks fan them out over the
/// control plane), carried out as its command does in `commands.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// `kube-anchor rollback`: back to last-known-good; the version the node is on is recorded
    /// as bad.
    Rollback,
    /// `kube-anchor rollback --to`: back to the component's release `releases_back` releases
    /// before its current one, if that version passed a trial on this node; it becomes
    /// last-known-good.
    RollbackTo { releases_back: usize },
    /// `kube-anchor retry`: every bad version forgotten, so the anchor tries it again.
    Retry,
    /// `kube-anchor apply` with the inputs mounted on the node: the version they name written at
    /// once (etcd's join step first, the credentials checked, a decommission marker lifted), with
    /// no turn and no trial of its own.
    Apply,
    /// `kube-anchor bootstrap --join` from what the releases hold (`helm get manifest`), as the
    /// README's runbook replaces a node: component by component in boot order, etcd's join step
    /// until it has a record (never a new cluster), the release's version written with no turn
    /// and no trial, a learner waited for until promoted, each component's health waited for
    /// (`--wait-timeout`, 5 minutes) before the next. The component a verb names is ignored.
    BootstrapJoin,
    /// `kube-anchor remove`: the manifest and the credentials go (`Engine::remove`); the ledger
    /// forgets them, and with no file left its history; its version and last-known-good stay. A
    /// running anchor sees the files go and writes its version again at once.
    Remove,
}

/// How the anchor DaemonSets are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonSets {
    /// One per node and component, as `examples/bootstrap/cluster.sh` renders the charts
    /// (`perNode` credentials): a template change replaces every node's pod at once.
    PerNode,
    /// One per component (the charts without `perNode`): one node's pod at a time, the next once
    /// the new one is Ready.
    OnePerComponent,
}

/// The machines and the anchors' settings a run has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// How long a boot takes: the kubelet starts this many seconds (at least, at most) after the
    /// power returns.
    pub boot: (u64, u64),
    /// Each component's `trialPeriod` (seconds) and `crashLoopThreshold`.
    pub trial_period: [u64; 4],
    pub crash_loop_threshold: [u32; 4],
    /// Every node runs `kube-anchor kubelet-pre-start` before its kubelet starts (the drop-in
    /// `kubelet-pre-start --install` writes; `cluster.sh node` installs it).
    pub kubelet_pre_start: bool,
    /// The etcd and kube-apiserver charts' `anchor.drainGuard` (on by default): each anchor
    /// keeps a guard pod on its node and the budget's `minAvailable` (`drain_guard::decide`).
    pub drain_guard: bool,
}

impl Setup {
    /// Servers (a boot takes 20–120 s) and the charts' defaults (charts/*/values.yaml:
    /// `trialPeriod: 5m`, `crashLoopThreshold: 3`).
    pub const SERVERS: Setup = Setup {
        boot: (20, 120),
        trial_period: [300, 300, 300, 300],
        crash_loop_threshold: [3, 3, 3, 3],
        kubelet_pre_start: true,
        drain_guard: true,
    };

    /// The lifecycle run's bed (`tests/selfhosted/lifecycle.rs`): process nodes, whose boot is
    /// the kubelet started again at once, and its values (etcd `trialPeriod: 60s`, kube-apiserver
    /// `trialPeriod: 150s` and `crashLoopThreshold: 2`: `SHORT_TRIALS`, tests/support/selfhosted.rs).
    pub const LIFECYCLE_BED: Setup = Setup {
        boot: (0, 0),
        trial_period: [60, 150, 25, 25],
        crash_loop_threshold: [3, 2, 3, 3],
        kubelet_pre_start: true,
        drain_guard: true,
    };
}

/// How long a settled world must stay settled to count, as the bed's lifecycle run has it
/// (`STABLE`, tests/selfhosted/lifecycle.rs).
pub const STABLE: u64 = 15;

/// A run: how many nodes, and what happens when (seconds from the start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    pub nodes: usize,
    pub daemonsets: DaemonSets,
    pub ops: Vec<(u64, Op)>,
}

impl Scenario {
    /// When the world is checked for the last time.
    pub fn end(&self) -> u64 {
        self.ops.iter().map(|(at, op)| at + op_length(op)).max().unwrap_or(0) + SETTLE
    }
}

fn op_length(op: &Op) -> u64 {
    match op {
        Op::PowerCut { down_for, .. } => *down_for,
        Op::LateDataDisk {
            down_for, mount_after, ..
        } => down_for + mount_after,
        Op::HangApiServer { for_secs, .. }
        | Op::Partition { for_secs, .. }
        | Op::CutOffTurnHolder { for_secs, .. }
        | Op::Pause { for_secs, .. }
        | Op::EtcdAlarm { for_secs } => *for_secs,
        Op::Drain { down_for, .. } | Op::CutTurnHolder { down_for, .. } => *down_for,
        _ => 0,
    }
}

/// The invariants (design.md, "The fleet simulation").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Invariant {
    /// etcd lost quorum while the world alone had left it one.
    QuorumLost,
    /// Three or more nodes: two API servers the world left up did not serve clients at once, or
    /// none did while the world had taken at most a minority down.
    ApiServersDown,
    /// A version with a fault was written on a second node.
    BadVersionSpread,
    /// A version without a fault was rolled back.
    GoodRolledBack,
    /// A version the skew policies forbid was written: etcd below the cluster's version (etcd
    /// cannot be downgraded across a minor version), or a Kubernetes component against the
    /// version skew policy (kubernetes.io, "Version Skew Policy": API servers within one minor
    /// of each other; kube-controller-manager and kube-scheduler not newer than any API server,
    /// at most one minor older than the newest).
    SkewWritten,
    /// Two etcd clusters ran at once.
    TwoClusters,
    /// After the world was left alone, a node did not run a good version of every component,
    /// no API server served clients, or a rollout turn stayed held.
    NotRecovered,
    /// A preStop hook removed a component under the quorum guard while fewer than a majority of
    /// its copies (the nodes with an anchor pod of it, this one included) ran it Ready elsewhere.
    RemovedBelowQuorum,
    /// A preStop hook removed kube-controller-manager or kube-scheduler (the last-copy guard)
    /// while no other copy ran it Ready.
    RemovedLastCopy,
    /// An anchor removed an etcd member whose data was on its node's data disk, on a node the
    /// charts still select: no proof that the member was gone.
    RemovedWithoutProof,
    /// An eviction-based drain took a node down that etcd or the API servers could not lose:
    /// three members or more and fewer than a majority of them healthy on the other nodes, or
    /// two selected nodes or more and no other API server serving clients. (Two members cannot
    /// lose one, drained or not, as `QuorumLost` has it.)
    DrainedBelowQuorum,
    /// Three nodes or more: for [`LEADERLESS_GRACE`] an API server served clients and no
    /// kube-controller-manager (no DaemonSet, node lifecycle or any other controller) or no
    /// kube-scheduler (no pod bound) led.
    ControllersDown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub at: u64,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at {}s: {}", self.invariant, self.at, self.detail)
    }
}

/// What a run shows.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The first violation of each invariant.
    pub violations: BTreeMap<Invariant, Violation>,
    pub steps: u64,
    pub writes: u64,
    /// When a version was last written (the second): when the run's rollouts settled.
    pub last_write_at: Option<u64>,
    /// When a version was first written (the second).
    pub first_write_at: Option<u64>,
    /// For each operation (by its index in time order) after which the world settled before
    /// the next one: seconds from the operation to the start of [`STABLE`] settled seconds
    /// ([`World::settled`]).
    pub settled_after: BTreeMap<usize, u64>,
    pub rollbacks: u64,
    /// When each of them was (the second).
    pub rolled_back_at: Vec<u64>,
    pub promotions: u64,
    /// How the preStop hooks ended, by the decision they reported (`keep`, `held`, `remove`,
    /// `failed`, `timed-out`, `aborted`).
    pub hook_exits: BTreeMap<&'static str, u64>,
    /// How the etcd anchors' join steps ended, by decision (`keep`, `add-learner`, `promote`, …).
    pub join_ends: BTreeMap<&'static str, u64>,
    /// How the operator's one-shot verbs ended (`rolled-back`, `retried`, `applied`, `refused`), and
    /// what the kubelet's pre-start step did with a version on trial (`kubelet-pre-start-interrupted`,
    /// `-marked-bad`, `-kept`: an API server answered its kubelet).
    pub verbs: BTreeMap<&'static str, u64>,
    /// The main etcd cluster's members when the run ended.
    pub members: usize,
    /// How long each drain waited for its guards' evictions, in the order they went through.
    pub drain_waits: Vec<u64>,
}

impl Report {
    pub fn invariants(&self) -> BTreeSet<Invariant> {
        self.violations.keys().copied().collect()
    }
}

#[derive(Debug, Clone)]
struct VersionSpec {
    id: String,
    fault: Option<Fault>,
    minor: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Created; its process starts at `at`.
    Starting {
        at: u64,
    },
    Running {
        since: u64,
    },
    /// Exited; the kubelet starts it again at `restart_at`.
    Exited {
        restart_at: u64,
    },
    /// The kubelet stops it for a replacement (grace period) until `until`.
    Stopping {
        until: u64,
    },
}

#[derive(Debug, Clone)]
struct Container {
    version: usize,
    sandbox: u64,
    created_at: u64,
    attempt: u32,
    phase: Phase,
    backoff: u64,
    /// Created before the data disk was mounted: its hostPath bind mount shows the empty mount
    /// point on the root file system for its whole life (the kubelet's hostPath mounts are
    /// private: a mount made beneath one later does not reach the container).
    on_root: bool,
    /// Its process is stopped from `.0` until `.1`: it holds its port and answers nothing.
    stopped: Option<(u64, u64)>,
    /// kube-apiserver: this process has reached its etcd, and since when it has lost it.
    reached_etcd: bool,
    etcd_lost_since: Option<u64>,
}

impl Container {
    /// Since when its process has been stopped, while it still is at `now`.
    fn stopped_since(&self, now: u64) -> Option<u64> {
        self.stopped.filter(|(_, until)| now < *until).map(|(from, _)| from)
    }

    fn running(&self) -> bool {
        matches!(self.phase, Phase::Running { .. } | Phase::Stopping { .. })
    }
}

#[derive(Debug, Clone, Default)]
struct StaticPod {
    manifest: Option<usize>,
    container: Option<Container>,
    /// The mirror pod as the kubelet last posted it: version, Ready, restarts.
    mirror: Option<(usize, bool, u32)>,
    /// When the replacement may start once the previous one has stopped.
    start_gap_until: u64,
}

/// Where a node stands in the main etcd cluster's member list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listed {
    No,
    /// Added as a learner (since when it has run with the cluster's data, for its catch-up).
    Learner {
        running_since: Option<u64>,
    },
    Voter,
}

/// An etcd data dir's member: the cluster and the member ID it was created as (etcd keeps both
/// in its WAL and its backend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Data {
    cluster: u64,
    member: u64,
}

impl Data {
    /// Member `member`'s data in the main cluster.
    fn main(member: u64) -> Self {
        Data {
            cluster: MAIN_CLUSTER,
            member,
        }
    }
}

/// A node's anchor pod of one component, as the API holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnchorPodObject {
    Absent,
    /// Created by the DaemonSet controller from the template of release version `revision`, not
    /// yet bound to its node: DaemonSet pods are bound by kube-scheduler (their node affinity
    /// names the node; `ScheduleDaemonSetPods`, GA in 1.17).
    Pending {
        revision: usize,
        serial: u64,
    },
    /// Created from the template of release version `revision`: its inputs are pinned to it
    /// (`--expect-inputs`).
    Bound {
        revision: usize,
        serial: u64,
    },
    /// Deleted: listed until its preStop hook has ended and its kubelet has seen the deletion.
    Terminating {
        serial: u64,
    },
}

struct AnchorProc {
    /// The release version its pod's template pins the inputs to.
    expects: usize,
    /// The inputs' version this process last took (matching `expects`).
    accepted: Option<usize>,
    /// Started before the data disk was mounted (see [`Container::on_root`]): the chart mounts
    /// the host's `/var/lib/etcd` with no mount propagation.
    on_root: bool,
    machine: Anchor,
    next_wake: u64,
    /// The inputs' version this process last synced.
    synced_inputs: Option<usize>,
    next_sync: u64,
    /// Why the last sync wrote nothing (a refusal).
    input_error: Option<String>,
    /// The etcd join is not finished: the next step comes after [`MEMBERSHIP_RETRY`].
    membership_pending: bool,
    /// What its `/readyz` last said (the machine's [`Effect::Ready`]).
    ready: bool,
    /// When it looks at its drain guard next (`anchor.rs`, `GUARD_PERIOD`).
    next_guard: u64,
}

/// One anchor pod's preStop hook at work: the real [`Hook`] and [`Looks`], performed here.
struct HookRun {
    /// Its anchor's view of the data dir (see [`AnchorProc::on_root`]).
    on_root: bool,
    hook: Hook,
    started: u64,
    /// The action being performed, and when what it gives is observed.
    action: Action,
    due: u64,
    looks: Option<Looks>,
}

struct Node {
    name: String,
    powered: bool,
    /// The side of a partition it is on, and until when ([`Op::Partition`]).
    partition: Option<(u64, u64)>,
    /// Both charts' DaemonSets select it.
    selected: bool,
    /// In the main etcd cluster's member list, under `member_id`; `published`: the member has
    /// started and published its name and client URLs (etcd keeps them after it stops).
    listed: Listed,
    member_id: u64,
    published: bool,
    hooks: [Option<HookRun>; 4],
    /// When the kubelet (re)starts; `None` while it runs or the node is off.
    kubelet_at: Option<u64>,
    kubelet_up: bool,
    kubelet_since: u64,
    /// The kubelet has reached an API server since it started (all its pod sources are ready).
    sources_ready: bool,
    pods: [StaticPod; 4],
    anchor_pods: [AnchorPodObject; 4],
    anchors: [Option<AnchorProc>; 4],
    /// When the kubelet starts each anchor pod's container.
    anchor_start_at: [Option<u64>; 4],
    /// When its kubelet last posted its status to an API server, and whether each anchor pod
    /// was Ready then: the API shows it so until the node lifecycle controller, hearing nothing
    /// for its grace period, marks the node's pods not Ready (`marked_unready`).
    posted_at: u64,
    anchors_ready_posted: [bool; 4],
    marked_unready: bool,
    /// Its drain guard of each component exists, and was Ready when its kubelet last posted
    /// (the guard's readiness probe is the static pod's: [`World::ready`]).
    guards: [bool; 4],
    guards_ready_posted: [bool; 4],
    /// `spec.unschedulable`: a drain cordoned it.
    cordoned: bool,
    ledgers: [Ledger; 4],
    /// The inputs mounted into each anchor (a ConfigMap volume), and an update on its way.
    inputs: [Option<usize>; 4],
    inputs_due: [Option<(usize, u64)>; 4],
    /// The member data on etcd's data disk; `None`: none.
    disk_data: Option<Data>,
    /// What etcd wrote into the mount point on the root file system while the disk was not
    /// mounted (hidden once it is).
    root_data: Option<Data>,
    /// When the data disk is mounted (at or before the boot but after a late mount).
    disk_mounted_at: u64,
    /// The etcd anchor's membership record (`<state-dir>/v1/etcd.membership.json`).
    record: Option<Record>,
    world_down_until: u64,
    /// A learner here never catches up ([`Op::SlowDisk`]).
    slow_disk: bool,
    /// Its Node object exists, and since when it has not ([`Op::DeleteNode`]).
    registered: bool,
    deleted_at: u64,
    /// `kube-anchor bootstrap --join` at work on it ([`Verb::BootstrapJoin`]).
    bootstrap: Option<BootstrapRun>,
    /// When the operator runs `kube-anchor resume` for each component ([`Op::Pause`]).
    resume_at: [Option<u64>; 4],
}

/// `kube-anchor bootstrap --join` on a node, one component at a time in boot order.
#[derive(Debug, Clone, Copy)]
struct BootstrapRun {
    /// The component it is at (`COMPONENTS` is the boot order).
    component: usize,
    /// What it waits for, and since when.
    wait: BootWait,
    since: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BootWait {
    /// etcd's membership record (the join step taken again each second).
    Record,
    /// The learner promoted (the join step promotes it once it has caught up).
    Voter,
    /// The component's health endpoint.
    Healthy,
}

impl Node {
    /// Its kubelet posts its status at `now`: its anchor pods' readiness as they are.
    fn post_status(&mut self, now: u64) {
        self.posted_at = now;
        self.marked_unready = false;
        self.anchors_ready_posted = std::array::from_fn(|c| self.anchors[c].as_ref().is_some_and(|p| p.ready));
    }
}

/// The leader election of kube-controller-manager or kube-scheduler (a Lease in kube-system).
#[derive(Debug, Clone, Copy)]
struct Election {
    /// The process holding the Lease: its node and its container (sandbox, attempt). A restarted
    /// container is another process, with an identity of its own.
    holder: Option<(usize, u64, u32)>,
    renewed: u64,
    /// Since when the holder has led (its controllers started then).
    since: u64,
    /// Since when an API server has served clients while none led ([`Invariant::ControllersDown`]).
    leaderless_since: Option<u64>,
}

pub struct World {
    setup: Setup,
    daemonsets: DaemonSets,
    rng: Rng,
    now: u64,
    nodes: Vec<Node>,
    versions: Vec<VersionSpec>,
    /// Each component's release history (version indices; the last is current).
    releases: [Vec<usize>; 4],
    /// The control plane's rollout Lease (`kubeapi::RolloutLease`), as the API holds it.
    turn_lease: LeaseView,
    /// kube-controller-manager's and kube-scheduler's ([`World::election`]).
    elections: [Election; 2],
    cluster_version: u32,
    next_cluster_id: u64,
    next_member_id: u64,
    next_sandbox: u64,
    next_pod_serial: u64,
    /// The last side of a partition handed out ([`Op::Partition`]).
    next_side: u64,
    /// Until when the anchors' etcd client certificate is expired ([`Op::ExpireAnchorEtcdCert`]).
    anchor_etcd_cert_expired_until: u64,
    /// Until when the etcd cluster's `NOSPACE` alarm is raised ([`Op::EtcdAlarm`]).
    alarm_until: u64,
    /// The nodes each faulty version was written on.
    written_on: BTreeMap<usize, BTreeSet<usize>>,
    /// Each component's guard budget's `minAvailable` (`None`: not set yet).
    min_available: [Option<i32>; 4],
    /// Drains waiting for their guards' evictions: the node, how long its reboot takes, and
    /// when the drain began.
    drains: Vec<(usize, u64, u64)>,
    base: Instant,
    report: Report,
}

/// The membership record of node `i`'s member in the fleet as it was created.
fn voter_record(i: usize, id: u64) -> Record {
    Record {
        name: format!("cp-{}", i + 1),
        peer_url: format!("https://cp-{}:2380", i + 1),
        member_id: Some(id.to_string()),
        phase: membership::Phase::Voter,
        initial_cluster: INITIAL_CLUSTER.into(),
        initial_cluster_state: if i == 0 { "new" } else { "existing" }.into(),
        last_join: None,
        last_leave: None,
        leave_pending: None,
    }
}

/// A join decision's name in [`Report::join_ends`].
fn join_name(join: &membership::Join) -> &'static str {
    use membership::Join;
    match join {
        Join::Bootstrap => "bootstrap",
        Join::AddLearner => "add-learner",
        Join::Resume { .. } => "resume",
        Join::Promote { .. } => "promote",
        Join::RecordVoter { .. } => "record-voter",
        Join::Adopt { .. } => "adopt",
        Join::Rejoin { .. } => "rejoin",
        Join::Keep => "keep",
        Join::Wait(_) => "wait",
        Join::AwaitRejoinConsent { .. } => "await-rejoin-consent",
    }
}

fn wall(now: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + now)
}

impl World {
    pub fn new(nodes: usize, seed: u64) -> Self {
        let mut versions = Vec::new();
        for (component, name) in COMPONENTS.iter().enumerate() {
            debug_assert_eq!(component, versions.len());
            versions.push(VersionSpec {
                id: format!("{name}-v000"),
                fault: None,
                minor: FIRST_MINOR[component],
            });
        }
        let nodes = (0..nodes)
            .map(|i| {
                let mut ledgers = COMPONENTS.map(Ledger::new);
                for (c, ledger) in ledgers.iter_mut().enumerate() {
                    // Written, then passed its trial, as `bootstrap` leaves a node.
                    ledger.content_hash = Some(versions[c].id.clone());
                    history::applied(&mut ledger.history, &versions[c].id, "0s");
                    ledger.mark_good(&versions[c].id, "0s");
                }
                let pod = |c: usize| StaticPod {
                    manifest: Some(c),
                    container: Some(Container {
                        version: c,
                        sandbox: (i * COMPONENTS.len() + c) as u64,
                        created_at: 0,
                        attempt: 0,
                        phase: Phase::Running { since: 0 },
                        backoff: BACKOFF_START,
                        on_root: false,
                        stopped: None,
                        reached_etcd: true,
                        etcd_lost_since: None,
                    }),
                    mirror: Some((c, true, 0)),
                    start_gap_until: 0,
                };
                Node {
                    name: format!("cp-{}", i + 1),
                    powered: true,
                    partition: None,
                    selected: true,
                    listed: Listed::Voter,
                    member_id: 1000 + i as u64,
                    published: true,
                    hooks: std::array::from_fn(|_| None),
                    kubelet_at: None,
                    kubelet_up: true,
                    kubelet_since: 0,
                    sources_ready: true,
                    pods: std::array::from_fn(pod),
                    anchor_pods: std::array::from_fn(|c| AnchorPodObject::Bound {
                        revision: c,
                        serial: (i * COMPONENTS.len() + c) as u64,
                    }),
                    anchors: std::array::from_fn(|_| None),
                    anchor_start_at: [Some(0); 4],
                    posted_at: 0,
                    anchors_ready_posted: [false; 4],
                    marked_unready: false,
                    guards: [false; 4],
                    guards_ready_posted: [false; 4],
                    cordoned: false,
                    ledgers,
                    inputs: std::array::from_fn(Some),
                    inputs_due: [None; 4],
                    disk_data: Some(Data::main(1000 + i as u64)),
                    root_data: None,
                    disk_mounted_at: 0,
                    record: Some(voter_record(i, 1000 + i as u64)),
                    world_down_until: 0,
                    slow_disk: false,
                    registered: true,
                    deleted_at: 0,
                    bootstrap: None,
                    resume_at: [None; 4],
                }
            })
            .collect::<Vec<_>>();
        let sandboxes = (nodes.len() * COMPONENTS.len()) as u64;
        World {
            setup: Setup::SERVERS,
            daemonsets: DaemonSets::PerNode,
            rng: Rng::new(seed),
            now: 0,
            nodes,
            versions,
            releases: std::array::from_fn(|c| vec![c]),
            turn_lease: LeaseView::default(),
            // cp-1's processes lead, as the first node's do after a bootstrap.
            elections: [CONTROLLER_MANAGER, SCHEDULER].map(|c| Election {
                holder: Some((0, c as u64, 0)),
                renewed: 0,
                since: 0,
                leaderless_since: None,
            }),
            cluster_version: 5,
            next_cluster_id: MAIN_CLUSTER + 1,
            next_member_id: 1000 + sandboxes,
            next_sandbox: sandboxes,
            next_pod_serial: sandboxes,
            next_side: 0,
            anchor_etcd_cert_expired_until: 0,
            alarm_until: 0,
            written_on: BTreeMap::new(),
            min_available: [None; 4],
            drains: Vec::new(),
            base: Instant::now(),
            report: Report::default(),
        }
    }

    /// Runs `scenario` to its end with [`Setup::SERVERS`].
    pub fn run(scenario: &Scenario, seed: u64) -> Report {
        Self::run_on(scenario, seed, Setup::SERVERS)
    }

    /// [`World::run`] with `setup`.
    pub fn run_on(scenario: &Scenario, seed: u64, setup: Setup) -> Report {
        let mut world = World::new(scenario.nodes, seed);
        world.setup = setup;
        world.daemonsets = scenario.daemonsets;
        let end = scenario.end();
        let mut ops = scenario.ops.clone();
        ops.sort_by_key(|(at, _)| *at);
        let mut next = 0;
        // The last operation applied (its index and second) until the world settles after it,
        // and since when the world has been settled.
        let mut unsettled: Option<(usize, u64)> = None;
        let mut settled_since: Option<u64> = None;
        while world.now <= end {
            while next < ops.len() && ops[next].0 <= world.now {
                world.operate(&ops[next].1);
                unsettled = Some((next, world.now));
                settled_since = None;
                next += 1;
            }
            world.tick();
            world.check();
            // Looked at only while an operation waits to have settled: the check reads every
            // node and component.
            if let Some((i, applied)) = unsettled {
                if world.settled() {
                    let since = *settled_since.get_or_insert(world.now);
                    if world.now >= since + STABLE {
                        world.report.settled_after.insert(i, since - applied);
                        unsettled = None;
                    }
                } else {
                    settled_since = None;
                }
            }
            world.now += 1;
        }
        world.check_recovered();
        world.report.steps = end + 1;
        world.report.members = world.members();
        world.report
    }

    /// How long the next boot takes.
    fn boot_time(&mut self) -> u64 {
        let (lo, hi) = self.setup.boot;
        self.secs(lo, hi)
    }

    /// Settled as the bed's lifecycle run checks it (`not_settled`, tests/selfhosted/lifecycle.rs):
    /// every node up; every etcd member running with quorum; no anchor pod terminating; on each
    /// selected node each component's static pod Running and Ready with the version its ledger
    /// says was written (but where the release holds a bad version the node has no good one to
    /// fall back on); and every anchor pod of the current template and Ready, but for a component
    /// whose release holds a bad version or that a node records a bad version of (held back by
    /// design).
    pub fn settled(&self) -> bool {
        let n = self.nodes.len();
        if self.nodes.iter().any(|node| !node.kubelet_up) || self.members_running(MAIN_CLUSTER) != self.members() {
            return false;
        }
        if self.nodes.iter().any(|node| {
            node.anchor_pods
                .iter()
                .any(|p| matches!(p, AnchorPodObject::Terminating { .. }))
        }) {
            return false;
        }
        for c in 0..COMPONENTS.len() {
            let release = *self.releases[c].last().expect("a release");
            let release_bad = self.versions[release].fault.is_some();
            for m in (0..n).filter(|&m| self.nodes[m].selected) {
                let node = &self.nodes[m];
                let nothing_good = release_bad && node.ledgers[c].last_known_good.is_none();
                let runs = node.pods[c]
                    .container
                    .as_ref()
                    .filter(|ct| matches!(ct.phase, Phase::Running { .. }));
                if (runs.is_none() || !self.ready(m, c)) && !nothing_good {
                    return false;
                }
                let running = runs.map(|ct| self.versions[ct.version].id.as_str());
                if running.is_some() && running != node.ledgers[c].content_hash.as_deref() {
                    return false;
                }
            }
            let held_back = release_bad || self.nodes.iter().any(|node| !node.ledgers[c].bad.is_empty());
            if held_back {
                continue;
            }
            for node in self.nodes.iter().filter(|node| node.selected) {
                let current =
                    matches!(node.anchor_pods[c], AnchorPodObject::Bound { revision, .. } if revision == release);
                if !current || !node.anchors[c].as_ref().is_some_and(|p| p.ready) {
                    return false;
                }
            }
        }
        true
    }

    fn violate(&mut self, invariant: Invariant, detail: String) {
        let at = self.now;
        self.report
            .violations
            .entry(invariant)
            .or_insert(Violation { invariant, at, detail });
    }

    fn secs(&mut self, lo: u64, hi: u64) -> u64 {
        self.rng.uniform(lo as f64, hi as f64 + 1.0).floor() as u64
    }

    // ---- the operator and the faults -------------------------------------------------------

    fn operate(&mut self, op: &Op) {
        match op {
            Op::Push {
                component,
                fault,
                minor_up,
            } => {
                let c = *component;
                let current = &self.versions[*self.releases[c].last().expect("a release")];
                let minor = current.minor + u32::from(*minor_up);
                // Of one width: `rollback --to` finds a revision by a prefix of its id, as of a hash.
                let id = format!("{}-v{:03}", COMPONENTS[c], self.versions.len());
                self.versions.push(VersionSpec {
                    id,
                    fault: *fault,
                    minor,
                });
                self.releases[c].push(self.versions.len() - 1);
                self.publish_release(c);
            }
            Op::HelmRollback { component } => {
                let c = *component;
                if self.releases[c].len() >= 2 {
                    let previous = self.releases[c][self.releases[c].len() - 2];
                    self.releases[c].push(previous);
                    self.publish_release(c);
                }
            }
            Op::PowerCut { nodes, down_for } => {
                let count = self.nodes.len();
                for &n in nodes.iter().filter(|&&n| n < count) {
                    self.cut_power(n, *down_for);
                }
            }
            Op::KubeletRestart { node } => {
                if let Some(n) = self.nodes.get_mut(*node).filter(|n| n.powered && n.kubelet_up) {
                    n.kubelet_up = false;
                    n.kubelet_at = Some(self.now + 2);
                    self.abort_hooks(*node);
                }
            }
            Op::Reimage { node } => {
                if *node < self.nodes.len() {
                    let back = self.now + self.secs(300, 600);
                    self.power_off(*node, back);
                    let n = &mut self.nodes[*node];
                    n.ledgers = COMPONENTS.map(Ledger::new);
                    for pod in &mut n.pods {
                        pod.manifest = None;
                    }
                    n.disk_data = None;
                    n.root_data = None;
                    n.record = None;
                }
            }
            Op::LateDataDisk {
                node,
                down_for,
                mount_after,
            } => {
                if *node < self.nodes.len() {
                    let back = self.cut_power(*node, *down_for);
                    self.nodes[*node].disk_mounted_at = back + mount_after;
                }
            }
            Op::HangApiServer { node, for_secs } => {
                let now = self.now;
                if let Some(ct) = self
                    .nodes
                    .get_mut(*node)
                    .and_then(|n| n.pods[APISERVER].container.as_mut())
                    .filter(|ct| ct.running())
                {
                    ct.stopped = Some((now, now + for_secs));
                }
            }
            Op::Drain { node, down_for } => {
                let n = *node;
                if n >= self.nodes.len() || !self.nodes[n].powered || self.drains.iter().any(|d| d.0 == n) {
                    return;
                }
                self.nodes[n].cordoned = true;
                self.drains.push((n, *down_for, self.now));
                self.drain_step();
            }
            Op::CutTurnHolder { component, down_for } => {
                if let Some(n) = self.turn_holder(*component).filter(|&n| self.nodes[n].powered) {
                    self.cut_power(n, *down_for);
                }
            }
            Op::DeleteLease => self.turn_lease = LeaseView::default(),
            Op::Verb { node, component, verb } => {
                if self.nodes.get(*node).is_some_and(|n| n.powered) {
                    let outcome = self.verb(*node, *component, *verb);
                    *self.report.verbs.entry(outcome).or_default() += 1;
                }
            }
            Op::SlowDisk { node } => {
                if let Some(n) = self.nodes.get_mut(*node) {
                    n.slow_disk = true;
                }
            }
            Op::CutOffTurnHolder { component, for_secs } => {
                if let Some(n) = self.turn_holder(*component) {
                    self.cut_off(&[n], *for_secs);
                }
            }
            Op::Partition { nodes, for_secs } => self.cut_off(nodes, *for_secs),
            Op::Pause {
                node,
                component,
                for_secs,
            } => {
                let (now, at) = (self.now, self.stamp());
                if let Some(n) = self.nodes.get_mut(*node).filter(|n| n.powered) {
                    n.ledgers[*component].paused = Some(Paused {
                        at,
                        reason: "maintenance".into(),
                    });
                    n.resume_at[*component] = Some(now + for_secs);
                }
            }
            Op::ExpireAnchorEtcdCert { for_secs } => self.anchor_etcd_cert_expired_until = self.now + for_secs,
            Op::EtcdAlarm { for_secs } => self.alarm_until = self.now + for_secs,
            Op::Select { node } => {
                if let Some(n) = self.nodes.get_mut(*node).filter(|n| n.registered) {
                    n.selected = true;
                }
            }
            Op::DeleteNode { node } => {
                if let Some(n) = self.nodes.get_mut(*node).filter(|n| n.registered) {
                    n.registered = false;
                    n.selected = false;
                    n.deleted_at = self.now;
                }
            }
            Op::Deselect { node } => {
                let n = *node;
                if n >= self.nodes.len() || !self.nodes[n].selected {
                    return;
                }
                self.nodes[n].selected = false;
                // Neither DaemonSet selects it: the controller deletes its pods.
                for c in 0..COMPONENTS.len() {
                    self.delete_anchor_pod(n, c);
                }
            }
        }
    }

    /// `verb` on node `n` for component `c`, deciding as its command does (`commands::rollback`,
    /// `commands::retry`, `commands::apply`), and how it ended (`Report::verbs`); a refusal
    /// changes nothing. A running anchor sees the files it changed at once (it watches them) and
    /// the ledger at its next resync.
    fn verb(&mut self, n: usize, c: usize, verb: Verb) -> &'static str {
        let now = self.stamp();
        let ledger = &mut self.nodes[n].ledgers[c];
        let target = match verb {
            Verb::Apply => return self.apply(n, c),
            Verb::BootstrapJoin => return self.start_bootstrap(n),
            Verb::Remove => return self.remove(n, c),
            Verb::Retry => {
                return if ledger.forget_bad(None).is_empty() {
                    "refused"
                } else {
                    "retried"
                };
            }
            Verb::Rollback => ledger.last_known_good.clone(),
            Verb::RollbackTo { releases_back } => self.releases[c]
                .len()
                .checked_sub(1 + releases_back)
                .map(|i| &self.versions[self.releases[c][i]].id)
                .and_then(|id| history::find_passed(&ledger.history, id).ok())
                .map(|r| r.hash.clone()),
        };
        let Some(target) = target else {
            return "refused";
        };
        // A rollback that restarts an etcd member or a kube-apiserver is written only where the
        // cluster affords it (`commands::rollback` with the anchor container's config and
        // environment; no `--force`).
        let restarts = ledger.content_hash.as_ref().is_some_and(|on| *on != target);
        if restarts && self.verb_restart_short(n, c) {
            return "refused";
        }
        let ledger = &mut self.nodes[n].ledgers[c];
        let RollbackPlan { mark_bad, promote } = ledger.rollback_plan(&target);
        if let Some(bad) = mark_bad {
            ledger.mark_bad(BadVersion {
                hash: bad,
                at: now,
                reason: "rolled back by hand".into(),
            });
        }
        // `Engine::apply` writes nothing on a node that left the control plane.
        if ledger.decommissioned.is_some() {
            return "refused";
        }
        self.write(n, c, &target);
        if promote {
            self.promote_version(n, c, &target);
        }
        if let Some(anchor) = self.nodes[n].anchors[c].as_mut() {
            anchor.next_sync = self.now;
        }
        "rolled-back"
    }

    /// `kube-anchor apply` on node `n` for component `c` (`commands::apply`): etcd's join step (a
    /// process on the host: it sees the data disk once mounted), the credentials checked
    /// (`Engine::check_credentials`), the decommission marker lifted (`Engine::recommission`),
    /// and the version the mounted inputs name written (`Engine::apply`).
    fn apply(&mut self, n: usize, c: usize) -> &'static str {
        let Some(version) = self.nodes[n].inputs[c] else {
            return "refused";
        };
        if c == ETCD
            && !self
                .join_step(
                    n,
                    !self.disk_mounted(n),
                    Some(INITIAL_CLUSTER),
                    Founding::WhenNoneAnswers,
                )
                .0
        {
            return "refused";
        }
        if self.refusal(version).is_some() {
            return "refused";
        }
        let id = self.versions[version].id.clone();
        // A manifest that replaces the running one restarts the component: written only where
        // the cluster affords it (`commands::before_etcd_restart`,
        // `commands::before_api_server_restart`; the operator passes no `--force`).
        let restarts = self.nodes[n].ledgers[c]
            .content_hash
            .as_ref()
            .is_some_and(|on| *on != id);
        if restarts && self.verb_restart_short(n, c) {
            return "refused";
        }
        self.nodes[n].ledgers[c].decommissioned = None;
        self.write(n, c, &id);
        if let Some(anchor) = self.nodes[n].anchors[c].as_mut() {
            anchor.next_sync = self.now;
        }
        "applied"
    }

    /// `kube-anchor remove` on node `n` for component `c` (`commands::remove`): nothing recorded
    /// is refused (`--component` names a likely typo).
    fn remove(&mut self, n: usize, c: usize) -> &'static str {
        if self.nodes[n].ledgers[c].content_hash.is_none() && self.nodes[n].pods[c].manifest.is_none() {
            return "refused";
        }
        // Refused while an anchor of the component runs on the node (`Engine::running_anchor`,
        // its presence lock; no `--force`): its next sync would write the files back.
        if self.nodes[n].anchors[c].is_some() {
            return "refused";
        }
        // An etcd member leaves first (`commands::remove_member`, the operator passing the
        // anchor's config and no `--keep-member`): refused, nothing removed, where it may not.
        // The verb then waits for etcd to stop and removes the data dir.
        if c == ETCD
            && self.nodes[n].record.is_some()
            && let LeaveAnswer::Refused { .. } | LeaveAnswer::Failed(_) | LeaveAnswer::NoAnswer { .. } = self.leave(n)
        {
            return "refused";
        }
        let node = &mut self.nodes[n];
        node.pods[c].manifest = None;
        node.ledgers[c].history.clear();
        "removed"
    }

    /// `kube-anchor bootstrap --join` starts on node `n` (over ssh, on a node that is on).
    fn start_bootstrap(&mut self, n: usize) -> &'static str {
        if self.nodes[n].bootstrap.is_some() {
            return "refused";
        }
        self.nodes[n].bootstrap = Some(BootstrapRun {
            component: ETCD,
            wait: BootWait::Record,
            since: self.now,
        });
        "bootstrap-started"
    }

    /// One second of node `n`'s `bootstrap --join` (`bootstrap_node::run`): etcd's join step
    /// until recorded, then each component's current release written as `Engine::apply` does
    /// (credentials checked, a decommission marker lifted), a learner waited for until promoted,
    /// each health endpoint waited for; every wait bounded by `--wait-timeout`.
    fn bootstrap_step(&mut self, n: usize) {
        let Some(mut run) = self.nodes[n].bootstrap else {
            return;
        };
        let now = self.now;
        let c = run.component;
        let on_root = !self.disk_mounted(n);
        let done = match run.wait {
            BootWait::Record => {
                let (recorded, _) = if c == ETCD {
                    self.join_step(n, on_root, None, Founding::WhenNoneAnswers)
                } else {
                    (true, false)
                };
                if recorded {
                    let version = *self.releases[c].last().expect("a release");
                    if self.refusal(version).is_some() {
                        self.end_bootstrap(n, "bootstrap-failed");
                        return;
                    }
                    self.nodes[n].ledgers[c].decommissioned = None;
                    let id = self.versions[version].id.clone();
                    self.write(n, c, &id);
                    let learner = c == ETCD && matches!(self.nodes[n].listed, Listed::Learner { .. });
                    run.wait = if learner { BootWait::Voter } else { BootWait::Healthy };
                    run.since = now;
                }
                false
            }
            BootWait::Voter => {
                self.join_step(n, on_root, None, Founding::WhenNoneAnswers);
                if self.nodes[n].listed == Listed::Voter {
                    run.wait = BootWait::Healthy;
                    run.since = now;
                }
                false
            }
            BootWait::Healthy => self.health(n, c).is_ok(),
        };
        if done {
            if c + 1 == COMPONENTS.len() {
                self.end_bootstrap(n, "bootstrapped");
                return;
            }
            run = BootstrapRun {
                component: c + 1,
                wait: BootWait::Record,
                since: now,
            };
        } else if now >= run.since + BOOTSTRAP_WAIT {
            self.end_bootstrap(n, "bootstrap-failed");
            return;
        }
        self.nodes[n].bootstrap = Some(run);
    }

    fn end_bootstrap(&mut self, n: usize, outcome: &'static str) {
        self.nodes[n].bootstrap = None;
        *self.report.verbs.entry(outcome).or_default() += 1;
    }

    /// podgc, in the leading kube-controller-manager: the pods bound to a Node gone for its
    /// quarantine are force-deleted (mirror pods too). A kubelet that hears of it stops the
    /// anchor with the pod's own grace period, so its preStop hook runs (kubelet
    /// `calculateEffectiveGracePeriod`: a zero deletion grace falls back to the pod's).
    fn pod_gc(&mut self) {
        if !self.leads(CONTROLLER_MANAGER) {
            return;
        }
        for n in 0..self.nodes.len() {
            let node = &self.nodes[n];
            if node.registered || self.now < node.deleted_at + PODGC_QUARANTINE {
                continue;
            }
            for c in 0..COMPONENTS.len() {
                self.nodes[n].pods[c].mirror = None;
                if self.nodes[n].anchor_pods[c] == AnchorPodObject::Absent {
                    continue;
                }
                self.nodes[n].anchor_pods[c] = AnchorPodObject::Absent;
                self.nodes[n].anchor_start_at[c] = None;
                if self.nodes[n].kubelet_up && self.kubelet_reaches_api(n) {
                    self.stop_anchor(n, c);
                }
            }
        }
    }

    /// The DaemonSet controller deletes node `n`'s anchor pod of component `c`. A kubelet that
    /// hears of it from an API server runs the preStop hook of its anchor at once; one cut off
    /// from every API server does when it hears, and until then the anchor runs on (a pod on a
    /// node that is off has nothing to run it in).
    fn delete_anchor_pod(&mut self, n: usize, c: usize) {
        let serial = match self.nodes[n].anchor_pods[c] {
            AnchorPodObject::Bound { serial, .. } => serial,
            // No kubelet has it: gone at once.
            AnchorPodObject::Pending { .. } => {
                self.nodes[n].anchor_pods[c] = AnchorPodObject::Absent;
                return;
            }
            AnchorPodObject::Absent | AnchorPodObject::Terminating { .. } => return,
        };
        self.nodes[n].anchor_pods[c] = AnchorPodObject::Terminating { serial };
        self.nodes[n].anchor_start_at[c] = None;
        if self.nodes[n].kubelet_up && self.kubelet_reaches_api(n) {
            self.stop_anchor(n, c);
        }
    }

    /// The kubelet stops node `n`'s anchor of component `c`, whose pod was deleted: its preStop
    /// hook runs.
    fn stop_anchor(&mut self, n: usize, c: usize) {
        let Some(anchor) = self.nodes[n].anchors[c].take() else {
            return;
        };
        let member = if c == ETCD {
            MemberConfig::Configured
        } else {
            MemberConfig::NotConfigured
        };
        let limits = Limits {
            timeout: Duration::from_secs(PRESTOP_TIMEOUT),
        };
        let (hook, action) = Hook::new(limits, member, false)
            .paused(self.paused(n, c))
            .step(Observation::Began, Duration::ZERO);
        self.nodes[n].hooks[c] = Some(HookRun {
            on_root: anchor.on_root,
            hook,
            started: self.now,
            action,
            due: self.now,
            looks: None,
        });
    }

    /// The ConfigMap changes; each node's mounted copy follows within the kubelet's sync period
    /// and its ConfigMap cache TTL (a minute at most, kubelet defaults).
    fn publish_release(&mut self, c: usize) {
        let version = *self.releases[c].last().expect("a release");
        for i in 0..self.nodes.len() {
            let at = self.now + self.secs(1, 60);
            self.nodes[i].inputs_due[c] = Some((version, at));
        }
    }

    /// Node `n`'s power goes off for `down_for` seconds; returns when its kubelet starts again.
    fn cut_power(&mut self, n: usize, down_for: u64) -> u64 {
        let back = self.now + down_for + self.boot_time();
        self.power_off(n, back);
        back
    }

    /// `nodes` are cut off from the others for `for_secs` seconds, on a side of their own.
    fn cut_off(&mut self, nodes: &[usize], for_secs: u64) {
        self.next_side += 1;
        let (side, until) = (self.next_side, self.now + for_secs);
        let count = self.nodes.len();
        for &n in nodes.iter().filter(|&&n| n < count) {
            let node = &mut self.nodes[n];
            node.partition = Some((side, until));
            // Taken away by the world until a boot's grace after the network is back (its
            // kube-apiserver, which exited without etcd, waits out its back-off).
            node.world_down_until = node.world_down_until.max(until + BOOT_GRACE);
        }
    }

    /// The simulated clock as the ledger's and the join step's timestamps have it.
    fn stamp(&self) -> String {
        format!("{}s", self.now)
    }

    fn power_off(&mut self, n: usize, back: u64) {
        self.abort_hooks(n);
        if self.nodes[n].bootstrap.is_some() {
            self.end_bootstrap(n, "bootstrap-failed");
        }
        let now = self.now;
        let node = &mut self.nodes[n];
        node.powered = false;
        // What the API shows of it from now on: its pods as they were.
        node.post_status(now);
        node.kubelet_up = false;
        node.kubelet_at = Some(back);
        node.sources_ready = false;
        for pod in &mut node.pods {
            pod.container = None;
        }
        node.anchors = std::array::from_fn(|_| None);
        node.anchor_start_at = [None; 4];
        node.world_down_until = back + BOOT_GRACE;
    }

    // ---- the world, one second -------------------------------------------------------------

    fn tick(&mut self) {
        let now = self.now;
        for node in self.nodes.iter_mut().filter(|n| n.powered) {
            for c in 0..COMPONENTS.len() {
                if node.resume_at[c].is_some_and(|at| at <= now) {
                    node.resume_at[c] = None;
                    node.ledgers[c].paused = None;
                }
            }
        }
        for n in 0..self.nodes.len() {
            if let Some(at) = self.nodes[n].kubelet_at
                && at <= now
            {
                self.kubelet_pre_start(n);
                let node = &mut self.nodes[n];
                node.powered = true;
                node.kubelet_up = true;
                node.kubelet_at = None;
                node.kubelet_since = now;
                node.sources_ready = false;
                // A kubelet whose Node is gone registers a new one, with its own labels only.
                node.registered = true;
                // A new kubelet process knows only the pods its sources give it: the containers
                // of a pod no longer in its manifests are orphans, never restarted, and killed
                // only once all its sources are ready (`HandlePodCleanups`); a dead one leaves
                // the way free for the new pod of the same name (the new process's pod workers
                // never started the old one: `allowStaticPodStart`, pod_workers.go).
                for pod in &mut node.pods {
                    if let Some(ct) = &pod.container
                        && pod.manifest != Some(ct.version)
                        && !matches!(ct.phase, Phase::Running { .. })
                    {
                        pod.container = None;
                    }
                }
            }
        }
        for n in 0..self.nodes.len() {
            if !self.nodes[n].kubelet_up {
                continue;
            }
            let kubelet_reaches_api = self.kubelet_reaches_api(n);
            if kubelet_reaches_api {
                self.nodes[n].sources_ready = true;
            }
            // Its status and mirror pods go to its Node (a mirror pod names it as its owner);
            // with the Node gone, they are refused.
            let posts = kubelet_reaches_api && self.nodes[n].registered;
            for c in 0..COMPONENTS.len() {
                self.kubelet_pod(n, c);
                if posts {
                    let pod = &self.nodes[n].pods[c];
                    let mirror = pod
                        .container
                        .as_ref()
                        .map(|ct| (ct.version, self.ready(n, c), ct.attempt));
                    self.nodes[n].pods[c].mirror = mirror;
                }
                // The ConfigMap volume is refreshed by the kubelet, from the API.
                if let Some((version, at)) = self.nodes[n].inputs_due[c]
                    && at <= now
                    && kubelet_reaches_api
                {
                    self.nodes[n].inputs[c] = Some(version);
                    self.nodes[n].inputs_due[c] = None;
                }
            }
            // The anchors are DaemonSet pods: the kubelet starts one only once it has it from an
            // API server, and learns of a deletion from there too (a kubelet cut off from every
            // API server learns nothing: its pods run on, and a deleted one stays listed,
            // terminating, until it hears).
            for c in 0..COMPONENTS.len() {
                let node = &mut self.nodes[n];
                if !node.sources_ready {
                    continue;
                }
                match node.anchor_pods[c] {
                    AnchorPodObject::Terminating { .. } if !kubelet_reaches_api => {}
                    AnchorPodObject::Terminating { .. } if node.anchors[c].is_some() => self.stop_anchor(n, c),
                    // Its process went with the deletion (to its hook) or with the power.
                    AnchorPodObject::Terminating { .. } if node.hooks[c].is_none() => {
                        node.anchor_pods[c] = AnchorPodObject::Absent;
                    }
                    // Force-deleted (podgc) while this kubelet did not hear.
                    AnchorPodObject::Absent if kubelet_reaches_api && node.anchors[c].is_some() => {
                        self.stop_anchor(n, c)
                    }
                    AnchorPodObject::Bound { revision, .. } if node.anchors[c].is_none() => {
                        match node.anchor_start_at[c] {
                            None => {
                                let delay = 5 + (self.rng.next_u64() % 11);
                                self.nodes[n].anchor_start_at[c] = Some(now + delay);
                            }
                            Some(at) if at <= now => self.start_anchor(n, c, revision),
                            Some(_) => {}
                        }
                    }
                    _ => {}
                }
            }
            // Its node status, and with it its pods' readiness, as the API will show it: its
            // guards' as their readiness probe (the static pod's) answers. Back after a drain's
            // reboot, it is uncordoned (kured does it once the node is Ready).
            if posts {
                let ready = GUARDED.map(|c| self.ready(n, c));
                let waits = self.drains.iter().any(|d| d.0 == n);
                let node = &mut self.nodes[n];
                node.post_status(now);
                for (i, &c) in GUARDED.iter().enumerate() {
                    node.guards_ready_posted[c] = node.guards[c] && ready[i];
                }
                if node.cordoned && !waits {
                    node.cordoned = false;
                }
            }
        }
        // A guard's controller is its anchor pod: the garbage collector deletes it with the pod.
        for node in &mut self.nodes {
            for c in GUARDED {
                if node.anchor_pods[c] == AnchorPodObject::Absent {
                    node.guards[c] = false;
                }
            }
        }
        if now.is_multiple_of(5) && !self.drains.is_empty() {
            self.drain_step();
        }
        self.elect(CONTROLLER_MANAGER);
        self.elect(SCHEDULER);
        self.node_lifecycle_controller();
        self.pod_gc();
        self.schedule_pending_pods();
        self.daemonset_controller();
        self.raise_cluster_version();
        for n in 0..self.nodes.len() {
            for c in 0..COMPONENTS.len() {
                self.anchor(n, c);
                self.prestop(n, c);
            }
            if self.nodes[n].powered {
                self.bootstrap_step(n);
            }
        }
    }

    /// The container of node `n`'s anchor pod of component `c` starts: a new process, its
    /// machine empty, its ConfigMap volume as the API holds it now.
    fn start_anchor(&mut self, n: usize, c: usize, revision: usize) {
        let now = self.now;
        let on_root = !self.disk_mounted(n);
        let current = *self.releases[c].last().expect("a release");
        let node = &mut self.nodes[n];
        node.anchor_start_at[c] = None;
        node.inputs[c] = Some(current);
        node.inputs_due[c] = None;
        node.anchors[c] = Some(AnchorProc {
            expects: revision,
            accepted: None,
            on_root,
            machine: Anchor::new(Settings {
                component: COMPONENTS[c].into(),
                trial_period: Duration::from_secs(self.setup.trial_period[c]),
                crash_loop_threshold: self.setup.crash_loop_threshold[c],
                in_fleet: true,
                client_checks: true,
                // Every simulated etcd anchor renders `spec.etcdMember`; every kube-apiserver
                // anchor runs with the chart's `anchor.apiServerMargin`.
                restart_needs_margin: c == ETCD || c == APISERVER,
                skew_gate: c != ETCD,
                // Every image is on every node here: the gate is the bed's to show.
                image_gate: false,
            }),
            next_wake: now,
            synced_inputs: None,
            next_sync: now,
            input_error: None,
            membership_pending: false,
            ready: false,
            next_guard: now,
        });
    }

    /// Each component's DaemonSet controller, in the leading kube-controller-manager: a selected
    /// node without a pod gets one of the current template (for kube-scheduler to bind) once its
    /// old one is gone (`maxSurge: 0`), and pods of an older
    /// template are deleted as `rollingUpdate` does with `maxUnavailable: 1` (kubernetes
    /// pkg/controller/daemon/update.go): one that is not available at once, an available one only
    /// while no pod of the DaemonSet is unavailable. With a DaemonSet per node each has its one
    /// pod, so every node's goes at once.
    fn daemonset_controller(&mut self) {
        if !self.leads(CONTROLLER_MANAGER) {
            return;
        }
        for c in 0..COMPONENTS.len() {
            let template = *self.releases[c].last().expect("a release");
            // Nothing to do while every selected node has a pod of the current template.
            let current = |node: &Node| {
                !node.selected
                    || matches!(node.anchor_pods[c], AnchorPodObject::Bound { revision, .. } | AnchorPodObject::Pending { revision, .. } if revision == template)
            };
            if self.nodes.iter().all(current) {
                continue;
            }
            let selected: Vec<usize> = (0..self.nodes.len()).filter(|&n| self.nodes[n].selected).collect();
            let groups: Vec<Vec<usize>> = match self.daemonsets {
                DaemonSets::PerNode => selected.iter().map(|&n| vec![n]).collect(),
                DaemonSets::OnePerComponent => vec![selected],
            };
            for group in groups {
                let mut unavailable = 0;
                let mut delete = Vec::new();
                let mut candidates = Vec::new();
                for n in group {
                    // A node that lost power or its network keeps its pods' Ready in the API for
                    // the node monitor's grace period.
                    let available = self.api_shows_ready(n) && self.nodes[n].anchors_ready_posted[c];
                    match self.nodes[n].anchor_pods[c] {
                        AnchorPodObject::Absent => {
                            self.next_pod_serial += 1;
                            self.nodes[n].anchor_pods[c] = AnchorPodObject::Pending {
                                revision: template,
                                serial: self.next_pod_serial,
                            };
                            unavailable += 1;
                        }
                        AnchorPodObject::Terminating { .. } => unavailable += 1,
                        AnchorPodObject::Pending { revision, .. } if revision == template => unavailable += 1,
                        AnchorPodObject::Pending { .. } => {
                            delete.push(n);
                            unavailable += 1;
                        }
                        AnchorPodObject::Bound { revision, .. } if revision == template => {
                            unavailable += usize::from(!available);
                        }
                        AnchorPodObject::Bound { .. } if !available => {
                            delete.push(n);
                            unavailable += 1;
                        }
                        AnchorPodObject::Bound { .. } if unavailable == 0 => candidates.push(n),
                        AnchorPodObject::Bound { .. } => {}
                    }
                }
                let remaining = 1usize.saturating_sub(unavailable).min(candidates.len());
                delete.extend(&candidates[..remaining]);
                for n in delete {
                    self.delete_anchor_pod(n, c);
                }
            }
        }
    }

    /// Component `c`'s (kube-controller-manager's or kube-scheduler's) election.
    fn election(&self, c: usize) -> &Election {
        &self.elections[c - CONTROLLER_MANAGER]
    }

    fn election_mut(&mut self, c: usize) -> &mut Election {
        &mut self.elections[c - CONTROLLER_MANAGER]
    }

    /// Node `n`'s container of component `c` is the process `(sandbox, attempt)` and runs.
    fn process_is(&self, n: usize, c: usize, sandbox: u64, attempt: u32) -> bool {
        self.nodes[n].powered
            && self.nodes[n].pods[c]
                .container
                .as_ref()
                .is_some_and(|ct| ct.running() && ct.sandbox == sandbox && ct.attempt == attempt)
    }

    /// Node `n`'s kube-controller-manager or kube-scheduler (component `c`) is served by the API
    /// server its kubeconfig names: its own node's (`https://${NODE_IP}:6443`,
    /// examples/bootstrap/cluster.sh, as kubeadm's kubeconfigs do), with its client certificate.
    fn controller_reaches_api(&self, n: usize, c: usize) -> bool {
        self.accepts_client_certs(n) && self.fault(n, c) != Some(Fault::ClientCertUntrusted)
    }

    /// A process of component `c` leads this second: it renewed (or took) the Lease now.
    fn leads(&self, c: usize) -> bool {
        self.led_at(c, self.now)
    }

    /// A process of component `c` renewed (or took) the Lease at second `at` and still runs.
    fn led_at(&self, c: usize, at: u64) -> bool {
        let e = self.election(c);
        e.renewed == at
            && e.holder
                .is_some_and(|(n, sandbox, attempt)| self.process_is(n, c, sandbox, attempt))
    }

    /// One second of component `c`'s leader election: the holder renews through its API server
    /// or, past the renew deadline, exits; a Lease not renewed for its duration is taken at the
    /// next retry by a running process whose API server serves it (whichever asks first).
    fn elect(&mut self, c: usize) {
        let now = self.now;
        let mut e = *self.election(c);
        if let Some((n, sandbox, attempt)) = e.holder
            && self.process_is(n, c, sandbox, attempt)
        {
            if self.controller_reaches_api(n, c) {
                e.renewed = now;
            } else if now >= e.renewed + RENEW_DEADLINE {
                // "leaderelection lost": the process exits, and the kubelet restarts it.
                let mut ct = self.nodes[n].pods[c].container.take().expect("it runs");
                ct.phase = self.exit(&mut ct);
                self.nodes[n].pods[c].container = Some(ct);
            }
        }
        if (e.holder.is_none() || now >= e.renewed + LEASE_DURATION) && now.is_multiple_of(RETRY_PERIOD) {
            let candidates: Vec<(usize, u64, u32)> = (0..self.nodes.len())
                .filter(|&m| self.controller_reaches_api(m, c))
                .filter_map(|m| {
                    let ct = self.nodes[m].pods[c].container.as_ref()?;
                    matches!(ct.phase, Phase::Running { .. }).then_some((m, ct.sandbox, ct.attempt))
                })
                .collect();
            if !candidates.is_empty() {
                let first = (self.rng.next_u64() % candidates.len() as u64) as usize;
                e.holder = Some(candidates[first]);
                e.renewed = now;
                e.since = now;
            }
        }
        *self.election_mut(c) = e;
        // What a control plane without it lacks, once its API serves. Three nodes or more: on
        // fewer a version on trial has no other copy to lead meanwhile (`NotRecovered` speaks
        // for those).
        let selected = self.nodes.iter().filter(|node| node.selected).count();
        if self.leads(c) || selected < 3 || !self.any_api(|w, j| w.serves_clients(j)) {
            self.election_mut(c).leaderless_since = None;
            return;
        }
        let since = *self.election_mut(c).leaderless_since.get_or_insert(now);
        if now >= since + LEADERLESS_GRACE {
            let detail = format!(
                "no {} has led for {}s while an API server served clients",
                COMPONENTS[c],
                now - since
            );
            self.violate(Invariant::ControllersDown, detail);
        }
    }

    /// The node lifecycle controller, in the leading kube-controller-manager: a node whose
    /// kubelet has posted nothing for `--node-monitor-grace-period` has its pods marked not
    /// Ready. It times what it observes itself, so a new leader gives every node the grace anew.
    fn node_lifecycle_controller(&mut self) {
        if !self.leads(CONTROLLER_MANAGER) {
            return;
        }
        let (now, since) = (self.now, self.election(CONTROLLER_MANAGER).since);
        for node in &mut self.nodes {
            if now >= node.posted_at.max(since) + NODE_MONITOR_GRACE {
                node.marked_unready = true;
            }
        }
    }

    /// The leading kube-scheduler binds each pending anchor pod to the node it is for, unless
    /// that node is marked not Ready: the taint the node lifecycle controller sets then
    /// (`node.kubernetes.io/not-ready` or `unreachable`, `NoSchedule`) is not among those a
    /// DaemonSet pod tolerates for scheduling (only their `NoExecute` forms, and the charts'
    /// control-plane toleration).
    fn schedule_pending_pods(&mut self) {
        if !self.leads(SCHEDULER) {
            return;
        }
        for node in self.nodes.iter_mut().filter(|node| !node.marked_unready) {
            for pod in &mut node.anchor_pods {
                if let AnchorPodObject::Pending { revision, serial } = *pod {
                    *pod = AnchorPodObject::Bound { revision, serial };
                }
            }
        }
    }

    /// `kube-anchor kubelet-pre-start` on node `n`, just before its kubelet starts
    /// (`kubelet_pre_start::kubelet_pre_start`): each version of etcd or kube-apiserver on trial
    /// goes back to last-known-good, recorded as interrupted (bad after a second reboot), unless
    /// an API server answers the kubelet.
    fn kubelet_pre_start(&mut self, n: usize) {
        if !self.setup.kubelet_pre_start {
            return;
        }
        for c in 0..COMPONENTS.len() {
            let ledger = &self.nodes[n].ledgers[c];
            let minor = |hash: Option<&String>| hash.map(|h| self.versions[self.version_index(h)].minor);
            let versions = kubelet_start::Versions {
                keeps_the_api_away: c == ETCD || c == APISERVER,
                last_known_good_usable: ledger.last_known_good.is_some(),
                etcd_minor_up: c == ETCD
                    && matches!(
                        (minor(ledger.content_hash.as_ref()), minor(ledger.last_known_good.as_ref())),
                        (Some(trial), Some(good)) if trial > good
                    ),
            };
            let Ok(trial) = kubelet_start::on_trial(ledger, versions) else {
                continue;
            };
            let answer = if self.kubelet_reaches_api(n) {
                Ok(())
            } else {
                Err("connection refused".to_owned())
            };
            let anchor_runs = self.nodes[n].anchors[c].is_some();
            let decision = kubelet_start::decide(trial, answer, anchor_runs);
            if matches!(decision, kubelet_start::Decision::Keep { .. }) {
                *self.report.verbs.entry("kubelet-pre-start-kept").or_default() += 1;
            }
            if let kubelet_start::Decision::Revert {
                version,
                to,
                reason,
                mark_bad,
                boots,
            } = decision
            {
                // Recorded bad, a version without a fault counts as a good one rolled back,
                // whoever recorded it (the anchor's own rule in `Effect::RollBack`).
                let spec = &self.versions[self.version_index(&version)];
                if mark_bad && spec.fault.is_none() && !(c == ETCD && spec.minor < self.cluster_version) {
                    let detail = format!(
                        "the kubelet's pre-start step on {} recorded {} {version} as bad: {reason}",
                        self.nodes[n].name, self.nodes[n].ledgers[c].component
                    );
                    self.violate(Invariant::GoodRolledBack, detail);
                }
                let at = self.stamp();
                let ledger = &mut self.nodes[n].ledgers[c];
                if mark_bad {
                    ledger.mark_bad(BadVersion {
                        hash: version,
                        at,
                        reason,
                    });
                } else {
                    ledger.interrupted = Some(Interrupted {
                        hash: version,
                        at,
                        reason,
                        boots,
                    });
                }
                self.write(n, c, &to);
                let how = if mark_bad {
                    "kubelet-pre-start-marked-bad"
                } else {
                    "kubelet-pre-start-interrupted"
                };
                *self.report.verbs.entry(how).or_default() += 1;
            }
        }
    }

    /// The kubelet's pod worker for one static pod.
    fn kubelet_pod(&mut self, n: usize, c: usize) {
        let now = self.now;
        let sources_ready = self.nodes[n].sources_ready;
        let manifest = self.nodes[n].pods[c].manifest;
        let Some(mut ct) = self.nodes[n].pods[c].container.take() else {
            if let Some(version) = manifest
                && now >= self.nodes[n].pods[c].start_gap_until
            {
                let at = now + self.secs(2, 8);
                let sandbox = self.next_sandbox;
                self.next_sandbox += 1;
                let on_root = !self.disk_mounted(n);
                self.nodes[n].pods[c].container = Some(Container {
                    version,
                    sandbox,
                    created_at: now,
                    attempt: 0,
                    phase: Phase::Starting { at },
                    backoff: BACKOFF_START,
                    on_root,
                    stopped: None,
                    reached_etcd: false,
                    etcd_lost_since: None,
                });
            }
            return;
        };
        // A manifest changed or removed: the old pod is stopped (its grace period), then the new
        // one created. A kubelet that has not reached an API server since it started deletes no
        // pod (it waits for all its pod sources: kubelet `HandlePodCleanups`).
        if manifest != Some(ct.version) && sources_ready {
            match ct.phase {
                Phase::Stopping { until } if until <= now => {
                    self.stopped(n, c);
                    return; // container gone
                }
                Phase::Stopping { .. } => {}
                Phase::Running { .. } => {
                    // kube-apiserver uses up the kubelet's 30 s grace period (the bed measured
                    // 30 s for the old one to stop: APISERVER_TRIAL_S, tests/support/selfhosted.rs);
                    // etcd stops within seconds.
                    let grace = if c == APISERVER {
                        self.secs(25, 30)
                    } else {
                        self.secs(1, 5)
                    };
                    ct.phase = Phase::Stopping { until: now + grace }
                }
                Phase::Starting { .. } | Phase::Exited { .. } => {
                    self.nodes[n].pods[c].start_gap_until = now + 1;
                    return;
                }
            }
            self.nodes[n].pods[c].container = Some(ct);
            return;
        }
        match ct.phase {
            // The same manifest came back while its pod stopped (written again within the
            // second: a `kube-anchor remove` that a running anchor repaired): the pod stops, and
            // the file's pod starts anew (the kubelet restarts a static pod re-added while it
            // terminated: `restartRequested`, pkg/kubelet/pod_workers.go).
            Phase::Stopping { until } if until <= now => {
                self.stopped(n, c);
                return;
            }
            Phase::Starting { at } if at <= now => {
                ct.phase = if self.refuses_to_start(n, c, ct.version) {
                    self.exit(&mut ct)
                } else {
                    Phase::Running { since: now }
                };
            }
            Phase::Exited { restart_at } if restart_at <= now => {
                // A restart is a new container, with its mounts made anew.
                ct.attempt += 1;
                ct.phase = Phase::Starting { at: now + 1 };
                ct.on_root = !self.disk_mounted(n);
                ct.stopped = None;
                ct.reached_etcd = false;
                ct.etcd_lost_since = None;
            }
            Phase::Running { since } => {
                let hung_since = ct.stopped_since(now);
                if hung_since.is_some_and(|from| now >= from + LIVENESS_KILL) {
                    // The kubelet kills it on its liveness probe's failures (SIGKILL reaches a
                    // stopped process).
                    ct.phase = self.exit(&mut ct);
                } else if hung_since.is_some() {
                    // Stopped: it neither exits nor notices anything.
                } else if c == APISERVER && self.apiserver_gives_up_on_etcd(n, &mut ct, since) {
                    ct.phase = self.exit(&mut ct);
                } else if now >= since + 2 * BACKOFF_MAX {
                    // The kubelet forgets a back-off not updated for twice its maximum
                    // (client-go flowcontrol `Backoff`, `hasExpired`).
                    ct.backoff = BACKOFF_START;
                }
                if c == ETCD && ct.phase == (Phase::Running { since }) && !self.etcd_member_runs(n, ct.on_root) {
                    ct.phase = self.exit(&mut ct);
                }
                // A learner catches up from the time it first runs with the cluster's data (the
                // leader keeps its progress while it is down).
                let with_data = ct.running() && self.holds_own_member(n, ct.on_root);
                if c == ETCD
                    && with_data
                    && let Listed::Learner { running_since } = &mut self.nodes[n].listed
                {
                    running_since.get_or_insert(now);
                }
            }
            _ => {}
        }
        self.nodes[n].pods[c].container = Some(ct);
    }

    /// Node `n`'s pod of component `c` has stopped: the next one starts after a gap (etcd: the bed
    /// measured 40 s between the old member's exit and the new one's start; the others sooner).
    fn stopped(&mut self, n: usize, c: usize) {
        let gap = if c == ETCD { self.secs(25, 40) } else { self.secs(3, 10) };
        self.nodes[n].pods[c].start_gap_until = self.now + gap;
    }

    /// Whether node `n`'s running etcd, on the data dir it sees, stays up this second; creates
    /// its data on an empty dir (etcd docs, "Runtime reconfiguration"; etcdserver `bootstrap.go`).
    fn etcd_member_runs(&mut self, n: usize, on_root: bool) -> bool {
        let node = &self.nodes[n];
        let (listed, published, member) = (node.listed, node.published, node.member_id);
        match self.data_in(n, on_root) {
            None => {
                // The manifest's `--initial-cluster-state` (from the record): `new` founds a
                // cluster.
                let new = node.record.as_ref().is_some_and(|r| r.initial_cluster_state == "new");
                if new {
                    let cluster = self.next_cluster_id;
                    self.next_cluster_id += 1;
                    *self.data_in_mut(n, on_root) = Some(Data { cluster, member });
                    return true;
                }
                match listed {
                    // `existing`: etcd exits when the cluster has no member with its peer URL.
                    Listed::No => false,
                    // A member that has run before: the leader sends it a commit index past its
                    // empty log and raft panics ("tocommit(N) is out of range [lastIndex(0)]").
                    _ if published => false,
                    // A member added but never started joins with its peer URL once the cluster
                    // can answer (until then it keeps trying).
                    _ => {
                        if self.quorum_from(n, MAIN_CLUSTER) {
                            *self.data_in_mut(n, on_root) = Some(Data::main(member));
                            self.nodes[n].published = true;
                        }
                        true
                    }
                }
            }
            // Data of a member the cluster no longer lists (removed, or replaced by a new ID): its
            // peers refuse it and it stops ("the member has been permanently removed from the
            // cluster").
            Some(data) if data.cluster == MAIN_CLUSTER => listed != Listed::No && data.member == member,
            Some(_) => true,
        }
    }

    /// The data disk is mounted on node `n`.
    fn disk_mounted(&self, n: usize) -> bool {
        self.now >= self.nodes[n].disk_mounted_at
    }

    /// The member data in node `n`'s data dir as a container sees it: the data disk's, or the
    /// root file system's mount point for one created before the disk was mounted.
    fn data_in(&self, n: usize, on_root: bool) -> Option<Data> {
        if on_root {
            self.nodes[n].root_data
        } else {
            self.nodes[n].disk_data
        }
    }

    fn data_in_mut(&mut self, n: usize, on_root: bool) -> &mut Option<Data> {
        if on_root {
            &mut self.nodes[n].root_data
        } else {
            &mut self.nodes[n].disk_data
        }
    }

    /// The data dir a container of node `n` sees holds its current member of the main cluster.
    fn holds_own_member(&self, n: usize, on_root: bool) -> bool {
        self.data_in(n, on_root) == Some(Data::main(self.nodes[n].member_id))
    }

    /// The member data node `n`'s etcd container sees (the data disk's when none runs and it is
    /// mounted).
    fn etcd_data(&self, n: usize) -> Option<Data> {
        let on_root = self.nodes[n].pods[ETCD]
            .container
            .as_ref()
            .map_or(!self.disk_mounted(n), |ct| ct.on_root);
        self.data_in(n, on_root)
    }

    fn exit(&mut self, ct: &mut Container) -> Phase {
        let restart_at = self.now + ct.backoff;
        ct.backoff = (ct.backoff * 2).min(BACKOFF_MAX);
        Phase::Exited { restart_at }
    }

    /// A kube-apiserver process without its etcd: one that never reached it exits when its
    /// post-start hooks give up (about 30 s after its start); one that did runs on, not Ready,
    /// until the kubelet kills it on its liveness probe, whose `/livez` checks etcd
    /// (`storagebackend/factory/etcd3.go`, kubernetes#98662): 8 failures 10 s apart (the
    /// charts' `failureThreshold: 8`, `periodSeconds: 10`).
    fn apiserver_gives_up_on_etcd(&self, n: usize, ct: &mut Container, since: u64) -> bool {
        let now = self.now;
        if self.etcd_serves_local(n) {
            ct.reached_etcd = true;
            ct.etcd_lost_since = None;
            return false;
        }
        if !ct.reached_etcd {
            return now >= since + APISERVER_WITHOUT_ETCD;
        }
        let lost = *ct.etcd_lost_since.get_or_insert(now);
        now >= lost + LIVENESS_WITHOUT_ETCD
    }

    fn refuses_to_start(&self, n: usize, c: usize, version: usize) -> bool {
        let spec = &self.versions[version];
        if spec.fault == Some(Fault::RefusedFlag) {
            return true;
        }
        // etcd refuses to run below the cluster's version (etcd docs, "Downgrading").
        c == ETCD && self.etcd_data(n).is_some_and(|d| d.cluster == MAIN_CLUSTER) && spec.minor < self.cluster_version
    }

    /// etcd raises the cluster version to the lowest member version once every member runs it.
    fn raise_cluster_version(&mut self) {
        let mut lowest = u32::MAX;
        for n in 0..self.nodes.len() {
            match self.etcd_member_version(n) {
                Some(minor) => lowest = lowest.min(minor),
                None => return,
            }
        }
        if lowest != u32::MAX && lowest > self.cluster_version {
            self.cluster_version = lowest;
        }
    }

    fn etcd_member_version(&self, n: usize) -> Option<u32> {
        let ct = self.nodes[n].pods[ETCD].container.as_ref()?;
        (ct.running() && self.holds_own_member(n, ct.on_root)).then(|| self.versions[ct.version].minor)
    }

    // ---- what is true of the control plane -------------------------------------------------

    fn fault(&self, n: usize, c: usize) -> Option<Fault> {
        let ct = self.nodes[n].pods[c].container.as_ref()?;
        self.versions[ct.version].fault
    }

    fn runs(&self, n: usize, c: usize) -> bool {
        self.nodes[n].powered && self.nodes[n].pods[c].container.as_ref().is_some_and(Container::running)
    }

    /// Node `n`'s etcd is a member of `cluster` (a second cluster has its one founder).
    fn is_member(&self, n: usize, cluster: u64) -> bool {
        let node = &self.nodes[n];
        self.etcd_data(n).is_some_and(|d| {
            d.cluster == cluster
                && (cluster != MAIN_CLUSTER || (node.listed == Listed::Voter && d.member == node.member_id))
        })
    }

    /// The members of `cluster` that run.
    fn members_running(&self, cluster: u64) -> usize {
        (0..self.nodes.len())
            .filter(|&n| self.runs(n, ETCD) && self.is_member(n, cluster))
            .count()
    }

    /// The side of a partition node `n` is on now (0: none, or healed).
    fn side(&self, n: usize) -> u64 {
        match self.nodes[n].partition {
            Some((side, until)) if self.now < until => side,
            _ => 0,
        }
    }

    /// Nodes `a` and `b` reach each other over the network (a node always reaches itself).
    fn linked(&self, a: usize, b: usize) -> bool {
        a == b || self.side(a) == self.side(b)
    }

    /// From node `n`, a majority of `cluster`'s members runs and is reached: a member on `n`'s
    /// side has (or elects) a leader. Raft needs a majority of the voters to elect and to commit.
    fn quorum_from(&self, n: usize, cluster: u64) -> bool {
        let members = if cluster == MAIN_CLUSTER { self.members() } else { 1 };
        self.members_reached(n, cluster) > members / 2
    }

    /// Node `m` runs a member of `cluster` that node `n` reaches.
    fn member_reached(&self, n: usize, m: usize, cluster: u64) -> bool {
        self.linked(n, m) && self.runs(m, ETCD) && self.is_member(m, cluster)
    }

    /// The running members of `cluster` that node `n` reaches.
    fn members_reached(&self, n: usize, cluster: u64) -> usize {
        (0..self.nodes.len())
            .filter(|&m| self.member_reached(n, m, cluster))
            .count()
    }

    /// Some member of `cluster` has a leader (on the side of a partition that holds a majority).
    fn has_quorum(&self, cluster: u64) -> bool {
        (0..self.nodes.len()).any(|n| self.member_reached(n, n, cluster) && self.quorum_from(n, cluster))
    }

    /// How many members the main cluster has.
    fn members(&self) -> usize {
        self.nodes.iter().filter(|n| n.listed == Listed::Voter).count()
    }

    /// The main cluster's member list.
    fn member_list(&self) -> Vec<Member> {
        (0..self.nodes.len())
            .filter(|&m| self.nodes[m].listed != Listed::No)
            .map(|m| {
                let node = &self.nodes[m];
                let name = &node.name;
                Member {
                    id: node.member_id,
                    // A member added but never started has no name and no client URLs.
                    name: if node.published { name.clone() } else { String::new() },
                    peer_urls: vec![format!("https://{name}:2380")],
                    client_urls: if node.published {
                        vec![format!("https://{name}:2379")]
                    } else {
                        Vec::new()
                    },
                    is_learner: matches!(node.listed, Listed::Learner { .. }),
                }
            })
            .collect()
    }

    /// etcd on node `n` serves the local kube-apiserver (`https://127.0.0.1:2379`).
    fn etcd_serves_local(&self, n: usize) -> bool {
        self.runs(n, ETCD)
            && !matches!(
                self.fault(n, ETCD),
                Some(Fault::ServingNameDropped | Fault::ListenAddressMoved)
            )
            && self
                .etcd_data(n)
                .is_some_and(|d| self.is_member(n, d.cluster) && self.quorum_from(n, d.cluster))
    }

    fn api_runs(&self, n: usize) -> bool {
        self.runs(n, APISERVER) && self.etcd_serves_local(n) && !self.api_hung(n)
    }

    /// Node `n`'s kube-apiserver is stopped: it holds its port and answers nothing.
    fn api_hung(&self, n: usize) -> bool {
        self.nodes[n].pods[APISERVER]
            .container
            .as_ref()
            .is_some_and(|ct| ct.stopped_since(self.now).is_some())
    }

    fn accepts_client_certs(&self, n: usize) -> bool {
        self.api_runs(n) && self.fault(n, APISERVER) != Some(Fault::CaWithoutBundle)
    }

    fn accepts_tokens(&self, n: usize) -> bool {
        self.api_runs(n) && self.fault(n, APISERVER) != Some(Fault::ServiceAccountKeyDropped)
    }

    /// Serves every client: kubelets and controllers (client certificates), pods (tokens, the
    /// Service IP).
    fn serves_clients(&self, n: usize) -> bool {
        self.accepts_client_certs(n)
            && self.accepts_tokens(n)
            && self.fault(n, APISERVER) != Some(Fault::ServingNameDropped)
    }

    fn any_api(&self, ok: impl Fn(&World, usize) -> bool) -> bool {
        (0..self.nodes.len()).any(|n| ok(self, n))
    }

    /// An API server that node `n` reaches and of which `ok` holds (the kubelet's and the
    /// anchors' clients go to any of them: the Service's endpoints, a load balancer).
    fn api_from(&self, n: usize, ok: impl Fn(&World, usize) -> bool) -> bool {
        (0..self.nodes.len()).any(|j| self.linked(n, j) && ok(self, j))
    }

    /// Node `n`'s kubelet reaches an API server that accepts its client certificate.
    fn kubelet_reaches_api(&self, n: usize) -> bool {
        self.api_from(n, |w, j| w.accepts_client_certs(j))
    }

    /// The API still shows node `n`'s pods as its kubelet last posted them: the node lifecycle
    /// controller has not marked them not Ready ([`World::node_lifecycle_controller`]).
    fn api_shows_ready(&self, n: usize) -> bool {
        !self.nodes[n].marked_unready
    }

    fn ready(&self, n: usize, c: usize) -> bool {
        self.health(n, c).is_ok() && self.runs(n, c)
    }

    /// The anchor's health URL: etcd's `http://127.0.0.1:2381/health` (the plain-HTTP metrics
    /// listener: no client TLS), kube-apiserver's `https://127.0.0.1:6443/readyz`.
    fn health(&self, n: usize, c: usize) -> Result<(), HealthFailure> {
        if !self.runs(n, c) || self.fault(n, c) == Some(Fault::HealthMoved) {
            return Err(HealthFailure::no_answer("connection refused"));
        }
        if c == APISERVER && self.api_hung(n) {
            return Err(HealthFailure::no_answer(
                "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
            ));
        }
        match c {
            // Alarms first, as etcd's `/health` checks them before the leader.
            ETCD if self.now < self.alarm_until => Err(HealthFailure::answered(
                r#"503: {"health":"false","reason":"ALARM NOSPACE"}"#,
            )),
            ETCD if !self.etcd_data(n).is_some_and(|d| self.quorum_from(n, d.cluster)) => Err(HealthFailure::answered(
                r#"503: {"health":"false","reason":"RAFT NO LEADER"}"#,
            )),
            APISERVER if !self.etcd_serves_local(n) => Err(HealthFailure::answered("500: [-]etcd failed")),
            _ => Ok(()),
        }
    }

    fn runtime_view(&self, n: usize, c: usize) -> RuntimeView {
        let Some(ct) = &self.nodes[n].pods[c].container else {
            return RuntimeView::NoSandbox;
        };
        let state = match ct.phase {
            Phase::Running { .. } | Phase::Stopping { .. } => ContainerState::Running,
            Phase::Starting { .. } => ContainerState::Created,
            Phase::Exited { .. } => ContainerState::Exited,
        };
        RuntimeView::Pod(LocalPod {
            sandbox_id: format!("sb{}", ct.sandbox),
            content_hash: Some(self.versions[ct.version].id.clone()),
            ready: true,
            created_at: ct.created_at as i64,
            containers: vec![LocalContainer {
                name: COMPONENTS[c].into(),
                attempt: ct.attempt,
                state,
                started_at: None,
                finished_at: None,
                exit_code: (state == ContainerState::Exited).then_some(1),
                reason: None,
            }],
        })
    }

    // ---- the anchors -----------------------------------------------------------------------

    /// Node `n`'s anchors reach an API server that accepts their token.
    fn anchor_reaches_api(&self, n: usize) -> bool {
        self.api_from(n, |w, j| w.accepts_tokens(j))
    }

    fn anchor(&mut self, n: usize, c: usize) {
        let now = self.now;
        let inputs = self.nodes[n].inputs[c];
        // Nothing due: the machine (large) stays where it is.
        let due = |p: &AnchorProc| p.synced_inputs != inputs || p.next_sync <= now || p.next_wake <= now;
        if !self.nodes[n].anchors[c].as_ref().is_some_and(due) {
            return;
        }
        let Some(mut proc) = self.nodes[n].anchors[c].take() else {
            return;
        };
        if proc.synced_inputs != inputs || proc.next_sync <= now {
            proc.synced_inputs = inputs;
            self.sync(n, c, &mut proc);
            proc.next_sync = now
                + if proc.membership_pending {
                    MEMBERSHIP_RETRY
                } else if proc.machine.waits_for_lease() {
                    TURN_RETRY
                } else {
                    60
                };
            proc.next_wake = now;
        }
        if proc.next_wake <= now {
            self.evaluate(n, c, &mut proc);
            proc.next_wake = now
                + if proc.machine.busy() {
                    TRIAL_TICK
                } else {
                    HEALTH_INTERVAL
                };
        }
        if self.setup.drain_guard && GUARDED.contains(&c) && proc.next_guard <= now {
            proc.next_guard = now + GUARD_PERIOD;
            self.guard_step(n, c);
        }
        self.nodes[n].anchors[c] = Some(proc);
    }

    fn instant(&self) -> Instant {
        self.base + Duration::from_secs(self.now)
    }

    fn sync(&mut self, n: usize, c: usize, proc: &mut AnchorProc) {
        // A held anchor takes no join step either (`Daemon::membership_step`).
        if c == ETCD && self.nodes[n].ledgers[c].paused.is_none() {
            let (may_sync, pending) = self.membership(n, proc.on_root);
            proc.membership_pending = pending;
            if !may_sync {
                return;
            }
        }
        proc.input_error = None;
        let effects = self.sync_step(n, c, proc);
        self.perform(n, c, proc, effects);
    }

    /// The machine's sync step on the inputs and the ledger as they are.
    fn sync_step(&self, n: usize, c: usize, proc: &mut AnchorProc) -> Vec<Effect> {
        let (desired, refused) = self.desired(n, c, proc);
        let ledger = &self.nodes[n].ledgers[c];
        proc.machine.step(Input::Sync(SyncFacts {
            desired: desired.as_deref(),
            desired_refused: refused,
            ledger,
            last_known_good: ledger.last_known_good.as_deref(),
            unrecorded_manifest: false,
            paused: self.paused(n, c),
            now: Duration::from_secs(self.now),
        }))
    }

    /// Why node `n`'s anchor of `c` is held, as the daemon says it (`Daemon::pause`).
    fn paused(&self, n: usize, c: usize) -> Option<String> {
        Pause::of(self.nodes[n].ledgers[c].paused.as_ref(), None, None).map(|p| p.describe(COMPONENTS[c]))
    }

    /// What a sync tells the machine of the inputs: their version while it matches the pod's
    /// template (`--expect-inputs`), and the refusal of the credentials of the version this
    /// process would write (the inputs', else the one it took before: `anchor::Daemon::sync_files`).
    fn desired(&self, n: usize, c: usize, proc: &mut AnchorProc) -> (Option<String>, Option<String>) {
        let inputs = self.nodes[n].inputs[c].filter(|&v| v == proc.expects);
        if inputs.is_some() {
            proc.accepted = inputs;
        }
        let refused = inputs.or(proc.accepted).and_then(|v| self.refusal(v));
        (inputs.map(|v| self.versions[v].id.clone()), refused)
    }

    /// `credentials::check`'s verdict on version `v` (design.md, "Credentials checked before
    /// they are written"): a key of another certificate; a serving certificate without a name its
    /// clients dial (etcd's `127.0.0.1` of its own `--listen-client-urls`, kube-apiserver's first
    /// service address); a client CA bundle that no longer trusts the certificates the node's
    /// kubeconfigs hold. What the check cannot see (a listen address moved, a key the tokens were
    /// signed with dropped, a client certificate of an untrusted CA) is written.
    fn refusal(&self, v: usize) -> Option<String> {
        match self.versions[v].fault? {
            Fault::WrongKey => Some("the private key does not belong to the certificate".to_owned()),
            Fault::ServingNameDropped => Some("serving certificate does not cover a name its clients dial".to_owned()),
            Fault::CaWithoutBundle => Some("the CA bundle no longer trusts a client the node holds".to_owned()),
            _ => None,
        }
    }

    /// The etcd anchor's join step before its sync (the real [`JoinStep`], its calls answered
    /// by the world); whether the sync may go on (a record renders the manifest) and whether the
    /// join is pending.
    fn membership(&mut self, n: usize, on_root: bool) -> (bool, bool) {
        self.join_step(n, on_root, Some(INITIAL_CLUSTER), Founding::Never)
    }

    /// One etcd join step on node `n` with `initial_cluster` (none for `bootstrap --join`: a
    /// cluster that does not answer is waited for, never founded anew) and `founding` (`run`
    /// never founds; the one-shot verbs only when no endpoint answers).
    fn join_step(
        &mut self,
        n: usize,
        on_root: bool,
        initial_cluster: Option<&str>,
        founding: Founding,
    ) -> (bool, bool) {
        let me = self.me(n);
        let (mut join, mut action) = JoinStep::new(JoinStart {
            me,
            record: self.nodes[n].record.clone(),
            data_dir_has_member: self.data_in(n, on_root).is_some(),
            initial_cluster: initial_cluster.map(str::to_owned),
            founding,
            // No operator here says `apply --rejoin`.
            rejoin_consented: false,
            at: self.stamp(),
        });
        loop {
            let observation = match action {
                join_steps::Action::Done(end) => {
                    *self.report.join_ends.entry(join_name(&end.decision)).or_default() += 1;
                    return (end.record.is_some(), end.pending);
                }
                join_steps::Action::ListMembers => join_steps::Observation::Members(self.observe_members(n)),
                join_steps::Action::ProbeHealth { .. } => {
                    join_steps::Observation::Healthy(self.healthy_members_from(n))
                }
                join_steps::Action::AddLearner { .. } => match self.add_learner(n) {
                    Ok(()) => join_steps::Observation::Added {
                        id: self.nodes[n].member_id,
                        members: self.member_list(),
                    },
                    // A failed call ends the step; the next one looks again.
                    Err(_) => return (false, true),
                },
                join_steps::Action::Promote { id } => join_steps::Observation::Promoted(self.promote(n, id)),
                join_steps::Action::RemoveStale { id } => {
                    let Some(m) = self.node_of_member(id) else {
                        return (false, true);
                    };
                    let holds = self.nodes[m].disk_data == Some(Data::main(id));
                    let removed = self.remove_member(n, m);
                    if removed.is_ok() && holds && self.nodes[m].selected {
                        let detail = format!(
                            "{}'s anchor removed member {id} of {}, whose data is on its data disk",
                            self.nodes[n].name, self.nodes[m].name
                        );
                        self.violate(Invariant::RemovedWithoutProof, detail);
                    }
                    match removed {
                        Ok(()) => join_steps::Observation::Removed,
                        Err(_) => return (self.nodes[n].record.is_some(), true),
                    }
                }
                join_steps::Action::Store(record) => {
                    self.nodes[n].record = Some(record).filter(|r| r.phase != membership::Phase::Removed);
                    join_steps::Observation::Stored
                }
                join_steps::Action::AskProgress { id, .. } => join_steps::Observation::Progress(self.progress(n, id)),
            };
            (join, action) = join.step(observation, self.stamp());
        }
    }

    /// The node whose member has (or last had) ID `id`.
    fn node_of_member(&self, id: u64) -> Option<usize> {
        (0..self.nodes.len()).find(|&m| self.nodes[m].member_id == id)
    }

    /// Node `n`'s member as its config renders it.
    fn me(&self, n: usize) -> Me {
        Me {
            name: self.nodes[n].name.clone(),
            peer_url: format!("https://{}:2380", self.nodes[n].name),
        }
    }

    /// What node `n`'s etcd anchor finds before a restart: the member list and each other
    /// voter's own status, as [`World::healthy_members_from`] probes them (a member answers with
    /// a leader when it runs on a side with a quorum). Every healthy member is modelled caught up
    /// (the world keeps no raft indexes).
    fn margin_facts(&self, n: usize) -> MarginFacts {
        let observed = self.observe_members(n);
        let peers = self
            .healthy_members_from(n)
            .into_iter()
            .filter(|&id| id != self.nodes[n].member_id)
            .map(|id| {
                (
                    id,
                    PeerStatus {
                        raft_applied_index: 100,
                        healthy: true,
                    },
                )
            })
            .collect();
        MarginFacts::Etcd {
            me: self.me(n),
            observed,
            peers,
        }
    }

    /// What node `n`'s kube-apiserver anchor finds before a restart
    /// (`kube_anchor_k8s::margin::api_server_peers`): the other nodes the chart selects (the
    /// DaemonSet's pods stay listed while a node is off) through an API server it reaches, and
    /// each one's `/readyz` at its own address: served while the server runs with its etcd and
    /// presents a certificate of the CA this node trusts (not after a CA replaced without a
    /// bundle).
    /// A one-shot verb's margin check before it restarts component `c` on node `n`, run in the
    /// anchor container (its config and environment): short, so refused.
    fn verb_restart_short(&self, n: usize, c: usize) -> bool {
        let facts = match c {
            ETCD => self.margin_facts(n),
            APISERVER => self.api_server_margin_facts(n),
            _ => return false,
        };
        matches!(facts.judge(), margin::Margin::Short(_))
    }

    fn api_server_margin_facts(&self, n: usize) -> MarginFacts {
        if !self.anchor_reaches_api(n) {
            return MarginFacts::Unknown("no API server answers: the other anchors cannot be listed".into());
        }
        let peers = (0..self.nodes.len())
            .filter(|&m| m != n && self.nodes[m].selected)
            .map(|m| ApiServerPeer {
                node: self.nodes[m].name.clone(),
                answer: if !self.linked(n, m) || !self.runs(m, APISERVER) || self.api_hung(m) {
                    PeerAnswer::NoAnswer("connection refused".into())
                } else if self.fault(m, APISERVER) == Some(Fault::CaWithoutBundle) {
                    PeerAnswer::NoAnswer("invalid peer certificate: UnknownIssuer".into())
                } else if !self.api_runs(m) {
                    PeerAnswer::Refused("HTTP 500: [-]etcd failed".into())
                } else {
                    PeerAnswer::Serving
                },
            })
            .collect();
        MarginFacts::ApiServers { peers }
    }

    /// The member list as node `n`'s anchors' client sees it (a linearizable read, through the
    /// members' client URLs): none without a quorum it reaches, or with the anchors' own client
    /// certificate expired.
    fn list_members(&self, n: usize) -> Result<Vec<Member>, String> {
        match self.observe_members(n) {
            MemberList::Members(members) => Ok(members),
            MemberList::Unreachable(why) | MemberList::Refused(why) => Err(why),
        }
    }

    /// [`World::list_members`] as `kube_anchor_k8s::etcd::Cluster::observe_members` classifies it: an expired
    /// client certificate is a refusal by the members that run (the TLS handshake fails); no
    /// quorum is no answer.
    fn observe_members(&self, n: usize) -> MemberList {
        if self.now < self.anchor_etcd_cert_expired_until {
            MemberList::Refused("tls: certificate has expired or is not yet valid".into())
        } else if !self.quorum_from(n, MAIN_CLUSTER) {
            MemberList::Unreachable("context deadline exceeded".into())
        } else {
            MemberList::Members(self.member_list())
        }
    }

    /// The members that answer a status with a leader: those on a side with a quorum.
    fn healthy_members(&self) -> BTreeSet<u64> {
        (0..self.nodes.len())
            .filter(|&m| self.member_reached(m, m, MAIN_CLUSTER) && self.quorum_from(m, MAIN_CLUSTER))
            .map(|m| self.nodes[m].member_id)
            .collect()
    }

    /// [`World::healthy_members`] as node `n` probes them: a member it cannot reach does not
    /// answer.
    fn healthy_members_from(&self, n: usize) -> BTreeSet<u64> {
        let mut healthy = self.healthy_members();
        healthy.retain(|&id| self.node_of_member(id).is_some_and(|m| self.linked(n, m)));
        healthy
    }

    /// `member add --learner` for node `n`: a membership change commits through raft (quorum),
    /// and etcd refuses more than `--max-learners`.
    fn add_learner(&mut self, n: usize) -> Result<(), String> {
        self.list_members(n)?;
        let learners = self
            .nodes
            .iter()
            .filter(|m| matches!(m.listed, Listed::Learner { .. }))
            .count();
        if learners >= MAX_LEARNERS {
            return Err("etcdserver: too many learner members in cluster".into());
        }
        self.next_member_id += 1;
        let node = &mut self.nodes[n];
        node.member_id = self.next_member_id;
        node.listed = Listed::Learner { running_since: None };
        node.published = false;
        Ok(())
    }

    /// `member promote` from node `from`: refused until the learner has caught up.
    fn promote(&mut self, from: usize, id: u64) -> Result<(), String> {
        self.list_members(from)?;
        let Some(m) = self.node_of_member(id) else {
            return Err("etcdserver: member not found".into());
        };
        match self.nodes[m].listed {
            Listed::Learner {
                running_since: Some(since),
            } if self.now >= since + LEARNER_CATCH_UP && !self.nodes[m].slow_disk => {
                self.nodes[m].listed = Listed::Voter;
                Ok(())
            }
            Listed::Learner { .. } => {
                Err("etcdserver: can only promote a learner member which is in sync with leader".into())
            }
            _ => Err("etcdserver: can only promote a learner member".into()),
        }
    }

    /// The leader's view of learner `id`, asked from node `from`.
    fn progress(&self, from: usize, id: u64) -> Result<LearnerProgress, String> {
        self.list_members(from)?;
        let caught_up = self.node_of_member(id).is_some_and(|m| {
            matches!(self.nodes[m].listed, Listed::Learner { running_since: Some(_) }) && !self.nodes[m].slow_disk
        });
        Ok(LearnerProgress {
            leader_index: 100,
            matched: Some(if caught_up { 100 } else { 0 }),
        })
    }

    /// `member remove` of node `m`'s member, asked from node `from`, with etcd's own check
    /// (`--strict-reconfig-check`, on by default): a removal that would leave fewer started
    /// members than a quorum of the rest is refused. The leader counts the members its transport
    /// is connected to (`mayRemoveMember`, `numConnectedSince`: server/etcdserver/server.go):
    /// those on its side, which is `from`'s once the list answered.
    fn remove_member(&mut self, from: usize, m: usize) -> Result<(), String> {
        self.list_members(from)?;
        if self.nodes[m].listed == Listed::Voter {
            let remaining = self.members() - 1;
            let started_after =
                self.members_reached(from, MAIN_CLUSTER) - usize::from(self.member_reached(from, m, MAIN_CLUSTER));
            if started_after <= remaining / 2 {
                return Err("etcdserver: re-configuration failed due to not enough started members".into());
            }
        }
        self.nodes[m].listed = Listed::No;
        self.nodes[m].published = false;
        Ok(())
    }

    fn evaluate(&mut self, n: usize, c: usize, proc: &mut AnchorProc) {
        let api = self.anchor_reaches_api(n);
        let mirror = api.then(|| match self.nodes[n].pods[c].mirror {
            None => MirrorPod::Absent,
            Some((version, ready, restarts)) => MirrorPod::Present {
                hash: Some(self.versions[version].id.clone()),
                phase: Some("Running".into()),
                ready,
                restarts,
            },
        });
        // API servers answer but none accepts the anchor's token: 401, which the watch shows
        // as a refusal (kube-apiserver's authentication answers a token it cannot verify with
        // 401 Unauthorized; the anchor's client moves on only from 502-504 and transport
        // failures, crates/k8s/src/failover.rs).
        let mirror = mirror.or_else(|| {
            self.api_from(n, |w, j| w.api_runs(j))
                .then(|| MirrorPod::Refused("401 Unauthorized: Unauthorized".into()))
        });
        // `--depends-on NAME=HEALTH_URL`: down while it does not run or its health URL answers
        // with an error.
        let dependency_down = DEPENDS_ON[c].and_then(|d| {
            if !self.runs(n, d) {
                Some(format!("{} does not run on this node", COMPONENTS[d]))
            } else {
                self.health(n, d)
                    .err()
                    .filter(|f| f.answered)
                    .map(|f| format!("{} fails its health check ({})", COMPONENTS[d], f.reason))
            }
        });
        let view = VersionView {
            api_configured: true,
            mirror,
            health: Some(self.health(n, c)),
            runtime: Some(self.runtime_view(n, c)),
            runtime_restarts: 0,
            dependency_down,
            clients: self.clients(n, c),
            clients_reconnecting: false,
        };
        let effects = proc.machine.step(Input::Evaluate(EvaluateFacts {
            view,
            dependency_looked: true,
            input_error: proc.input_error.clone(),
            pending: self.pending(n, c, proc),
            paused: self.paused(n, c),
            now: Duration::from_secs(self.now),
        }));
        self.perform(n, c, proc, effects);
        if proc.machine.turn.holding().is_some() && self.anchor_reaches_api(n) {
            let effects = proc.machine.step(Input::Review {
                ledger: &self.nodes[n].ledgers[c],
                instant: self.instant(),
            });
            self.perform(n, c, proc, effects);
        }
    }

    /// What the chart's `--client-check`s get on node `n` from component `c`
    /// (charts/*/values.yaml `anchor.clientChecks`): etcd is asked about by kube-apiserver's
    /// `/readyz/etcd`; kube-apiserver with the anchor's token and with a client certificate of the
    /// cluster CA; a controller with its kubeconfig, at the API server it names (its node's).
    fn clients(&self, n: usize, c: usize) -> Vec<ClientView> {
        let api_answers = self.runs(n, APISERVER) && !self.api_hung(n);
        let client = |name: &str, refused: Option<&str>| ClientView {
            client: name.into(),
            answer: match refused {
                _ if !api_answers => ClientAnswer::NoAnswer("connection refused".into()),
                Some(why) => ClientAnswer::Refused(why.into()),
                None => ClientAnswer::Served,
            },
            served_before: false,
        };
        let unauthorized = |fault| (self.fault(n, APISERVER) == Some(fault)).then_some("401 Unauthorized");
        match c {
            ETCD => vec![client(
                "kube-apiserver (/readyz/etcd)",
                (!self.etcd_serves_local(n)).then_some("500: [-]etcd failed"),
            )],
            APISERVER => vec![
                client(
                    "the anchor's service account",
                    unauthorized(Fault::ServiceAccountKeyDropped),
                ),
                client(
                    "a client certificate of the cluster CA",
                    unauthorized(Fault::CaWithoutBundle),
                ),
            ],
            _ => vec![client(
                COMPONENTS[c],
                (!self.controller_reaches_api(n, c)).then_some("401 Unauthorized"),
            )],
        }
    }

    /// Why the anchor's pod is not Ready whatever its version does, as the daemon tells its
    /// machine: it never took inputs matching its template, or the etcd join is not done.
    fn pending(&self, n: usize, c: usize, proc: &AnchorProc) -> Option<String> {
        let awaiting = proc.accepted.is_none() && self.nodes[n].inputs[c].is_some_and(|v| v != proc.expects);
        if awaiting {
            Some("the inputs belong to another revision of this anchor".into())
        } else {
            proc.membership_pending.then(|| "not a member yet".into())
        }
    }

    /// What the anchor of component `c` on node `n` reads from the node's other anchors before
    /// version `id` takes its turn: each Kubernetes component's written and last-known-good
    /// minor (as `Engine::skew_facts` reads their manifests).
    fn skew_facts(&self, n: usize, c: usize, id: &str) -> SkewFacts {
        let kind = |c: usize| match c {
            APISERVER => Some(skew::Kind::ApiServer),
            CONTROLLER_MANAGER => Some(skew::Kind::ControllerManager),
            SCHEDULER => Some(skew::Kind::Scheduler),
            _ => None,
        };
        let minor = |hash: Option<&String>| {
            hash.map(|h| skew::Minor {
                major: 1,
                minor: self.versions[self.version_index(h)].minor,
            })
        };
        let node = &self.nodes[n];
        let Some(this) = kind(c) else {
            return SkewFacts::default();
        };
        let ledger = &node.ledgers[c];
        SkewFacts {
            to: minor(Some(&id.to_owned())).map(|m| (this, m)),
            from: [ledger.content_hash.as_ref(), ledger.last_known_good.as_ref()]
                .into_iter()
                .filter_map(minor)
                .collect(),
            beside: [APISERVER, CONTROLLER_MANAGER, SCHEDULER]
                .into_iter()
                .filter(|&d| d != c)
                .filter_map(|d| {
                    Some(skew::Beside {
                        kind: kind(d)?,
                        written: minor(node.ledgers[d].content_hash.as_ref()),
                        last_known_good: minor(node.ledgers[d].last_known_good.as_ref()),
                    })
                })
                .collect(),
        }
    }

    fn version_index(&self, id: &str) -> usize {
        self.versions.iter().position(|v| v.id == id).expect("a known version")
    }

    fn perform(&mut self, n: usize, c: usize, proc: &mut AnchorProc, effects: Vec<Effect>) {
        let mut queue: std::collections::VecDeque<Effect> = effects.into();
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Write { version } => {
                    self.write(n, c, &version);
                    queue.extend(proc.machine.step(Input::Written {
                        done: true,
                        now: Duration::from_secs(self.now),
                    }));
                }
                // The daemon asks for its pod's inputs (`input_revision`), as it renews and gives
                // back.
                Effect::AskTurn { .. } => {
                    let answer = if self.anchor_reaches_api(n) {
                        let version = self.versions[proc.expects].id.clone();
                        Ok(self.ask_lease(n, c, &version))
                    } else {
                        Err("API unreachable".to_owned())
                    };
                    let more = proc.machine.step(Input::Asked {
                        answer: Answer::Lease {
                            lease: rollout::LEASE.to_owned(),
                            turn: answer,
                        },
                        instant: self.instant(),
                        wall: wall(self.now),
                    });
                    queue.extend(more);
                }
                // As the daemon asks (`RolloutLease::first_write`): an unreachable API is no word
                // against the write.
                Effect::AskFirstWrite { version } => {
                    let word = if self.anchor_reaches_api(n) {
                        let revision = self.versions[proc.expects].id.clone();
                        Ok(rollout::first_write(
                            std::slice::from_ref(&self.turn_lease),
                            &self.nodes[n].name,
                            COMPONENTS[c],
                            Some(&revision),
                            &[],
                        ))
                    } else {
                        Err("API unreachable".to_owned())
                    };
                    queue.extend(proc.machine.step(Input::FirstWriteAsked {
                        version,
                        answer: FirstWriteAnswer::Lease {
                            lease: rollout::LEASE.to_owned(),
                            word,
                        },
                    }));
                }
                Effect::CheckMargin { version } => {
                    let facts = match c {
                        APISERVER => self.api_server_margin_facts(n),
                        ETCD => self.margin_facts(n),
                        _ => MarginFacts::Unknown("no margin asked for this component".into()),
                    };
                    let more = proc.machine.step(Input::MarginChecked {
                        images: None,
                        facts,
                        skew: self.skew_facts(n, c, &version),
                        instant: self.instant(),
                        wall: wall(self.now),
                    });
                    queue.extend(more);
                }
                Effect::Resync => queue.extend(self.sync_step(n, c, proc)),
                Effect::RecoverTurn => {
                    if self.anchor_reaches_api(n) {
                        let more = proc.machine.step(Input::Recovered {
                            held_here: self.turn_holder(c) == Some(n),
                            ledger: &self.nodes[n].ledgers[c],
                            instant: self.instant(),
                        });
                        queue.extend(more);
                    }
                }
                Effect::GiveBackEarlierTurn => {
                    if self.anchor_reaches_api(n) {
                        self.release_lease(n, c, TurnEnd::Neither);
                        queue.extend(proc.machine.step(Input::EarlierGivenBack));
                    }
                }
                Effect::Promote { version } => {
                    if self.promote_version(n, c, &version) {
                        self.report.promotions += 1;
                    }
                }
                Effect::RollBack { failed, reason } => {
                    let Some(to) = self.nodes[n].ledgers[c]
                        .last_known_good
                        .clone()
                        .filter(|l| *l != failed)
                    else {
                        queue.extend(proc.machine.step(Input::NoLastKnownGood {
                            now: Duration::from_secs(self.now),
                        }));
                        continue;
                    };
                    let spec = &self.versions[self.version_index(&failed)];
                    if spec.fault.is_none() && !(c == ETCD && spec.minor < self.cluster_version) {
                        let detail = format!(
                            "{} rolled back {failed} on {}: {reason}",
                            COMPONENTS[c], self.nodes[n].name
                        );
                        self.violate(Invariant::GoodRolledBack, detail);
                    }
                    self.report.rollbacks += 1;
                    self.report.rolled_back_at.push(self.now);
                    let at = self.stamp();
                    self.nodes[n].ledgers[c].mark_bad(BadVersion {
                        hash: failed.clone(),
                        at,
                        reason: reason.clone(),
                    });
                    self.write(n, c, &to);
                    let note = format!("{failed} failed its trial ({reason}); rolled back to last-known-good {to}");
                    queue.extend(proc.machine.step(Input::RolledBack { to, note }));
                }
                Effect::GiveBackTurn { failed, ran, .. } => {
                    if self.anchor_reaches_api(n) {
                        let revision = self.versions[proc.expects].id.clone();
                        let end = match (failed, ran) {
                            (true, _) => TurnEnd::Failed(&revision),
                            (false, true) => TurnEnd::Ran(&revision),
                            (false, false) => TurnEnd::Neither,
                        };
                        self.release_lease(n, c, end);
                        queue.extend(proc.machine.step(Input::GivenBack));
                    }
                }
                // As the daemon renews: it asks for the turn again, for its pod's inputs, and
                // counts it renewed whatever the answer (`anchor::Daemon`, `Lease::ask`).
                Effect::RenewTurn => {
                    if self.anchor_reaches_api(n) {
                        let version = self.versions[proc.expects].id.clone();
                        self.ask_lease(n, c, &version);
                        queue.extend(proc.machine.step(Input::Renewed {
                            instant: self.instant(),
                        }));
                    }
                }
                Effect::Refused { reason } => {
                    proc.input_error = Some(format!("credentials refused, nothing written: {reason}"));
                }
                // Every evaluation looks at the dependency.
                Effect::LookAtDependency
                | Effect::RecordLkgFailing { .. }
                | Effect::LkgFailing { .. }
                | Effect::Log(_) => {}
                Effect::Ready { ready, .. } => proc.ready = ready,
                Effect::RecordClientsServed { clients } => self.nodes[n].ledgers[c].clients_served = Some(clients),
                Effect::AskClients => {
                    let clients = self.clients(n, c);
                    queue.extend(proc.machine.step(Input::ClientsAsked { clients }));
                }
            }
        }
    }

    /// `RolloutLease::ask` for node `n`'s anchor of component `c` and `version`:
    /// `rollout::decide` on the Lease as it is, and the Lease taken (created when the operator
    /// deleted it) on `Take`.
    fn ask_lease(&mut self, n: usize, c: usize, version: &str) -> rollout::LeaseAnswer {
        let me = &self.nodes[n].name;
        let turn = rollout::decide(
            std::slice::from_ref(&self.turn_lease),
            me,
            COMPONENTS[c],
            Some(version),
            &[],
        );
        if turn == rollout::LeaseAnswer::Take {
            self.turn_lease = rollout::take(&self.turn_lease, me, COMPONENTS[c], wall(self.now));
        }
        turn
    }

    /// `RolloutLease::release` by node `n` for component `c`: only a turn it holds, recording
    /// how it `end`ed (its inputs' version failed, or ran).
    fn release_lease(&mut self, n: usize, c: usize, end: TurnEnd<'_>) {
        if let Some(after) = rollout::give_back(&self.turn_lease, &self.nodes[n].name, COMPONENTS[c], end) {
            self.turn_lease = after;
        }
    }

    /// The node holding the rollout turn for component `c`.
    fn turn_holder(&self, c: usize) -> Option<usize> {
        let holder = self
            .turn_lease
            .holder()
            .filter(|_| self.turn_lease.components.contains(COMPONENTS[c]))?;
        self.nodes.iter().position(|node| node.name == holder)
    }

    /// `Engine::promote`: refused, recording nothing, when the node no longer runs `version` or
    /// it was recorded bad meanwhile (an operator's `rollback` while the anchor judged it); else
    /// last-known-good, and the history pruned to the default retention.
    fn promote_version(&mut self, n: usize, c: usize, version: &str) -> bool {
        let now = self.stamp();
        let ledger = &mut self.nodes[n].ledgers[c];
        if ledger.content_hash.as_deref() != Some(version) || ledger.bad_version(version).is_some() {
            return false;
        }
        ledger.mark_good(version, &now);
        ledger.prune_history(Retention::default());
        true
    }

    fn write(&mut self, n: usize, c: usize, id: &str) {
        let v = self.version_index(id);
        if self.nodes[n].pods[c].manifest == Some(v) && self.nodes[n].ledgers[c].content_hash.as_deref() == Some(id) {
            return; // in place: nothing written
        }
        self.report.writes += 1;
        self.report.last_write_at = Some(self.now);
        self.report.first_write_at.get_or_insert(self.now);
        self.nodes[n].pods[c].manifest = Some(v);
        // As `Engine::apply` records a write.
        let now = self.stamp();
        let ledger = &mut self.nodes[n].ledgers[c];
        ledger.content_hash = Some(id.to_owned());
        history::applied(&mut ledger.history, id, &now);
        ledger.prune_history(Retention::default());
        let spec = self.versions[v].clone();
        if c == ETCD && spec.minor < self.cluster_version {
            let detail = format!(
                "{} wrote etcd {id} (3.{}) on a cluster at version 3.{}",
                self.nodes[n].name, spec.minor, self.cluster_version
            );
            self.violate(Invariant::SkewWritten, detail);
        }
        if let Some(against) = self.kubernetes_skew(n, c, spec.minor) {
            let detail = format!(
                "{} wrote {} {id} (1.{}) while {against}",
                self.nodes[n].name, COMPONENTS[c], spec.minor
            );
            self.violate(Invariant::SkewWritten, detail);
        }
        if let Some(fault) = spec.fault
            && self.refusal(v).is_none()
        {
            let on = self.written_on.entry(v).or_default();
            on.insert(n);
            if on.len() >= 2 {
                let nodes = on
                    .iter()
                    .map(|&i| self.nodes[i].name.clone())
                    .collect::<Vec<_>>()
                    .join(", ");
                let detail = format!("{id} ({fault:?}) written on {nodes}");
                self.violate(Invariant::BadVersionSpread, detail);
            }
        }
    }

    /// What the version skew policy has against Kubernetes component `c` at minor `minor` on
    /// node `n`, beside the versions the selected nodes' manifests name (a node that is off comes
    /// back with them): API servers more than one minor apart, or a kube-controller-manager or
    /// kube-scheduler newer than an API server or more than one minor older.
    fn kubernetes_skew(&self, n: usize, c: usize, minor: u32) -> Option<String> {
        let written = |d: usize| {
            (0..self.nodes.len())
                .filter(move |&m| self.nodes[m].selected && (m, d) != (n, c))
                .filter_map(move |m| self.nodes[m].pods[d].manifest.map(|v| (m, d, self.versions[v].minor)))
        };
        let found = match c {
            APISERVER => written(APISERVER)
                .find(|&(_, _, other)| other.abs_diff(minor) > 1)
                .or_else(|| {
                    written(CONTROLLER_MANAGER)
                        .chain(written(SCHEDULER))
                        .find(|&(_, _, other)| other > minor || other + 1 < minor)
                }),
            CONTROLLER_MANAGER | SCHEDULER => written(APISERVER).find(|&(_, _, api)| minor > api || minor + 1 < api),
            _ => None,
        };
        found.map(|(m, d, other)| format!("{} 1.{other} is on {}", COMPONENTS[d], self.nodes[m].name))
    }

    // ---- the preStop hooks -------------------------------------------------------------------

    /// Node `n`'s anchor pod of component `c` by name (its DaemonSet's name and a suffix of
    /// its own).
    fn anchor_pod_name(&self, n: usize, c: usize) -> String {
        let serial = match self.nodes[n].anchor_pods[c] {
            AnchorPodObject::Bound { serial, .. }
            | AnchorPodObject::Pending { serial, .. }
            | AnchorPodObject::Terminating { serial } => serial,
            AnchorPodObject::Absent => 0,
        };
        format!("{}-anchor-{}-{serial}", COMPONENTS[c], self.nodes[n].name)
    }

    fn daemonset(&self, c: usize) -> DaemonSetFacts {
        DaemonSetFacts {
            namespace: "kube-system".into(),
            name: format!("{}-anchor", COMPONENTS[c]),
            uid: format!("ds-{c}"),
            deleting: false,
            selection: NodeSelection {
                node_selector: [(CONTROL_PLANE_LABEL.to_owned(), String::new())].into(),
                required_terms: Vec::new(),
            },
            decommission: false,
        }
    }

    /// Node `m`'s anchor pod of component `c` as the API lists it: Ready while its anchor runs
    /// and its static pod is ready; a deleted one is listed, terminating, until its hook has
    /// ended and its kubelet has seen the deletion.
    fn anchor_pod(&self, m: usize, c: usize) -> Option<AnchorPod> {
        let node = &self.nodes[m];
        let terminating = match node.anchor_pods[c] {
            AnchorPodObject::Absent => return None,
            AnchorPodObject::Bound { .. } | AnchorPodObject::Pending { .. } => false,
            AnchorPodObject::Terminating { .. } => true,
        };
        let bound = !matches!(node.anchor_pods[c], AnchorPodObject::Pending { .. });
        Some(AnchorPod {
            namespace: "kube-system".into(),
            name: self.anchor_pod_name(m, c),
            node: bound.then(|| node.name.clone()),
            terminating,
            ready: !terminating && node.anchors[c].is_some() && self.ready(m, c),
            static_copy: false,
        })
    }

    /// What the API tells node `n`'s hook of component `c`.
    fn prestop_evidence(&self, n: usize, c: usize) -> Evidence {
        if !self.anchor_reaches_api(n) {
            let why = || "connection refused".to_owned();
            return Evidence {
                pod: Lookup::Unavailable(why()),
                daemonset: None,
                node: Lookup::Unavailable(why()),
                anchors: None,
                dependents: None,
            };
        }
        let node = &self.nodes[n];
        let labels = if node.selected {
            [(CONTROL_PLANE_LABEL.to_owned(), String::new())].into()
        } else {
            BTreeMap::new()
        };
        let static_pods_ready = (0..self.nodes.len())
            .filter(|&m| {
                let other = &self.nodes[m];
                other.pods[c].mirror.is_some_and(|(_, ready, _)| ready) && self.api_shows_ready(m)
            })
            .map(|m| self.nodes[m].name.clone())
            .collect();
        // The charts' kube-apiserver probes `${NODE_IP}:6443/readyz`, which another node can ask
        // (etcd's and kube-scheduler's probe 127.0.0.1 and are never asked): the hook asks every
        // other copy whose mirror pod it finds, and one that does not answer Ready is silent.
        let silent_copies = if c == APISERVER {
            (0..self.nodes.len())
                .filter(|&m| {
                    m != n
                        && self.nodes[m].pods[c].mirror.is_some()
                        && (!self.linked(n, m) || self.health(m, c).is_err())
                })
                .map(|m| self.nodes[m].name.clone())
                .collect()
        } else {
            BTreeSet::new()
        };
        // The anchor pods bound to this node whose `--depends-on` names this component.
        let dependents = (0..COMPONENTS.len())
            .filter(|&d| DEPENDS_ON[d] == Some(c))
            .filter_map(|d| {
                let pod = self.anchor_pod(n, d).filter(|pod| pod.node.is_some())?;
                Some(Dependent {
                    namespace: pod.namespace,
                    name: pod.name,
                    component: COMPONENTS[d].into(),
                    going: pod.terminating || !node.selected,
                })
            })
            .collect();
        let daemonset = self.daemonset(c);
        Evidence {
            // A pod podgc force-deleted is gone at once.
            pod: if node.anchor_pods[c] == AnchorPodObject::Absent {
                Lookup::NotFound
            } else {
                Lookup::Found(PodFacts {
                    owner: Some(DaemonSetRef {
                        name: daemonset.name.clone(),
                        uid: daemonset.uid.clone(),
                    }),
                    deleting: true,
                })
            },
            daemonset: Some(Lookup::Found(daemonset.clone())),
            node: if node.registered {
                Lookup::Found(NodeFacts {
                    name: node.name.clone(),
                    labels,
                    deleting: false,
                    decommission: false,
                })
            } else {
                Lookup::NotFound
            },
            anchors: Some(Lookup::Found(Anchors {
                daemonsets: vec![daemonset],
                pods: (0..self.nodes.len()).filter_map(|m| self.anchor_pod(m, c)).collect(),
                static_pods_ready,
                silent_copies,
            })),
            dependents: Some(Lookup::Found(dependents)),
        }
    }

    /// Component `c`'s ledger on node `n`, as a dependent's hook reads it.
    fn files_here(&self, n: usize, c: usize) -> FilesHere {
        if self.nodes[n].ledgers[c].decommissioned.is_some() {
            FilesHere::Decommissioned
        } else if self.nodes[n].pods[c].manifest.is_some() {
            FilesHere::Kept
        } else {
            FilesHere::Nothing
        }
    }

    /// One attempt of node `n`'s member to leave: the real `membership::decide_leave` on the
    /// member list, then etcd's own check ([`World::remove_member`]).
    fn leave(&mut self, n: usize) -> LeaveAnswer {
        let me = self.me(n);
        let observed = self.observe_members(n);
        let healthy = self.healthy_members_from(n);
        match membership::decide_leave(&LeaveFacts {
            me: &me,
            observed: &observed,
            healthy: &healthy,
        }) {
            Leave::Remove { id } => match self.remove_member(n, n) {
                Ok(()) => LeaveAnswer::Removed { id },
                Err(reason) => LeaveAnswer::Refused {
                    reason,
                    may_pass_later: true,
                },
            },
            Leave::NotAMember => LeaveAnswer::NotAMember,
            Leave::Refuse(refusal) => LeaveAnswer::Refused {
                reason: refusal.to_string(),
                may_pass_later: refusal.may_pass_later(),
            },
        }
    }

    /// Node `n`'s hook of component `c`, one second: the action due is performed and what it
    /// gave goes to the real machine. The run stays in `hooks` while the action is performed:
    /// its pod is listed, terminating, for as long as the hook runs.
    fn prestop(&mut self, n: usize, c: usize) {
        let now = self.now;
        let Some(run) = &self.nodes[n].hooks[c] else {
            return;
        };
        if now >= run.started + PRESTOP_TIMEOUT {
            // `pre-stop` stops where it is at its --timeout.
            self.nodes[n].hooks[c] = None;
            *self.report.hook_exits.entry("timed-out").or_default() += 1;
            return;
        }
        if run.due > now {
            return;
        }
        let (started, action) = (run.started, run.action.clone());
        let since = Duration::from_secs(now - started);
        let observation = match &action {
            Action::GatherEvidence { until } => {
                let evidence = self.prestop_evidence(n, c);
                let files: [FilesHere; 4] = std::array::from_fn(|d| self.files_here(n, d));
                let this = ThisPod {
                    namespace: "kube-system".into(),
                    name: self.anchor_pod_name(n, c),
                    node: self.nodes[n].name.clone(),
                };
                let run = self.nodes[n].hooks[c].as_mut().expect("checked above");
                let looks = run
                    .looks
                    .get_or_insert_with(|| Looks::new(this, GUARDS[c], Duration::from_secs(CONFIRM_INTERVAL), *until));
                let files_here = |component: &str| files[component_index(component)].clone();
                match looks.look(&evidence, files_here, since) {
                    NextLook::Again { at, .. } => {
                        run.due = started + at.as_secs();
                        return;
                    }
                    NextLook::Decided(decision) => Observation::Decided(decision),
                }
            }
            Action::Leave { .. } => Observation::Left(self.leave(n)),
            Action::MarkDecommissioned { reason } => {
                self.nodes[n].ledgers[c].decommissioned = Some(Decommissioned {
                    at: format!("{now}s"),
                    reason: reason.clone(),
                    by_pod: Some(self.anchor_pod_name(n, c)),
                });
                Observation::Done
            }
            Action::GiveBackTurn { .. } => {
                if self.anchor_reaches_api(n) {
                    self.release_lease(n, c, TurnEnd::Neither);
                }
                Observation::Done
            }
            Action::RemoveManifest => {
                self.check_removal(n, c);
                self.nodes[n].pods[c].manifest = None;
                Observation::Done
            }
            Action::WaitStopped { until } | Action::WaitEtcdStopped { until } => {
                let stopped = self.nodes[n].pods[c].container.is_none();
                if !stopped && since < *until {
                    self.nodes[n].hooks[c].as_mut().expect("checked above").due = now + 1;
                    return;
                }
                match action {
                    Action::WaitEtcdStopped { .. } => Observation::EtcdStopped(stopped),
                    _ => Observation::Done,
                }
            }
            Action::SaveAndRemoveDataDir => {
                let on_root = self.nodes[n].hooks[c].as_ref().is_some_and(|run| run.on_root);
                *self.data_in_mut(n, on_root) = None;
                self.nodes[n].record = None;
                Observation::Done
            }
            Action::Warn { .. }
            | Action::RecordIntentToLeave { .. }
            | Action::RecordLeaveHeld { .. }
            | Action::Pause { .. }
            | Action::RunBeforeRemove { .. }
            | Action::RemoveCredentials => Observation::Done,
            Action::Exit(_) => unreachable!("an exited hook is not kept"),
        };
        let mut run = self.nodes[n].hooks[c].take().expect("checked above");
        let (hook, action) = run.hook.step(observation, since);
        if let Action::Exit(exit) = &action {
            *self.report.hook_exits.entry(exit.decision()).or_default() += 1;
            return;
        }
        run.due = now
            + match &action {
                Action::Pause { pause, .. } => pause.as_secs(),
                _ => 1,
            };
        run.hook = hook;
        run.action = action;
        self.nodes[n].hooks[c] = Some(run);
    }

    /// A kubelet restart or a power cut cuts off node `n`'s hooks (each is an exec the kubelet
    /// runs in the container).
    fn abort_hooks(&mut self, n: usize) {
        for c in 0..COMPONENTS.len() {
            if self.nodes[n].hooks[c].take().is_some() {
                *self.report.hook_exits.entry("aborted").or_default() += 1;
            }
        }
    }

    // ---- the invariants --------------------------------------------------------------------

    /// The guard's promise, against the world's truth: removing component `c` from node `n`
    /// leaves a majority of its copies running it Ready, or under the last-copy guard one.
    fn check_removal(&mut self, n: usize, c: usize) {
        let copies = (0..self.nodes.len())
            .filter(|&m| self.anchor_pod(m, c).is_some())
            .count();
        let serving: Vec<String> = (0..self.nodes.len())
            .filter(|&m| m != n && self.nodes[m].selected && self.ready(m, c))
            .map(|m| self.nodes[m].name.clone())
            .collect();
        if GUARDS[c] == Guard::LastCopy {
            if serving.is_empty() && copies >= 2 {
                let detail = format!(
                    "{}'s hook removed {} with none of its {copies} copies running elsewhere",
                    self.nodes[n].name, COMPONENTS[c]
                );
                self.violate(Invariant::RemovedLastCopy, detail);
            }
        } else if serving.len() <= copies / 2 {
            let detail = format!(
                "{}'s hook removed {} with {} of its {copies} copies running elsewhere ({})",
                self.nodes[n].name,
                COMPONENTS[c],
                serving.len(),
                serving.join(", ")
            );
            self.violate(Invariant::RemovedBelowQuorum, detail);
        }
    }

    /// An anchor's look at its drain guard (`Daemon::keep_drain_guard`, every `GUARD_PERIOD`):
    /// the real [`drain_guard::decide`] on what the API shows, carried out at once. The budget
    /// counts the nodes the DaemonSet selects (`desiredNumberScheduled`: a registered Node with
    /// the chart's labels).
    fn guard_step(&mut self, n: usize, c: usize) {
        if !self.anchor_reaches_api(n) {
            return;
        }
        let node = &self.nodes[n];
        let ledger = &node.ledgers[c];
        let facts = GuardFacts {
            wanted: ledger
                .content_hash
                .as_ref()
                .filter(|_| ledger.decommissioned.is_none())
                .map(|_| GUARD_SPEC.to_owned()),
            seen: node.guards[c].then(|| SeenGuard {
                digest: Some(GUARD_SPEC.to_owned()),
                terminating: false,
            }),
            cordoned: node.cordoned,
            nodes: Some(self.nodes.iter().filter(|m| m.selected && m.registered).count() as i32),
            min_available: self.min_available[c],
        };
        for action in drain_guard::decide(&facts) {
            match action {
                GuardAction::Create => self.nodes[n].guards[c] = true,
                GuardAction::Replace | GuardAction::Delete => self.nodes[n].guards[c] = false,
                GuardAction::SetMinAvailable(k) => self.min_available[c] = Some(k),
            }
        }
    }

    /// The API's view of node `n`'s guard of `c`: it exists and was Ready when the kubelet last
    /// posted, and the node lifecycle controller has not marked the node's pods not Ready since.
    fn guard_ready_in_api(&self, n: usize, c: usize) -> bool {
        let node = &self.nodes[n];
        node.guards[c] && node.guards_ready_posted[c] && self.api_shows_ready(n)
    }

    /// The Eviction API on node `n`'s guard of `c` (pkg/registry/core/pod/storage/eviction.go):
    /// a Ready guard goes while the Ready guards without it keep the budget's `minAvailable`,
    /// one not Ready while the Ready ones keep it (`unhealthyPodEvictionPolicy:
    /// IfHealthyBudget`). The disruption controller counts the pods the budget selects (an
    /// integer `minAvailable`: pkg/controller/disruption, `getExpectedPodCount`); its status is
    /// taken as current. No `minAvailable` (neither field set): nothing is held.
    fn evictable(&self, n: usize, c: usize) -> bool {
        let healthy = (0..self.nodes.len()).filter(|&m| self.guard_ready_in_api(m, c)).count() as i32;
        let min = self.min_available[c].unwrap_or(0);
        if self.guard_ready_in_api(n, c) {
            healthy > min
        } else {
            healthy >= min
        }
    }

    /// The pending drains' evictions (kubectl drain's `evictPods`: each pod of the node through
    /// the Eviction API, refused with 429 while the budget allows no disruption and tried again
    /// every 5 s); a drain whose node has no guard left goes on to the reboot. An eviction needs
    /// an API server; a node whose power went meanwhile is left to its boot.
    fn drain_step(&mut self) {
        if !self.any_api(|w, j| w.serves_clients(j)) {
            return;
        }
        self.drains.retain(|&(n, ..)| self.nodes[n].powered);
        let mut done = Vec::new();
        for i in 0..self.drains.len() {
            let n = self.drains[i].0;
            for c in GUARDED {
                if self.nodes[n].guards[c] && self.evictable(n, c) {
                    self.nodes[n].guards[c] = false;
                }
            }
            if GUARDED.iter().all(|&c| !self.nodes[n].guards[c]) {
                done.push(i);
            }
        }
        for i in done.into_iter().rev() {
            let (n, down_for, began) = self.drains.remove(i);
            self.report.drain_waits.push(self.now - began);
            self.check_drain(n);
            self.cut_power(n, down_for);
        }
    }

    /// Whether the control plane could lose node `n` when a drain takes it down
    /// ([`Invariant::DrainedBelowQuorum`]).
    fn check_drain(&mut self, n: usize) {
        let members = self.members();
        let own = self.nodes[n].member_id;
        let healthy_elsewhere = self.healthy_members().into_iter().filter(|&id| id != own).count();
        let mut short = Vec::new();
        if members >= 3 && self.nodes[n].listed == Listed::Voter && healthy_elsewhere <= members / 2 {
            short.push(format!(
                "{healthy_elsewhere} of {members} etcd members healthy elsewhere"
            ));
        }
        let selected = (0..self.nodes.len()).filter(|&m| self.nodes[m].selected).count();
        if selected >= 2
            && self.nodes[n].selected
            && !(0..self.nodes.len()).any(|m| m != n && self.nodes[m].selected && self.serves_clients(m))
        {
            short.push("no other API server serving clients".into());
        }
        if !short.is_empty() {
            let detail = format!("a drain took {} down with {}", self.nodes[n].name, short.join(" and "));
            self.violate(Invariant::DrainedBelowQuorum, detail);
        }
    }

    fn world_down(&self, n: usize) -> bool {
        !self.nodes[n].powered || self.now < self.nodes[n].world_down_until
    }

    fn check(&mut self) {
        // etcd: over its members (a node that left is not one).
        let members = self.members();
        let world_down = (0..self.nodes.len())
            .filter(|&n| self.nodes[n].listed == Listed::Voter && self.world_down(n))
            .count();
        if members >= 3 && world_down <= (members - 1) / 2 && !self.has_quorum(MAIN_CLUSTER) {
            let running = self.members_running(MAIN_CLUSTER);
            // The most that reach each other, where a partition splits them.
            let together = (0..self.nodes.len())
                .map(|n| self.members_reached(n, MAIN_CLUSTER))
                .max()
                .unwrap_or(0);
            let apart = if together < running {
                format!(", at most {together} reaching each other")
            } else {
                String::new()
            };
            self.violate(
                Invariant::QuorumLost,
                format!("{running} of {members} members run{apart}; the world took {world_down} down"),
            );
        }
        // The API servers: over the nodes the charts select (a node the operator took out of
        // the control plane serves nobody by design).
        let selected = || (0..self.nodes.len()).filter(|&n| self.nodes[n].selected);
        let count = selected().count();
        // A hung kube-apiserver is the world's doing too.
        let api_world_down = |n: usize| self.world_down(n) || self.api_hung(n);
        let world_down = selected().filter(|&n| api_world_down(n)).count();
        let minority = count.saturating_sub(1) / 2;
        if count >= 3 {
            let down: Vec<usize> = selected()
                .filter(|&n| !api_world_down(n) && !self.serves_clients(n))
                .collect();
            let serving = selected().filter(|&n| self.serves_clients(n)).count();
            // Where the world took the others down, an API server stopped by what the anchors
            // wrote (a manifest replacing the running one, a version with a fault) is still the
            // one that left clients with none: the world's share never excuses the anchors' own.
            let stopped_here = selected().any(|n| {
                let pod = &self.nodes[n].pods[APISERVER];
                let written_here = match &pod.container {
                    None => pod.manifest.is_some(),
                    Some(ct) => pod.manifest != Some(ct.version) || self.versions[ct.version].fault.is_some(),
                };
                !api_world_down(n) && !self.serves_clients(n) && written_here
            });
            if down.len() >= 2 || (serving == 0 && (world_down <= minority || stopped_here)) {
                let names = down
                    .iter()
                    .map(|&n| self.nodes[n].name.clone())
                    .collect::<Vec<_>>()
                    .join(", ");
                self.violate(
                    Invariant::ApiServersDown,
                    format!("API servers not serving clients on {names}; the world took {world_down} down"),
                );
            }
        }
        let clusters: BTreeSet<u64> = (0..self.nodes.len())
            .filter(|&n| self.runs(n, ETCD))
            .filter_map(|n| self.etcd_data(n).map(|d| d.cluster))
            .collect();
        if clusters.len() >= 2 {
            self.violate(
                Invariant::TwoClusters,
                format!("etcd clusters {clusters:?} run at once"),
            );
        }
    }

    fn check_recovered(&mut self) {
        let mut wrong = Vec::new();
        for n in 0..self.nodes.len() {
            if !self.nodes[n].powered || !self.nodes[n].selected {
                continue;
            }
            for c in 0..COMPONENTS.len() {
                let good = self.nodes[n].pods[c]
                    .container
                    .as_ref()
                    .filter(|ct| matches!(ct.phase, Phase::Running { .. }))
                    .map(|ct| &self.versions[ct.version])
                    .filter(|v| v.fault.is_none() && !(c == ETCD && v.minor < self.cluster_version));
                if good.is_none() || !self.ready(n, c) {
                    let what = match &self.nodes[n].pods[c].container {
                        Some(ct) => format!("{} {:?}", self.versions[ct.version].id, ct.phase),
                        None => "nothing".into(),
                    };
                    wrong.push(format!("{} runs {what}", self.nodes[n].name));
                }
            }
        }
        if !self.any_api(|w, j| w.serves_clients(j)) {
            wrong.push("no API server serves clients".into());
        }
        // The run's last second was `now - 1`.
        for c in [CONTROLLER_MANAGER, SCHEDULER] {
            if !self.led_at(c, self.now - 1) {
                wrong.push(format!("no {} leads", COMPONENTS[c]));
            }
        }
        if let Some(h) = self.turn_lease.holder() {
            let components: Vec<&str> = self.turn_lease.components.iter().map(String::as_str).collect();
            wrong.push(format!("{h} holds the rollout turn for {}", components.join(" and ")));
        }
        if !wrong.is_empty() {
            self.violate(Invariant::NotRecovered, wrong.join("; "));
        }
    }
}

// ---- generated runs and shrinking -----------------------------------------------------------

/// How many operations a generated run has, and over how long they are spread.
pub const GENERATED_OPS: usize = 20;
pub const GENERATED_SPAN: u64 = 30 * 60;

/// A run drawn from `seed`: `nodes` nodes, [`GENERATED_OPS`] operations over
/// [`GENERATED_SPAN`] (pushes good and bad of every kind, helm rollbacks, power cuts of any
/// subset, on three nodes a node cut off from the others by the network, kubelet restarts, a
/// hung kube-apiserver, drains with a reboot, and now and then a
/// power cut of the node holding a turn, a rollout Lease deleted, a one-shot `rollback`,
/// `rollback --to`, `retry`, `apply`, `remove` or `bootstrap --join` on a node, a boot with a late data disk or a re-image, and on
/// three nodes, in the last quarter, the last one leaving the control plane).
pub fn generate(nodes: usize, seed: u64) -> Scenario {
    let mut rng = Rng::new(seed ^ 0x005e_ed0f_0be7);
    let mut ops = Vec::with_capacity(GENERATED_OPS);
    for _ in 0..GENERATED_OPS {
        let at = rng.uniform(0.0, GENERATED_SPAN as f64) as u64;
        // etcd and kube-apiserver 35 % each, kube-controller-manager and kube-scheduler 15 %.
        let component = match rng.next_u64() % 20 {
            0..7 => ETCD,
            7..14 => APISERVER,
            14..17 => CONTROLLER_MANAGER,
            _ => SCHEDULER,
        };
        let roll = rng.next_u64() % 100;
        let op = match roll {
            0..35 => Op::Push {
                component,
                fault: None,
                minor_up: rng.next_u64().is_multiple_of(4),
            },
            35..60 => {
                let faults: Vec<Fault> = Fault::ALL.into_iter().filter(|f| f.applies_to(component)).collect();
                Op::Push {
                    component,
                    fault: Some(faults[(rng.next_u64() % faults.len() as u64) as usize]),
                    minor_up: false,
                }
            }
            60..67 => Op::HelmRollback { component },
            // Three nodes or more: one node (a minority) cut off from the others.
            80..82 if nodes >= 3 => Op::Partition {
                nodes: vec![(rng.next_u64() % nodes as u64) as usize],
                for_secs: rng.uniform(30.0, 900.0) as u64,
            },
            67..82 => {
                let mut cut: Vec<usize> = (0..nodes).filter(|_| rng.next_u64().is_multiple_of(2)).collect();
                if cut.is_empty() {
                    cut.push((rng.next_u64() % nodes as u64) as usize);
                }
                Op::PowerCut {
                    nodes: cut,
                    down_for: rng.uniform(10.0, 600.0) as u64,
                }
            }
            82..88 => Op::KubeletRestart {
                node: (rng.next_u64() % nodes as u64) as usize,
            },
            88..91 => Op::HangApiServer {
                node: (rng.next_u64() % nodes as u64) as usize,
                for_secs: rng.uniform(20.0, 200.0) as u64,
            },
            91..94 => Op::Drain {
                node: (rng.next_u64() % nodes as u64) as usize,
                down_for: rng.uniform(30.0, 300.0) as u64,
            },
            94 => Op::CutTurnHolder {
                component,
                down_for: rng.uniform(10.0, 600.0) as u64,
            },
            95 => Op::DeleteLease,
            96 => Op::Verb {
                node: (rng.next_u64() % nodes as u64) as usize,
                component,
                verb: match rng.next_u64() % 12 {
                    0..4 => Verb::Rollback,
                    4..6 => Verb::Retry,
                    6..8 => Verb::Apply,
                    8 => Verb::BootstrapJoin,
                    9 => Verb::Remove,
                    _ => Verb::RollbackTo {
                        releases_back: 1 + (rng.next_u64() % 3) as usize,
                    },
                },
            },
            97 => Op::LateDataDisk {
                node: (rng.next_u64() % nodes as u64) as usize,
                down_for: rng.uniform(10.0, 600.0) as u64,
                mount_after: rng.uniform(5.0, 300.0) as u64,
            },
            // Three nodes or more: now and then, late in the run, the last one leaves the control plane
            // (the invariants about quorum and API servers hold for three nodes or more, so an
            // early leave would leave the rest of the run unchecked).
            99 if nodes >= 3 && at >= GENERATED_SPAN * 3 / 4 => Op::Deselect { node: nodes - 1 },
            _ => Op::Reimage {
                node: (rng.next_u64() % nodes as u64) as usize,
            },
        };
        ops.push((at, op));
    }
    ops.sort_by_key(|(at, _)| *at);
    // The charts' two layouts, one seed in two each.
    let daemonsets = if seed.is_multiple_of(2) {
        DaemonSets::OnePerComponent
    } else {
        DaemonSets::PerNode
    };
    Scenario { nodes, daemonsets, ops }
}

/// A smaller `scenario` with which `seed` still shows `invariant`. Passes over it until one
/// changes nothing, each keeping every change that still shows the violation: an operation
/// dropped; the run on one node (operations on the others dropped); a node dropped from a power
/// cut; an operation moved halfway to the one before it; a power cut or a partition halved.
pub fn shrink(scenario: &Scenario, seed: u64, invariant: Invariant) -> Scenario {
    let shows = |s: &Scenario| World::run(s, seed).violations.contains_key(&invariant);
    let mut best = scenario.clone();
    loop {
        let before = best.clone();
        let mut i = 0;
        while i < best.ops.len() {
            let mut candidate = best.clone();
            candidate.ops.remove(i);
            if shows(&candidate) {
                best = candidate;
            } else {
                i += 1;
            }
        }
        if best.nodes > 1
            && let Some(alone) = on_first_node(&best)
            && shows(&alone)
        {
            best = alone;
        }
        // One change per operation and pass (the candidates are made from `best` as it stands).
        for i in 0..best.ops.len() {
            if let Some(candidate) = smaller_op(&best, i).into_iter().find(|c| shows(c)) {
                best = candidate;
            }
        }
        if best == before {
            return best;
        }
    }
}

/// `scenario` on its first node alone: what the others did is dropped. None when nothing is left.
fn on_first_node(scenario: &Scenario) -> Option<Scenario> {
    let ops: Vec<(u64, Op)> = scenario
        .ops
        .iter()
        .filter_map(|(at, op)| {
            let op = match op {
                Op::PowerCut { nodes, down_for } if nodes.contains(&0) => Op::PowerCut {
                    nodes: vec![0],
                    down_for: *down_for,
                },
                Op::PowerCut { .. } | Op::Partition { .. } => return None,
                Op::KubeletRestart { node }
                | Op::Reimage { node }
                | Op::Drain { node, .. }
                | Op::Verb { node, .. }
                | Op::SlowDisk { node }
                | Op::Deselect { node }
                | Op::Select { node }
                | Op::DeleteNode { node }
                | Op::LateDataDisk { node, .. }
                | Op::HangApiServer { node, .. }
                    if *node != 0 =>
                {
                    return None;
                }
                other => other.clone(),
            };
            Some((*at, op))
        })
        .collect();
    (!ops.is_empty()).then_some(Scenario {
        nodes: 1,
        daemonsets: scenario.daemonsets,
        ops,
    })
}

/// The one-step smaller versions of `scenario`'s operation `i`: each node of a power cut
/// dropped, the cut (or a drain's or a turn holder's time off) halved, the operation moved
/// halfway to the one before it.
fn smaller_op(scenario: &Scenario, i: usize) -> Vec<Scenario> {
    let with = |at: u64, op: Op| {
        let mut s = scenario.clone();
        s.ops[i] = (at, op);
        s
    };
    let (at, op) = scenario.ops[i].clone();
    let mut out = Vec::new();
    if let Op::PowerCut { nodes, down_for } = &op {
        if nodes.len() > 1 {
            for k in 0..nodes.len() {
                let mut fewer = nodes.clone();
                fewer.remove(k);
                out.push(with(
                    at,
                    Op::PowerCut {
                        nodes: fewer,
                        down_for: *down_for,
                    },
                ));
            }
        }
        if *down_for > 1 {
            out.push(with(
                at,
                Op::PowerCut {
                    nodes: nodes.clone(),
                    down_for: down_for / 2,
                },
            ));
        }
    }
    match &op {
        Op::Drain { node, down_for } if *down_for > 1 => out.push(with(
            at,
            Op::Drain {
                node: *node,
                down_for: down_for / 2,
            },
        )),
        Op::CutTurnHolder { component, down_for } if *down_for > 1 => out.push(with(
            at,
            Op::CutTurnHolder {
                component: *component,
                down_for: down_for / 2,
            },
        )),
        Op::Partition { nodes, for_secs } if *for_secs > 1 => out.push(with(
            at,
            Op::Partition {
                nodes: nodes.clone(),
                for_secs: for_secs / 2,
            },
        )),
        _ => {}
    }
    let previous = i.checked_sub(1).map_or(0, |p| scenario.ops[p].0);
    if at > previous {
        out.push(with(previous + (at - previous) / 2, op));
    }
    out
}

impl fmt::Display for Scenario {
    /// As a scenario to paste into a test.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Scenario {{")?;
        writeln!(f, "    nodes: {},", self.nodes)?;
        writeln!(f, "    daemonsets: DaemonSets::{:?},", self.daemonsets)?;
        writeln!(f, "    ops: vec![")?;
        for (at, op) in &self.ops {
            writeln!(f, "        ({at}, {}),", op_source(op))?;
        }
        writeln!(f, "    ],")?;
        write!(f, "}}")
    }
}

const COMPONENT_CONSTS: [&str; 4] = ["ETCD", "APISERVER", "CONTROLLER_MANAGER", "SCHEDULER"];

/// The index of a modelled component's name.
fn component_index(component: &str) -> usize {
    COMPONENTS
        .iter()
        .position(|x| *x == component)
        .expect("a modelled component")
}

/// `op` as Rust source.
fn op_source(op: &Op) -> String {
    match op {
        Op::Push {
            component,
            fault,
            minor_up,
        } => {
            let fault = match fault {
                Some(f) => format!("Some(Fault::{f:?})"),
                None => "None".into(),
            };
            format!(
                "Op::Push {{ component: {}, fault: {fault}, minor_up: {minor_up} }}",
                COMPONENT_CONSTS[*component]
            )
        }
        Op::HelmRollback { component } => {
            format!("Op::HelmRollback {{ component: {} }}", COMPONENT_CONSTS[*component])
        }
        Op::PowerCut { nodes, down_for } => format!("Op::PowerCut {{ nodes: vec!{nodes:?}, down_for: {down_for} }}"),
        Op::Partition { nodes, for_secs } => format!("Op::Partition {{ nodes: vec!{nodes:?}, for_secs: {for_secs} }}"),
        Op::CutTurnHolder { component, down_for } => format!(
            "Op::CutTurnHolder {{ component: {}, down_for: {down_for} }}",
            COMPONENT_CONSTS[*component]
        ),
        Op::DeleteLease => "Op::DeleteLease".to_owned(),
        Op::CutOffTurnHolder { component, for_secs } => format!(
            "Op::CutOffTurnHolder {{ component: {}, for_secs: {for_secs} }}",
            COMPONENT_CONSTS[*component]
        ),
        Op::Verb { node, component, verb } => format!(
            "Op::Verb {{ node: {node}, component: {}, verb: Verb::{verb:?} }}",
            COMPONENT_CONSTS[*component]
        ),
        other => format!("Op::{other:?}"),
    }
}
