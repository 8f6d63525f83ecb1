//! The randomized lifecycle run: a self-hosted control plane on three process nodes (the example
//! bootstrap script, every component chart installed), then a seeded sequence of operations and
//! faults, each applied while the previous ones may still be settling, with invariants checked
//! continuously and whenever the run lets the cluster settle. The first violation stops the run;
//! the run prints its seed and the operation's index, keeps the logs of every process of every
//! node, and the same seed replays the same sequence (the whole plan is drawn, and printed,
//! before the first operation).
//!
//! Operations: hard reboots of one, two or all three nodes (seeded boot delays), a node that
//! stays down for a while; `helm upgrade` of a component with a good change or a bad one (a flag
//! the component refuses; its health endpoints moved off the port its probes ask, so it runs and
//! never turns healthy; a private key that does not belong to its certificate, which the anchors
//! refuse before writing), `kube-anchor retry` on every node afterwards; an anchor pod deleted;
//! an anchor DaemonSet deleted and re-created; the scheduler's node relabelled out of its
//! selector and back; a node drained and uncordoned; one node's kube-apiserver stopped (SIGSTOP)
//! for 20-90 s, as a hung server is, then continued; `perNode` toggled for kube-scheduler or
//! kube-controller-manager (Helm creates a DaemonSet per node and deletes the shared one, or the
//! reverse), after which exactly the DaemonSets the values ask for must exist; a component's
//! release renamed (`helm install` under the new name, then `helm uninstall` of the old: the old
//! anchors' hooks must keep every file), after which only the new release's DaemonSets may exist;
//! a node replaced: decommissioned for good from a settled cluster (out of every chart's
//! nodeSelector: nothing of its control plane may be left, not its etcd member, not its data
//! dir), then a fresh machine with the same name and address joined (`cluster.sh join`: etcd
//! added as a learner and promoted before its kube-apiserver starts; skipped, and said so, while a
//! rollout is held back, since the fresh node would start the held version); the checkpointed
//! workload rolled (a self-hosted kube-scheduler DaemonSet on the host network, annotated for
//! the pod-checkpointer chart's checkpoints, given a new template version; the first roll
//! installs the chart and the DaemonSet at version 0 and waits until every node holds its
//! checkpoint, so the operations after it run with checkpoints on every node).
//!
//! Invariants, continuously (every second, by a monitor of its own):
//! - etcd keeps a quorum (two members healthy) unless more than one node is down by the run's
//!   choice: a node is down from its power cut until its etcd member is healthy again, and so
//!   is a member the rollout of an etcd version the run pushed restarts (unhealthy while its
//!   node has that version on trial);
//! - the API answers through at least one of the three API servers under the same condition (a
//!   client that fails over across them), where a node whose kube-apiserver version the run
//!   pushed is on trial also counts as down by choice (its rollout restarts that server; an etcd
//!   change pushed beside it restarts another node's member, each on a Lease of its own); a
//!   lapse counts only after 10 s (etcd: 5 s) and only while the condition held for the whole
//!   lapse and 20 s before it;
//!
//! and once the cluster settles (every node up, every selected node running each component's
//! static pod Running and Ready with the hash its anchor's ledger records (but a node with no
//! last-known-good of a component whose values hold a bad version, selected or joined while
//! they do: it has nothing good to run until they are fixed), every anchor
//! DaemonSet rolled out and Ready, three etcd members healthy; within a bound, else that is the
//! violation):
//! - every file an anchor's ledger claims is on the node with the recorded content, and no file
//!   under `/etc/kubernetes` is claimed by no ledger and no checkpoint (besides what was there
//!   before the charts; a checkpoint claims its files while the API shows its pod on the node);
//! - at most one process of each component per node, none where the component is deselected;
//!   once the checkpointed workload is installed, settled also means: both its DaemonSets rolled
//!   out and Ready, and on every node one copy of it running, the checkpoint of the node's pod
//!   of the latest version held and inactive, the checkpointer's own checkpoint active, and no
//!   checkpoint of a pod gone from the node (an old version's retired);
//! - etcd's member list names each node once and nothing else;
//! - a version rolled back on one node was tried on no other (unless `retry` was asked for);
//! - no anchor container ended with an error exit and no log of any pod says `panicked at`.
//!
//! `./test.sh` runs a short sequence on the bed of the scripted scenarios (tests/selfhosted.rs,
//! after its reboot trial): KUBE_ANCHOR_LIFECYCLE_OPS, default 15, of seed
//! KUBE_ANCHOR_LIFECYCLE_SEED, default 3 (an API server stopped, bad pushes of two components
//! and good ones, a retry, full-cluster, two-node and single-node power cuts, a node down for two
//! minutes while the other two are cut, anchor pods and an anchor DaemonSet deleted), then the
//! operations that give every chart its shape back for the scripted scenarios that follow.
//! `tools/lifecycle.sh [OPS] [SEED…]` runs longer ones alone (KUBE_ANCHOR_SCRIPTED=0) and prints
//! the table; with KUBE_ANCHOR_LIFECYCLE_PLAN_ONLY set the test prints the plan and stops;
//! KUBE_ANCHOR_LIFECYCLE_ONLY=5,6 runs only those operations of the seed's plan (to narrow a
//! failure down); KUBE_ANCHOR_LIFECYCLE_MINUTES ends a run at the first operation that settles
//! once that many minutes have passed since the run began.
//!
//! KUBE_ANCHOR_LIFECYCLE_NODES=1 runs the same on a single control-plane node (its plans draw no
//! two-node reboot, and a power cut is the whole cluster's): every kube-apiserver or etcd change
//! takes the only API server down, so a bad one is judged from what the container runtime shows.
//! There the monitor only counts the API's and etcd's lapses (each is by design), and the settle
//! checks judge that both come back, within the same bounds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::support::background::Background;
use crate::support::checkpointed::{
    COMPONENT, checkpoint_files, checkpoint_of, checkpointed_version, checkpointer_values, component_objects,
    component_processes, daemonset_not_ready, is_checkpoint_file, self_checkpoint_active,
};
use crate::support::fixture::BIN;
use crate::support::processes::{test_dir, tool};
use crate::support::selfhosted::{COMPONENTS, SHORT_TRIALS, SelfHosted, env_or, etcd_health, files_under, script};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use sha2::{Digest, Sha256};

/// The bed's nodes: three, or one with KUBE_ANCHOR_LIFECYCLE_NODES=1 (a single control-plane
/// node, where every kube-apiserver or etcd change, good or bad, takes the only API server down,
/// and a bad one is rolled back from what the container runtime shows). Their addresses are
/// NET.1 to NET.3, NET from KUBE_ANCHOR_LIFECYCLE_NET (default 127.0.6, which no other test
/// binary's bed uses: test.sh runs this bed beside the others, and tools/lifecycle.sh gives
/// seeds run side by side a network each).
pub(crate) fn nodes() -> &'static [(&'static str, &'static str)] {
    static NODES: OnceLock<Vec<(&'static str, &'static str)>> = OnceLock::new();
    NODES.get_or_init(|| {
        let net = std::env::var("KUBE_ANCHOR_LIFECYCLE_NET").unwrap_or_else(|_| "127.0.6".into());
        let three = ["cp-1", "cp-2", "cp-3"]
            .into_iter()
            .enumerate()
            .map(|(i, name)| (name, &*String::leak(format!("{net}.{}", i + 1))));
        match env_or("KUBE_ANCHOR_LIFECYCLE_NODES", 3) {
            1 => three.take(1).collect(),
            3 => three.collect(),
            other => panic!("KUBE_ANCHOR_LIFECYCLE_NODES={other}: the run has one node or three"),
        }
    })
}
pub(crate) const SCHEDULER: &str = "kube-scheduler";
pub(crate) const SCHEDULER_LABEL: &str = "kube-anchor.io/scheduler";
/// How long the cluster may take to settle after an operation (after its last boot, for a
/// reboot). A kube-apiserver change rolls over three nodes one trial (150 s) at a time.
const SETTLE_BOUND: Duration = Duration::from_secs(480);
const APISERVER_SETTLE_BOUND: Duration = Duration::from_secs(780);
/// How long every check must pass in a row for the cluster to count as settled.
const STABLE: Duration = Duration::from_secs(15);

// ------------------------------------------------------------------------------------------
// The plan: operations drawn from the seed alone (never from what the cluster does), so a seed
// always names the same sequence.

#[derive(Debug, Clone)]
enum Op {
    /// Power cut of `nodes`, each booted again `delays[i]` seconds later.
    Reboot {
        nodes: Vec<usize>,
        delays: Vec<u64>,
    },
    /// `helm upgrade` with a change of the component's values.
    Upgrade {
        component: &'static str,
        change: Change,
    },
    /// `kube-anchor retry --component` on every node that records a bad version of it.
    Retry {
        component: &'static str,
    },
    DeleteAnchorPod {
        component: &'static str,
        node: usize,
    },
    /// The component's anchor DaemonSet (the node's own, for a per-node chart) deleted, and
    /// `helm upgrade` re-creating it `after` seconds later.
    DeleteDaemonSet {
        component: &'static str,
        node: usize,
        after: u64,
    },
    /// The scheduler's label taken from the node, or given back.
    Relabel {
        node: usize,
        selected: bool,
    },
    /// Drained, uncordoned `hold` seconds later.
    Drain {
        node: usize,
        hold: u64,
    },
    /// `helm upgrade` of a shared-DaemonSet component with `perNode` listing every node (one
    /// DaemonSet per node: Helm creates them, then deletes the shared one), or back.
    TogglePerNode {
        component: &'static str,
        on: bool,
    },
    /// The node's kube-apiserver stopped (SIGSTOP: it holds its connections and answers
    /// nothing, as a hung server does) and continued `secs` seconds later, unless the kubelet's
    /// liveness probe has restarted it by then.
    PauseApiServer {
        node: usize,
        secs: u64,
    },
    /// The component's release renamed as an operator does it: `helm install` under the new
    /// name with the same values, then `helm uninstall` of the old one (`cluster.sh rename`).
    /// For a moment two anchors of the component run on each node; the old ones' hooks must keep
    /// every file.
    Rename {
        component: &'static str,
        from: String,
        to: String,
    },
    /// The node decommissioned for good and a fresh machine joined in its place, with the same
    /// name and address (see [`Run::replace`]).
    Replace {
        node: usize,
    },
    /// The checkpointed DaemonSet (a self-hosted component the pod-checkpointer chart keeps
    /// checkpoints of) rolled to a new template `version`; the first one installs the chart and
    /// the DaemonSet at version 0 and waits until every node holds its checkpoint.
    RollCheckpointed {
        version: u32,
    },
}

