//! Is this pod's termination a real decommission of the component on this node? Pure.
//!
//! Removal needs positive evidence, all of it:
//! - this anchor pod is being deleted in the API (a container restart — a liveness kill runs the
//!   preStop hook too — an eviction by the kubelet or a node shutdown leave it undeleted);
//! - the owning DaemonSet is gone (a `NotFound` Status for it, nothing else) or being deleted,
//!   the Node is being deleted, or the Node no longer matches the DaemonSet's node selection;
//! - no other anchor of the same component wants this node: no other non-deleting anchor
//!   DaemonSet of the component selects it, and no other live anchor pod of the component runs
//!   on it (a renamed release or a `perNode` toggle creates the new DaemonSet, then deletes the
//!   old one);
//! - no component that depends on this one stays on this node: no anchor pod there names it in
//!   its `--depends-on` (kube-apiserver depends on etcd, kube-scheduler and
//!   kube-controller-manager on kube-apiserver) and stays, i.e. is not terminating and its
//!   DaemonSet is not being deleted and still selects the node. Removing etcd under a running kube-apiserver
//!   stops that API server, and with it whatever on the node reaches the API through it: its
//!   kubelet may then never start the anchor that would bring etcd back (see [`dependents`]);
//! - under the component's [`Guard`], enough other Ready copies remain (see [`enough_remain`]):
//!   a quorum of them for etcd and kube-apiserver, one for kube-scheduler and
//!   kube-controller-manager.
//!
//! The last two hold a proven decommission back (a Warning Event says so) unless the Node or the
//! DaemonSet carries [`DECOMMISSION_ANNOTATION`].
//!
//! Everything else — a rolling update, an eviction, a reboot, an API that cannot be reached,
//! times out or refuses us — keeps the files. The executor asks twice, a short interval apart,
//! and removes only when both answers are `Remove` ([`confirm`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, NodeSelectorTerm, Pod};

/// The labels every anchor DaemonSet and pod carries (the charts' `kube-anchor-lib.labels`):
/// `app.kubernetes.io/name=kube-anchor` and the component's name under [`COMPONENT_LABEL`].
pub(crate) const ANCHOR_NAME_LABEL: (&str, &str) = ("app.kubernetes.io/name", "kube-anchor");
pub(crate) const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
/// On a Node or an anchor DaemonSet, `"true"` lifts the guard: the last copies may go.
pub(crate) const DECOMMISSION_ANNOTATION: &str = "kube-anchor.io/decommission";
/// The environment variable of an anchor's `--depends-on` (the charts set it from
/// `anchor.dependsOn`): the components it needs on its node, comma-separated.
pub const DEPENDS_ON_ENV: &str = "KUBE_ANCHOR_DEPENDS_ON";

/// One entry of `--depends-on` ([`DEPENDS_ON_ENV`]): a component, and the health URL that says
/// whether it is up (`etcd=http://127.0.0.1:2381/health`; the name alone: the runtime only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub component: String,
    pub health_url: Option<String>,
}

impl Dependency {
    /// The component an entry names.
    pub fn name_of(entry: &str) -> &str {
        entry.split_once('=').map_or(entry, |(name, _)| name).trim()
    }
}

impl std::str::FromStr for Dependency {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (component, health_url) = match s.split_once('=') {
            Some((name, url)) if !url.trim().is_empty() => (name.trim(), Some(url.trim().to_owned())),
            Some((name, _)) => (name.trim(), None),
            None => (s.trim(), None),
        };
        if component.is_empty() && health_url.is_some() {
            return Err(format!("{s:?}: a health URL without a component"));
        }
        Ok(Self {
            component: component.to_owned(),
            health_url,
        })
    }
}

/// The label selector of every anchor, of any component.
pub fn every_anchor_selector() -> String {
    format!("{}={}", ANCHOR_NAME_LABEL.0, ANCHOR_NAME_LABEL.1)
}

/// The label selector of every anchor of `component`.
pub fn anchor_selector(component: &str) -> String {
    format!(
        "{}={},{COMPONENT_LABEL}={component}",
        ANCHOR_NAME_LABEL.0, ANCHOR_NAME_LABEL.1
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupMode {
    /// Remove only on positive evidence of a decommission.
    Guarded,
    /// Never remove (files stay until removed by hand).
    Never,
    /// Remove on every termination (the original anchor's behaviour; for tests and teardown).
    Always,
}

/// `--quorum-guard`: which [`Guard`] a component's removal is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuorumGuard {
    /// [`Guard::Quorum`] for etcd and kube-apiserver, [`Guard::LastCopy`] for kube-scheduler and
    /// kube-controller-manager, [`Guard::None`] for anything else.
    Auto,
    On,
    LastCopy,
    Off,
}

impl QuorumGuard {
    /// The components whose copies form a quorum (etcd members; API servers behind one
    /// endpoint, where losing most of them at once is an outage).
    pub(crate) const QUORUM_COMPONENTS: [&str; 2] = ["etcd", "kube-apiserver"];
    /// The components a control plane cannot bring back once every copy is gone: with no
    /// kube-controller-manager nobody creates the pods of a re-created anchor DaemonSet, with no
    /// kube-scheduler nobody places them (DaemonSet pods go through the scheduler).
    pub(crate) const LAST_COPY_COMPONENTS: [&str; 2] = ["kube-scheduler", "kube-controller-manager"];

    pub fn guard_for(self, component: &str) -> Guard {
        match self {
            QuorumGuard::On => Guard::Quorum,
            QuorumGuard::LastCopy => Guard::LastCopy,
            QuorumGuard::Off => Guard::None,
            QuorumGuard::Auto if Self::QUORUM_COMPONENTS.contains(&component) => Guard::Quorum,
            QuorumGuard::Auto if Self::LAST_COPY_COMPONENTS.contains(&component) => Guard::LastCopy,
            QuorumGuard::Auto => Guard::None,
        }
    }
}

/// What a proven decommission must leave Ready on other nodes before this node's copy may go
/// without the operator's consent ([`DECOMMISSION_ANNOTATION`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// Nothing: the proof is enough.
    None,
    /// At least one other Ready copy.
    LastCopy,
    /// A majority of all the copies.
    Quorum,
}

/// The answer to one API lookup.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup<T> {
    Found(T),
    /// The API answered with a `NotFound` Status for exactly this object.
    NotFound,
    /// Anything else: unreachable, timeout, 403, 5xx, a 404 that is not the API's... never
    /// evidence.
    Unavailable(String),
}

impl<T> Lookup<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Lookup<U> {
        match self {
            Lookup::Found(t) => Lookup::Found(f(t)),
            Lookup::NotFound => Lookup::NotFound,
            Lookup::Unavailable(r) => Lookup::Unavailable(r),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonSetRef {
    pub name: String,
    pub uid: String,
}

/// This anchor's own pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    /// Its controlling DaemonSet.
    pub owner: Option<DaemonSetRef>,
    /// It has a deletionTimestamp.
    pub deleting: bool,
}

/// Node selection of a DaemonSet's pods: `nodeSelector` AND any one of the required
/// node-affinity terms (when there are terms).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSelection {
    pub node_selector: BTreeMap<String, String>,
    pub required_terms: Vec<NodeSelectorTerm>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSetFacts {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    pub selection: NodeSelection,
    /// Carries [`DECOMMISSION_ANNOTATION`]`: "true"`.
    pub decommission: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub deleting: bool,
    /// Carries [`DECOMMISSION_ANNOTATION`]`: "true"`.
    pub decommission: bool,
}

/// Another anchor pod of the same component, anywhere in the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnchorPod {
    pub namespace: String,
    pub name: String,
    pub node: Option<String>,
    /// Being deleted, or finished (Succeeded/Failed, e.g. evicted by the kubelet).
    pub terminating: bool,
    /// Its Ready condition is True: the anchor's `/readyz` answers, i.e. its static pod runs
    /// what was written.
    pub ready: bool,
    /// A static pod's mirror (the kubelet runs it from a manifest on the node; no DaemonSet
    /// placed it): the checkpointer's own checkpoint, which its decommission retires last.
    pub static_copy: bool,
}

/// Every anchor of the component the API lists (by [`anchor_selector`], all namespaces),
/// this pod and its DaemonSet included: [`decide`] sets them apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Anchors {
    pub daemonsets: Vec<DaemonSetFacts>,
    pub pods: Vec<AnchorPod>,
    /// The nodes where the component's static pod (its mirror pod) is Running and Ready,
    /// whatever its anchor says: an anchor holding a rollout back after a rollback elsewhere is
    /// not Ready, while the version it keeps runs well.
    pub static_pods_ready: BTreeSet<String>,
    /// The other nodes whose copy was asked at its own readiness URL during this look
    /// ([`crate::pod_status::readiness_url`]) and did not answer: whatever Ready its node last
    /// posted, it does not count. A node that lost power keeps its pods Ready in the API until
    /// the node lifecycle controller's grace (40 s) has passed.
    pub silent_copies: BTreeSet<String>,
}

