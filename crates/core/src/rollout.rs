//! One node at a time across every anchor of the control plane, whatever components and
//! DaemonSets they belong to.
//!
//! A DaemonSet's `maxUnavailable: 1` and the anchor's readiness gate order the nodes of *one*
//! DaemonSet. A chart with per-node credentials (`perNode`: etcd, kube-apiserver) makes one
//! DaemonSet per node, and `helm upgrade` changes all of them at once: each rolls its single pod
//! at the same moment, every node would take the new version together, and a bad push would take
//! every kube-apiserver or a quorum of etcd down at once (and with them the API that proves the
//! version bad). And components fail through each other: an etcd member restarting on one node
//! while kube-apiserver restarts on another leaves two API servers without a backend at once
//! (each node's kube-apiserver dials its own member). So an anchor that would *replace* the
//! version a node runs first takes the control plane's rollout Lease ([`LEASE`]), holds it
//! through the new version's trial, and gives it back once the version is promoted or the node
//! runs its last-known-good one again. One node holds the turn at a time, for one component at
//! a time (the Lease lists it): a trial judges a version by what its node shows, and another
//! component restarting beside it on the same node would be taken for its failure (the bed saw a
//! good kube-scheduler rolled back under a kube-apiserver restarted on the same turn). A version
//! rolled back on one node is recorded on the Lease (by component and input revision) and no
//! other node tries it.
//!
//! Not needed: writing a component for the first time (bootstrap, install on a node without its
//! manifest), repairing drift, going back to the last-known-good version. A first write still
//! asks the Lease's word ([`first_write`]), taking nothing: a revision rolled back on a node is
//! not started, nor one another node is trying; without an API it goes ahead. A manifest
//! kube-anchor did not write (a kubeadm node taken over) counts as a running version. Without
//! the API the upgrade waits: the node keeps the version it runs.
//!
//! The component's own Lease (`kube-anchor-<component>`) held the turn before the control
//! plane shared one: it is still read, so that a turn an earlier anchor holds there, or a
//! revision it recorded failed, is honoured while the anchors are upgraded.
//!
//! Pure: [`decide`] judges the Leases as read, [`take`] and [`give_back`] say what they become;
//! `kubeapi::RolloutLease` reads and writes them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime};

/// The control plane's rollout Lease, in the anchors' namespace.
pub const LEASE: &str = "kube-anchor-control-plane";

/// The Lease of one component, before the control plane shared one.
pub fn component_lease(component: &str) -> String {
    format!("kube-anchor-{component}")
}

/// A holder renews every few seconds through its trial; one that has not for this long is
/// silent: `/readyz` of the waiting anchors says so, and only then is its Node looked up (a
/// holder that still renews has a Node). It keeps the turn either way.
pub(crate) const HOLDER_SILENT: Duration = Duration::from_secs(60);

/// How long a holder last renewed at `renewed` has been silent, if it is.
pub fn silent_for(renewed: SystemTime, now: SystemTime) -> Option<Duration> {
    now.duration_since(renewed).ok().filter(|quiet| *quiet >= HOLDER_SILENT)
}

/// An input revision rolled back on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    pub revision: String,
    pub node: String,
}

/// A rollout Lease as far as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseView {
    /// The node holding the turn.
    pub holder: Option<String>,
    pub renewed: Option<SystemTime>,
    /// The components whose turn the holder holds.
    pub components: BTreeSet<String>,
    /// By component: the input revision last rolled back.
    pub failed: BTreeMap<String, Failed>,
}

impl LeaseView {
    /// The node holding the turn, if it is held (an empty holder is none).
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }

    /// Whether node `me` holds the turn for `component`.
    pub fn held_by(&self, me: &str, component: &str) -> bool {
        self.holder() == Some(me) && self.components.contains(component)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// Take (or keep) the Lease and go on.
    Take,
    /// Another node holds the turn; wait. `rolling_out`: its components on the Lease;
    /// `renewed`: when it last said so.
    Held {
        by: String,
        rolling_out: Vec<String>,
        renewed: Option<SystemTime>,
    },
    /// This revision was rolled back on another node: do not try it here.
    FailedElsewhere { node: String },
}