impl Op {
    fn kind(&self) -> String {
        match self {
            Op::Reboot { nodes, delays } if nodes.len() == 1 && delays[0] >= 60 => "node down a while".into(),
            Op::Reboot { nodes, .. } => format!("reboot {} node(s)", nodes.len()),
            Op::Upgrade { component, change } => format!("upgrade {component}, {}", change.kind()),
            Op::Retry { .. } => "retry".into(),
            Op::DeleteAnchorPod { .. } => "anchor pod deleted".into(),
            Op::DeleteDaemonSet { .. } => "DaemonSet deleted, re-created".into(),
            Op::Relabel { selected: false, .. } => "relabel out".into(),
            Op::Relabel { selected: true, .. } => "relabel in".into(),
            Op::Drain { .. } => "drain, uncordon".into(),
            Op::PauseApiServer { .. } => "API server stopped a while".into(),
            Op::TogglePerNode { on: true, .. } => "perNode on".into(),
            Op::TogglePerNode { on: false, .. } => "perNode off".into(),
            Op::Rename { .. } => "release renamed".into(),
            Op::Replace { .. } => "node replaced".into(),
            Op::RollCheckpointed { .. } => "checkpointed workload rolled".into(),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = |i: &usize| nodes()[*i].0;
        match self {
            Op::Reboot { nodes, delays } => {
                let parts: Vec<String> = nodes
                    .iter()
                    .zip(delays)
                    .map(|(n, d)| format!("{} +{d}s", node(n)))
                    .collect();
                write!(f, "power cut, boots: {}", parts.join(", "))
            }
            Op::Upgrade { component, change } => {
                write!(
                    f,
                    "helm upgrade {component} {} ({})",
                    change.describe(component),
                    change.kind()
                )
            }
            Op::Retry { component } => write!(f, "kube-anchor retry --component {component} where one is recorded bad"),
            Op::DeleteAnchorPod { component, node: n } => write!(f, "delete the {component} anchor pod on {}", node(n)),
            Op::DeleteDaemonSet {
                component,
                node: n,
                after,
            } => {
                write!(
                    f,
                    "delete the {component} anchor DaemonSet ({}), re-create after {after}s",
                    node(n)
                )
            }
            Op::Relabel { node: n, selected } => {
                write!(
                    f,
                    "{} {SCHEDULER_LABEL} on {}",
                    if *selected { "set" } else { "remove" },
                    node(n)
                )
            }
            Op::Drain { node: n, hold } => write!(f, "drain {}, uncordon after {hold}s", node(n)),
            Op::PauseApiServer { node: n, secs } => {
                write!(
                    f,
                    "stop the kube-apiserver of {} (SIGSTOP), continue after {secs}s",
                    node(n)
                )
            }
            Op::TogglePerNode { component, on: true } => {
                write!(
                    f,
                    "helm upgrade {component} with perNode listing every node (a DaemonSet each)"
                )
            }
            Op::TogglePerNode { component, on: false } => {
                write!(f, "helm upgrade {component} without perNode (one shared DaemonSet)")
            }
            Op::Rename { component, from, to } => {
                write!(
                    f,
                    "rename the {component} release {from} to {to} (install, then uninstall)"
                )
            }
            Op::Replace { node: n } => {
                write!(
                    f,
                    "decommission {} for good (out of every chart's nodeSelector), a fresh machine joins in its place",
                    node(n)
                )
            }
            Op::RollCheckpointed { version } => {
                write!(f, "roll the checkpointed DaemonSet {COMPONENT} to version {version}")?;
                if *version == 1 {
                    write!(
                        f,
                        " (first the pod-checkpointer chart and the DaemonSet at version 0, checkpointed on every node)"
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// A change of a component's values, good or bad.
#[derive(Debug, Clone, PartialEq)]
enum Change {
    /// A flag the component accepts (`component.extraArgs`): a good version.
    Flag(String),
    /// A flag the component refuses: it exits at once, again and again.
    RefusedFlag(u32),
    /// The component serves its health endpoints on another port than its probes and its
    /// anchor ask: it runs, and never turns healthy.
    NeverHealthy,
    /// A private key that does not belong to its certificate: the anchors refuse the version
    /// before writing anything, and every node keeps what runs.
    MismatchedKey,
}

impl Change {
    fn good(&self) -> bool {
        matches!(self, Change::Flag(_))
    }

    fn kind(&self) -> &'static str {
        match self {
            Change::Flag(_) => "good",
            Change::RefusedFlag(_) => "refused flag",
            Change::NeverHealthy => "never healthy",
            Change::MismatchedKey => "mismatched key",
        }
    }

    /// The `--set` (or `--set-file`) that makes the change; `dir` is the cluster's.
    fn args(&self, component: &str, dir: &Path) -> [String; 2] {
        match self {
            Change::Flag(flag) => ["--set".into(), format!("component.extraArgs.{flag}")],
            Change::RefusedFlag(n) => ["--set".into(), format!("component.extraArgs.no-such-flag={n}")],
            Change::NeverHealthy => [
                "--set".into(),
                format!("component.extraArgs.{}", unhealthy_port(component)),
            ],
            Change::MismatchedKey => {
                let (key, _) = mismatched_key(component);
                let file = dir.join("mismatched").join(component);
                [
                    "--set-file".into(),
                    format!("credentials.{}={}", key.replace('.', "\\."), file.display()),
                ]
            }
        }
    }

    fn describe(&self, component: &str) -> String {
        match self {
            Change::MismatchedKey => {
                let (key, from) = mismatched_key(component);
                format!("--set-file credentials.{key}=<{from}>")
            }
            other => other.args(component, Path::new("")).join(" "),
        }
    }
}

/// The flag that moves the component's health endpoints away from where its probes and its
/// anchor's health URL look (the charts' ports; etcd's metrics URL serves `/health`).
fn unhealthy_port(component: &str) -> &'static str {
    match component {
        "etcd" => "listen-metrics-urls=http://${NODE_IP}:2391",
        "kube-apiserver" => "secure-port=6444",
        "kube-controller-manager" => "secure-port=10267",
        _ => "secure-port=10269",
    }
}

/// The credential a mismatched-key change replaces, and what takes its place: another key of
/// the PKI (for kube-scheduler, its kubeconfig with the controller-manager's key).
fn mismatched_key(component: &str) -> (&'static str, &'static str) {
    match component {
        "kube-apiserver" => ("apiserver-kubelet-client.key", "the apiserver-etcd-client key"),
        "kube-controller-manager" => ("ca.key", "the service-account key"),
        _ => (
            "scheduler.conf",
            "scheduler.conf with the controller-manager's client key",
        ),
    }
}

/// Writes what [`Change::MismatchedKey`] puts in each component's values, from the cluster's
/// PKI, into `dir/mismatched/<component>`.
fn write_mismatched(dir: &Path) {
    let pki = dir.join("pki");
    let out = dir.join("mismatched");
    fs::create_dir_all(&out).unwrap();
    let key_data = |conf: &str| -> String {
        let conf: serde_yaml_ng::Value = serde_yaml_ng::from_str(conf).unwrap();
        conf["users"][0]["user"]["client-key-data"]
            .as_str()
            .unwrap_or_else(|| panic!("no client-key-data in a kubeconfig of {}", pki.display()))
            .to_owned()
    };
    let scheduler = fs::read_to_string(pki.join("scheduler.conf")).unwrap();
    let controller_manager = fs::read_to_string(pki.join("controller-manager.conf")).unwrap();
    let swapped = scheduler.replace(&key_data(&scheduler), &key_data(&controller_manager));
    assert_ne!(swapped, scheduler);
    for (component, content) in [
        (
            "kube-apiserver",
            fs::read(pki.join("apiserver-etcd-client.key")).unwrap(),
        ),
        ("kube-controller-manager", fs::read(pki.join("sa.key")).unwrap()),
        ("kube-scheduler", swapped.into_bytes()),
    ] {
        fs::write(out.join(component), content).unwrap();
    }
}

/// One step of the plan: the operation, then either wait until the cluster settles or only
/// `gap` seconds before the next one.
#[derive(Debug, Clone)]
struct Step {
    op: Op,
    settle: bool,
    gap: u64,
}

/// What the plan knows of the cluster's desired state while drawing.
#[derive(Debug, Clone)]
pub(crate) struct Model {
    /// The change each component's values carry (None: the base values).
    changes: BTreeMap<&'static str, Option<Change>>,
    scheduler_selected: Vec<bool>,
    /// Components pushed bad since their last retry.
    retry_due: BTreeSet<&'static str>,
    /// Shared-DaemonSet components whose values list every node under `perNode`.
    per_node: BTreeSet<&'static str>,
    /// Each component's release name (the chart's, until renamed).
    releases: BTreeMap<&'static str, String>,
    /// The checkpointed DaemonSet's template version (0: not installed, or as installed).
    checkpointed: u32,
}

impl Model {
    pub(crate) fn new() -> Self {
        Self {
            changes: COMPONENTS.iter().map(|c| (*c, None)).collect(),
            scheduler_selected: vec![true; nodes().len()],
            retry_due: BTreeSet::new(),
            per_node: BTreeSet::new(),
            releases: COMPONENTS.iter().map(|c| (*c, c.to_string())).collect(),
            checkpointed: 0,
        }
    }

    fn release(&self, component: &str) -> &str {
        &self.releases[component]
    }

    /// The `--set`s the component's values carry now; `dir` is the cluster's.
    pub(crate) fn set_args(&self, component: &str, dir: &Path) -> Vec<String> {
        let mut args = match &self.changes[component] {
            Some(change) => change.args(component, dir).to_vec(),
            None => vec![],
        };
        if self.per_node.contains(component) {
            let every: serde_json::Map<String, serde_json::Value> = nodes()
                .iter()
                .map(|(name, _)| (name.to_string(), serde_json::json!({"credentials": {}})))
                .collect();
            args.extend([
                "--set-json".into(),
                format!("perNode={}", serde_json::Value::Object(every)),
            ]);
        }
        args
    }

    /// Whether the component runs one anchor DaemonSet per node (etcd's and kube-apiserver's
    /// per-node credentials always do).
    fn is_per_node(&self, component: &str) -> bool {
        matches!(component, "etcd" | "kube-apiserver") || self.per_node.contains(component)
    }

    fn is_bad(&self, component: &str) -> bool {
        self.changes[component].as_ref().is_some_and(|c| !c.good())
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Upgrade { component, change } => {
                self.changes.insert(component, Some(change.clone()));
                if !change.good() {
                    self.retry_due.insert(component);
                }
            }
            Op::Retry { component } => {
                self.retry_due.remove(component);
            }
            Op::Relabel { node, selected } => self.scheduler_selected[*node] = *selected,
            Op::TogglePerNode { component, on: true } => {
                self.per_node.insert(component);
            }
            Op::TogglePerNode { component, on: false } => {
                self.per_node.remove(component);
            }
            Op::Rename { component, to, .. } => {
                self.releases.insert(component, to.clone());
            }
            Op::RollCheckpointed { version } => self.checkpointed = *version,
            _ => {}
        }
    }
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, items: &[T]) -> T {
    items[rng.usize(..items.len())]
}

/// One operation for `n` nodes (1 or 3; with 3, the draws are those of the run's first
/// versions, so older seeds keep their plans).
fn draw(rng: &mut fastrand::Rng, model: &Model, n: usize) -> Op {
    loop {
        let roll = rng.u32(0..100);
        let op = match roll {
            0..=11 => {
                let node = rng.usize(0..n);
                let delay = rng.u64(0..=20);
                // One draw (so plans drawn before it existed keep every other operation): four
                // in 21 of these, on three nodes, roll the checkpointed workload instead.
                if n == 3 && delay % 5 == 3 {
                    Op::RollCheckpointed {
                        version: model.checkpointed + 1,
                    }
                } else {
                    Op::Reboot {
                        nodes: vec![node],
                        delays: vec![delay],
                    }
                }
            }
            12..=19 => {
                if n < 3 {
                    continue;
                }
                let first = rng.usize(0..3);
                let second = (first + 1 + rng.usize(0..2)) % 3;
                Op::Reboot {
                    nodes: vec![first, second],
                    delays: vec![rng.u64(0..=30), rng.u64(0..=30)],
                }
            }
            20..=27 => Op::Reboot {
                nodes: (0..n).collect(),
                delays: (0..n).map(|_| rng.u64(0..=60)).collect(),
            },
            28..=33 => {
                let node = rng.usize(0..n);
                let secs = rng.u64(60..=150);
                // One draw (so plans drawn before replacements existed keep every other
                // operation): a third of these nodes never come back, and a fresh machine takes
                // their place. Only on three nodes, and while the values hold no bad version (the
                // fresh node starts from what the releases hold).
                if n == 3 && secs.is_multiple_of(3) && !COMPONENTS.iter().any(|c| model.is_bad(c)) {
                    Op::Replace { node }
                } else {
                    Op::Reboot {
                        nodes: vec![node],
                        delays: vec![secs],
                    }
                }
            }
            34..=51 => {
                let component = pick(rng, &COMPONENTS);
                let flag = if component == "etcd" {
                    format!("log-level={}", pick(rng, &["debug", "info", "warn"]))
                } else {
                    format!("v={}", rng.u32(1..=4))
                };
                let change = Change::Flag(flag);
                if model.changes[component].as_ref() == Some(&change) {
                    continue;
                }
                Op::Upgrade { component, change }
            }
            52..=61 => {
                let component = pick(rng, &COMPONENTS);
                if model.is_bad(component) {
                    continue;
                }
                // One draw: the number names a refused flag, and its residue picks the kind of
                // bad change (so plans drawn before the other kinds existed keep every
                // operation). etcd's keys are per node: no mismatched key for it.
                let n = rng.u32(1..1000);
                let change = match n % 4 {
                    2 => Change::NeverHealthy,
                    3 if component != "etcd" => Change::MismatchedKey,
                    _ => Change::RefusedFlag(n),
                };
                Op::Upgrade { component, change }
            }
            62..=67 => {
                let Some(&component) = model.retry_due.iter().nth(rng.usize(..model.retry_due.len().max(1))) else {
                    continue;
                };
                Op::Retry { component }
            }
            75..=77 => {
                let component = pick(rng, &[SCHEDULER, "kube-controller-manager"]);
                Op::TogglePerNode {
                    component,
                    on: !model.per_node.contains(component),
                }
            }
            68..=74 => Op::DeleteAnchorPod {
                component: pick(rng, &COMPONENTS),
                node: rng.usize(0..n),
            },
            78..=85 => Op::DeleteDaemonSet {
                component: pick(rng, &COMPONENTS),
                node: rng.usize(0..n),
                after: rng.u64(0..=30),
            },
            86..=91 => {
                let node = rng.usize(0..n);
                let selected = !model.scheduler_selected[node];
                // Keep two schedulers: the anchors' own pods need one to be placed.
                if !selected && model.scheduler_selected.iter().filter(|s| **s).count() < 3 {
                    continue;
                }
                Op::Relabel { node, selected }
            }
            92..=93 => Op::PauseApiServer {
                node: rng.usize(0..n),
                secs: rng.u64(20..=90),
            },
            94..=97 => {
                let component = pick(rng, &COMPONENTS);
                let from = model.release(component).to_owned();
                let to = if from == component {
                    format!("{component}-renamed")
                } else {
                    component.to_owned()
                };
                Op::Rename { component, from, to }
            }
            _ => Op::Drain {
                node: rng.usize(0..n),
                hold: rng.u64(5..=30),
            },
        };
        return op;
    }
}

fn plan(seed: u64, ops: usize) -> Vec<Step> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut model = Model::new();
    (0..ops)
        .map(|i| {
            let op = draw(&mut rng, &model, nodes().len());
            model.apply(&op);
            let settle = i + 1 == ops || rng.u32(0..100) < 60;
            let gap = rng.u64(5..=30);
            Step { op, settle, gap }
        })
        .collect()
}

// ------------------------------------------------------------------------------------------
// The monitor: etcd's quorum and the API's availability, every second, on a thread of its own.

#[derive(Debug, Default)]
struct Shared {
    /// By the run's choice: from a node's power cut until its etcd member is healthy again.
    down: Vec<bool>,
    booted: Vec<bool>,
    op: usize,
    started: Option<Instant>,
    violations: Vec<String>,
    api_polls: u64,
    /// Polls no API server answered.
    api_unanswered: u64,
    /// Of those, polls while at most one node was down by choice.
    api_unanswered_calm: u64,
}

impl Shared {
    fn violation(&mut self, what: String) {
        let at = self.started.map(|s| s.elapsed().as_secs_f64()).unwrap_or_default();
        self.violations
            .push(format!("at {at:.0}s, operation {}: {what}", self.op));
    }
}

fn monitor(cluster: &SelfHosted, shared: Arc<Mutex<Shared>>) -> Background<()> {
    let ips: Vec<String> = cluster.nodes.iter().map(|n| n.ip.clone()).collect();
    let ledgers = |component: &str| -> Vec<PathBuf> {
        cluster
            .nodes
            .iter()
            .map(|n| n.host().join(format!("var/lib/kube-anchor/v1/{component}.json")))
            .collect()
    };
    let (etcd_ledgers, apiserver_ledgers) = (ledgers("etcd"), ledgers("kube-apiserver"));
    // One node has no other API server: every kube-apiserver or etcd change, good or bad,
    // takes the API down for a while by design. There the monitor only counts, and the settle
    // checks judge that the API and etcd come back.
    let judged = ips.len() > 1;
    Background::with_clients(cluster.admin_kubeconfigs(), move |clients, stop| async move {
        let ask = |c: kube::Client| async move {
            let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(c);
            tokio::time::timeout(Duration::from_secs(2), namespaces.get("kube-system"))
                .await
                .is_ok_and(|r| r.is_ok())
        };
        // Since when at most one node is down by choice (for the API: or its API server
        // restarted by a rollout of the run's pushing), and since when etcd has had no quorum or
        // the API no answer.
        let mut calm_since: Option<Instant> = Some(Instant::now());
        let mut api_calm_since: Option<Instant> = Some(Instant::now());
        let mut no_quorum_since: Option<Instant> = None;
        let mut no_api_since: Option<Instant> = None;
        let (mut quorum_reported, mut api_reported) = (false, false);
        let mut next = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let tick = Instant::now();
            let healthy: Vec<bool> = ips.iter().map(|ip| etcd_health(ip)).collect();
            // A member whose node tries a new etcd version the run pushed: the rollout restarts
            // it (here the restart keeps it down for up to a minute: the kubelet first deletes
            // the old mirror pod through its node's API server, which waits on that member).
            let on_trial: Vec<bool> = etcd_ledgers.iter().map(|path| version_on_trial(path)).collect();
            // A node trying a kube-apiserver version the run pushed: its rollout restarts that
            // node's API server. Pushed beside an etcd change (each component rolls one node at
            // a time, on a Lease of its own), two nodes' API servers may be down at once by the
            // run's choice.
            let apiserver_on_trial: Vec<bool> = apiserver_ledgers.iter().map(|path| version_on_trial(path)).collect();
            let mut answered = false;
            for k in 0..clients.len() {
                if ask(clients[(next + k) % clients.len()].clone()).await {
                    answered = true;
                    break;
                }
            }
            next = (next + 1) % clients.len();
            let now = Instant::now();
            {
                let mut s = shared.lock().unwrap();
                for (i, &up) in healthy.iter().enumerate() {
                    if s.down[i] && s.booted[i] && up {
                        s.down[i] = false;
                    }
                }
                // Down by the run's choice: cut, or restarted by a rollout of its pushing.
                let down_by_choice = (0..ips.len())
                    .filter(|&i| s.down[i] || (on_trial[i] && !healthy[i]))
                    .count();
                let api_down_by_choice = (0..ips.len())
                    .filter(|&i| s.down[i] || (on_trial[i] && !healthy[i]) || apiserver_on_trial[i])
                    .count();
                // More than a minority down by the run's choice (on one node: the node).
                let minority = (ips.len() - 1) / 2;
                for (since, down) in [
                    (&mut calm_since, down_by_choice),
                    (&mut api_calm_since, api_down_by_choice),
                ] {
                    if down > minority {
                        *since = None;
                    } else if since.is_none() {
                        *since = Some(now);
                    }
                }
                let calm_before = |since: Instant, margin: Duration| calm_since.is_some_and(|c| c + margin <= since);
                let api_calm_before =
                    |since: Instant, margin: Duration| api_calm_since.is_some_and(|c| c + margin <= since);
                s.api_polls += 1;
                if !answered {
                    s.api_unanswered += 1;
                    if api_down_by_choice <= minority {
                        s.api_unanswered_calm += 1;
                    }
                }
                if healthy.iter().filter(|h| **h).count() > ips.len() / 2 {
                    (no_quorum_since, quorum_reported) = (None, false);
                } else {
                    let since = *no_quorum_since.get_or_insert(now);
                    if judged
                        && !quorum_reported
                        && now - since >= Duration::from_secs(5)
                        && calm_before(since, Duration::ZERO)
                    {
                        quorum_reported = true;
                        let down = s.down.clone();
                        s.violation(format!(
                            "etcd without a quorum for {:.0}s (members healthy: {healthy:?}; down by choice: {down:?}; etcd on trial: {on_trial:?})",
                            (now - since).as_secs_f64()
                        ));
                    }
                }
                if answered {
                    (no_api_since, api_reported) = (None, false);
                } else {
                    let since = *no_api_since.get_or_insert(now);
                    if judged
                        && !api_reported
                        && now - since >= Duration::from_secs(10)
                        && api_calm_before(since, Duration::from_secs(20))
                    {
                        api_reported = true;
                        let down = s.down.clone();
                        s.violation(format!(
                            "no API server answered for {:.0}s (etcd healthy: {healthy:?}; down by choice: {down:?}; etcd on trial: {on_trial:?}; kube-apiserver on trial: {apiserver_on_trial:?})",
                            (now - since).as_secs_f64()
                        ));
                    }
                }
            }
            tokio::time::sleep_until((tick + Duration::from_secs(1)).into()).await;
        }
    })
}

/// Whether the anchor ledger at `path` has a version on trial (written, not yet
/// last-known-good).
fn version_on_trial(path: &Path) -> bool {
    let ledger: serde_json::Value = fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let ledger = &ledger["ledger"];
    ledger["contentHash"].is_string() && ledger["contentHash"] != ledger["lastKnownGood"]
}

// ------------------------------------------------------------------------------------------
// The run.

/// The component of a kube-anchor DaemonSet, from the charts' labels (its name is the
/// release's).
fn anchor_component(ds: &DaemonSet) -> Option<&'static str> {
    let labels = ds.metadata.labels.as_ref()?;
    if labels.get("app.kubernetes.io/name").map(String::as_str) != Some("kube-anchor") {
        return None;
    }
    let component = labels.get("app.kubernetes.io/component")?;
    COMPONENTS.iter().find(|c| **c == component.as_str()).copied()
}

/// `kube-anchor retry --component` on every node whose ledger records a bad version of the
/// component (elsewhere `retry` has nothing to do, says so and exits 1); the hashes it lets be
/// tried again.
fn retry_where_recorded(cluster: &SelfHosted, component: &str) -> Result<Vec<String>, String> {
    let mut hashes = Vec::new();
    for n in &cluster.nodes {
        let bad: Vec<String> = n
            .ledger(component)
            .and_then(|l| l["bad"].as_array().cloned())
            .into_iter()
            .flatten()
            .map(|b| b["hash"].as_str().unwrap_or_default().to_owned())
            .collect();
        if bad.is_empty() {
            continue;
        }
        hashes.extend(bad);
        let out = Command::new(BIN)
            .args(["retry", "--component", component, "--host-root"])
            .arg(n.host())
            .output()
            .unwrap();
        if !out.status.success() {
            return Err(format!(
                "kube-anchor retry on {}: {}",
                n.name,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(hashes)
}

struct Run {
    cluster: SelfHosted,
    model: Model,
    shared: Arc<Mutex<Shared>>,
    /// Nodes to boot, and when.
    boots: Vec<(Instant, usize)>,
    /// Files under each node's /etc/kubernetes before the charts were installed that no ledger
    /// claims (the kubelet's kubeconfig).
    baseline: Vec<BTreeSet<PathBuf>>,
    /// Bad versions `retry` was asked to try again: a second node may try them.
    retried: BTreeSet<String>,
    /// Anchor container restarts already judged, by pod.
    restarts_seen: BTreeMap<String, i32>,
    /// When the run last booted a node.
    last_boot: Option<Instant>,
    /// Every version some node recorded as bad, with whether the last push of its component
    /// before it was seen was a good one, and the node's reason.
    rolled_back: BTreeMap<String, (&'static str, bool, String)>,
    /// Machines replaced so far (their disks are kept aside, numbered).
    replaced: usize,
    /// Operations skipped, and why.
    skipped: Vec<String>,
    /// Whether the pod-checkpointer chart and the checkpointed DaemonSet are installed.
    checkpointed: bool,
    client: kube::Client,
}

impl Run {
    /// Boots every node whose time has come.
    fn tick(&mut self) {
        let now = Instant::now();
        let due: Vec<usize> = self
            .boots
            .iter()
            .filter(|(at, _)| *at <= now)
            .map(|(_, i)| *i)
            .collect();
        self.boots.retain(|(at, _)| *at > now);
        for i in due {
            let dir = self.cluster.dir.clone();
            self.cluster.nodes[i].boot(&dir);
            self.shared.lock().unwrap().booted[i] = true;
            self.last_boot = Some(now);
        }
    }

    async fn sleep(&mut self, secs: u64) {
        let until = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < until {
            self.tick();
            tokio::time::sleep(Duration::from_millis(500).min(until.saturating_duration_since(Instant::now()))).await;
        }
    }

    /// A command that needs the API, tried again (booting nodes meanwhile) until it succeeds
    /// or `bound` has passed; then its failure.
    async fn until_ok(&mut self, what: &str, mut run: impl FnMut() -> Output) -> Result<String, String> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let out = run();
            if out.status.success() {
                return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
            }
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            if Instant::now() > deadline {
                return Err(format!("{what}: {}", err.trim()));
            }
            self.sleep(3).await;
        }
    }

    /// `kubectl ARGS…` as the cluster's admin, to be run (again) by [`Run::until_ok`].
    fn kubectl(&self, args: &[&str]) -> impl FnMut() -> Output + use<> {
        self.kubectl_through(self.cluster.dir.join("admin.conf"), args)
    }

    /// [`Run::kubectl`] through the API server of node `via` (the admin kubeconfig names the
    /// first node's).
    fn kubectl_via(&self, via: usize, args: &[&str]) -> impl FnMut() -> Output + use<> {
        self.kubectl_through(self.cluster.admin_kubeconfig(via), args)
    }

    fn kubectl_through(&self, admin: PathBuf, args: &[&str]) -> impl FnMut() -> Output + use<> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        move || {
            Command::new(tool("kubectl"))
                .arg("--kubeconfig")
                .arg(&admin)
                .args(["--request-timeout", "10s"])
                .args(&args)
                .output()
                .unwrap()
        }
    }

    /// `cluster.sh upgrade COMPONENT` of the component's release with the values the plan
    /// gives it now.
    fn upgrade(&self, component: &str) -> impl FnMut() -> Output + use<> {
        let dir = self.cluster.dir.clone();
        let release = self.model.release(component).to_owned();
        let mut args = vec![component.to_owned()];
        args.extend(self.model.set_args(component, &dir));
        move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            script("upgrade", &dir, &args, &[("RELEASE", &release)])
        }
    }

    /// `cluster.sh rename COMPONENT FROM TO` with the values the plan gives it now.
    fn rename(&self, component: &str, from: &str, to: &str) -> impl FnMut() -> Output + use<> {
        let dir = self.cluster.dir.clone();
        let mut args = vec![component.to_owned(), from.to_owned(), to.to_owned()];
        args.extend(self.model.set_args(component, &dir));
        move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            script("rename", &dir, &args, &[])
        }
    }

    fn daemonset_name(&self, component: &str, node: usize) -> String {
        let release = self.model.release(component);
        if self.model.is_per_node(component) {
            format!("{release}-anchor-{}", nodes()[node].0)
        } else {
            format!("{release}-anchor")
        }
    }

    /// Every anchor DaemonSet the values ask for, with the number of nodes it should run on.
    fn expected_daemonsets(&self) -> BTreeMap<String, i32> {
        let mut expected = BTreeMap::new();
        for c in COMPONENTS {
            for i in 0..nodes().len() {
                *expected.entry(self.daemonset_name(c, i)).or_insert(0) += i32::from(self.selected(c, i));
            }
        }
        expected
    }

    async fn apply(&mut self, op: &Op) -> Result<(), String> {
        self.model.apply(op);
        match op {
            Op::Reboot { nodes, delays } => {
                let now = Instant::now();
                for (&i, &delay) in nodes.iter().zip(delays) {
                    if !self.cluster.nodes[i].is_up() {
                        continue; // already down: its boot stays as scheduled
                    }
                    {
                        let mut s = self.shared.lock().unwrap();
                        s.down[i] = true;
                        s.booted[i] = false;
                    }
                    self.cluster.nodes[i].kill_now();
                    self.boots.push((now + Duration::from_secs(delay), i));
                }
                for &i in nodes {
                    self.cluster.nodes[i].wait_dead();
                }
                self.tick();
                Ok(())
            }
            Op::Upgrade { component, .. } => self
                .until_ok(&format!("helm upgrade {component}"), self.upgrade(component))
                .await
                .map(drop),
            Op::Retry { component } => {
                self.retried.extend(retry_where_recorded(&self.cluster, component)?);
                Ok(())
            }
            Op::DeleteAnchorPod { component, node } => {
                let selector = format!("app.kubernetes.io/name=kube-anchor,app.kubernetes.io/component={component}");
                let field = format!("spec.nodeName={}", nodes()[*node].0);
                let args = [
                    "-n",
                    "kube-system",
                    "delete",
                    "pod",
                    "-l",
                    &selector,
                    "--field-selector",
                    &field,
                    "--wait=false",
                ];
                self.until_ok("kubectl delete pod", self.kubectl(&args)).await.map(drop)
            }
            Op::DeleteDaemonSet { component, node, after } => {
                let name = self.daemonset_name(component, *node);
                let args = [
                    "-n",
                    "kube-system",
                    "delete",
                    "daemonset",
                    &name,
                    "--wait=false",
                    "--ignore-not-found",
                ];
                self.until_ok("kubectl delete daemonset", self.kubectl(&args)).await?;
                self.sleep(*after).await;
                self.until_ok(&format!("helm upgrade {component}"), self.upgrade(component))
                    .await
                    .map(drop)
            }
            Op::Relabel { node, selected } => {
                let label = if *selected {
                    format!("{SCHEDULER_LABEL}=yes")
                } else {
                    format!("{SCHEDULER_LABEL}-")
                };
                let args = ["label", "node", nodes()[*node].0, &label, "--overwrite"];
                self.until_ok("kubectl label", self.kubectl(&args)).await.map(drop)
            }
            Op::Drain { node, hold } => {
                let name = nodes()[*node].0;
                let args = [
                    "drain",
                    name,
                    "--ignore-daemonsets",
                    "--delete-emptydir-data",
                    "--timeout=120s",
                ];
                self.until_ok("kubectl drain", self.kubectl(&args)).await?;
                self.sleep(*hold).await;
                self.until_ok("kubectl uncordon", self.kubectl(&["uncordon", name]))
                    .await
                    .map(drop)
            }
            // The model already lists (or no longer lists) the component under perNode.
            Op::TogglePerNode { component, .. } => self
                .until_ok(&format!("helm upgrade {component}"), self.upgrade(component))
                .await
                .map(drop),
            Op::Rename { component, from, to } => self
                .until_ok(&format!("rename {from} to {to}"), self.rename(component, from, to))
                .await
                .map(drop),
            Op::Replace { node } => self.replace(*node).await,
            Op::RollCheckpointed { version } => {
                if !self.checkpointed {
                    self.install_checkpointed().await?;
                }
                self.apply_checkpointed(*version).await
            }
            Op::PauseApiServer { node, secs } => {
                // None on a node that is down or between two API server processes: nothing to
                // stop, and the operation is a no-op (said in the log).
                let pids = self.cluster.nodes[*node].pids_named("kube-apiserver");
                println!("         kube-apiserver pids on {}: {pids:?}", nodes()[*node].0);
                for pid in &pids {
                    // SAFETY: kill(2) with a pid read from /proc; no memory is involved.
                    unsafe { libc::kill(*pid, libc::SIGSTOP) };
                }
                self.sleep(*secs).await;
                for pid in &pids {
                    // SAFETY: as above; a pid that has exited meanwhile gets ESRCH.
                    unsafe { libc::kill(*pid, libc::SIGCONT) };
                }
                Ok(())
            }
        }
    }

    /// The pod-checkpointer chart (`helm upgrade --install`, so a retry after a failed attempt
    /// goes on) and the checkpointed DaemonSet at version 0, then a wait until every node
    /// holds its checkpoint.
    async fn install_checkpointed(&mut self) -> Result<(), String> {
        let dir = self.cluster.dir.clone();
        let values = dir.join("pod-checkpointer.yaml");
        fs::write(&values, checkpointer_values(&self.cluster)).unwrap();
        let chart = crate::support::helm::chart("pod-checkpointer");
        let admin = dir.join("admin.conf");
        let install = move || {
            Command::new(tool("helm"))
                .args(["upgrade", "--install", "pod-checkpointer", &chart, "-f"])
                .arg(&values)
                .args(["--namespace", "kube-system", "--kubeconfig"])
                .arg(&admin)
                .output()
                .unwrap()
        };
        self.until_ok("helm install pod-checkpointer", install).await?;
        self.checkpointed = true;
        self.apply_checkpointed(0).await?;
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let Some(why) = self.checkpointed_not_settled(0).await else {
                println!("         pod-checkpointer installed; {COMPONENT} version 0 checkpointed on every node");
                return Ok(());
            };
            if Instant::now() > deadline {
                return Err(format!("{COMPONENT} version 0 not checkpointed within 300 s: {why}"));
            }
            self.sleep(2).await;
        }
    }