/// The component's static pod as its manifest names it: the kubelet names its mirror pod on
/// node N `<name>-<N>`, in `namespace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPodName {
    pub namespace: String,
    pub name: String,
}

impl StaticPodName {
    pub fn mirror_pod(&self, node: &str) -> String {
        format!("{}-{}", self.name, node.to_lowercase())
    }

    /// Whether `pod`, looked up by [`StaticPodName::mirror_pod`], is the copy on `node` and
    /// Ready.
    pub fn ready_on(&self, pod: &Pod, node: &str) -> bool {
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node) && crate::pod_status::is_ready(pod)
    }
}

/// An anchor pod on this node of another component that depends on this one: its
/// `--depends-on` ([`DEPENDS_ON_ENV`]) names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependent {
    pub namespace: String,
    pub name: String,
    pub component: String,
    /// It goes too: being deleted or finished, or its DaemonSet is being deleted or no longer
    /// selects this node (a node leaving every chart at once, whichever hook runs first).
    pub going: bool,
}

/// What the API said, lookup by lookup. `daemonset` is `None` when it was not looked up (the
/// pod could not be read or has no DaemonSet owner); `anchors` and `dependents` are `None` when
/// not listed.
#[derive(Debug, Clone, PartialEq)]
pub struct Evidence {
    pub pod: Lookup<PodFacts>,
    pub daemonset: Option<Lookup<DaemonSetFacts>>,
    pub node: Lookup<NodeFacts>,
    pub anchors: Option<Lookup<Anchors>>,
    /// The anchor pods on this node whose component depends on this one ([`dependents`]).
    pub dependents: Option<Lookup<Vec<Dependent>>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Remove(String),
    Keep(String),
    /// A decommission is proved, but removing would leave fewer than a quorum of Ready copies:
    /// kept, and said loudly (a Warning Event).
    Held(String),
}

impl Decision {
    pub fn reason(&self) -> &str {
        match self {
            Decision::Remove(r) | Decision::Keep(r) | Decision::Held(r) => r,
        }
    }
}

/// This anchor pod, as the downward API names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThisPod {
    pub namespace: String,
    pub name: String,
    pub node: String,
}

pub fn decide(mode: CleanupMode, guard: Guard, this: &ThisPod, evidence: &Evidence) -> Decision {
    match mode {
        CleanupMode::Never => return Decision::Keep("--cleanup never".into()),
        CleanupMode::Always => return Decision::Remove("--cleanup always".into()),
        CleanupMode::Guarded => {}
    }
    let proof = match proof(evidence) {
        Ok(proof) => proof,
        Err(keep) => return Decision::Keep(keep),
    };
    let anchors = match no_other_anchor_wants_node(this, evidence) {
        Ok(anchors) => anchors,
        Err(keep) => return Decision::Keep(format!("{proof}, but {keep}")),
    };
    let consent = || format!("set {DECOMMISSION_ANNOTATION}=\"true\" on the Node or the DaemonSet to remove anyway");
    match no_dependent_runs_here(evidence) {
        Ok(()) => {}
        Err(Dependents::Unknown(keep)) => return Decision::Keep(format!("{proof}, but {keep}")),
        Err(Dependents::Running(why)) if !consented(evidence) => {
            return Decision::Held(format!("{proof}, but {why}; {}", consent()));
        }
        Err(Dependents::Running(_)) => {}
    }
    if let Err(short) = enough_remain(guard, this, anchors)
        && !consented(evidence)
    {
        return Decision::Held(format!("{proof}, but {short}; {}", consent()));
    }
    Decision::Remove(proof)
}

/// Why the components that depend on this one stand in the way.
enum Dependents {
    /// Not listed: no evidence either way.
    Unknown(String),
    /// One still runs on this node.
    Running(String),
}

/// Ok when no live anchor pod on this node depends on this component (or the node itself is
/// going away, taking them all).
fn no_dependent_runs_here(evidence: &Evidence) -> Result<(), Dependents> {
    if matches!(&evidence.node, Lookup::Found(node) if node.deleting) {
        return Ok(());
    }
    let dependents = match &evidence.dependents {
        None => return Err(Dependents::Unknown("the anchors on this node were not listed".into())),
        Some(Lookup::Found(dependents)) => dependents,
        Some(Lookup::NotFound) => {
            return Err(Dependents::Unknown(
                "the anchors on this node could not be listed".into(),
            ));
        }
        Some(Lookup::Unavailable(why)) => {
            return Err(Dependents::Unknown(format!(
                "cannot list the anchors on this node ({why}): not evidence"
            )));
        }
    };
    match dependents.iter().find(|d| !d.going) {
        None => Ok(()),
        Some(d) => Err(Dependents::Running(format!(
            "{} runs on this node (anchor pod {}/{}) and depends on it: removing it would stop {} here",
            d.component, d.namespace, d.name, d.component
        ))),
    }
}

/// The anchor pods on `node`, among `pods` (every anchor pod, by the charts' labels), whose
/// `--depends-on` names `component`. One goes with this one when it is terminating, or when its
/// DaemonSet (among `daemonsets`, every anchor DaemonSet) is being deleted or no longer selects
/// the node (`node_labels`; unknown labels select). A pod whose DaemonSet is not listed stays:
/// nothing says it goes.
pub fn dependents(
    component: &str,
    node: &str,
    node_labels: Option<&BTreeMap<String, String>>,
    pods: &[Pod],
    daemonsets: &[DaemonSet],
) -> Vec<Dependent> {
    pods.iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter(|p| {
            p.spec.iter().flat_map(|s| &s.containers).any(|c| {
                c.env
                    .iter()
                    .flatten()
                    .filter(|e| e.name == DEPENDS_ON_ENV)
                    .filter_map(|e| e.value.as_deref())
                    .any(|v| v.split(',').any(|d| Dependency::name_of(d) == component))
            })
        })
        .map(|p| {
            let anchor = anchor_pod(p);
            let owner =
                daemonset_owner(p).and_then(|o| daemonsets.iter().map(daemonset_facts).find(|d| d.uid == o.uid));
            let owner_lets_go = owner.is_some_and(|d| {
                d.deleting || node_labels.is_some_and(|labels| !matches_node(&d.selection, labels, node))
            });
            Dependent {
                namespace: anchor.namespace,
                name: anchor.name,
                component: p
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(COMPONENT_LABEL))
                    .cloned()
                    .unwrap_or_default(),
                going: anchor.terminating || owner_lets_go,
            }
        })
        .collect()
}

/// A dependent component's files on this node, as its ledger there records them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FilesHere {
    /// Nothing of it here: no ledger, or one that holds no file.
    Nothing,
    /// Its own hook has decommissioned it here: its files are going, and no daemon writes them
    /// again.
    Decommissioned,
    /// Its files are here and nothing says they go.
    Kept,
    /// Its ledger cannot be read (why).
    Unreadable(String),
}

impl FilesHere {
    /// What a dependent's ledger on this node says.
    pub fn of(ledger: &crate::ledger::Ledger) -> Self {
        if ledger.decommissioned.is_some() {
            FilesHere::Decommissioned
        } else if ledger.has_files() {
            FilesHere::Kept
        } else {
            FilesHere::Nothing
        }
    }
}

/// Whether a proven removal may go ahead now, in dependency order ([`removal_order`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// No dependent that goes with this component is left on the node.
    Now,
    /// A dependent that goes is still on the node, its hook at work: wait (why).
    Wait(String),
    /// A dependent's anchor pod is gone and its files stayed: it keeps running here, and this
    /// component stays under it (why).
    Held(String),
}

/// The dependents a proven removal waits for: those on this node that go with it (all of them
/// when the node itself is being deleted). One that stays under the operator's consent is not
/// waited for.
pub fn goes_with(evidence: &Evidence) -> Vec<Dependent> {
    let node_deleting = matches!(&evidence.node, Lookup::Found(node) if node.deleting);
    match &evidence.dependents {
        Some(Lookup::Found(dependents)) => dependents
            .iter()
            .filter(|d| d.going || node_deleting)
            .cloned()
            .collect(),
        _ => Vec::new(),
    }
}

