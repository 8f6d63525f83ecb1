//! Rolling etcd defragmentation, decided: whether this node's member is defragmented now.
//!
//! etcd's `Defragment` rewrites a member's database to give back the pages deletes and
//! compactions freed; while it runs the member answers nothing (etcd's maintenance guide). So a
//! defrag is a short outage of one member, and is judged like a restart:
//! - only a member above both thresholds (OpenShift's etcd operator: at least 100 MB, and at
//!   least 45 % of it free pages), and never to gain nothing;
//! - one member at a time, every other member healthy and caught up first (so the previous one
//!   is back), no learner catching up, the cluster able to lose this member (quorum of the
//!   voters without it), no rollout turn held anywhere;
//! - the members above the thresholds in name order, the leader last, and a leader hands its
//!   leadership to a caught-up voter first (a defragmenting leader stalls every write for as long
//!   as it takes).
//!
//! Every node decides from the same observations (each member's own status), so all agree on
//! whose turn it is without talking to each other; a member being defragmented answers nothing,
//! which holds every other node until it is back.

use std::time::Duration;

use crate::membership::HAND_OFF_MAX_LAG;

/// `spec.etcdMember.defrag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefragPolicy {
    /// How often a node looks.
    pub every: Duration,
    /// A member is defragmented only with a database of at least this many bytes...
    pub min_bytes: u64,
    /// ...of which at least this percentage is free pages.
    pub min_free_percent: u8,
}

/// One member as its own status shows it (`None` fields: it did not answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub name: String,
    pub id: u64,
    pub is_learner: bool,
    /// Its status answered with a leader and no error but alarms.
    pub healthy: bool,
    pub leads: bool,
    pub applied_index: u64,
    pub db_size: u64,
    pub db_size_in_use: u64,
}