    /// `kubectl apply` of the checkpointed DaemonSet (and its Secret and ConfigMap) at `version`.
    async fn apply_checkpointed(&mut self, version: u32) -> Result<(), String> {
        let objects = self.cluster.dir.join(format!("{COMPONENT}-{version}.yaml"));
        fs::write(&objects, component_objects(&self.cluster, version)).unwrap();
        let apply = self.kubectl(&["apply", "-f", objects.to_str().unwrap()]);
        self.until_ok(&format!("kubectl apply {COMPONENT} version {version}"), apply)
            .await
            .map(drop)
    }

    /// Why the checkpointed workload has not settled at `version` (`None`: it has): both
    /// DaemonSets rolled out and Ready on every node; on each node exactly one copy of the
    /// component running, the checkpoint of the node's pod of `version` held and inactive, the
    /// checkpointer's own checkpoint active, and no checkpoint of a pod no longer on the node
    /// (an old version's is retired once its replacement is Ready for the stable window).
    async fn checkpointed_not_settled(&self, version: u32) -> Option<String> {
        let expected = nodes().len() as i32;
        for ds in ["pod-checkpointer-anchor", COMPONENT] {
            if let Some(why) = daemonset_not_ready(&self.client, ds, expected).await {
                return Some(why);
            }
        }
        let live = match self.live_pods().await {
            Ok(live) => live,
            Err(e) => return Some(e),
        };
        for (i, n) in self.cluster.nodes.iter().enumerate() {
            let host = n.host();
            let Some(pod) = live[i].iter().find(|p| is_component_pod(p)) else {
                return Some(format!("{}: no {COMPONENT} pod", n.name));
            };
            let checkpointed = checkpointed_version(&host, pod);
            if checkpointed.as_deref() != Some(version.to_string().as_str()) {
                return Some(format!(
                    "{}: the checkpoint of {pod} holds version {checkpointed:?}, expected {version}",
                    n.name
                ));
            }
            let (_, active) = checkpoint_files(&host);
            let copies = component_processes(&n.ip);
            if active || copies != 1 || !self_checkpoint_active(&host) {
                return Some(format!(
                    "{}: {COMPONENT} checkpoint active: {active}; copies running: {copies}; the checkpointer's own checkpoint active: {}",
                    n.name,
                    self_checkpoint_active(&host)
                ));
            }
            if let Some(stale) = self.checkpoints_of_gone_pods(i, &live[i]).first() {
                return Some(format!("{}: {} (a pod no longer on the node)", n.name, stale.display()));
            }
        }
        None
    }