/// A node leaving several charts at once runs every anchor's hook at the same moment. Removal
/// goes in dependency order: this component goes only once each dependent in `waited` (the
/// [`goes_with`] of every look so far) has nothing left here or has decommissioned itself here.
/// Removing etcd first stops the node's API server under the kube-apiserver hook, which then
/// cannot gather its evidence through it and keeps kube-apiserver's files and keys on a node
/// that leaves. While a waited dependent's anchor pod is still listed (in `evidence`, or not
/// listed at all), its hook is at work: wait. Once its pod is gone with its files kept (its hook
/// found no decommission), it stays, and so does this component, unless the operator consented.
pub fn removal_order(evidence: &Evidence, waited: &[Dependent], files_here: impl Fn(&str) -> FilesHere) -> Order {
    let listed = |d: &Dependent| match &evidence.dependents {
        Some(Lookup::Found(now)) => now.iter().any(|x| x.namespace == d.namespace && x.name == d.name),
        _ => true,
    };
    let mut wait = None;
    for d in waited {
        let unread = match files_here(&d.component) {
            FilesHere::Nothing | FilesHere::Decommissioned => continue,
            FilesHere::Kept => String::new(),
            FilesHere::Unreadable(why) => format!(" (its ledger cannot be read: {why})"),
        };
        if listed(d) {
            wait.get_or_insert_with(|| {
                format!(
                    "{} goes too and is still on this node{unread}: its anchor pod {}/{} has not decommissioned it yet",
                    d.component, d.namespace, d.name
                )
            });
        } else if !consented(evidence) {
            return Order::Held(format!(
                "{} depends on it and stays: its anchor pod {}/{} is gone and left its files on this node{unread}",
                d.component, d.namespace, d.name
            ));
        }
    }
    wait.map_or(Order::Now, Order::Wait)
}

/// Ok(why this is a decommission) or Err(why it is not proved).
fn proof(evidence: &Evidence) -> Result<String, String> {
    let pod = match &evidence.pod {
        Lookup::Found(pod) => Some(pod),
        Lookup::NotFound => None,
        Lookup::Unavailable(why) => return Err(format!("cannot read this pod ({why}): not evidence")),
    };
    // The hook also runs on a container restart (a liveness kill) in a pod that stays: only a
    // pod on its way out may take the component with it.
    if pod.is_some_and(|p| !p.deleting) {
        return Err("this pod is not being deleted: a container restart, a kubelet eviction or a node shutdown".into());
    }
    // The node itself going away is evidence on its own.
    if let Lookup::Found(node) = &evidence.node
        && node.deleting
    {
        return Ok(format!("node {} is being deleted", node.name));
    }
    let Some(pod) = pod else {
        return Err("this pod is not found; cannot tell its owner".into());
    };
    let Some(owner) = &pod.owner else {
        return Err("this pod has no DaemonSet owner".into());
    };
    let ds = match &evidence.daemonset {
        None => return Err("the owning DaemonSet was not looked up".into()),
        Some(Lookup::NotFound) => return Ok(format!("DaemonSet {} is gone", owner.name)),
        Some(Lookup::Unavailable(why)) => {
            return Err(format!("cannot read DaemonSet {} ({why}): not evidence", owner.name));
        }
        Some(Lookup::Found(ds)) => ds,
    };
    if ds.deleting && ds.uid == owner.uid {
        return Ok(format!("DaemonSet {} is being deleted", owner.name));
    }
    let node = match &evidence.node {
        Lookup::Found(node) => node,
        Lookup::NotFound => return Err("this node is not found in the API: not evidence".into()),
        Lookup::Unavailable(why) => return Err(format!("cannot read this node ({why}): not evidence")),
    };
    // A DaemonSet of the same name but another UID replaced ours: it decides by its selection.
    let replaced = if ds.uid == owner.uid {
        ""
    } else {
        " (a new DaemonSet of that name)"
    };
    if ds.deleting {
        return Err(format!(
            "DaemonSet {}{replaced} is being deleted, but it is not this pod's owner",
            owner.name
        ));
    }
    if !matches_node(&ds.selection, &node.labels, &node.name) {
        return Ok(format!(
            "node {} is no longer selected by DaemonSet {}{replaced}",
            node.name, owner.name
        ));
    }
    Err(format!(
        "DaemonSet {}{replaced} still selects node {}: an update, eviction, reboot or restart",
        owner.name, node.name
    ))
}

/// Ok(every anchor of the component) when none but this one wants this node; Err(why) when
/// another anchor wants or holds it, or when that cannot be ruled out.
fn no_other_anchor_wants_node<'e>(this: &ThisPod, evidence: &'e Evidence) -> Result<&'e Anchors, String> {
    let anchors = match &evidence.anchors {
        None => return Err("the other anchors of the component were not listed".into()),
        Some(Lookup::Found(anchors)) => anchors,
        Some(Lookup::NotFound) => return Err("the other anchors of the component could not be listed".into()),
        Some(Lookup::Unavailable(why)) => {
            return Err(format!(
                "cannot list the other anchors of the component ({why}): not evidence"
            ));
        }
    };
    let is_this = |p: &AnchorPod| p.namespace == this.namespace && p.name == this.name;
    // Another anchor pod here wants the node (a renamed release's, a new DaemonSet's); a static
    // copy on the node wants nothing: it is what the decommission itself takes away.
    if let Some(p) = anchors
        .pods
        .iter()
        .find(|p| !is_this(p) && !p.terminating && !p.static_copy && p.node.as_deref() == Some(this.node.as_str()))
    {
        return Err(format!(
            "anchor pod {}/{} of the same component runs on this node",
            p.namespace, p.name
        ));
    }
    let node = match &evidence.node {
        // No DaemonSet will run pods on a node that is going away.
        Lookup::Found(node) if node.deleting => return Ok(anchors),
        Lookup::Found(node) => Some(node),
        _ => None,
    };
    let own_uid = match &evidence.pod {
        Lookup::Found(PodFacts { owner: Some(o), .. }) => Some(o.uid.as_str()),
        _ => None,
    };
    for ds in &anchors.daemonsets {
        if ds.deleting || Some(ds.uid.as_str()) == own_uid {
            continue;
        }
        match node {
            Some(node) if !matches_node(&ds.selection, &node.labels, &node.name) => {}
            Some(node) => {
                return Err(format!(
                    "anchor DaemonSet {}/{} of the same component selects node {}",
                    ds.namespace, ds.name, node.name
                ));
            }
            None => {
                return Err(format!(
                    "anchor DaemonSet {}/{} of the same component may select this node (its labels are unknown)",
                    ds.namespace, ds.name
                ));
            }
        }
    }
    Ok(anchors)
}

/// The guard's rule. The copies are the nodes with an anchor pod of the component (any state),
/// this node included; the copies that remain are the *other* nodes with a live (not
/// terminating) anchor pod of the component that is Ready, or whose static pod is
/// (`static_pods_ready`: an anchor holding a rollout back is not Ready, while the version it
/// keeps runs and serves), unless the copy was asked directly just now and did not answer
/// (`silent_copies`: a Ready posted before a power loss is stale). [`Guard::Quorum`] needs the remaining copies
/// to be a majority of all copies, [`Guard::LastCopy`] needs one. A DaemonSet deletion or a
/// deselection of every node terminates every anchor at once, so none counts, and nothing is
/// removed without consent.
pub fn enough_remain(guard: Guard, this: &ThisPod, anchors: &Anchors) -> Result<(), String> {
    let elsewhere = || {
        anchors
            .pods
            .iter()
            .filter(|p| p.node.as_deref().is_some_and(|n| n != this.node))
    };
    let copies = elsewhere()
        .filter_map(|p| p.node.as_deref())
        .collect::<BTreeSet<_>>()
        .len()
        + 1;
    // A copy is Ready when its anchor is, or when its static pod is (an anchor holding a
    // rollout back is not Ready while the version it keeps runs).
    let remaining = elsewhere()
        .filter(|p| !p.terminating)
        .filter(|p| p.ready || p.node.as_ref().is_some_and(|n| anchors.static_pods_ready.contains(n)))
        .filter_map(|p| p.node.as_deref())
        .filter(|n| !anchors.silent_copies.contains(*n))
        .collect::<BTreeSet<_>>()
        .len();
    let silent = elsewhere()
        .filter_map(|p| p.node.as_deref())
        .filter(|n| anchors.silent_copies.contains(*n))
        .collect::<BTreeSet<_>>();
    let silent = if silent.is_empty() {
        String::new()
    } else {
        let nodes: Vec<&str> = silent.into_iter().collect();
        format!(
            "; not counted, though posted Ready: the copy on {} did not answer at its readiness URL",
            nodes.join(", ")
        )
    };
    match guard {
        Guard::None => Ok(()),
        Guard::LastCopy if remaining >= 1 => Ok(()),
        Guard::LastCopy => Err(format!(
            "no other Ready copy would remain ({copies} in all), and the control plane cannot bring back a component whose copies are all gone{silent}"
        )),
        Guard::Quorum => {
            let quorum = copies / 2 + 1;
            if remaining >= quorum {
                Ok(())
            } else {
                Err(format!(
                    "only {remaining} other Ready copies of {copies} would remain, fewer than a quorum of {quorum}{silent}"
                ))
            }
        }
    }
}

/// An explicit decommission annotation on the Node or on this pod's own DaemonSet.
fn consented(evidence: &Evidence) -> bool {
    let node = matches!(&evidence.node, Lookup::Found(n) if n.decommission);
    let own_uid = match &evidence.pod {
        Lookup::Found(PodFacts { owner: Some(o), .. }) => Some(o.uid.as_str()),
        _ => None,
    };
    let ds = matches!(&evidence.daemonset, Some(Lookup::Found(d)) if d.decommission && Some(d.uid.as_str()) == own_uid);
    node || ds
}