/// `leases`: the Leases as read (the control plane's, and the component's own when it exists);
/// `me`: this node; `revision`: the input revision of `component` this node would apply (the
/// config marker); `gone`: holders whose Node object the API answered does not exist.
///
/// A turn is never taken over on a timer alone: a holder that stopped renewing may be a node
/// whose anchor was blinded by the very version it is trying (a kube-apiserver push that broke
/// its own API path, an etcd member partitioned away), and taking its turn would put the next
/// node on that version too. Only a release or the holder's Node gone frees it; an operator can
/// also delete the Lease.
pub fn decide(leases: &[LeaseView], me: &str, component: &str, revision: Option<&str>, gone: &[String]) -> LeaseAnswer {
    if let Some(revision) = revision
        && let Some(failed) = leases
            .iter()
            .filter_map(|l| l.failed.get(component))
            .find(|f| f.revision == revision && f.node != me)
    {
        return LeaseAnswer::FailedElsewhere {
            node: failed.node.clone(),
        };
    }
    // Held by another node, or by this one for another component: a trial judges a version by
    // its node's components and clients, and another component restarting under it on the same
    // node (a kube-apiserver under a kube-scheduler on trial) would be taken for its failure.
    match leases.iter().find(|l| {
        l.holder()
            .is_some_and(|h| !gone.iter().any(|g| g == h) && (h != me || l.components.iter().any(|c| c != component)))
    }) {
        None => LeaseAnswer::Take,
        Some(l) => LeaseAnswer::Held {
            by: l.holder.clone().unwrap_or_default(),
            rolling_out: l.components.iter().cloned().collect(),
            renewed: l.renewed,
        },
    }
}

/// What a first write may do, asked of the Leases as read without taking a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstWrite {
    /// Write: nothing on the Lease speaks against the revision here.
    Go,
    /// Another node is trying a version of this component on its turn; `renewed`: when it
    /// last said so.
    OnTrialElsewhere { by: String, renewed: Option<SystemTime> },
    /// This revision was rolled back on `node` (another, or this one before it lost its record).
    FailedElsewhere { node: String },
}

/// Whether node `me` may write `component` of input `revision` for the first time (nothing of it
/// on the node): a first write restarts nothing, so it takes no turn, but it must not start a
/// revision rolled back on a node (this one too: a re-imaged node that failed it has no record
/// left, and nothing to go back to), nor a second copy of one still on trial (which a rollback
/// there would then leave behind here). `gone`: holders whose Node is gone.
pub fn first_write(
    leases: &[LeaseView],
    me: &str,
    component: &str,
    revision: Option<&str>,
    gone: &[String],
) -> FirstWrite {
    if let Some(revision) = revision
        && let Some(failed) = leases
            .iter()
            .filter_map(|l| l.failed.get(component))
            .find(|f| f.revision == revision)
    {
        return FirstWrite::FailedElsewhere {
            node: failed.node.clone(),
        };
    }
    match leases.iter().find(|l| {
        l.components.contains(component) && l.holder().is_some_and(|h| h != me && !gone.iter().any(|g| g == h))
    }) {
        Some(l) => FirstWrite::OnTrialElsewhere {
            by: l.holder.clone().unwrap_or_default(),
            renewed: l.renewed,
        },
        None => FirstWrite::Go,
    }
}

/// The control plane's Lease once node `me` took (or renewed) the turn for `component` at
/// `now`: a holder gone, or none, leaves only `component` listed.
pub fn take(lease: &LeaseView, me: &str, component: &str, now: SystemTime) -> LeaseView {
    let mut components = if lease.holder() == Some(me) {
        lease.components.clone()
    } else {
        BTreeSet::new()
    };
    components.insert(component.to_owned());
    LeaseView {
        holder: Some(me.to_owned()),
        renewed: Some(now),
        components,
        failed: lease.failed.clone(),
    }
}