    /// The names of the kube-system pods the API shows on each node (not being deleted).
    async fn live_pods(&self) -> Result<Vec<BTreeSet<String>>, String> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "kube-system");
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing pods: {e}"))?;
        let mut live = vec![BTreeSet::new(); nodes().len()];
        for p in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            let node = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            if let Some(i) = nodes().iter().position(|(name, _)| Some(*name) == node) {
                live[i].insert(p.metadata.name.clone().unwrap_or_default());
            }
        }
        Ok(live)
    }

    /// The checkpoint files on node `i` of no pod in `live` (its live pods).
    fn checkpoints_of_gone_pods(&self, i: usize, live: &BTreeSet<String>) -> Vec<PathBuf> {
        let kubernetes = self.cluster.nodes[i].host().join("etc/kubernetes");
        [
            "inactive-manifests",
            "checkpoint-secrets",
            "checkpoint-configmaps",
            "manifests",
        ]
        .iter()
        .flat_map(|d| files_under(&kubernetes.join(d)))
        .filter(|f| is_checkpoint_file(f) && !live.iter().any(|pod| checkpoint_of(f, pod)))
        .collect()
    }

    fn selected(&self, component: &str, node: usize) -> bool {
        component != SCHEDULER || self.model.scheduler_selected[node]
    }

    /// [`Op::Replace`] of node `k`, as an operator replaces a control-plane machine:
    /// 1. from a settled cluster (one checks before taking a member away; the operations after
    ///    this one may land in the middle of what follows);
    /// 2. the node leaves every chart's nodeSelector: its anchors' hooks take every component off
    ///    it, etcd's member leaving first and its data dir going after a snapshot; the run waits
    ///    until none of it is left (anchor pods, processes, files, the member, the data dir);
    /// 3. the machine goes: powered off, its Node deleted, its disks (the node's `/` and its
    ///    kubelet's state) kept aside for the logs;
    /// 4. a fresh machine with the same name and address boots its kubelet and runs `cluster.sh
    ///    join` (bootstrap from what the releases hold now: etcd joins as a learner and is
    ///    promoted before kube-apiserver starts), and its Node gets the charts' labels back: the
    ///    anchors adopt what the join wrote.
    ///
    /// The node is down by the run's choice from the decommission until its member is a voter
    /// and healthy. Every step goes through the API server of another node. Skipped while a
    /// rollout is held back (an anchor DaemonSet not Ready: a version rolled back on some node,
    /// which the values may still hold): the join would start that version on the fresh node,
    /// which nothing guards yet.
    async fn replace(&mut self, k: usize) -> Result<(), String> {
        const CONTROL_PLANE: &str = "node-role.kubernetes.io/control-plane";
        let (name, ip) = nodes()[k];
        let via = (k + 1) % nodes().len();
        self.settled_within(APISERVER_SETTLE_BOUND)
            .await
            .map_err(|why| format!("not settled before decommissioning {name}: {why}"))?;
        if let Some(held) = self.held_back().await {
            println!("         skipped: {held}");
            self.skipped.push(format!("{name} not replaced: {held}"));
            return Ok(());
        }
        {
            let mut s = self.shared.lock().unwrap();
            s.down[k] = true;
            s.booted[k] = false;
        }
        let unlabel = format!("{CONTROL_PLANE}-");
        self.until_ok(
            "kubectl label",
            self.kubectl_via(via, &["label", "node", name, &unlabel]),
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(240);
        while let Some(left) = self.decommission_left(k) {
            if Instant::now() > deadline {
                return Err(format!("{name} not decommissioned within 240 s: {left}"));
            }
            self.sleep(2).await;
        }
        println!("         {name} decommissioned: no anchor, process, file, etcd member or data dir left");

        self.cluster.nodes[k].kill();
        let root = self.cluster.nodes[k].root.clone();
        let aside = root.join(format!("replaced-{}", self.replaced));
        self.replaced += 1;
        for part in ["host", "kubelet"] {
            fs::create_dir_all(&aside).unwrap();
            fs::rename(root.join(part), aside.join(part)).unwrap();
        }
        fs::create_dir_all(root.join("host/etc/kubernetes/manifests")).unwrap();
        let delete = ["delete", "node", name, "--ignore-not-found"];
        self.until_ok("kubectl delete node", self.kubectl_via(via, &delete))
            .await?;

        let dir = self.cluster.dir.clone();
        self.cluster.nodes[k].boot(&dir);
        let mut labels = vec![format!("{CONTROL_PLANE}=")];
        if self.model.scheduler_selected[k] {
            labels.push(format!("{SCHEDULER_LABEL}=yes"));
        }
        let components: Vec<&str> = COMPONENTS.into_iter().filter(|c| self.selected(c, k)).collect();
        let bootstrap_args: Vec<String> = labels.iter().map(|l| format!("--node-label {l}")).collect();
        let bootstrap_args = format!(
            "--wait-timeout 4m --components {} {}",
            components.join(","),
            bootstrap_args.join(" ")
        );
        let host = self.cluster.nodes[k].host().display().to_string();
        let admin = self.cluster.admin_kubeconfig(via).display().to_string();
        let env = [
            ("HOST_ROOT", host.as_str()),
            ("BOOTSTRAP_ARGS", bootstrap_args.as_str()),
            ("ADMIN_KUBECONFIG", admin.as_str()),
        ];
        let out = script("join", &dir, &[name, ip], &env);
        let log = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
        fs::write(dir.join(format!("join-{name}-{}.log", self.replaced)), &log).unwrap();
        if !out.status.success() {
            return Err(format!(
                "cluster.sh join {name}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        self.until_ok("kubectl get node", self.kubectl_via(via, &["get", "node", name]))
            .await?;
        self.cluster.register_node(k, via).await?;
        let mut label = vec!["label", "node", name, "--overwrite"];
        label.extend(labels.iter().map(String::as_str));
        self.until_ok("kubectl label", self.kubectl_via(via, &label)).await?;

        // The join promoted the member before it went on: a check.
        match self.cluster.etcd_members() {
            Ok(members) if members.iter().any(|(n, learner)| n == name && !learner) => {}
            Ok(members) => return Err(format!("after the join of {name}, etcd's members: {members:?}")),
            Err(e) => return Err(format!("after the join of {name}: {e}")),
        }
        println!("         {name} joined: its etcd member a voter");
        self.shared.lock().unwrap().booted[k] = true;
        self.last_boot = Some(Instant::now());
        Ok(())
    }

    /// Why a rollout is held back (an anchor DaemonSet not fully rolled out and Ready), if one is.
    async fn held_back(&self) -> Option<String> {
        let daemonsets: Api<DaemonSet> = Api::namespaced(self.client.clone(), "kube-system");
        let list = match daemonsets.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) => return Some(format!("listing DaemonSets: {e}")),
        };
        list.items
            .iter()
            .filter(|ds| anchor_component(ds).is_some())
            .find_map(|ds| {
                let s = ds.status.as_ref()?;
                let desired = s.desired_number_scheduled;
                (s.number_ready != desired || s.updated_number_scheduled.unwrap_or(0) != desired).then(|| {
                    format!(
                        "{} holds a rollout back: {} of {desired} Ready",
                        ds.metadata.name.clone().unwrap_or_default(),
                        s.number_ready
                    )
                })
            })
    }

    /// What is left of node `k`'s control plane while it is decommissioned (`None`: nothing),
    /// as the node shows it. (Its anchor pods stay Terminating in the API: the node's kubelet
    /// reaches the API through the node's own API server, gone before it could report them.
    /// Deleting the Node lets the controller-manager collect them.)
    fn decommission_left(&self, k: usize) -> Option<String> {
        let n = &self.cluster.nodes[k];
        if n.processes_named("kube-anchor") > 0 {
            return Some("anchor processes (a hook may still run)".into());
        }
        for component in COMPONENTS {
            let comm: String = component.chars().take(15).collect();
            if n.processes_named(&comm) > 0 {
                return Some(format!("{component} runs"));
            }
        }
        if component_processes(&n.ip) > 0 {
            return Some(format!("{COMPONENT} runs"));
        }
        let left: Vec<PathBuf> = files_under(&n.host().join("etc/kubernetes"))
            .into_iter()
            .filter(|p| !self.baseline[k].contains(p))
            .collect();
        if !left.is_empty() {
            return Some(format!("files {left:?}"));
        }
        match self.cluster.etcd_member_names() {
            Ok(names) if names.contains(&n.name) => return Some("its etcd member".into()),
            Ok(_) => {}
            Err(e) => return Some(format!("etcd's member list: {e}")),
        }
        // etcd's data (the data dir itself may stay: the anchor's container mounts it).
        let data = n.host().join("var/lib/etcd/member");
        data.exists().then(|| format!("{}", data.display()))
    }

    /// Waits until every settle check passes throughout [`STABLE`]; else, after `bound`, why not.
    async fn settled_within(&mut self, bound: Duration) -> Result<(), String> {
        let deadline = Instant::now() + bound;
        let mut settled_since: Option<Instant> = None;
        loop {
            match self.not_settled().await {
                None if settled_since.get_or_insert_with(Instant::now).elapsed() >= STABLE => return Ok(()),
                None => {}
                Some(why) if Instant::now() > deadline => return Err(why),
                Some(_) => settled_since = None,
            }
            self.sleep(2).await;
        }
    }

    /// Why the cluster has not settled yet, or `None` once it has.
    async fn not_settled(&self) -> Option<String> {
        if !self.boots.is_empty() {
            return Some("a node is still down".into());
        }
        if let Some(i) = self.shared.lock().unwrap().down.iter().position(|d| *d) {
            return Some(format!("{}: etcd not healthy since its boot", nodes()[i].0));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "kube-system");
        let list = match pods.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) => return Some(format!("listing pods: {e}")),
        };
        // A pod on its way out (an anchor's preStop hook may still run) is not settled.
        if let Some(p) = list.items.iter().find(|p| p.metadata.deletion_timestamp.is_some()) {
            return Some(format!("{}: terminating", p.metadata.name.clone().unwrap_or_default()));
        }
        let by_name: BTreeMap<String, &Pod> = list
            .items
            .iter()
            .map(|p| (p.metadata.name.clone().unwrap_or_default(), p))
            .collect();
        for (i, n) in self.cluster.nodes.iter().enumerate() {
            for component in COMPONENTS {
                let name = format!("{component}-{}", n.name);
                if !self.selected(component, i) {
                    if by_name.contains_key(&name) {
                        return Some(format!("{name}: a mirror pod on a deselected node"));
                    }
                    continue;
                }
                let Some(pod) = by_name.get(&name) else {
                    return Some(format!("{name}: no mirror pod"));
                };
                let status = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .and_then(|c| c.first());
                let running = status
                    .and_then(|s| s.state.as_ref())
                    .is_some_and(|s| s.running.is_some());
                // A node with no good version of the component to fall back on (selected, or
                // joined, while the values hold a bad one) runs what the values give it until
                // they are fixed: not Ready, by design.
                let nothing_good =
                    self.model.is_bad(component) && n.ledger(component).is_none_or(|l| !l["lastKnownGood"].is_string());
                if (!running || !status.is_some_and(|s| s.ready)) && !nothing_good {
                    return Some(format!("{name}: not Running and Ready"));
                }
                let hash = pod
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("kube-anchor.io/content-hash"));
                let written = n.written_hash(component);
                if hash != written.as_ref() {
                    return Some(format!("{name}: runs {hash:?}, its anchor's ledger says {written:?}"));
                }
            }
        }
        let daemonsets: Api<DaemonSet> = Api::namespaced(self.client.clone(), "kube-system");
        let list = match daemonsets.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(e) => return Some(format!("listing DaemonSets: {e}")),
        };
        let expected = self.expected_daemonsets();
        let present: BTreeSet<String> = list.items.iter().filter_map(|d| d.metadata.name.clone()).collect();
        if let Some(missing) = expected.keys().find(|name| !present.contains(*name)) {
            return Some(format!("DaemonSet {missing} missing"));
        }
        // Any release's: a renamed release's old DaemonSets must be gone too.
        if let Some(left) = list
            .items
            .iter()
            .filter(|d| anchor_component(d).is_some())
            .filter_map(|d| d.metadata.name.as_ref())
            .find(|name| !expected.contains_key(*name))
        {
            return Some(format!("DaemonSet {left} left over"));
        }
        for ds in &list.items {
            let name = ds.metadata.name.clone().unwrap_or_default();
            let component = anchor_component(ds);
            // A held-back anchor (a bad version recorded) is not Ready by design: its rollout
            // waits for values that do not carry the bad version.
            if component.is_none_or(|c| self.model.is_bad(c) || !self.recorded_bad(c).is_empty()) {
                continue;
            }
            let Some(s) = ds.status.as_ref() else {
                return Some(format!("{name}: no status"));
            };
            let generation = ds.metadata.generation.unwrap_or_default();
            let desired = expected[&name];
            // Counts of 0 are left out of the status.
            if s.observed_generation != Some(generation)
                || s.desired_number_scheduled != desired
                || s.number_ready != desired
                || s.updated_number_scheduled.unwrap_or(0) != desired
            {
                return Some(format!(
                    "{name}: desired {} (expected {desired}), ready {}, updated {:?}",
                    s.desired_number_scheduled, s.number_ready, s.updated_number_scheduled
                ));
            }
        }
        if self.checkpointed
            && let Some(why) = self.checkpointed_not_settled(self.model.checkpointed).await
        {
            return Some(why);
        }
        match self.cluster.etcd_healthy_members() {
            Ok(n) if n == nodes().len() => None,
            Ok(n) => Some(format!("etcd: {n} healthy members")),
            Err(e) => Some(format!("etcd: {e}")),
        }
    }

    /// The versions of `component` some node records as bad: (hash, node, reason).
    fn recorded_bad(&self, component: &str) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        for n in &self.cluster.nodes {
            let Some(ledger) = n.ledger(component) else { continue };
            for b in ledger["bad"].as_array().into_iter().flatten() {
                let field = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
                out.push((field("hash"), n.name.clone(), field("reason")));
            }
        }
        out
    }

    /// The files every ledger of the node claims, with their sha256 (hex).
    fn claimed(&self, node: usize) -> BTreeMap<PathBuf, String> {
        let n = &self.cluster.nodes[node];
        let mut out = BTreeMap::new();
        for component in COMPONENTS {
            let Some(ledger) = n.ledger(component) else { continue };
            for f in ledger["files"].as_array().into_iter().flatten() {
                let path = f["path"].as_str().unwrap_or_default().trim_start_matches('/');
                out.insert(n.host().join(path), f["sha256"].as_str().unwrap_or_default().to_owned());
            }
        }
        out
    }

    fn unclaimed(&self, node: usize) -> BTreeSet<PathBuf> {
        let claimed = self.claimed(node);
        files_under(&self.cluster.nodes[node].host().join("etc/kubernetes"))
            .into_iter()
            .filter(|p| !claimed.contains_key(p))
            .collect()
    }

    /// The invariants of a settled cluster: every violation found.
    async fn settled_violations(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        // A checkpoint file is claimed by its pod while the API shows that pod on the node.
        let live = match self.live_pods().await {
            Ok(live) => live,
            Err(e) => {
                out.push(e);
                vec![BTreeSet::new(); nodes().len()]
            }
        };
        for (i, n) in self.cluster.nodes.iter().enumerate() {
            for (path, sha) in self.claimed(i) {
                match fs::read(&path) {
                    Ok(bytes) => {
                        let actual = hex::encode(Sha256::digest(&bytes));
                        if !sha.ends_with(&actual) {
                            out.push(format!("{}: {} differs from its ledger", n.name, path.display()));
                        }
                    }
                    Err(e) => out.push(format!("{}: {} claimed, missing: {e}", n.name, path.display())),
                }
            }
            for stray in self.unclaimed(i).difference(&self.baseline[i]) {
                if is_checkpoint_file(stray) && live[i].iter().any(|pod| checkpoint_of(stray, pod)) {
                    continue;
                }
                out.push(format!(
                    "{}: {} is claimed by no ledger and no checkpoint",
                    n.name,
                    stray.display()
                ));
            }
            let workload_copies = component_processes(&n.ip);
            if workload_copies > usize::from(self.checkpointed) {
                out.push(format!("{}: {workload_copies} copies of {COMPONENT} run", n.name));
            }
            for component in COMPONENTS {
                let comm: String = component.chars().take(15).collect();
                let mut copies = n.processes_named(&comm);
                // The checkpointed workload is a kube-scheduler too (on a port of its own).
                if component == SCHEDULER {
                    copies = copies.saturating_sub(workload_copies);
                }
                let expected = usize::from(self.selected(component, i));
                if copies > 1 || (expected == 0 && copies > 0) {
                    out.push(format!(
                        "{}: {copies} processes of {component} (expected {expected})",
                        n.name
                    ));
                }
            }
        }
        // One etcd member per node, no other.
        match self.cluster.etcd_member_names() {
            Ok(mut names) => {
                names.sort();
                if names != nodes().iter().map(|(name, _)| *name).collect::<Vec<_>>() {
                    out.push(format!("etcd's member list: {names:?}"));
                }
            }
            Err(e) => out.push(format!("etcd's member list: {e}")),
        }
        // A version rolled back on one node is tried on no other.
        for component in COMPONENTS {
            let mut tried_by: BTreeMap<String, BTreeSet<&str>> = BTreeMap::new();
            let mut failed = BTreeSet::new();
            for n in &self.cluster.nodes {
                let Some(ledger) = n.ledger(component) else { continue };
                for r in ledger["history"].as_array().into_iter().flatten() {
                    let hash = r["hash"].as_str().unwrap_or_default().to_owned();
                    if r["result"] == "failed" {
                        failed.insert(hash.clone());
                    }
                    tried_by.entry(hash).or_default().insert(&n.name);
                }
                for b in ledger["bad"].as_array().into_iter().flatten() {
                    failed.insert(b["hash"].as_str().unwrap_or_default().to_owned());
                }
            }
            for hash in failed.difference(&self.retried) {
                let nodes = tried_by.get(hash).cloned().unwrap_or_default();
                if nodes.len() > 1 {
                    out.push(format!("{component} {hash} rolled back, yet tried on {nodes:?}"));
                }
            }
        }
        for component in COMPONENTS {
            let after_good = !self.model.is_bad(component);
            for (hash, node, reason) in self.recorded_bad(component) {
                self.rolled_back
                    .entry(hash)
                    .or_insert_with(|| (component, after_good, format!("{node}: {reason}")));
            }
        }
        // No anchor container ended with an error.
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "kube-system");
        if let Ok(list) = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=kube-anchor"))
            .await
        {
            for pod in list.items {
                let name = pod.metadata.name.clone().unwrap_or_default();
                for c in pod.status.and_then(|s| s.container_statuses).into_iter().flatten() {
                    let seen = self.restarts_seen.get(&name).copied().unwrap_or(0);
                    if c.restart_count <= seen {
                        continue;
                    }
                    self.restarts_seen.insert(name.clone(), c.restart_count);
                    let last = c.last_state.and_then(|s| s.terminated);
                    if let Some(t) = last.filter(|t| !matches!(t.exit_code, 0 | 137 | 143)) {
                        out.push(format!(
                            "anchor {name} exited {} ({}): {}",
                            t.exit_code,
                            t.reason.unwrap_or_default(),
                            t.message.unwrap_or_default().trim()
                        ));
                    }
                }
            }
        }
        // Container logs (`<n>.log` in the pod log dirs the kubelet makes on each node).
        for log in files_under(&self.cluster.dir.join("nodes"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
        {
            if fs::read_to_string(&log).is_ok_and(|t| t.contains("panicked at")) {
                out.push(format!("a panic in {}", log.display()));
            }
        }
        out
    }
}