impl MemberView {
    /// Above both thresholds.
    pub fn fragmented(&self, policy: &DefragPolicy) -> bool {
        let free = self.db_size.saturating_sub(self.db_size_in_use);
        self.db_size >= policy.min_bytes
            && u128::from(free) * 100 >= u128::from(policy.min_free_percent) * u128::from(self.db_size)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub me: String,
    /// Every member of the list (a member whose status did not answer is unhealthy).
    pub members: Vec<MemberView>,
    /// Why nothing may be restarted now, if anything holds it (a rollout turn held, a version
    /// on trial on this node, a snapshot being taken here).
    pub held: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// This member is below the thresholds.
    NotNeeded,
    /// This member is above them and must wait (why).
    Wait(String),
    /// Defragment this member now; `hand_off` first when it leads.
    Defrag { hand_off: bool },
}

pub fn decide(facts: &Facts, policy: &DefragPolicy) -> Decision {
    let Some(me) = facts.members.iter().find(|m| m.name == facts.me) else {
        return Decision::Wait(format!("{} is not in the member list", facts.me));
    };
    if !me.fragmented(policy) {
        return Decision::NotNeeded;
    }
    if let Err(why) = affordable(facts) {
        return Decision::Wait(why);
    }
    let mut turn: Vec<&MemberView> = facts.members.iter().filter(|m| m.fragmented(policy)).collect();
    // Followers by name, the leader last.
    turn.sort_by(|a, b| (a.leads, &a.name).cmp(&(b.leads, &b.name)));
    let first = turn.first().expect("this member is above the thresholds");
    if first.name != me.name {
        return Decision::Wait(format!("member {} goes first", first.name));
    }
    Decision::Defrag { hand_off: me.leads }
}

/// An operator's defrag of this node's member (`kube-anchor defrag`): the thresholds and the
/// turn order are the operator's choice, the cluster's margin is not.
pub fn on_demand(facts: &Facts) -> Decision {
    let Some(me) = facts.members.iter().find(|m| m.name == facts.me) else {
        return Decision::Wait(format!("{} is not in the member list", facts.me));
    };
    match affordable(facts) {
        Ok(()) => Decision::Defrag { hand_off: me.leads },
        Err(why) => Decision::Wait(why),
    }
}

/// Whether the cluster can spare one member for a defrag now (why not).
fn affordable(facts: &Facts) -> Result<(), String> {
    if let Some(held) = &facts.held {
        return Err(held.clone());
    }
    if let Some(learner) = facts.members.iter().find(|m| m.is_learner) {
        return Err(format!("learner {} is catching up", learner.name));
    }
    if let Some(down) = facts.members.iter().find(|m| !m.healthy) {
        return Err(format!("member {} is not healthy", down.name));
    }
    let newest = facts.members.iter().map(|m| m.applied_index).max().unwrap_or(0);
    if let Some(behind) = facts
        .members
        .iter()
        .find(|m| newest.saturating_sub(m.applied_index) > HAND_OFF_MAX_LAG)
    {
        return Err(format!(
            "member {} is {} entries behind",
            behind.name,
            newest - behind.applied_index
        ));
    }
    let voters = facts.members.len();
    // The voters left while this one is busy must still be a quorum of all of them.
    if voters - 1 < voters / 2 + 1 {
        return Err(format!(
            "{voters} voter(s): the cluster cannot lose one for the defrag (quorum {})",
            voters / 2 + 1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    fn policy() -> DefragPolicy {
        DefragPolicy {
            every: Duration::from_secs(600),
            min_bytes: 100 * MB,
            min_free_percent: 45,
        }
    }

    fn member(name: &str, leads: bool, size_mb: u64, in_use_mb: u64) -> MemberView {
        MemberView {
            name: name.into(),
            id: name.bytes().map(u64::from).sum(),
            is_learner: false,
            healthy: true,
            leads,
            applied_index: 5000,
            db_size: size_mb * MB,
            db_size_in_use: in_use_mb * MB,
        }
    }

    fn facts(me: &str, members: Vec<MemberView>) -> Facts {
        Facts {
            me: me.into(),
            members,
            held: None,
        }
    }

    fn three() -> Vec<MemberView> {
        vec![
            member("a", true, 400, 100),
            member("b", false, 400, 100),
            member("c", false, 400, 100),
        ]
    }

    #[test]
    fn only_a_member_above_both_thresholds() {
        let p = policy();
        assert!(member("a", false, 200, 110).fragmented(&p)); // 45 % free
        assert!(!member("a", false, 200, 111).fragmented(&p));
        assert!(!member("a", false, 99, 0).fragmented(&p));
        let mut members = three();
        members[1] = member("b", false, 400, 390);
        assert_eq!(decide(&facts("b", members), &p), Decision::NotNeeded);
    }

    #[test]
    fn followers_go_in_name_order_and_the_leader_last_after_a_hand_off() {
        let p = policy();
        assert_eq!(decide(&facts("b", three()), &p), Decision::Defrag { hand_off: false });
        assert_eq!(
            decide(&facts("c", three()), &p),
            Decision::Wait("member b goes first".into())
        );
        assert_eq!(
            decide(&facts("a", three()), &p),
            Decision::Wait("member b goes first".into())
        );
        // b and c done: the leader, after handing off.
        let mut members = three();
        members[1] = member("b", false, 100, 100);
        members[2] = member("c", false, 100, 100);
        assert_eq!(decide(&facts("a", members), &p), Decision::Defrag { hand_off: true });
    }

    #[test]
    fn never_while_another_member_is_down_behind_or_learning_or_a_turn_is_held() {
        let p = policy();
        let mut members = three();
        members[0].healthy = false;
        assert_eq!(
            decide(&facts("b", members), &p),
            Decision::Wait("member a is not healthy".into())
        );
        let mut members = three();
        members[2].applied_index = 1000;
        assert_eq!(
            decide(&facts("b", members), &p),
            Decision::Wait("member c is 4000 entries behind".into())
        );
        let mut members = three();
        members.push(MemberView {
            is_learner: true,
            ..member("d", false, 10, 10)
        });
        assert_eq!(
            decide(&facts("b", members), &p),
            Decision::Wait("learner d is catching up".into())
        );
        let mut f = facts("b", three());
        f.held = Some("node cp-2 holds the rollout turn".into());
        assert_eq!(
            decide(&f, &p),
            Decision::Wait("node cp-2 holds the rollout turn".into())
        );
    }

    #[test]
    fn an_operators_defrag_skips_the_thresholds_and_the_turn_not_the_margin() {
        let mut members = three();
        members[2] = member("c", false, 10, 10);
        assert_eq!(
            on_demand(&facts("c", members.clone())),
            Decision::Defrag { hand_off: false }
        );
        assert_eq!(
            on_demand(&facts("a", members.clone())),
            Decision::Defrag { hand_off: true }
        );
        members[1].healthy = false;
        assert_eq!(
            on_demand(&facts("c", members)),
            Decision::Wait("member b is not healthy".into())
        );
        let two: Vec<MemberView> = three().into_iter().take(2).collect();
        assert!(matches!(on_demand(&facts("a", two)), Decision::Wait(w) if w.contains("cannot lose one")));
    }

    #[test]
    fn never_where_the_cluster_cannot_lose_the_member() {
        let p = policy();
        for n in [1, 2] {
            let members: Vec<MemberView> = three().into_iter().take(n).collect();
            let me = members.last().unwrap().name.clone();
            assert!(
                matches!(decide(&facts(&me, members), &p), Decision::Wait(w) if w.contains("cannot lose one")),
                "{n} voters"
            );
        }
    }
}
