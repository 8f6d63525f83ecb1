//! Rolling etcd defragmentation, carried out: observe every member's own status, decide
//! ([`kube_anchor_core::etcd_defrag`]), hand leadership off when this member leads, defragment
//! this node's member, and measure what it gave back.

use std::time::{Duration, Instant};

use kube_anchor_core::config::EtcdMember;
use kube_anchor_core::etcd_defrag::{DefragPolicy, MemberView};
use kube_anchor_k8s::etcd::{Cluster, Credentials, Endpoint, EtcdError};

use crate::engine::Inputs;
use crate::etcd_member::{ETCD_TIMEOUT, MemberError};

/// How long one member's defrag may take: etcd rewrites the whole database (a few seconds for
/// 100 MB, minutes for gigabytes on a slow disk).
const DEFRAG_BUDGET: Duration = Duration::from_secs(600);
/// How long the member may take to answer again after its defrag.
const BACK_WITHIN: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub(crate) enum DefragError {
    #[error(transparent)]
    Member(#[from] MemberError),
    #[error(transparent)]
    Etcd(#[from] EtcdError),
    #[error("this member still leads after the hand-off ({0}): not defragmented while it leads")]
    StillLeads(String),
    #[error("not defragmented: just before it, {0}")]
    NoLongerAffordable(String),
    #[error("{endpoint} did not answer a status within {within:?} after its defrag")]
    NotBack { endpoint: String, within: Duration },
}

/// What a node defragments with, owned (the defrag runs on its own task).
#[derive(Clone)]
pub(crate) struct Defragger {
    pub member_name: String,
    client_url: String,
    credentials: Credentials,
    endpoints: Vec<String>,
    pub policy: DefragPolicy,
}

impl Defragger {
    /// `None` when the config asks for no defragmentation.
    pub(crate) fn of(inputs: &Inputs, member: &EtcdMember) -> Result<Option<Self>, MemberError> {
        let Some(policy) = member.defrag else {
            return Ok(None);
        };
        Ok(Some(Self {
            member_name: crate::etcd_member::me(inputs, member)?.name,
            client_url: crate::etcd_member::own_client_url(inputs, member)?,
            credentials: crate::etcd_member::credentials(member)?,
            endpoints: member.endpoints.clone(),
            policy,
        }))
    }

    /// Every member as its own status shows it (one that does not answer: unhealthy).
    pub(crate) async fn observe(&self) -> Result<Vec<MemberView>, EtcdError> {
        let members = Cluster::new(&self.endpoints, &self.credentials, ETCD_TIMEOUT)?
            .member_list()
            .await?;
        let creds = &self.credentials;
        let views = members.iter().map(|m| async move {
            let status = crate::etcd_member::member_status(m, creds).await;
            MemberView {
                name: m.name.clone(),
                id: m.id,
                is_learner: m.is_learner,
                healthy: status.as_ref().is_some_and(|s| s.healthy()),
                leads: status.as_ref().is_some_and(|s| s.leader == m.id),
                applied_index: status.as_ref().map_or(0, |s| s.raft_applied_index),
                db_size: status.as_ref().map_or(0, |s| s.db_size),
                db_size_in_use: status.as_ref().map_or(0, |s| s.db_size_in_use),
            }
        });
        Ok(futures::future::join_all(views).await)
    }
}

/// One defrag of this node's member.
#[derive(Debug, Clone)]
pub(crate) struct Defragged {
    pub before: u64,
    pub in_use_before: u64,
    pub after: u64,
    pub took: Duration,
    /// The hand-off before it, in words, when this member led.
    pub hand_off: Option<String>,
}

/// Hands leadership off first when `hand_off` (and refuses to go on while this member still
/// leads), then defragments this node's member and waits for it to answer again.
pub(crate) async fn defragment(
    defragger: &Defragger,
    inputs: &Inputs,
    member: &EtcdMember,
    hand_off: bool,
) -> Result<Defragged, DefragError> {
    let endpoint = Endpoint::new(&defragger.client_url, &defragger.credentials, ETCD_TIMEOUT)?;
    let hand_off = if hand_off {
        let report = crate::etcd_member::hand_off_leadership(inputs, member, crate::etcd_member::HAND_OFF_BUDGET).await;
        let status = endpoint.status().await?;
        if status.leader == status.member_id {
            return Err(DefragError::StillLeads(report.summary));
        }
        Some(report.summary)
    } else {
        None
    };
    // Looked at again just before: the decision's statuses may be seconds old (a hand-off), and
    // another member may have gone meanwhile.
    let facts = kube_anchor_core::etcd_defrag::Facts {
        me: defragger.member_name.clone(),
        members: defragger.observe().await?,
        held: None,
    };
    if let kube_anchor_core::etcd_defrag::Decision::Wait(why) = kube_anchor_core::etcd_defrag::on_demand(&facts) {
        return Err(DefragError::NoLongerAffordable(why));
    }
    let before = endpoint.status().await?;
    let started = Instant::now();
    endpoint.defragment(DEFRAG_BUDGET).await?;
    let took = started.elapsed();
    let back = Instant::now();
    let after = loop {
        match endpoint.status().await {
            Ok(s) => break s,
            Err(_) if back.elapsed() < BACK_WITHIN => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => {
                return Err(DefragError::NotBack {
                    endpoint: defragger.client_url.clone(),
                    within: BACK_WITHIN,
                });
            }
        }
    };
    Ok(Defragged {
        before: before.db_size,
        in_use_before: before.db_size_in_use,
        after: after.db_size,
        took,
        hand_off,
    })
}