/// Whether a pod name is one of the checkpointed DaemonSet's pods (`<name>-<5 chars>`; the
/// mirror pod of an active checkpoint has the node's name after that).
fn is_component_pod(name: &str) -> bool {
    name.strip_prefix(COMPONENT)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|suffix| suffix.len() == 5 && !suffix.contains('-'))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn values() -> Vec<(&'static str, String)> {
    SHORT_TRIALS
        .iter()
        .map(|(chart, yaml)| {
            let mut yaml = yaml.to_string();
            // An etcd restart here (the old member stopped, the new one started and healthy)
            // can take longer than the bed's 25 s trial once the nodes are busy, and a trial
            // counts that time: a good version would fail it.
            if *chart == "etcd" {
                yaml = yaml.replace("trialPeriod: 25s", "trialPeriod: 60s");
            }
            if *chart == SCHEDULER {
                yaml.push_str(&format!("nodeSelector: {{{SCHEDULER_LABEL}: \"yes\"}}\n"));
            }
            (*chart, yaml)
        })
        .collect()
}

/// The bad credentials the run pushes, made from a PKI of the example script: each replaces its
/// credential with a key of another pair. (Only `cluster.sh pki`: the test needs no chart.)
#[test]
fn mismatched_keys_come_from_other_pairs() {
    let dir = test_dir().join("lifecycle-mismatched");
    let _ = fs::remove_dir_all(&dir);
    let nodes: Vec<String> = nodes().iter().map(|(n, ip)| format!("{n}={ip}")).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    crate::support::fixture::succeeded("cluster.sh pki", &script("pki", &dir, &nodes, &[]));
    write_mismatched(&dir);
    let read = |p: &str| fs::read_to_string(dir.join(p)).unwrap();
    assert_eq!(read("mismatched/kube-apiserver"), read("pki/apiserver-etcd-client.key"));
    assert_ne!(
        read("mismatched/kube-apiserver"),
        read("pki/apiserver-kubelet-client.key")
    );
    assert_eq!(read("mismatched/kube-controller-manager"), read("pki/sa.key"));
    assert_ne!(read("mismatched/kube-controller-manager"), read("pki/ca.key"));
    let user = |conf: &str| -> serde_yaml_ng::Value {
        let conf: serde_yaml_ng::Value = serde_yaml_ng::from_str(conf).unwrap();
        conf["users"][0]["user"].clone()
    };
    let swapped = user(&read("mismatched/kube-scheduler"));
    let scheduler = user(&read("pki/scheduler.conf"));
    assert_eq!(
        swapped["client-key-data"],
        user(&read("pki/controller-manager.conf"))["client-key-data"]
    );
    assert_ne!(swapped["client-key-data"], scheduler["client-key-data"]);
    assert_eq!(swapped["client-certificate-data"], scheduler["client-certificate-data"]);
    let _ = fs::remove_dir_all(&dir);
}