/// How a node's turn for a component ended, for the Lease's failure records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEnd<'a> {
    /// The input revision was rolled back here: no other node tries it.
    Failed(&'a str),
    /// The input revision runs converged here: a failure recorded for it (on another node, or
    /// here before a `retry`) is proven wrong and cleared.
    Ran(&'a str),
    /// Neither (a turn given back for nothing written, a node leaving).
    Neither,
}

/// The Lease once node `me` gave back its turn for `component`, as it `end`ed; `None` when that
/// changes nothing. The holder stays while it holds the turn for another of its components.
pub fn give_back(lease: &LeaseView, me: &str, component: &str, end: TurnEnd<'_>) -> Option<LeaseView> {
    let mut after = lease.clone();
    if lease.holder() == Some(me) {
        after.components.remove(component);
        if after.components.is_empty() {
            after.holder = None;
            after.renewed = None;
        }
    }
    match end {
        TurnEnd::Failed(revision) => {
            after.failed.insert(
                component.to_owned(),
                Failed {
                    revision: revision.to_owned(),
                    node: me.to_owned(),
                },
            );
        }
        TurnEnd::Ran(revision) => {
            if after.failed.get(component).is_some_and(|f| f.revision == revision) {
                after.failed.remove(component);
            }
        }
        TurnEnd::Neither => {}
    }
    (after != *lease).then_some(after)
}

/// Whether replacing `on_node` with `target` needs the Lease: only an upgrade (or downgrade)
/// of a version the node runs, not the first write and not a return to last-known-good.
pub fn needs_turn(on_node: Option<&str>, target: &str, last_known_good: Option<&str>) -> bool {
    match on_node {
        None => false,
        Some(current) => current != target && last_known_good != Some(target),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    fn held_by(holder: &str, components: &[&str], renewed: u64) -> LeaseView {
        LeaseView {
            holder: Some(holder.into()),
            renewed: Some(at(renewed)),
            components: components.iter().map(|c| (*c).to_owned()).collect(),
            failed: BTreeMap::new(),
        }
    }

    fn failed(component: &str, revision: &str, node: &str) -> LeaseView {
        let mut lease = LeaseView::default();
        lease.failed.insert(
            component.into(),
            Failed {
                revision: revision.into(),
                node: node.into(),
            },
        );
        lease
    }

    #[test]
    fn a_free_or_own_lease_is_taken_and_one_of_another_node_waits() {
        assert_eq!(decide(&[], "cp-1", "etcd", Some("r2"), &[]), LeaseAnswer::Take);
        assert_eq!(
            decide(&[LeaseView::default()], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Take
        );
        assert_eq!(
            decide(&[held_by("", &[], 90)], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Take,
            "an empty holder is none"
        );
        assert_eq!(
            decide(&[held_by("cp-1", &["etcd"], 90)], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Take
        );
        assert_eq!(
            decide(&[held_by("cp-2", &["etcd"], 90)], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Held {
                by: "cp-2".into(),
                rolling_out: vec!["etcd".into()],
                renewed: Some(at(90))
            }
        );
    }

    #[test]
    fn one_node_and_one_component_at_a_time_across_the_control_plane() {
        // cp-2 rolls etcd out: cp-1's kube-apiserver waits (two API servers would lose their
        // backend at once), and so does cp-2's own (its restart would be taken for etcd's).
        let lease = held_by("cp-2", &["etcd"], 90);
        assert!(matches!(
            decide(std::slice::from_ref(&lease), "cp-1", "kube-apiserver", None, &[]),
            LeaseAnswer::Held { by, rolling_out, .. } if by == "cp-2" && rolling_out == ["etcd"]
        ));
        assert!(matches!(
            decide(std::slice::from_ref(&lease), "cp-2", "kube-apiserver", None, &[]),
            LeaseAnswer::Held { by, rolling_out, .. } if by == "cp-2" && rolling_out == ["etcd"]
        ));
        assert_eq!(
            decide(std::slice::from_ref(&lease), "cp-2", "etcd", None, &[]),
            LeaseAnswer::Take,
            "renewed"
        );
        let renewed = take(&lease, "cp-2", "etcd", at(95));
        assert_eq!(renewed.renewed, Some(at(95)));
        assert_eq!(renewed.components, lease.components);
        let free = give_back(&renewed, "cp-2", "etcd", TurnEnd::Neither).unwrap();
        assert_eq!(free.holder(), None);
        assert_eq!(
            decide(std::slice::from_ref(&free), "cp-1", "kube-apiserver", None, &[]),
            LeaseAnswer::Take
        );
        let taken = take(&free, "cp-1", "kube-apiserver", at(100));
        assert!(taken.held_by("cp-1", "kube-apiserver") && !taken.held_by("cp-1", "etcd"));
        // A Lease that lists two (written elsewhere): giving one back keeps the turn for the other.
        let both = held_by("cp-2", &["etcd", "kube-apiserver"], 90);
        let etcd_left = give_back(&both, "cp-2", "kube-apiserver", TurnEnd::Neither).unwrap();
        assert_eq!(etcd_left.holder(), Some("cp-2"));
        assert!(etcd_left.held_by("cp-2", "etcd") && !etcd_left.held_by("cp-2", "kube-apiserver"));
    }

    #[test]
    fn a_turn_is_given_back_only_by_its_holder() {
        let lease = held_by("cp-2", &["etcd"], 90);
        assert_eq!(give_back(&lease, "cp-1", "etcd", TurnEnd::Neither), None, "not cp-1's");
        assert_eq!(
            give_back(&lease, "cp-2", "kube-apiserver", TurnEnd::Neither),
            None,
            "not held for it"
        );
        // A failure is recorded whoever holds the turn.
        let recorded = give_back(&lease, "cp-1", "etcd", TurnEnd::Failed("r2")).unwrap();
        assert_eq!(recorded.holder(), Some("cp-2"));
        assert_eq!(
            recorded.failed["etcd"],
            Failed {
                revision: "r2".into(),
                node: "cp-1".into()
            }
        );
    }

    #[test]
    fn a_failure_is_cleared_once_its_revision_runs_somewhere() {
        let lease = failed("etcd", "r2", "cp-2");
        // A turn for another revision, or another component, clears nothing.
        assert_eq!(give_back(&lease, "cp-1", "etcd", TurnEnd::Ran("r3")), None);
        assert_eq!(give_back(&lease, "cp-1", "kube-apiserver", TurnEnd::Ran("r2")), None);
        // cp-2, given the same revision again (fixed credentials of its own, or a retry), runs it.
        let cleared = give_back(&lease, "cp-2", "etcd", TurnEnd::Ran("r2")).unwrap();
        assert!(cleared.failed.is_empty());
        assert_eq!(decide(&[cleared], "cp-1", "etcd", Some("r2"), &[]), LeaseAnswer::Take);
    }

    #[test]
    fn a_first_write_takes_no_turn_but_waits_for_a_trial_and_refuses_a_failure() {
        let free = LeaseView::default();
        assert_eq!(first_write(&[free], "cp-3", "etcd", Some("r2"), &[]), FirstWrite::Go);
        assert_eq!(first_write(&[], "cp-3", "etcd", Some("r2"), &[]), FirstWrite::Go);
        // Another node rolls out another component: a first write restarts nothing, it goes.
        let apiserver = held_by("cp-1", &["kube-apiserver"], 90);
        assert_eq!(
            first_write(&[apiserver], "cp-3", "etcd", Some("r2"), &[]),
            FirstWrite::Go
        );
        // Another node tries etcd: wait for its trial.
        let etcd = held_by("cp-1", &["etcd"], 90);
        assert_eq!(
            first_write(std::slice::from_ref(&etcd), "cp-3", "etcd", Some("r2"), &[]),
            FirstWrite::OnTrialElsewhere {
                by: "cp-1".into(),
                renewed: Some(at(90))
            }
        );
        assert_eq!(
            first_write(
                std::slice::from_ref(&etcd),
                "cp-3",
                "etcd",
                Some("r2"),
                &["cp-1".into()]
            ),
            FirstWrite::Go,
            "its Node is gone"
        );
        assert_eq!(
            first_write(&[etcd], "cp-1", "etcd", Some("r2"), &[]),
            FirstWrite::Go,
            "its own"
        );
        assert_eq!(
            first_write(&[failed("etcd", "r2", "cp-1")], "cp-3", "etcd", Some("r2"), &[]),
            FirstWrite::FailedElsewhere { node: "cp-1".into() }
        );
        assert_eq!(
            first_write(&[failed("etcd", "r2", "cp-1")], "cp-3", "etcd", Some("r3"), &[]),
            FirstWrite::Go
        );
        assert_eq!(
            first_write(&[failed("etcd", "r2", "cp-1")], "cp-1", "etcd", Some("r2"), &[]),
            FirstWrite::FailedElsewhere { node: "cp-1".into() },
            "re-imaged, the node that failed it has nothing to go back to"
        );
    }

    #[test]
    fn a_taken_over_turn_lists_only_the_new_holders_component() {
        let lease = held_by("cp-2", &["etcd", "kube-apiserver"], 0);
        assert_eq!(
            decide(std::slice::from_ref(&lease), "cp-1", "etcd", None, &["cp-2".into()]),
            LeaseAnswer::Take
        );
        let taken = take(&lease, "cp-1", "etcd", at(100));
        assert_eq!(taken.holder(), Some("cp-1"));
        assert_eq!(taken.components, BTreeSet::from(["etcd".to_owned()]));
    }

    #[test]
    fn a_holder_that_stopped_renewing_keeps_the_turn_until_its_node_is_gone() {
        // Renewed long ago, or never: still held (the holder may be blind, not gone).
        assert!(matches!(
            decide(&[held_by("cp-2", &["etcd"], 0)], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Held { .. }
        ));
        let never_renewed = LeaseView {
            holder: Some("cp-2".into()),
            ..Default::default()
        };
        assert!(matches!(
            decide(&[never_renewed], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Held { .. }
        ));
        assert!(
            matches!(
                decide(&[held_by("cp-2", &["etcd"], 0)], "cp-1", "etcd", None, &["cp-3".into()]),
                LeaseAnswer::Held { .. }
            ),
            "another node's gone"
        );
    }

    #[test]
    fn a_revision_rolled_back_elsewhere_is_not_tried_but_another_one_is() {
        let lease = failed("etcd", "r2", "cp-2");
        let ask = |me, component, revision, gone: &[String]| {
            decide(std::slice::from_ref(&lease), me, component, revision, gone)
        };
        assert_eq!(
            ask("cp-1", "etcd", Some("r2"), &[]),
            LeaseAnswer::FailedElsewhere { node: "cp-2".into() }
        );
        // Not even once cp-2's Node is gone: the revision is still known bad.
        assert_eq!(
            ask("cp-1", "etcd", Some("r2"), &["cp-2".into()]),
            LeaseAnswer::FailedElsewhere { node: "cp-2".into() }
        );
        assert_eq!(ask("cp-1", "etcd", Some("r3"), &[]), LeaseAnswer::Take);
        assert_eq!(
            ask("cp-1", "kube-apiserver", Some("r2"), &[]),
            LeaseAnswer::Take,
            "another component's"
        );
        // The node that rolled it back may be given the same revision again (retry).
        assert_eq!(ask("cp-2", "etcd", Some("r2"), &[]), LeaseAnswer::Take);
        assert_eq!(ask("cp-1", "etcd", None, &[]), LeaseAnswer::Take);
    }

    #[test]
    fn the_components_own_lease_still_holds_a_turn_and_a_failure() {
        // An earlier anchor holds its component's Lease; the control plane's is free.
        let own = held_by("cp-3", &["etcd"], 90);
        assert!(matches!(
            decide(&[LeaseView::default(), own.clone()], "cp-1", "etcd", None, &[]),
            LeaseAnswer::Held { by, .. } if by == "cp-3"
        ));
        assert_eq!(
            decide(&[LeaseView::default(), own], "cp-3", "etcd", None, &[]),
            LeaseAnswer::Take
        );
        assert_eq!(
            decide(
                &[LeaseView::default(), failed("etcd", "r2", "cp-3")],
                "cp-1",
                "etcd",
                Some("r2"),
                &[]
            ),
            LeaseAnswer::FailedElsewhere { node: "cp-3".into() }
        );
    }

    #[test]
    fn a_holder_is_silent_after_a_minute_without_renewing() {
        assert_eq!(silent_for(at(100), at(130)), None);
        assert_eq!(silent_for(at(100), at(160)), Some(Duration::from_secs(60)));
        assert_eq!(silent_for(at(200), at(100)), None, "renewed in the future (skew)");
    }

    #[test]
    fn only_replacing_a_running_version_needs_the_lease() {
        assert!(!needs_turn(None, "b", None), "first write");
        assert!(!needs_turn(Some("b"), "b", Some("a")), "drift repair");
        assert!(!needs_turn(Some("b"), "a", Some("a")), "back to last-known-good");
        assert!(needs_turn(Some("a"), "b", Some("a")), "upgrade");
        assert!(needs_turn(Some("a"), "b", None), "upgrade before the first promotion");
    }
}
