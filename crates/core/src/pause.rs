//! An operator's hold on the anchors. Two switches, either enough:
//! - `kube-anchor pause` on the node: the component's ledger records it ([`Paused`]), under the
//!   ledger's lock, so once the verb returns no anchor write of that component lands;
//! - the Node annotation [`NODE_ANNOTATION`], from `kubectl`, for every component on the node
//!   (read by the anchor when the API answers).
//!
//! A paused anchor writes, repairs, rolls back, joins and removes nothing; it keeps a rollout
//! turn it holds (the other nodes go on waiting for it) and says why it is not Ready.

use crate::ledger::Paused;

/// Set on a Node (any value: the reason), every anchor on it holds, and its pod checkpointer.
pub const NODE_ANNOTATION: &str = "kube-anchor.io/paused";

/// The name `kube-anchor pause --component` takes for the node's pod checkpointer: held, it
/// checkpoints, activates, deactivates and retires nothing.
pub const CHECKPOINTER: &str = "pod-checkpointer";

/// Where a component's anchor stands held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pause {
    /// `kube-anchor pause` on the node.
    OnNode(Paused),
    /// The Node's annotation ([`NODE_ANNOTATION`]).
    NodeAnnotation { node: String, reason: String },
}

impl Pause {
    /// The pause in force, the node's own marker first (it has a time and needs no API).
    pub fn of(marker: Option<&Paused>, node: Option<&str>, annotation: Option<&str>) -> Option<Pause> {
        match (marker, node, annotation) {
            (Some(p), _, _) => Some(Pause::OnNode(p.clone())),
            (None, Some(node), Some(reason)) => Some(Pause::NodeAnnotation {
                node: node.to_owned(),
                reason: reason.to_owned(),
            }),
            _ => None,
        }
    }

    /// Why the anchor of `component` does nothing, and how to let it go on (for `/readyz`,
    /// `status`, the log and AnchorStatus).
    pub fn describe(&self, component: &str) -> String {
        match self {
            Pause::OnNode(p) => format!(
                "paused on this node since {} ({}): writing, repairing, rolling back, joining and removing nothing; `kube-anchor resume --component {component}` goes on",
                p.at, p.reason
            ),
            Pause::NodeAnnotation { node, reason } => format!(
                "paused by the annotation {NODE_ANNOTATION} on Node {node} ({reason}): writing, repairing, rolling back, joining and removing nothing; `kubectl annotate node {node} {NODE_ANNOTATION}-` goes on"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_marker_comes_first_and_no_node_name_reads_no_annotation() {
        let marker = Paused {
            at: "2026-12-07T03:00:00Z".into(),
            reason: "restoring etcd".into(),
        };
        assert_eq!(
            Pause::of(Some(&marker), Some("cp-1"), Some("drain")),
            Some(Pause::OnNode(marker.clone()))
        );
        assert_eq!(
            Pause::of(None, Some("cp-1"), Some("drain")),
            Some(Pause::NodeAnnotation {
                node: "cp-1".into(),
                reason: "drain".into()
            })
        );
        assert_eq!(Pause::of(None, None, Some("drain")), None);
        assert_eq!(Pause::of(None, Some("cp-1"), None), None);
        let said = Pause::of(Some(&marker), None, None).unwrap().describe("etcd");
        assert!(
            said.contains("restoring etcd") && said.contains("kube-anchor resume --component etcd"),
            "{said}"
        );
        let said = Pause::of(None, Some("cp-1"), Some("drain")).unwrap().describe("etcd");
        assert!(
            said.contains("kubectl annotate node cp-1 kube-anchor.io/paused-"),
            "{said}"
        );
    }
}