/// The plan a run follows: the seed's operations (or those KUBE_ANCHOR_LIFECYCLE_ONLY keeps),
/// then, when `restore` is set, the operations that give every chart its shape back for what
/// follows the run (the scripted scenarios).
pub(crate) struct Plan {
    pub(crate) seed: u64,
    pub(crate) ops: usize,
    steps: Vec<(usize, Step)>,
}

impl Plan {
    /// From KUBE_ANCHOR_LIFECYCLE_OPS (default 15), _SEED (default 3) and _ONLY; printed.
    pub(crate) fn from_env(restore: bool) -> Self {
        let ops = env_or("KUBE_ANCHOR_LIFECYCLE_OPS", 15) as usize;
        let seed = env_or("KUBE_ANCHOR_LIFECYCLE_SEED", 3);
        let mut steps: Vec<(usize, Step)> = plan(seed, ops).into_iter().enumerate().collect();
        // A replay of only some of the seed's operations (indices, comma-separated), to narrow a
        // failing sequence down; the last one always waits to settle.
        if let Ok(only) = std::env::var("KUBE_ANCHOR_LIFECYCLE_ONLY") {
            let keep: BTreeSet<usize> = only.split(',').filter_map(|i| i.trim().parse().ok()).collect();
            steps.retain(|(i, _)| keep.contains(i));
        }
        if restore {
            let mut model = Model::new();
            for (_, s) in &steps {
                model.apply(&s.op);
            }
            let next = steps.last().map_or(0, |(i, _)| i + 1);
            steps.extend(restoring_ops(&model).into_iter().enumerate().map(|(k, op)| {
                (
                    next + k,
                    Step {
                        op,
                        settle: true,
                        gap: 0,
                    },
                )
            }));
        }
        if let Some((_, last)) = steps.last_mut() {
            last.settle = true;
        }
        if !steps.is_empty() {
            println!(
                "lifecycle run: seed {seed}, {ops} operations, {} node(s):",
                nodes().len()
            );
        }
        for (i, s) in &steps {
            let then = if s.settle {
                "settle".to_owned()
            } else {
                format!("next after {}s", s.gap)
            };
            let restoring = if *i >= ops { " (restoring)" } else { "" };
            println!("  {i:>3}. {}{restoring} [{then}]", s.op);
        }
        Self { seed, ops, steps }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }
}

