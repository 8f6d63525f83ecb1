//! One node at a time across every anchor of a component, whatever DaemonSets they belong to.
//!
//! A DaemonSet's `maxUnavailable: 1` and the anchor's readiness gate order the nodes of *one*
//! DaemonSet. A chart with per-node credentials (`perNode`: etcd, kube-apiserver) makes one
//! DaemonSet per node, and `helm upgrade` changes all of them at once: each rolls its single pod
//! at the same moment, every node would take the new version together, and a bad push would take
//! every kube-apiserver or a quorum of etcd down at once (and with them the API that proves the
//! version bad). So an anchor that would *replace* the version a node runs first takes the
//! component's rollout Lease, holds it through the new version's trial, and gives it back once
//! the version is promoted or rolled back; a version rolled back on one node is recorded on the
//! Lease (by its input revision) and no other node tries it.
//!
//! Not needed, and not asked: writing a component for the first time (bootstrap, install on a
//! node without its manifest), repairing drift, going back to the last-known-good version. A
//! manifest kube-anchor did not write (a kubeadm node taken over) counts as a running version. Without the API the upgrade
//! waits: the node keeps the version it runs.
//!
//! Pure: [`decide`] judges a Lease as read; `kubeapi::RolloutLease` reads and writes it.

use std::time::{Duration, SystemTime};

/// A holder renews every few seconds through its trial; one that has not for this long is
/// silent: `/readyz` of the waiting anchors says so, and only then is its Node looked up (a
/// holder that still renews has a Node). It keeps the turn either way.
pub(crate) const HOLDER_SILENT: Duration = Duration::from_secs(60);

/// How long a holder last renewed at `renewed` has been silent, if it is.
pub fn silent_for(renewed: SystemTime, now: SystemTime) -> Option<Duration> {
    now.duration_since(renewed).ok().filter(|quiet| *quiet >= HOLDER_SILENT)
}

/// The Lease as far as the decision needs it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseView {
    pub holder: Option<String>,
    pub renewed: Option<SystemTime>,
    /// The input revision a node rolled back, and that node.
    pub failed: Option<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// Take (or keep) the Lease and go on.
    Take,
    /// Another node is upgrading this component; wait. `renewed`: when it last said so.
    Held { by: String, renewed: Option<SystemTime> },
    /// This revision was rolled back on another node: do not try it here.
    FailedElsewhere { node: String },
}

/// `me`: this node; `revision`: the input revision this node would apply (the config marker);
/// `holder_node_gone`: the API answered that the holder's Node object does not exist.
///
/// A turn is never taken over on a timer alone: a holder that stopped renewing may be a node
/// whose anchor was blinded by the very version it is trying (a kube-apiserver push that broke
/// its own API path, an etcd member partitioned away), and taking its turn would put the next
/// node on that version too. Only a release or the holder's Node gone frees it; an operator can
/// also delete the Lease.
pub fn decide(lease: Option<&LeaseView>, me: &str, revision: Option<&str>, holder_node_gone: bool) -> LeaseAnswer {
    let Some(lease) = lease else { return LeaseAnswer::Take };
    if let (Some((failed, node)), Some(revision)) = (&lease.failed, revision)
        && failed == revision
        && node != me
    {
        return LeaseAnswer::FailedElsewhere { node: node.clone() };
    }
    match &lease.holder {
        None => LeaseAnswer::Take,
        Some(h) if h.is_empty() || h == me => LeaseAnswer::Take,
        Some(_) if holder_node_gone => LeaseAnswer::Take,
        Some(h) => LeaseAnswer::Held {
            by: h.clone(),
            renewed: lease.renewed,
        },
    }
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

    fn held_by(holder: &str, renewed: u64) -> LeaseView {
        LeaseView {
            holder: Some(holder.into()),
            renewed: Some(at(renewed)),
            failed: None,
        }
    }

    #[test]
    fn a_free_or_own_lease_is_taken_and_one_of_another_node_waits() {
        assert_eq!(decide(None, "cp-1", Some("r2"), false), LeaseAnswer::Take);
        assert_eq!(
            decide(Some(&LeaseView::default()), "cp-1", None, false),
            LeaseAnswer::Take
        );
        assert_eq!(
            decide(Some(&held_by("cp-1", 90)), "cp-1", None, false),
            LeaseAnswer::Take
        );
        assert_eq!(
            decide(Some(&held_by("cp-2", 90)), "cp-1", None, false),
            LeaseAnswer::Held {
                by: "cp-2".into(),
                renewed: Some(at(90))
            }
        );
    }

    #[test]
    fn a_holder_that_stopped_renewing_keeps_the_turn_until_its_node_is_gone() {
        // Renewed long ago, or never: still held (the holder may be blind, not gone).
        assert!(matches!(
            decide(Some(&held_by("cp-2", 0)), "cp-1", None, false),
            LeaseAnswer::Held { .. }
        ));
        let never_renewed = LeaseView {
            holder: Some("cp-2".into()),
            ..Default::default()
        };
        assert!(matches!(
            decide(Some(&never_renewed), "cp-1", None, false),
            LeaseAnswer::Held { .. }
        ));
        assert_eq!(decide(Some(&held_by("cp-2", 0)), "cp-1", None, true), LeaseAnswer::Take);
    }

    #[test]
    fn a_revision_rolled_back_elsewhere_is_not_tried_but_another_one_is() {
        let mut lease = held_by("", 0);
        lease.failed = Some(("r2".into(), "cp-2".into()));
        assert_eq!(
            decide(Some(&lease), "cp-1", Some("r2"), false),
            LeaseAnswer::FailedElsewhere { node: "cp-2".into() }
        );
        // Not even once cp-2's Node is gone: the revision is still known bad.
        assert_eq!(
            decide(Some(&lease), "cp-1", Some("r2"), true),
            LeaseAnswer::FailedElsewhere { node: "cp-2".into() }
        );
        assert_eq!(decide(Some(&lease), "cp-1", Some("r3"), false), LeaseAnswer::Take);
        // The node that rolled it back may be given the same revision again (retry).
        assert_eq!(decide(Some(&lease), "cp-2", Some("r2"), false), LeaseAnswer::Take);
        assert_eq!(decide(Some(&lease), "cp-1", None, false), LeaseAnswer::Take);
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