/// The second look, a short interval after a first `Remove`: removal stands only when the
/// evidence still proves it (a `kubectl replace --force` passes through a 404 window).
pub fn confirm(first: &Decision, second: Decision) -> Decision {
    match (first, second) {
        (Decision::Remove(_), Decision::Remove(reason)) => Decision::Remove(reason),
        (Decision::Remove(_), Decision::Keep(reason)) => {
            Decision::Keep(format!("the evidence did not hold when looked at again: {reason}"))
        }
        (Decision::Remove(_), held @ Decision::Held(_)) => held,
        (first, _) => first.clone(),
    }
}

/// Pause between looks while a removal waits for a dependent's hook ([`Order::Wait`]).
pub const ORDER_POLL: Duration = Duration::from_secs(1);
/// Kept free after waiting for dependents: the confirming look and what follows it.
pub const ORDER_RESERVE: Duration = Duration::from_secs(5);

/// The looks of one preStop hook (the anchors' and the checkpointer's), as a pure machine: each
/// look's evidence goes in, and out comes when to look again or the decision. A first `Remove`
/// waits, looking every [`ORDER_POLL`], until each dependent that goes with the component has
/// left the node ([`removal_order`]), then is looked at again `confirm_interval` later and
/// [`confirm`]ed. Times are since the hook started; the evidence must be in by
/// `evidence_until`.
#[derive(Debug, Clone, PartialEq)]
pub struct Looks {
    this: ThisPod,
    guard: Guard,
    confirm_interval: Duration,
    evidence_until: Duration,
    /// The dependents a removal waits for: the [`goes_with`] of every look so far.
    waited: Vec<Dependent>,
    /// The first look's `Remove`, once in dependency order: the next look confirms it.
    first: Option<Decision>,
}

/// What to do after a look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextLook {
    /// Look again at `at`: a dependent goes first (`waiting_for`), or the removal is confirmed
    /// (`None`).
    Again {
        at: Duration,
        waiting_for: Option<String>,
    },
    Decided(Decision),
}

impl Looks {
    pub fn new(this: ThisPod, guard: Guard, confirm_interval: Duration, evidence_until: Duration) -> Self {
        Looks {
            this,
            guard,
            confirm_interval,
            evidence_until,
            waited: Vec::new(),
            first: None,
        }
    }

    /// One look's evidence, at `now`; `files_here` reads a dependent's ledger on this node.
    pub fn look(&mut self, evidence: &Evidence, files_here: impl Fn(&str) -> FilesHere, now: Duration) -> NextLook {
        let decision = decide(CleanupMode::Guarded, self.guard, &self.this, evidence);
        let order = if matches!(decision, Decision::Remove(_)) {
            for d in goes_with(evidence) {
                if !self.waited.contains(&d) {
                    self.waited.push(d);
                }
            }
            removal_order(evidence, &self.waited, files_here)
        } else {
            Order::Now
        };
        let left = |until: Duration| until.saturating_sub(now);
        let Some(first) = &self.first else {
            let held = |why: String| NextLook::Decided(Decision::Held(format!("{}, but {why}", decision.reason())));
            let order_until = self
                .evidence_until
                .saturating_sub(self.confirm_interval + ORDER_RESERVE);
            return match order {
                _ if !matches!(decision, Decision::Remove(_)) => NextLook::Decided(decision),
                Order::Held(why) => held(why),
                Order::Wait(why) if left(order_until) < ORDER_POLL => {
                    held(format!("{why}, and no time is left to wait for it"))
                }
                Order::Wait(why) => NextLook::Again {
                    at: now + ORDER_POLL,
                    waiting_for: Some(why),
                },
                Order::Now if left(self.evidence_until) < self.confirm_interval => NextLook::Decided(Decision::Keep(
                    format!("{}, but no time is left to confirm it", decision.reason()),
                )),
                Order::Now => {
                    self.first = Some(decision);
                    NextLook::Again {
                        at: now + self.confirm_interval,
                        waiting_for: None,
                    }
                }
            };
        };
        let second = match order {
            Order::Now => decision,
            Order::Held(why) | Order::Wait(why) => Decision::Held(format!("{}, but {why}", decision.reason())),
        };
        NextLook::Decided(confirm(first, second))
    }
}

/// Whether a node with `labels` and `name` satisfies `selection` (the scheduler's rules for
/// `nodeSelector` and `requiredDuringSchedulingIgnoredDuringExecution`).
pub fn matches_node(selection: &NodeSelection, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let selector_ok = selection.node_selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    let terms_ok =
        selection.required_terms.is_empty() || selection.required_terms.iter().any(|t| term_matches(t, labels, name));
    selector_ok && terms_ok
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    // A term with no requirements matches nothing (as in the scheduler).
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(name)))
}

fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v > x),
        "Lt" => matches!((value.and_then(number), values.first().and_then(|x| number(x))), (Some(v), Some(x)) if v < x),
        _ => false,
    }
}

/// The controlling DaemonSet of a pod, if any.
pub(crate) fn daemonset_owner(pod: &Pod) -> Option<DaemonSetRef> {
    pod.metadata.owner_references.as_ref()?.iter().find_map(|r| {
        (r.kind == "DaemonSet" && r.controller == Some(true)).then(|| DaemonSetRef {
            name: r.name.clone(),
            uid: r.uid.clone(),
        })
    })
}

fn annotated(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(DECOMMISSION_ANNOTATION))
        .is_some_and(|v| v == "true")
}

pub fn pod_facts(pod: &Pod) -> PodFacts {
    PodFacts {
        owner: daemonset_owner(pod),
        deleting: pod.metadata.deletion_timestamp.is_some(),
    }
}