/// Operations that give every chart its shape back after a run, for the scripted scenarios
/// that follow it: each release its chart's name, one shared DaemonSet, every node selected, a
/// good version, no bad one recorded.
fn restoring_ops(model: &Model) -> Vec<Op> {
    let mut ops = Vec::new();
    for component in COMPONENTS {
        let release = model.release(component);
        if release != component {
            ops.push(Op::Rename {
                component,
                from: release.to_owned(),
                to: component.to_owned(),
            });
        }
        if model.per_node.contains(component) {
            ops.push(Op::TogglePerNode { component, on: false });
        }
        if component == SCHEDULER {
            for (node, selected) in model.scheduler_selected.iter().enumerate() {
                if !selected {
                    ops.push(Op::Relabel { node, selected: true });
                }
            }
        }
        if model.is_bad(component) {
            let flag = if component == "etcd" { "log-level=info" } else { "v=2" };
            ops.push(Op::Upgrade {
                component,
                change: Change::Flag(flag.into()),
            });
        }
        if model.retry_due.contains(component) {
            ops.push(Op::Retry { component });
        }
    }
    ops
}

/// The run's bed: the example script's control plane on [`nodes`], every chart installed with
/// [`values`], every component's version last-known-good.
pub(crate) async fn bootstrap(dir: &Path) -> SelfHosted {
    let _ = fs::remove_dir_all(dir);
    println!(
        "cluster dir (logs of every process of every node; kept when the run fails): {}",
        dir.display()
    );
    let values = values();
    let values: Vec<(&str, &str)> = values.iter().map(|(c, y)| (*c, y.as_str())).collect();
    // The nodes carry the scheduler's label from their first boot, as the DaemonSets will see
    // them.
    let labels = format!("--node-label node-role.kubernetes.io/control-plane= --node-label {SCHEDULER_LABEL}=yes");
    let cluster = SelfHosted::bootstrap_with(dir, nodes(), &values, &labels).await;
    write_mismatched(dir);
    for (name, _) in nodes() {
        cluster.kubectl(&["label", "node", name, &format!("{SCHEDULER_LABEL}=yes")]);
    }
    cluster.install();
    cluster.wait_anchors_ready(Duration::from_secs(300)).await;
    for c in COMPONENTS {
        cluster.wait_promoted(c, Duration::from_secs(240)).await;
    }
    cluster
}

