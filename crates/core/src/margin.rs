//! Whether the cluster can afford a voluntary restart of this node's component, judged before
//! the write that restarts it: etcd must be able to lose this member
//! ([`crate::membership::restart_margin`]), and clients must have another kube-apiserver while
//! this one restarts ([`api_server_margin`]).

use std::collections::BTreeMap;

use crate::membership::{Me, MemberList, PeerStatus, restart_margin};

/// Whether the cluster can afford this node's component going down for a restart (a new
/// version written, `rollback`, `apply`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Margin {
    /// The rest of the cluster stands in while this one restarts.
    Affords,
    /// No margin can ever exist here (one or two voting etcd members, where losing any one loses
    /// quorum; a member that does not vote; a single API server): waiting would never end, so
    /// the write goes ahead and the version is judged by the node's own evidence.
    CannotExist(String),
    /// The cluster cannot lose this one now: wait, and say why.
    Short(String),
}

/// What the anchor found out before a voluntary restart, judged by [`MarginFacts::judge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarginFacts {
    /// This node's etcd member and what the other voters say about themselves.
    Etcd {
        me: Me,
        observed: MemberList,
        peers: BTreeMap<u64, PeerStatus>,
    },
    /// The other nodes an anchor of this kube-apiserver runs on, and what their API servers
    /// answered.
    ApiServers { peers: Vec<ApiServerPeer> },
    /// Nothing could be asked (no etcd client credentials, no API to list the other anchors):
    /// why. Unknown is no margin.
    Unknown(String),
}

impl MarginFacts {
    pub fn judge(&self) -> Margin {
        match self {
            MarginFacts::Etcd { me, observed, peers } => restart_margin(me, observed, peers),
            MarginFacts::ApiServers { peers } => api_server_margin(peers),
            MarginFacts::Unknown(why) => {
                Margin::Short(format!("whether the cluster can afford a restart is unknown: {why}"))
            }
        }
    }
}

/// Another node's kube-apiserver, asked at its own address before this node's restarts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiServerPeer {
    pub node: String,
    pub answer: PeerAnswer,
}

/// What an API server's `/readyz` said. A refusal (an HTTP error: `[-]etcd failed`) and no
/// answer (nothing listening, a timeout, a certificate this node's CA does not trust) are told
/// apart in what is said; neither serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAnswer {
    Serving,
    Refused(String),
    NoAnswer(String),
}

/// Before a voluntary restart of this node's kube-apiserver: clients (kubelets, controllers,
/// the anchors themselves) must have another API server to go to while this one is down, so at
/// least one other must answer its `/readyz`. The nodes are those an anchor of the component
/// runs on (the DaemonSet's pods), not the `kubernetes` Service's endpoints, which drop a
/// server that stopped renewing its lease: three nodes with two down must not look like one.
/// With no other node there is no margin to wait for: a single API server restarts as before.
pub fn api_server_margin(peers: &[ApiServerPeer]) -> Margin {
    if peers.is_empty() {
        return Margin::CannotExist(
            "no other node runs an anchor of this kube-apiserver: no other API server can serve while this one restarts".into(),
        );
    }
    if peers.iter().any(|p| p.answer == PeerAnswer::Serving) {
        return Margin::Affords;
    }
    let lacking: Vec<String> = peers
        .iter()
        .map(|p| match &p.answer {
            PeerAnswer::Serving => unreachable!("no peer serves"),
            PeerAnswer::Refused(why) => format!("{} refuses ({why})", p.node),
            PeerAnswer::NoAnswer(why) => format!("{} does not answer ({why})", p.node),
        })
        .collect();
    Margin::Short(format!(
        "no other API server would serve clients while this one restarts: {}",
        lacking.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(node: &str, answer: PeerAnswer) -> ApiServerPeer {
        ApiServerPeer {
            node: node.into(),
            answer,
        }
    }

    #[test]
    fn another_api_server_serving_is_the_margin() {
        let refused = || PeerAnswer::Refused("HTTP 500: [-]etcd failed".into());
        let silent = || PeerAnswer::NoAnswer("connection refused".into());
        type Case = (&'static str, Vec<ApiServerPeer>, fn(&Margin) -> bool);
        let cases: Vec<Case> = vec![
            (
                "one other serves",
                vec![peer("cp-2", refused()), peer("cp-3", PeerAnswer::Serving)],
                |m| *m == Margin::Affords,
            ),
            (
                "none serves: says who refuses and who is silent",
                vec![peer("cp-2", refused()), peer("cp-3", silent())],
                |m| {
                    matches!(m, Margin::Short(why)
                        if why.contains("cp-2 refuses (HTTP 500: [-]etcd failed)")
                            && why.contains("cp-3 does not answer (connection refused)"))
                },
            ),
            ("the only API server", vec![], |m| matches!(m, Margin::CannotExist(_))),
            (
                "one other, down: a restart leaves no API",
                vec![peer("cp-2", silent())],
                |m| matches!(m, Margin::Short(_)),
            ),
        ];
        for (what, peers, ok) in cases {
            let margin = MarginFacts::ApiServers { peers }.judge();
            assert!(ok(&margin), "{what}: {margin:?}");
        }
        assert!(matches!(
            MarginFacts::Unknown("the API cannot be reached".into()).judge(),
            Margin::Short(why) if why.contains("unknown: the API cannot be reached")
        ));
    }
}