/// The annotation the kubelet puts on a static pod's mirror pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub fn anchor_pod(pod: &Pod) -> AnchorPod {
    let status = pod.status.as_ref();
    let finished = matches!(status.and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
    let ready = crate::pod_status::is_ready(pod);
    let static_copy = pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    AnchorPod {
        namespace: pod.metadata.namespace.clone().unwrap_or_default(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        terminating: finished || pod.metadata.deletion_timestamp.is_some(),
        ready,
        static_copy,
    }
}

impl NodeSelection {
    /// The selection a pod template asks for (none: every node).
    pub fn of(pod_spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Self {
        Self {
            node_selector: pod_spec
                .and_then(|s| s.node_selector.clone())
                .unwrap_or_default()
                .into_iter()
                .collect(),
            required_terms: pod_spec
                .and_then(|s| s.affinity.as_ref())
                .and_then(|a| a.node_affinity.as_ref())
                .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
                .map(|r| r.node_selector_terms.clone())
                .unwrap_or_default(),
        }
    }
}

pub fn daemonset_facts(ds: &DaemonSet) -> DaemonSetFacts {
    DaemonSetFacts {
        namespace: ds.metadata.namespace.clone().unwrap_or_default(),
        name: ds.metadata.name.clone().unwrap_or_default(),
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        deleting: ds.metadata.deletion_timestamp.is_some(),
        selection: NodeSelection::of(ds.spec.as_ref().and_then(|s| s.template.spec.as_ref())),
        decommission: annotated(&ds.metadata),
    }
}

pub fn node_facts(node: &Node) -> NodeFacts {
    NodeFacts {
        name: node.metadata.name.clone().unwrap_or_default(),
        labels: node.metadata.labels.clone().unwrap_or_default().into_iter().collect(),
        deleting: node.metadata.deletion_timestamp.is_some(),
        decommission: annotated(&node.metadata),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEL: &[(&str, &str)] = &[("kubernetes-apiserver", "enabled")];

    fn this() -> ThisPod {
        ThisPod {
            namespace: "kube-system".into(),
            name: "anchor-a".into(),
            node: "cp-1".into(),
        }
    }

    fn pod(owned: bool, deleting: bool) -> Lookup<PodFacts> {
        Lookup::Found(PodFacts {
            owner: owned.then(|| DaemonSetRef {
                name: "kube-apiserver".into(),
                uid: "ds-1".into(),
            }),
            deleting,
        })
    }

    fn ds_facts(uid: &str, deleting: bool, selector: &[(&str, &str)], decommission: bool) -> DaemonSetFacts {
        DaemonSetFacts {
            namespace: "kube-system".into(),
            name: format!("anchor-{uid}"),
            uid: uid.into(),
            deleting,
            selection: NodeSelection {
                node_selector: selector.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
                required_terms: vec![],
            },
            decommission,
        }
    }

    fn ds(uid: &str, deleting: bool, selector: &[(&str, &str)]) -> Option<Lookup<DaemonSetFacts>> {
        Some(Lookup::Found(ds_facts(uid, deleting, selector, false)))
    }

    fn node(labels: &[(&str, &str)], deleting: bool, decommission: bool) -> Lookup<NodeFacts> {
        Lookup::Found(NodeFacts {
            name: "cp-1".into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            deleting,
            decommission,
        })
    }

    fn anchor(name: &str, node: &str, terminating: bool, ready: bool) -> AnchorPod {
        AnchorPod {
            namespace: "kube-system".into(),
            name: name.into(),
            node: Some(node.into()),
            terminating,
            ready,
            static_copy: false,
        }
    }

    /// This pod (terminating) and its own DaemonSet, plus `pods` and `daemonsets`.
    fn anchors(pods: Vec<AnchorPod>, daemonsets: Vec<DaemonSetFacts>) -> Option<Lookup<Anchors>> {
        let mut all = vec![anchor("anchor-a", "cp-1", true, true)];
        all.extend(pods);
        let mut sets = vec![ds_facts("ds-1", true, SEL, false)];
        sets.extend(daemonsets);
        Some(Lookup::Found(Anchors {
            daemonsets: sets,
            pods: all,
            static_pods_ready: BTreeSet::new(),
            silent_copies: BTreeSet::new(),
        }))
    }

    fn unavailable<T>() -> Lookup<T> {
        Lookup::Unavailable("connection refused".into())
    }

    fn ev(
        pod: Lookup<PodFacts>,
        daemonset: Option<Lookup<DaemonSetFacts>>,
        node: Lookup<NodeFacts>,
        anchors: Option<Lookup<Anchors>>,
    ) -> Evidence {
        Evidence {
            pod,
            daemonset,
            node,
            anchors,
            dependents: Some(Lookup::Found(vec![])),
        }
    }

    fn dependent(going: bool) -> Dependent {
        Dependent {
            namespace: "kube-system".into(),
            name: "kube-apiserver-anchor-x".into(),
            component: "kube-apiserver".into(),
            going,
        }
    }

    fn is_remove(d: &Decision) -> bool {
        matches!(d, Decision::Remove(_))
    }

    /// Every combination of the inputs: removal exactly when there is positive evidence, no
    /// other anchor wants the node, and the guard's copies remain (a quorum, one, or none
    /// needed) or the decommission is explicit. The expectation is written independently of `decide`.
    #[test]
    fn exhaustive_guarded_table() {
        let pods = vec![
            ("owned, deleting", pod(true, true)),
            ("owned, alive", pod(true, false)),
            ("no owner, deleting", pod(false, true)),
            ("pod 404", Lookup::NotFound),
            ("pod unreadable", unavailable()),
        ];
        let daemonsets = vec![
            ("ds present, selects", ds("ds-1", false, SEL)),
            ("ds present, other selector", ds("ds-1", false, &[("other", "x")])),
            ("ds deleting", ds("ds-1", true, SEL)),
            (
                "ds deleting, annotated",
                Some(Lookup::Found(ds_facts("ds-1", true, SEL, true))),
            ),
            ("ds replaced, selects", ds("ds-2", false, SEL)),
            ("ds replaced, other selector", ds("ds-2", false, &[("other", "x")])),
            ("ds replaced and deleting", ds("ds-2", true, SEL)),
            ("ds 404", Some(Lookup::NotFound)),
            ("ds unreadable", Some(unavailable())),
            ("ds not looked up", None),
        ];
        let nodes = vec![
            ("node labelled", node(SEL, false, false)),
            ("node labelled, annotated", node(SEL, false, true)),
            ("node unlabelled", node(&[], false, false)),
            ("node deleting", node(SEL, true, false)),
            ("node 404", Lookup::NotFound),
            ("node unreadable", unavailable()),
        ];
        let others = vec![
            ("alone", anchors(vec![], vec![])),
            (
                "two Ready elsewhere",
                anchors(
                    vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", false, true)],
                    vec![],
                ),
            ),
            (
                "one Ready of three",
                anchors(
                    vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", true, true)],
                    vec![],
                ),
            ),
            (
                "live anchor here",
                anchors(vec![anchor("x", "cp-1", false, false)], vec![]),
            ),
            (
                "terminating anchor here",
                anchors(vec![anchor("x", "cp-1", true, true)], vec![]),
            ),
            (
                // The checkpointer's own checkpoint, its mirror pod: the node's, no DaemonSet's.
                "static copy here",
                anchors(
                    vec![AnchorPod {
                        static_copy: true,
                        ..anchor("x-cp-1", "cp-1", false, true)
                    }],
                    vec![],
                ),
            ),
            (
                "other ds selects",
                anchors(vec![], vec![ds_facts("ds-9", false, SEL, false)]),
            ),
            (
                "other ds deleting",
                anchors(vec![], vec![ds_facts("ds-9", true, SEL, false)]),
            ),
            ("anchors unreadable", Some(unavailable())),
            ("anchors not listed", None),
        ];
        let dependents = vec![
            ("no dependent here", Some(Lookup::Found(vec![]))),
            ("a dependent runs here", Some(Lookup::Found(vec![dependent(false)]))),
            ("a dependent goes too", Some(Lookup::Found(vec![dependent(true)]))),
            ("dependents unreadable", Some(unavailable())),
            ("dependents not listed", None),
        ];
        let mut removals = 0;
        let mut held = 0;
        let mut total = 0;
        for (p_name, p) in &pods {
            for (d_name, d) in &daemonsets {
                for (n_name, n) in &nodes {
                    for (a_name, a) in &others {
                        for guard in [Guard::None, Guard::LastCopy, Guard::Quorum] {
                            for (dep_name, dep) in &dependents {
                                let mut e = ev(p.clone(), d.clone(), n.clone(), a.clone());
                                e.dependents = dep.clone();
                                let decision = decide(CleanupMode::Guarded, guard, &this(), &e);
                                let node_deleting = *n_name == "node deleting";
                                let node_selected = n_name.starts_with("node labelled");
                                let pod_may_go =
                                    matches!(*p_name, "owned, deleting" | "no owner, deleting" | "pod 404");
                                let by_owner = *p_name == "owned, deleting"
                                    && (matches!(*d_name, "ds 404" | "ds deleting" | "ds deleting, annotated")
                                        || (matches!(
                                            *d_name,
                                            "ds present, selects"
                                                | "ds present, other selector"
                                                | "ds replaced, selects"
                                                | "ds replaced, other selector"
                                        ) && (node_selected || *n_name == "node unlabelled")
                                            && (d_name.ends_with("other selector") || *n_name == "node unlabelled")));
                                let proved = pod_may_go && (node_deleting || by_owner);
                                let wanted = match *a_name {
                                    "live anchor here" | "anchors unreadable" | "anchors not listed" => true,
                                    "other ds selects" => {
                                        node_selected || matches!(*n_name, "node 404" | "node unreadable")
                                    }
                                    _ => false,
                                };
                                let enough = match guard {
                                    Guard::None => true,
                                    Guard::LastCopy => matches!(*a_name, "two Ready elsewhere" | "one Ready of three"),
                                    Guard::Quorum => *a_name == "two Ready elsewhere",
                                };
                                let consent = *n_name == "node labelled, annotated"
                                    || (*d_name == "ds deleting, annotated" && *p_name == "owned, deleting");
                                // A node going away takes its dependents with it.
                                let dependents_unknown = !node_deleting
                                    && matches!(*dep_name, "dependents unreadable" | "dependents not listed");
                                let dependent_runs = !node_deleting && *dep_name == "a dependent runs here";
                                let expected_remove = proved
                                    && !wanted
                                    && !dependents_unknown
                                    && (!dependent_runs || consent)
                                    && (enough || consent);
                                let expected_held =
                                    proved && !wanted && !dependents_unknown && (dependent_runs || !enough) && !consent;
                                let case = format!(
                                    "{p_name} / {d_name} / {n_name} / {a_name} / {guard:?} / {dep_name}: {decision:?}"
                                );
                                assert_eq!(is_remove(&decision), expected_remove, "{case}");
                                assert_eq!(matches!(decision, Decision::Held(_)), expected_held, "{case}");
                                removals += usize::from(expected_remove);
                                held += usize::from(expected_held);
                                total += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(removals > 0 && held > 0 && removals + held < total);
    }

    #[test]
    fn an_unreachable_api_is_never_evidence() {
        let d = decide(
            CleanupMode::Guarded,
            Guard::Quorum,
            &this(),
            &ev(unavailable(), None, unavailable(), Some(unavailable())),
        );
        assert!(matches!(&d, Decision::Keep(r) if r.contains("not evidence")), "{d:?}");
    }

    #[test]
    fn a_container_restart_is_not_a_decommission() {
        // The owning DaemonSet is gone, but this pod is not being deleted: a liveness kill.
        let e = ev(
            pod(true, false),
            Some(Lookup::NotFound),
            node(SEL, false, false),
            anchors(vec![], vec![]),
        );
        let d = decide(CleanupMode::Guarded, Guard::None, &this(), &e);
        assert!(
            matches!(&d, Decision::Keep(r) if r.contains("not being deleted")),
            "{d:?}"
        );
    }

    #[test]
    fn a_renamed_anchor_keeps_the_component() {
        let e = ev(
            pod(true, true),
            Some(Lookup::NotFound),
            node(SEL, false, false),
            anchors(vec![], vec![ds_facts("ds-new", false, SEL, false)]),
        );
        let d = decide(CleanupMode::Guarded, Guard::None, &this(), &e);
        assert!(matches!(&d, Decision::Keep(r) if r.contains("anchor-ds-new")), "{d:?}");
    }

    #[test]
    fn modes_override() {
        let e = ev(
            pod(true, true),
            ds("ds-1", false, SEL),
            node(SEL, false, false),
            anchors(vec![], vec![]),
        );
        assert!(!is_remove(&decide(CleanupMode::Guarded, Guard::None, &this(), &e)));
        assert!(is_remove(&decide(CleanupMode::Always, Guard::Quorum, &this(), &e)));
        let gone = ev(
            pod(true, true),
            Some(Lookup::NotFound),
            node(SEL, false, false),
            anchors(vec![], vec![]),
        );
        assert!(is_remove(&decide(CleanupMode::Guarded, Guard::None, &this(), &gone)));
        assert!(!is_remove(&decide(CleanupMode::Never, Guard::None, &this(), &gone)));
    }

    #[test]
    fn quorum_counts_other_nodes_with_a_live_ready_anchor() {
        let me = this();
        let cases: Vec<(Vec<AnchorPod>, bool)> = vec![
            // Alone: one copy, none would remain.
            (vec![], false),
            (vec![anchor("b", "cp-2", false, true)], false),
            (
                vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", false, true)],
                true,
            ),
            // Not Ready, or on its way out: does not count as remaining, counts as a copy.
            (
                vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", false, false)],
                false,
            ),
            (
                vec![anchor("b", "cp-2", true, true), anchor("c", "cp-3", true, true)],
                false,
            ),
            // Two pods on one node (a rollout of two DaemonSets) are one copy.
            (
                vec![
                    anchor("b", "cp-2", false, true),
                    anchor("b2", "cp-2", false, true),
                    anchor("c", "cp-3", false, true),
                ],
                true,
            ),
            // Five copies: three must remain.
            (
                vec![
                    anchor("b", "cp-2", false, true),
                    anchor("c", "cp-3", false, true),
                    anchor("d", "cp-4", false, true),
                    anchor("e", "cp-5", true, true),
                ],
                true,
            ),
            (
                vec![
                    anchor("b", "cp-2", false, true),
                    anchor("c", "cp-3", false, true),
                    anchor("d", "cp-4", false, false),
                    anchor("e", "cp-5", true, true),
                ],
                false,
            ),
            // Anchors on this node never count.
            (
                vec![anchor("x", "cp-1", false, true), anchor("b", "cp-2", false, true)],
                false,
            ),
        ];
        for (pods, ok) in cases {
            let none = copies(&pods, &[], &[]);
            assert_eq!(enough_remain(Guard::Quorum, &me, &none).is_ok(), ok, "{pods:?}");
            // One other live Ready copy on any node is enough for the last-copy guard.
            let one_elsewhere = pods
                .iter()
                .any(|p| p.node.as_deref() != Some("cp-1") && p.ready && !p.terminating);
            assert_eq!(
                enough_remain(Guard::LastCopy, &me, &none).is_ok(),
                one_elsewhere,
                "{pods:?}"
            );
            assert!(enough_remain(Guard::None, &me, &none).is_ok());
        }
    }

    /// Seed 11 of the lifecycle run: a never-healthy scheduler version rolled back on cp-2,
    /// whose anchor then holds the rollout back (not Ready); cp-3 powered off; cp-1 relabelled
    /// out of the scheduler's selector. cp-2's scheduler runs the kept version, Ready: the
    /// guard must let cp-1's go, or it stays on a node no DaemonSet selects, with no anchor.
    #[test]
    fn a_static_pod_running_under_an_anchor_that_holds_a_rollout_back_is_a_ready_copy() {
        let me = ThisPod {
            namespace: "kube-system".into(),
            name: "a".into(),
            node: "cp-1".into(),
        };
        let pods = vec![anchor("b", "cp-2", false, false), anchor("c", "cp-3", false, false)];
        let ready = |nodes: &[&str]| copies(&pods, nodes, &[]);
        assert!(enough_remain(Guard::LastCopy, &me, &ready(&[])).is_err());
        assert!(enough_remain(Guard::LastCopy, &me, &ready(&["cp-2"])).is_ok());
        // The quorum guard counts them the same way.
        assert!(enough_remain(Guard::Quorum, &me, &ready(&["cp-2"])).is_err());
        assert!(enough_remain(Guard::Quorum, &me, &ready(&["cp-2", "cp-3"])).is_ok());
        // A static pod Ready on this node, or under a terminating anchor, does not count.
        assert!(enough_remain(Guard::LastCopy, &me, &ready(&["cp-1"])).is_err());
        let going = vec![anchor("b", "cp-2", true, false)];
        assert!(enough_remain(Guard::LastCopy, &me, &copies(&going, &["cp-2"], &[])).is_err());
    }

    /// The other copies: anchor `pods`, the nodes whose static pod reads Ready, and those whose
    /// copy was asked directly and did not answer.
    fn copies(pods: &[AnchorPod], ready: &[&str], silent: &[&str]) -> Anchors {
        let set = |nodes: &[&str]| nodes.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();
        Anchors {
            daemonsets: vec![],
            pods: pods.to_vec(),
            static_pods_ready: set(ready),
            silent_copies: set(silent),
        }
    }

    /// The fleet simulation's `a-node-leaves-just-after-another-lost-power`: cp-2 lost power
    /// seconds ago, and its anchor and mirror pods still read Ready (the node lifecycle
    /// controller marks them only after its 40 s grace). Asked directly, cp-2's copy does not
    /// answer, so it does not count, and cp-1's copy stays: the quorum guard's promise holds
    /// against the world, not against what was last posted.
    #[test]
    fn a_copy_that_does_not_answer_when_asked_does_not_count_whatever_it_last_posted() {
        let me = ThisPod {
            namespace: "kube-system".into(),
            name: "a".into(),
            node: "cp-1".into(),
        };
        let pods = vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", false, true)];
        let posted = ["cp-2", "cp-3"];
        // (the copies asked that stayed silent, quorum guard passes, last-copy guard passes)
        let cases: [(&[&str], bool, bool); 4] = [
            (&[], true, true),
            (&["cp-2"], false, true),
            (&["cp-2", "cp-3"], false, false),
            // This node's own copy is never one of the others, asked or not.
            (&["cp-1"], true, true),
        ];
        for (silent, quorum, last_copy) in cases {
            let anchors = copies(&pods, &posted, silent);
            assert_eq!(
                enough_remain(Guard::Quorum, &me, &anchors).is_ok(),
                quorum,
                "{silent:?}"
            );
            assert_eq!(
                enough_remain(Guard::LastCopy, &me, &anchors).is_ok(),
                last_copy,
                "{silent:?}"
            );
            assert!(enough_remain(Guard::None, &me, &anchors).is_ok());
        }
        let why = enough_remain(Guard::Quorum, &me, &copies(&pods, &posted, &["cp-2"])).unwrap_err();
        assert!(why.contains("only 1 other Ready copies of 3"), "{why}");
        assert!(
            why.contains("the copy on cp-2 did not answer at its readiness URL"),
            "{why}"
        );
    }

    #[test]
    fn confirm_needs_two_removes() {
        let remove = Decision::Remove("DaemonSet x is gone".into());
        let keep = Decision::Keep("DaemonSet x still selects node cp-1".into());
        let held = Decision::Held("quorum".into());
        assert_eq!(confirm(&remove, remove.clone()), remove);
        assert!(matches!(confirm(&remove, keep.clone()), Decision::Keep(r) if r.contains("did not hold")));
        assert_eq!(confirm(&remove, held.clone()), held);
        assert_eq!(confirm(&keep, remove.clone()), keep);
        assert_eq!(confirm(&held, remove), held);
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn node_affinity_operators() {
        let labels: BTreeMap<String, String> = [
            ("role".to_string(), "cp".to_string()),
            ("gen".to_string(), "5".to_string()),
        ]
        .into();
        let cases = [
            (req("role", "In", &["cp", "x"]), true),
            (req("role", "In", &["worker"]), false),
            (req("role", "NotIn", &["worker"]), true),
            (req("missing", "NotIn", &["x"]), true),
            (req("role", "Exists", &[]), true),
            (req("missing", "Exists", &[]), false),
            (req("missing", "DoesNotExist", &[]), true),
            (req("gen", "Gt", &["4"]), true),
            (req("gen", "Lt", &["4"]), false),
            (req("role", "Gt", &["4"]), false),
            (req("role", "Bogus", &["cp"]), false),
        ];
        for (r, want) in cases {
            let sel = NodeSelection {
                node_selector: BTreeMap::new(),
                required_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![r.clone()]),
                    match_fields: None,
                }],
            };
            assert_eq!(matches_node(&sel, &labels, "cp-1"), want, "{r:?}");
        }
        // Terms are ORed; an empty term matches nothing; matchFields on metadata.name.
        let by_name = NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["cp-1"])]),
        };
        let never = NodeSelectorTerm::default();
        let sel = NodeSelection {
            node_selector: BTreeMap::new(),
            required_terms: vec![never.clone(), by_name],
        };
        assert!(matches_node(&sel, &labels, "cp-1"));
        assert!(!matches_node(&sel, &labels, "cp-2"));
        let sel = NodeSelection {
            node_selector: BTreeMap::new(),
            required_terms: vec![never],
        };
        assert!(!matches_node(&sel, &labels, "cp-1"));
    }

    #[test]
    fn facts_from_real_objects() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "kube-system", "deletionTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x"},
                {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-apiserver", "uid": "ds-1", "controller": true}
            ]},
            "spec": {"nodeName": "cp-1", "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        assert_eq!(
            pod_facts(&pod),
            PodFacts {
                owner: Some(DaemonSetRef {
                    name: "kube-apiserver".into(),
                    uid: "ds-1".into()
                }),
                deleting: true
            }
        );
        assert_eq!(
            anchor_pod(&pod),
            AnchorPod {
                namespace: "kube-system".into(),
                name: "p".into(),
                node: Some("cp-1".into()),
                terminating: true,
                ready: true,
                static_copy: false
            }
        );
        let evicted: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "e"}, "status": {"phase": "Failed"}
        }))
        .unwrap();
        assert!(anchor_pod(&evicted).terminating && !anchor_pod(&evicted).ready);
        let mirror: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pod-checkpointer-x7k2p-cp-1", "annotations": {"kubernetes.io/config.mirror": "0123abcd"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "cp-1", "uid": "n", "controller": true}]},
            "spec": {"nodeName": "cp-1", "containers": []}
        }))
        .unwrap();
        assert!(anchor_pod(&mirror).static_copy && !anchor_pod(&pod).static_copy);
        let d: DaemonSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver", "namespace": "kube-system", "uid": "ds-1", "deletionTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"kube-anchor.io/decommission": "true"}},
            "spec": {"selector": {}, "template": {"spec": {"containers": [], "nodeSelector": {"a": "b"},
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}}}}}
        }))
        .unwrap();
        let f = daemonset_facts(&d);
        assert!(f.deleting && f.decommission);
        assert_eq!(
            (f.namespace.as_str(), f.name.as_str()),
            ("kube-system", "kube-apiserver")
        );
        assert_eq!(f.selection.node_selector.get("a").map(String::as_str), Some("b"));
        assert_eq!(f.selection.required_terms.len(), 1);
        let n: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cp-1", "annotations": {"kube-anchor.io/decommission": "yes"}}
        }))
        .unwrap();
        assert!(!node_facts(&n).decommission, "only \"true\" consents");
    }

    #[test]
    fn guard_defaults_by_component() {
        assert_eq!(QuorumGuard::Auto.guard_for("etcd"), Guard::Quorum);
        assert_eq!(QuorumGuard::Auto.guard_for("kube-apiserver"), Guard::Quorum);
        assert_eq!(QuorumGuard::Auto.guard_for("kube-scheduler"), Guard::LastCopy);
        assert_eq!(QuorumGuard::Auto.guard_for("kube-controller-manager"), Guard::LastCopy);
        assert_eq!(QuorumGuard::Auto.guard_for("kube-addon-manager"), Guard::None);
        assert_eq!(QuorumGuard::On.guard_for("kube-scheduler"), Guard::Quorum);
        assert_eq!(QuorumGuard::LastCopy.guard_for("etcd"), Guard::LastCopy);
        assert_eq!(QuorumGuard::Off.guard_for("etcd"), Guard::None);
    }

    /// The sequence the lifecycle run found (seed 4, operations 5-6): the kube-scheduler's
    /// anchor DaemonSet deleted, so every anchor terminates at once and each hook proves the
    /// decommission. Under the default guard each keeps its copy (a re-created DaemonSet needs a
    /// scheduler to place its pods); a node deselected while the others run still loses it.
    #[test]
    fn a_deleted_scheduler_daemonset_keeps_the_last_copies() {
        let guard = QuorumGuard::Auto.guard_for("kube-scheduler");
        let all_terminating = anchors(
            vec![anchor("b", "cp-2", true, true), anchor("c", "cp-3", true, true)],
            vec![],
        );
        let deleted = ev(
            pod(true, true),
            Some(Lookup::NotFound),
            node(SEL, false, false),
            all_terminating.clone(),
        );
        let d = decide(CleanupMode::Guarded, guard, &this(), &deleted);
        assert!(
            matches!(&d, Decision::Held(r) if r.contains("no other Ready copy")),
            "{d:?}"
        );
        // Consent on the Node lifts it.
        let consented = ev(
            pod(true, true),
            Some(Lookup::NotFound),
            node(SEL, false, true),
            all_terminating,
        );
        assert!(is_remove(&decide(CleanupMode::Guarded, guard, &this(), &consented)));
        // One node relabelled out while the other two run: removed.
        let deselected = ev(
            pod(true, true),
            ds("ds-1", false, SEL),
            node(&[], false, false),
            anchors(
                vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", false, true)],
                vec![],
            ),
        );
        assert!(is_remove(&decide(CleanupMode::Guarded, guard, &this(), &deselected)));
    }

    /// The lifecycle run's seed 4, operation 17: one node's etcd anchor DaemonSet deleted while
    /// the other two etcd members are Ready, and re-created 29 s later. The quorum guard let the
    /// hook take etcd off the node; the node's kube-apiserver (on its local member) stopped, its
    /// kubelet (on that API server) went dark, and the re-created DaemonSet's pod never started.
    /// The kube-apiserver anchor on the node now holds etcd there.
    #[test]
    fn etcd_stays_under_the_api_server_that_needs_it() {
        let guard = QuorumGuard::Auto.guard_for("etcd");
        let others_ready = anchors(
            vec![anchor("b", "cp-2", false, true), anchor("c", "cp-3", false, true)],
            vec![],
        );
        let mut deleted = ev(
            pod(true, true),
            Some(Lookup::NotFound),
            node(SEL, false, false),
            others_ready.clone(),
        );
        assert!(
            is_remove(&decide(CleanupMode::Guarded, guard, &this(), &deleted)),
            "before: removed"
        );
        deleted.dependents = Some(Lookup::Found(vec![dependent(false)]));
        let d = decide(CleanupMode::Guarded, guard, &this(), &deleted);
        assert!(
            matches!(&d, Decision::Held(r) if r.contains("kube-apiserver runs on this node")),
            "{d:?}"
        );
        // The whole node leaving the control plane: its kube-apiserver anchor goes too.
        deleted.dependents = Some(Lookup::Found(vec![dependent(true)]));
        assert!(is_remove(&decide(CleanupMode::Guarded, guard, &this(), &deleted)));
        // Consent on the Node lifts the hold.
        let mut consented = ev(
            pod(true, true),
            Some(Lookup::NotFound),
            node(SEL, false, true),
            others_ready,
        );
        consented.dependents = Some(Lookup::Found(vec![dependent(false)]));
        assert!(is_remove(&decide(CleanupMode::Guarded, guard, &this(), &consented)));
    }

    #[test]
    fn dependents_are_read_from_the_anchor_pods_on_the_node() {
        let pod = |name: &str, node: &str, component: &str, depends_on: Option<&str>, deleting: bool| -> Pod {
            let mut meta = serde_json::json!({"name": name, "namespace": "kube-system",
                "labels": {"app.kubernetes.io/name": "kube-anchor", "app.kubernetes.io/component": component},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": format!("{component}-anchor"),
                    "uid": format!("{component}-ds"), "controller": true}]});
            if deleting {
                meta["deletionTimestamp"] = serde_json::json!("2026-01-01T00:00:00Z");
            }
            let env: Vec<serde_json::Value> = depends_on
                .map(|d| serde_json::json!({"name": DEPENDS_ON_ENV, "value": d}))
                .into_iter()
                .collect();
            serde_json::from_value(serde_json::json!({
                "metadata": meta,
                "spec": {"nodeName": node, "containers": [{"name": "anchor", "env": env}]}
            }))
            .unwrap()
        };
        let pods = [
            pod("api-1", "cp-1", "kube-apiserver", Some("etcd"), false),
            pod("api-2", "cp-2", "kube-apiserver", Some("etcd"), false),
            pod("sched-1", "cp-1", "kube-scheduler", Some("kube-apiserver"), true),
            pod(
                "kcm-1",
                "cp-1",
                "kube-controller-manager",
                Some("other, kube-apiserver"),
                false,
            ),
            pod("etcd-1", "cp-1", "etcd", None, false),
        ];
        let daemonset = |component: &str, selector: serde_json::Value, deleting: bool| -> DaemonSet {
            let mut meta = serde_json::json!({"name": format!("{component}-anchor"), "namespace": "kube-system",
                "uid": format!("{component}-ds")});
            if deleting {
                meta["deletionTimestamp"] = serde_json::json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(serde_json::json!({"metadata": meta, "spec": {"selector": {},
                "template": {"spec": {"containers": [], "nodeSelector": selector}}}}))
            .unwrap()
        };
        let cp = serde_json::json!({"node-role.kubernetes.io/control-plane": ""});
        let labelled: BTreeMap<String, String> =
            [("node-role.kubernetes.io/control-plane".to_owned(), String::new())].into();
        let unlabelled = BTreeMap::new();
        let names =
            |c: &str, labels: Option<&BTreeMap<String, String>>, daemonsets: &[DaemonSet]| -> Vec<(String, bool)> {
                dependents(c, "cp-1", labels, &pods, daemonsets)
                    .into_iter()
                    .map(|d| (format!("{}/{}", d.component, d.name), d.going))
                    .collect()
            };
        let selecting = [
            daemonset("kube-apiserver", cp.clone(), false),
            daemonset("kube-controller-manager", cp.clone(), false),
        ];
        assert_eq!(
            names("etcd", Some(&labelled), &selecting),
            [("kube-apiserver/api-1".to_owned(), false)]
        );
        assert_eq!(
            names("kube-apiserver", Some(&labelled), &selecting),
            [
                ("kube-scheduler/sched-1".to_owned(), true),
                ("kube-controller-manager/kcm-1".to_owned(), false)
            ]
        );
        assert!(names("kube-scheduler", Some(&labelled), &selecting).is_empty());
        // The node leaves every chart: the kube-apiserver anchor goes, even before its pod is
        // marked for deletion.
        assert_eq!(
            names("etcd", Some(&unlabelled), &selecting),
            [("kube-apiserver/api-1".to_owned(), true)]
        );
        // Its DaemonSet being deleted: going too. Not listed, or the node's labels unknown:
        // staying.
        let deleting = [daemonset("kube-apiserver", cp.clone(), true)];
        assert!(names("etcd", Some(&labelled), &deleting)[0].1);
        assert!(!names("etcd", Some(&labelled), &[])[0].1);
        assert!(!names("etcd", None, &selecting)[0].1);
    }

    /// The order of removal, every combination: a waited dependent's files here (nothing,
    /// decommissioned, kept, unreadable) × its anchor pod still listed, gone, or the list
    /// unavailable × the operator's consent. The expectation is written independently of
    /// `removal_order`: go when its files are not kept, else wait while its pod may still be at
    /// work, else hold unless consented.
    #[test]
    fn removal_waits_for_each_dependent_that_goes_and_holds_under_one_that_stayed() {
        let files = [
            ("nothing", FilesHere::Nothing),
            ("decommissioned", FilesHere::Decommissioned),
            ("kept", FilesHere::Kept),
            ("unreadable", FilesHere::Unreadable("permission denied".into())),
        ];
        let listings: [(&str, Option<Lookup<Vec<Dependent>>>); 4] = [
            ("listed", Some(Lookup::Found(vec![dependent(true)]))),
            ("gone", Some(Lookup::Found(vec![]))),
            ("unavailable", Some(unavailable())),
            ("not listed", None),
        ];
        for (files_name, here) in &files {
            for (listing_name, listing) in &listings {
                for consent in [false, true] {
                    let mut e = ev(pod(true, true), Some(Lookup::NotFound), node(&[], false, consent), None);
                    e.dependents = listing.clone();
                    let order = removal_order(&e, &[dependent(true)], |c| {
                        assert_eq!(c, "kube-apiserver");
                        here.clone()
                    });
                    let kept = matches!(here, FilesHere::Kept | FilesHere::Unreadable(_));
                    let may_be_at_work = *listing_name != "gone";
                    let case = format!("{files_name}, {listing_name}, consent {consent}: {order:?}");
                    match order {
                        Order::Now => assert!(!kept || (!may_be_at_work && consent), "{case}"),
                        Order::Wait(why) => {
                            assert!(kept && may_be_at_work, "{case}");
                            assert!(why.contains("kube-apiserver-anchor-x"), "{case}");
                            assert_eq!(why.contains("permission denied"), *files_name == "unreadable", "{case}");
                        }
                        Order::Held(why) => {
                            assert!(kept && !may_be_at_work && !consent, "{case}");
                            assert!(why.contains("left its files on this node"), "{case}");
                        }
                    }
                }
            }
        }
        // Nothing waited for: now.
        let e = ev(pod(true, true), Some(Lookup::NotFound), node(&[], false, false), None);
        assert_eq!(removal_order(&e, &[], |_| FilesHere::Kept), Order::Now);
    }

    /// What a proven removal waits for: the dependents that go with it, every one when the
    /// node is being deleted; one that stays under consent is not waited for.
    #[test]
    fn a_removal_waits_for_the_dependents_that_go_with_it() {
        let mut e = ev(pod(true, true), Some(Lookup::NotFound), node(&[], false, true), None);
        let staying = Dependent {
            name: "kcm".into(),
            component: "kube-controller-manager".into(),
            ..dependent(false)
        };
        e.dependents = Some(Lookup::Found(vec![dependent(true), staying.clone()]));
        assert_eq!(goes_with(&e), [dependent(true)]);
        e.node = node(&[], true, false);
        assert_eq!(goes_with(&e), [dependent(true), staying]);
        e.dependents = Some(unavailable());
        assert!(goes_with(&e).is_empty());
    }

    /// The looks of one hook: a first removal waits for a dependent that goes (each
    /// ORDER_POLL) until it has left or no time is left to wait, then is confirmed a
    /// confirm interval later; anything but a removal decides at once.
    #[test]
    fn looks_wait_in_dependency_order_and_confirm() {
        let secs = Duration::from_secs;
        let removal = || {
            let mut e = ev(
                pod(true, true),
                Some(Lookup::NotFound),
                node(&[], false, false),
                anchors(vec![], vec![]),
            );
            e.dependents = Some(Lookup::Found(vec![dependent(true)]));
            e
        };
        assert!(is_remove(&decide(
            CleanupMode::Guarded,
            Guard::None,
            &this(),
            &removal()
        )));
        let new = || Looks::new(this(), Guard::None, secs(2), secs(25));

        // Not a removal: decided by the first look.
        let mut looks = new();
        let alive = ev(
            pod(true, false),
            Some(Lookup::NotFound),
            node(&[], false, false),
            anchors(vec![], vec![]),
        );
        assert!(matches!(
            looks.look(&alive, |_| FilesHere::Nothing, secs(0)),
            NextLook::Decided(Decision::Keep(_))
        ));

        // The dependent has left: confirmed two seconds later; a second look that no longer
        // proves it keeps.
        let mut looks = new();
        assert_eq!(
            looks.look(&removal(), |_| FilesHere::Nothing, secs(1)),
            NextLook::Again {
                at: secs(3),
                waiting_for: None
            }
        );
        let mut unproved = looks.clone();
        assert!(matches!(
            looks.look(&removal(), |_| FilesHere::Nothing, secs(3)),
            NextLook::Decided(Decision::Remove(_))
        ));
        match unproved.look(&alive, |_| FilesHere::Nothing, secs(3)) {
            NextLook::Decided(Decision::Keep(why)) => assert!(why.starts_with("the evidence did not hold"), "{why}"),
            other => panic!("{other:?}"),
        }

        // The dependent's files stay: looked at every second until 18 s (25 s less the confirm
        // interval and the order's reserve), then held; once it decommissioned itself, confirmed.
        let mut looks = new();
        let mut now = secs(0);
        let held = loop {
            match looks.look(&removal(), |_| FilesHere::Kept, now) {
                NextLook::Again {
                    at,
                    waiting_for: Some(why),
                } => {
                    assert_eq!(at, now + ORDER_POLL);
                    assert!(why.contains("kube-apiserver goes too"), "{why}");
                    now = at;
                }
                NextLook::Decided(d) => break d,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(now, secs(18));
        assert!(
            matches!(&held, Decision::Held(why) if why.contains("no time is left to wait")),
            "{held:?}"
        );
        let mut looks = new();
        assert!(matches!(
            looks.look(&removal(), |_| FilesHere::Kept, secs(0)),
            NextLook::Again {
                waiting_for: Some(_),
                ..
            }
        ));
        assert_eq!(
            looks.look(&removal(), |_| FilesHere::Decommissioned, secs(1)),
            NextLook::Again {
                at: secs(3),
                waiting_for: None
            }
        );
        // A dependent back on the node by the confirming look holds it.
        match looks.look(&removal(), |_| FilesHere::Kept, secs(3)) {
            NextLook::Decided(Decision::Held(why)) => assert!(why.contains("kube-apiserver goes too"), "{why}"),
            other => panic!("{other:?}"),
        }

        // Too late to confirm: kept.
        let mut looks = new();
        match looks.look(&removal(), |_| FilesHere::Nothing, secs(24)) {
            NextLook::Decided(Decision::Keep(why)) => assert!(why.contains("no time is left to confirm"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