/// Follows `plan` on `cluster`, whose charts' values are `model`'s; returns the cluster and the
/// model after the plan. The first violation fails the test (after the table), with the seed,
/// the operation and the command that replays it; the cluster's directory is then kept.
pub(crate) async fn run(cluster: SelfHosted, plan: &Plan, model: Model) -> (SelfHosted, Model) {
    let (seed, ops, steps) = (plan.seed, plan.ops, &plan.steps);
    let one = if nodes().len() == 1 {
        "KUBE_ANCHOR_LIFECYCLE_NODES=1 "
    } else {
        ""
    };
    let dir = cluster.dir.clone();
    let client = cluster.client(0).await;
    let shared = Arc::new(Mutex::new(Shared {
        started: Some(Instant::now()),
        down: vec![false; nodes().len()],
        booted: vec![false; nodes().len()],
        ..Shared::default()
    }));
    let mut run = Run {
        model,
        shared: shared.clone(),
        boots: Vec::new(),
        baseline: Vec::new(),
        retried: BTreeSet::new(),
        restarts_seen: BTreeMap::new(),
        last_boot: None,
        rolled_back: BTreeMap::new(),
        replaced: 0,
        skipped: Vec::new(),
        checkpointed: false,
        client,
        cluster,
    };
    run.baseline = (0..nodes().len()).map(|i| run.unclaimed(i)).collect();
    let watcher = monitor(&run.cluster, shared.clone());

    let mut settle_times: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut failure: Option<(usize, Vec<String>)> = None;
    // A long run's time budget: once spent, the run ends at the next operation that settles
    // (so the last operations are checked too) and prints the table of what ran.
    let budget = std::env::var("KUBE_ANCHOR_LIFECYCLE_MINUTES")
        .ok()
        .and_then(|m| m.parse::<u64>().ok())
        .map(|m| Duration::from_secs(m * 60));
    let started = Instant::now();
    // The latest bound of the operations applied since the cluster last settled.
    let mut pending_deadline: Option<Instant> = None;
    let mut budget_spent = false;
    let mut restoring = 0;
    for (i, step) in steps.iter().map(|(i, s)| (*i, s)) {
        // Past the budget only the restoring operations are left to do.
        if budget_spent && i < ops {
            continue;
        }
        shared.lock().unwrap().op = i;
        if i >= ops {
            restoring += 1;
        }
        let kind = step.op.kind();
        *counts.entry(kind.clone()).or_default() += 1;
        let applied = Instant::now();
        println!("[{:>5.0}s] {i}. {}", started.elapsed().as_secs_f64(), step.op);
        if let Err(e) = run.apply(&step.op).await {
            failure = Some((i, vec![format!("the operation failed: {e}")]));
            break;
        }
        // An operation the run did not wait for keeps its own bound: a kube-apiserver change
        // followed at once by another operation still has its 780 s to roll over the nodes.
        let bound = match step.op {
            Op::Upgrade {
                component: "kube-apiserver",
                ..
            } => APISERVER_SETTLE_BOUND,
            _ => SETTLE_BOUND,
        };
        let earlier_deadline = pending_deadline;
        pending_deadline = Some(earlier_deadline.map_or(applied + bound, |d| d.max(applied + bound)));
        if step.settle {
            // Settled: every check passes throughout STABLE (an operation takes a moment to
            // show: a deleted pod is still listed Ready just after the delete).
            let mut reason = String::new();
            let mut settled_since: Option<Instant> = None;
            let settled = loop {
                run.tick();
                // The bound counts from the operation, or from the last boot after it.
                let from = run
                    .boots
                    .iter()
                    .map(|(at, _)| *at)
                    .chain(run.last_boot)
                    .max()
                    .unwrap_or(applied)
                    .max(applied);
                match run.not_settled().await {
                    None => {
                        let since = *settled_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= STABLE {
                            break Some(since);
                        }
                    }
                    Some(why) => (reason, settled_since) = (why, None),
                }
                let deadline = earlier_deadline.map_or(from + bound, |d| d.max(from + bound));
                if Instant::now() > deadline || !shared.lock().unwrap().violations.is_empty() {
                    break None;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            };
            let mut violations = shared.lock().unwrap().violations.clone();
            match settled {
                Some(since) => {
                    settle_times
                        .entry(kind)
                        .or_default()
                        .push((since - applied).as_secs_f64());
                    violations.extend(run.settled_violations().await);
                }
                None if !violations.is_empty() => {}
                None => violations.push(format!(
                    "not settled within {bound:?} of the operation or its last boot (or an earlier operation's bound): {reason}"
                )),
            }
            if !violations.is_empty() {
                failure = Some((i, violations));
                break;
            }
            let took = settle_times
                .get(&step.op.kind())
                .and_then(|v| v.last())
                .copied()
                .unwrap_or_default();
            println!(
                "[{:>5.0}s]    settled after {took:.0}s",
                started.elapsed().as_secs_f64()
            );
            pending_deadline = None;
            if let Some(budget) = budget.filter(|b| i < ops && !budget_spent && started.elapsed() >= *b) {
                println!(
                    "lifecycle run: the time budget ({} min) is spent; the run ends after operation {i}, settled",
                    budget.as_secs() / 60
                );
                budget_spent = true;
            }
        } else {
            run.sleep(step.gap).await;
            let violations = shared.lock().unwrap().violations.clone();
            if !violations.is_empty() {
                failure = Some((i, violations));
                break;
            }
        }
    }
    watcher.finish();
    let s = shared.lock().unwrap();
    println!(
        "\nlifecycle run, {} process node(s), seed {seed}, {} of {ops} operations{} in {:.0}s:",
        nodes().len(),
        counts.values().sum::<usize>() - restoring,
        if restoring > 0 {
            format!(" (and {restoring} restoring the charts' shape)")
        } else {
            String::new()
        },
        started.elapsed().as_secs_f64()
    );
    println!("| operation | count | waited to settle | settle time p50 / p90 / max |\n|---|---|---|---|");
    for (kind, n) in &counts {
        let mut v = settle_times.get(kind).cloned().unwrap_or_default();
        v.sort_by(|a, b| a.total_cmp(b));
        // An operation the next one followed before it settled has no settle time of its own.
        let times = if v.is_empty() {
            "–".to_owned()
        } else {
            format!(
                "{:.0} / {:.0} / {:.0} s",
                percentile(&v, 50.0),
                percentile(&v, 90.0),
                percentile(&v, 100.0)
            )
        };
        println!("| {kind} | {n} | {} | {times} |", v.len());
    }
    let availability = 100.0 * (s.api_polls - s.api_unanswered) as f64 / s.api_polls.max(1) as f64;
    println!(
        "| API through any of {} server(s) | {} polls | {availability:.1} % answered | unanswered: {} ({} with at most a minority of nodes down) |",
        nodes().len(),
        s.api_polls,
        s.api_unanswered,
        s.api_unanswered_calm
    );
    let after_good: Vec<_> = run.rolled_back.values().filter(|r| r.1).collect();
    println!(
        "| versions rolled back | {} | {} after a good push | |",
        run.rolled_back.len(),
        after_good.len()
    );
    println!(
        "| violations | {} | | |",
        failure.as_ref().map(|f| f.1.len()).unwrap_or(0)
    );
    for (component, _, reason) in &after_good {
        println!("a good {component} version rolled back: {reason}");
    }
    for skipped in &run.skipped {
        println!("skipped: {skipped}");
    }
    drop(s);
    if let Some((i, violations)) = failure {
        panic!(
            "seed {seed}, operation {i} ({}): {}\nreplay: {one}tools/lifecycle.sh {} {seed}\nlogs of every process of every node: {}",
            steps
                .iter()
                .find(|(j, _)| *j == i)
                .map(|(_, s)| s.op.to_string())
                .unwrap_or_default(),
            violations.join("\n  "),
            i + 1,
            dir.display()
        );
    }
    (run.cluster, run.model)
}

#[test]
fn a_seed_names_one_plan() {
    let a: Vec<String> = plan(7, 40)
        .iter()
        .map(|s| format!("{} {} {}", s.op, s.settle, s.gap))
        .collect();
    let b: Vec<String> = plan(7, 40)
        .iter()
        .map(|s| format!("{} {} {}", s.op, s.settle, s.gap))
        .collect();
    assert_eq!(a, b);
    let c: Vec<String> = plan(8, 40)
        .iter()
        .map(|s| format!("{} {} {}", s.op, s.settle, s.gap))
        .collect();
    assert_ne!(a, c);
    assert!(plan(7, 40).last().unwrap().settle, "a run ends settled");
}

#[test]
fn a_plan_keeps_two_schedulers_and_retries_only_what_went_bad() {
    let mut replaced = 0;
    for seed in 0..50 {
        let mut model = Model::new();
        for step in plan(seed, 60) {
            if let Op::Retry { component } = step.op {
                assert!(
                    model.retry_due.contains(component),
                    "seed {seed}: retry of {component} before a bad push"
                );
            }
            // A fresh node starts from what the releases hold: never a bad version.
            if let Op::Replace { .. } = step.op {
                replaced += 1;
                assert!(
                    COMPONENTS.iter().all(|c| !model.is_bad(c)),
                    "seed {seed}: a node replaced while the values hold a bad version"
                );
            }
            model.apply(&step.op);
            assert!(
                model.scheduler_selected.iter().filter(|s| **s).count() >= 2,
                "seed {seed}"
            );
        }
    }
    // Three nodes: one node's plans draw no replacement.
    assert!(nodes().len() < 3 || replaced > 0, "no seed of 0-49 replaces a node");
}

#[test]
fn the_restoring_operations_give_every_chart_its_shape_back() {
    let mut restored_something = false;
    for seed in 0..50 {
        let mut model = Model::new();
        for step in plan(seed, 60) {
            model.apply(&step.op);
        }
        let ops = restoring_ops(&model);
        restored_something |= !ops.is_empty();
        for op in &ops {
            model.apply(op);
        }
        for component in COMPONENTS {
            assert_eq!(model.release(component), component, "seed {seed}");
            assert!(!model.per_node.contains(component), "seed {seed}");
            assert!(!model.is_bad(component), "seed {seed}: {component}");
        }
        assert!(model.scheduler_selected.iter().all(|s| *s), "seed {seed}");
        assert!(model.retry_due.is_empty(), "seed {seed}");
        assert!(restoring_ops(&model).is_empty(), "seed {seed}: nothing left to restore");
    }
    assert!(restored_something, "no plan left anything to restore");
}

#[test]
fn checkpoint_files_are_told_by_their_pod() {
    let pod = "selfhosted-scheduler-x7k2p";
    for (path, of) in [
        (
            "/h/etc/kubernetes/inactive-manifests/kube-system-selfhosted-scheduler-x7k2p.json",
            true,
        ),
        (
            "/h/etc/kubernetes/manifests/kube-system-selfhosted-scheduler-x7k2p.json",
            true,
        ),
        (
            "/h/etc/kubernetes/checkpoint-secrets/kube-system/selfhosted-scheduler-x7k2p/kubeconfig/scheduler.conf",
            true,
        ),
        (
            "/h/etc/kubernetes/checkpoint-configmaps/kube-system/selfhosted-scheduler-x7k2p/config/config.yaml",
            true,
        ),
        (
            "/h/etc/kubernetes/inactive-manifests/kube-system-selfhosted-scheduler-abcde.json",
            false,
        ),
        (
            "/h/etc/kubernetes/checkpoint-secrets/kube-system/selfhosted-scheduler-abcde/kubeconfig/scheduler.conf",
            false,
        ),
        ("/h/etc/kubernetes/manifests/kube-scheduler.yaml", false),
    ] {
        assert_eq!(checkpoint_of(Path::new(path), pod), of, "{path}");
        assert_eq!(
            is_checkpoint_file(Path::new(path)),
            !path.ends_with("kube-scheduler.yaml"),
            "{path}"
        );
    }
    assert!(is_component_pod(pod));
    assert!(
        !is_component_pod("selfhosted-scheduler-x7k2p-cp-1"),
        "an active checkpoint's mirror pod"
    );
    assert!(!is_component_pod("kube-scheduler-cp-1"));
}
