//! The guarded checkpoint state machine, one instance per owner (controller kind/name/uid) on
//! this node. Pure: `decide(state, observation, config) -> (state, actions)`.
//!
//! A generation is the checkpoint of one parent pod (bootkube names its files after the pod).
//! Rules:
//! - Checkpoint a parent only once the API shows it Running and Ready for `ready_window`; older
//!   generations stay until the new one is proven.
//! - Activate the newest generation when no pod of the owner runs locally.
//! - Deactivate it once a replacement runs and is Ready locally; for a hostNetwork pod (which
//!   cannot start while its checkpoint holds the ports) hand off: deactivate, give the
//!   replacement `handoff_timeout`, re-activate if it is not Ready, and retry with backoff.
//! - Retire an older generation only when a replacement has been Running and Ready locally for
//!   `stable_window` and the API is reachable; retire everything only when the API has said
//!   twice, `retire_grace` apart, that the owner no longer wants a pod on this node.
//! - Never remove anything while the API is unreachable; never take "the API answers" as proof
//!   of anything local.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub ready_window: Duration,
    pub stable_window: Duration,
    pub handoff_timeout: Duration,
    pub retire_grace: Duration,
    /// Longest wait between two hand-off attempts.
    pub max_backoff: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            ready_window: Duration::from_secs(30),
            stable_window: Duration::from_secs(120),
            handoff_timeout: Duration::from_secs(60),
            retire_grace: Duration::from_secs(300),
            max_backoff: Duration::from_secs(600),
        }
    }
}

/// A parent pod of this owner on this node, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub uid: String,
    pub name: String,
    /// Since when the API shows it Running and Ready; `None` when it is not.
    pub ready_since: Option<Duration>,
    pub host_network: bool,
}

/// A pod of this owner that the kubelet runs on this node (never a checkpoint copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Local {
    pub uid: String,
    /// Since when it is Running and Ready locally; `None` while it is not.
    pub ready_since: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub now: Duration,
    pub api_reachable: bool,
    /// Meaningful only when `api_reachable`.
    pub parents: Vec<Parent>,
    pub local: Vec<Local>,
    /// Does the owner still want a pod on this node? `None`: unknown (API unreachable, or an
    /// owner kind whose placement cannot be judged).
    pub owner_wants_node: Option<bool>,
}

/// One checkpoint on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub uid: String,
    pub name: String,
    pub active: bool,
    pub host_network: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct State {
    /// Oldest first; the last one is the newest.
    pub generations: Vec<Generation>,
    /// A hostNetwork hand-off in progress: when the checkpoint was deactivated.
    pub handoff_started: Option<Duration>,
    pub handoff_attempts: u32,
    pub next_handoff: Option<Duration>,
    /// First time the API said the owner no longer wants this node.
    pub unwanted_since: Option<Duration>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write a new generation from this parent (secrets, then the inactive manifest).
    Checkpoint { uid: String, name: String },
    /// Copy the generation's inactive manifest into the kubelet's manifest directory.
    Activate { name: String },
    /// Remove the generation's manifest from the kubelet's directory (the checkpoint stays).
    Deactivate { name: String },
    /// Remove the generation: manifest, inactive copy, then its secrets and configmaps.
    Retire { name: String },
}

pub fn decide(state: &State, obs: &Observation, cfg: &Config) -> (State, Vec<Action>) {
    let mut s = state.clone();
    let mut actions = Vec::new();
    let now = obs.now;

    // The owner gone (or this node deselected): retire everything, but only on two API
    // confirmations `retire_grace` apart. Unknown or unreachable changes nothing.
    if obs.api_reachable {
        match obs.owner_wants_node {
            Some(false) => {
                let since = *s.unwanted_since.get_or_insert(now);
                if now.saturating_sub(since) >= cfg.retire_grace && !s.generations.is_empty() {
                    for g in s.generations.drain(..) {
                        actions.push(Action::Retire { name: g.name });
                    }
                    s.handoff_started = None;
                    return (s, actions);
                }
            }
            Some(true) => s.unwanted_since = None,
            None => {}
        }
    }

    // A new generation from a parent proven Running and Ready for the ready window.
    if obs.api_reachable {
        let newest_uid = s.generations.last().map(|g| g.uid.clone());
        let proven = obs
            .parents
            .iter()
            .filter(|p| p.ready_since.is_some_and(|t| now.saturating_sub(t) >= cfg.ready_window))
            .filter(|p| !s.generations.iter().any(|g| g.uid == p.uid))
            .max_by_key(|p| p.ready_since);
        if let Some(p) = proven
            && newest_uid.as_deref() != Some(p.uid.as_str())
        {
            actions.push(Action::Checkpoint {
                uid: p.uid.clone(),
                name: p.name.clone(),
            });
            s.generations.push(Generation {
                uid: p.uid.clone(),
                name: p.name.clone(),
                active: false,
                host_network: p.host_network,
            });
        }
    }

    let replacement_ready_for = obs
        .local
        .iter()
        .filter_map(|l| l.ready_since)
        .map(|t| now.saturating_sub(t))
        .max();
    let replacement_present = !obs.local.is_empty();
    let Some(newest) = s.generations.len().checked_sub(1) else {
        return (s, actions);
    };

    if replacement_ready_for.is_some() {
        // A replacement runs and is Ready here: no copy needs to be active.
        for g in s.generations.iter_mut().filter(|g| g.active) {
            g.active = false;
            actions.push(Action::Deactivate { name: g.name.clone() });
        }
        s.handoff_started = None;
        s.handoff_attempts = 0;
        s.next_handoff = None;
    } else if let Some(started) = s.handoff_started {
        if now.saturating_sub(started) >= cfg.handoff_timeout {
            // The replacement did not become Ready in time: bring the checkpoint back, retry later.
            s.handoff_started = None;
            s.handoff_attempts += 1;
            let backoff = cfg
                .handoff_timeout
                .saturating_mul(1 << s.handoff_attempts.min(16))
                .min(cfg.max_backoff);
            s.next_handoff = Some(now + backoff);
            activate(&mut s, newest, &mut actions);
        }
    } else {
        let g = &s.generations[newest];
        let may_hand_off = g.host_network && replacement_present && s.next_handoff.is_none_or(|t| now >= t);
        if may_hand_off {
            // The replacement needs the ports: step aside for a bounded time.
            for g in s.generations.iter_mut().filter(|g| g.active) {
                g.active = false;
                actions.push(Action::Deactivate { name: g.name.clone() });
            }
            s.handoff_started = Some(now);
        } else if !g.active {
            activate(&mut s, newest, &mut actions);
        }
    }

    // Older generations go only with a stable replacement and a reachable API.
    let stable = replacement_ready_for.is_some_and(|d| d >= cfg.stable_window);
    if obs.api_reachable && stable && s.generations.len() > 1 {
        let newest_gen = s.generations[newest].clone();
        let (keep, retire): (Vec<Generation>, Vec<Generation>) =
            s.generations.drain(..).partition(|g| g.uid == newest_gen.uid);
        for g in retire {
            actions.push(Action::Retire { name: g.name });
        }
        s.generations = keep;
    }
    (s, actions)
}

fn activate(s: &mut State, index: usize, actions: &mut Vec<Action>) {
    // Only one copy of the owner may be active: the newest.
    for (i, g) in s.generations.iter_mut().enumerate() {
        if i != index && g.active {
            g.active = false;
            actions.push(Action::Deactivate { name: g.name.clone() });
        }
    }
    let g = &mut s.generations[index];
    if !g.active {
        g.active = true;
        actions.push(Action::Activate { name: g.name.clone() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn cfg() -> Config {
        Config {
            ready_window: secs(30),
            stable_window: secs(120),
            handoff_timeout: secs(60),
            retire_grace: secs(300),
            max_backoff: secs(600),
        }
    }

    fn parent(uid: &str, ready_since: Option<u64>, host_network: bool) -> Parent {
        Parent {
            uid: uid.into(),
            name: format!("pod-{uid}"),
            ready_since: ready_since.map(secs),
            host_network,
        }
    }

    fn local(uid: &str, ready_since: Option<u64>) -> Local {
        Local {
            uid: uid.into(),
            ready_since: ready_since.map(secs),
        }
    }

    fn obs(now: u64, api: bool, parents: Vec<Parent>, local: Vec<Local>, wants: Option<bool>) -> Observation {
        Observation {
            now: secs(now),
            api_reachable: api,
            parents,
            local,
            owner_wants_node: wants,
        }
    }

    fn generation(uid: &str, active: bool, host_network: bool) -> Generation {
        Generation {
            uid: uid.into(),
            name: format!("pod-{uid}"),
            active,
            host_network,
        }
    }

    fn with(gens: Vec<Generation>) -> State {
        State {
            generations: gens,
            ..Default::default()
        }
    }

    #[test]
    fn checkpoints_only_after_the_ready_window() {
        let s = State::default();
        let (s1, a) = decide(
            &s,
            &obs(
                20,
                true,
                vec![parent("a", Some(0), true)],
                vec![local("a", Some(0))],
                Some(true),
            ),
            &cfg(),
        );
        assert!(a.is_empty(), "{a:?}");
        let (s2, a) = decide(
            &s1,
            &obs(
                31,
                true,
                vec![parent("a", Some(0), true)],
                vec![local("a", Some(0))],
                Some(true),
            ),
            &cfg(),
        );
        assert_eq!(
            a,
            [Action::Checkpoint {
                uid: "a".into(),
                name: "pod-a".into()
            }]
        );
        assert_eq!(s2.generations, [generation("a", false, true)]);
        // Not Ready (a bad flag): never checkpointed.
        let (_, a) = decide(
            &s,
            &obs(
                1000,
                true,
                vec![parent("b", None, true)],
                vec![local("b", None)],
                Some(true),
            ),
            &cfg(),
        );
        assert!(!a.iter().any(|x| matches!(x, Action::Checkpoint { .. })), "{a:?}");
    }

    #[test]
    fn after_a_reboot_the_checkpoint_is_activated_whatever_the_api_says() {
        for api in [false, true] {
            let (s, a) = decide(
                &with(vec![generation("a", false, true)]),
                &obs(5, api, vec![], vec![], None),
                &cfg(),
            );
            assert_eq!(a, [Action::Activate { name: "pod-a".into() }], "api {api}");
            assert!(s.generations[0].active);
        }
    }

    #[test]
    fn the_full_reboot_race_is_closed() {
        // The parent is gone from the API (the old pod was deleted) for far longer than any
        // timer; the replacement is not running yet: the checkpoint stays active, nothing retires.
        let mut s = with(vec![generation("a", true, true)]);
        for t in (0..3600).step_by(5) {
            let (next, a) = decide(&s, &obs(t, true, vec![], vec![], Some(true)), &cfg());
            assert!(
                a.iter()
                    .all(|x| !matches!(x, Action::Retire { .. } | Action::Deactivate { .. })),
                "t={t}: {a:?}"
            );
            s = next;
        }
        assert!(s.generations[0].active);
    }

    #[test]
    fn host_network_handoff_reactivates_when_the_replacement_does_not_come_up() {
        let s = with(vec![generation("a", true, true)]);
        let (s, a) = decide(
            &s,
            &obs(
                100,
                true,
                vec![parent("b", None, true)],
                vec![local("b", None)],
                Some(true),
            ),
            &cfg(),
        );
        assert_eq!(a, [Action::Deactivate { name: "pod-a".into() }]);
        assert_eq!(s.handoff_started, Some(secs(100)));
        let (s, a) = decide(&s, &obs(150, true, vec![], vec![local("b", None)], Some(true)), &cfg());
        assert!(a.is_empty(), "within the hand-off: {a:?}");
        let (s, a) = decide(&s, &obs(161, true, vec![], vec![local("b", None)], Some(true)), &cfg());
        assert_eq!(a, [Action::Activate { name: "pod-a".into() }]);
        // Backoff: no new attempt right away.
        let (s, a) = decide(&s, &obs(170, true, vec![], vec![local("b", None)], Some(true)), &cfg());
        assert!(a.is_empty(), "{a:?}");
        let later = s.next_handoff.unwrap().as_secs();
        let (_, a) = decide(
            &s,
            &obs(later, true, vec![], vec![local("b", None)], Some(true)),
            &cfg(),
        );
        assert_eq!(a, [Action::Deactivate { name: "pod-a".into() }]);
    }

    #[test]
    fn non_host_network_checkpoint_stays_until_the_replacement_is_ready() {
        let s = with(vec![generation("a", true, false)]);
        let (s, a) = decide(&s, &obs(10, true, vec![], vec![local("b", None)], Some(true)), &cfg());
        assert!(a.is_empty(), "{a:?}");
        let (_, a) = decide(
            &s,
            &obs(20, true, vec![], vec![local("b", Some(15))], Some(true)),
            &cfg(),
        );
        assert_eq!(a, [Action::Deactivate { name: "pod-a".into() }]);
    }

    #[test]
    fn older_generations_retire_only_with_a_stable_replacement_and_a_reachable_api() {
        let s = with(vec![generation("a", false, true), generation("b", false, true)]);
        let running = |since| vec![local("b", Some(since))];
        let (_, a) = decide(&s, &obs(100, true, vec![], running(50), Some(true)), &cfg());
        assert!(a.is_empty(), "not stable yet: {a:?}");
        let (_, a) = decide(&s, &obs(200, false, vec![], running(50), None), &cfg());
        assert!(a.is_empty(), "API unreachable: {a:?}");
        let (s2, a) = decide(&s, &obs(200, true, vec![], running(50), Some(true)), &cfg());
        assert_eq!(a, [Action::Retire { name: "pod-a".into() }]);
        assert_eq!(s2.generations, [generation("b", false, true)]);
    }

    #[test]
    fn an_unwanted_owner_is_retired_after_two_confirmations_grace_apart() {
        let s = with(vec![generation("a", false, true)]);
        let (s, a) = decide(
            &s,
            &obs(0, true, vec![], vec![local("a", Some(0))], Some(false)),
            &cfg(),
        );
        assert!(a.is_empty());
        let (s, a) = decide(&s, &obs(100, false, vec![], vec![local("a", Some(0))], None), &cfg());
        assert!(a.is_empty());
        // A reachable API saying "wanted" again resets the clock.
        let (s_reset, _) = decide(
            &s,
            &obs(200, true, vec![], vec![local("a", Some(0))], Some(true)),
            &cfg(),
        );
        assert_eq!(s_reset.unwanted_since, None);
        let (_, a) = decide(&s, &obs(300, true, vec![], vec![], Some(false)), &cfg());
        assert_eq!(a, [Action::Retire { name: "pod-a".into() }]);
    }
}

#[cfg(test)]
mod exhaustive {
    use super::*;

    /// Every combination of the discrete inputs, from every discrete state: the actions obey
    /// the rules, checked one by one.
    #[test]
    fn every_combination() {
        let cfg = Config::default();
        let now = Duration::from_secs(10_000);
        let ago = |s: u64| Some(now - Duration::from_secs(s));
        let mut cases = 0;
        for api in [false, true] {
            for wants in [None, Some(true), Some(false)] {
                for unwanted_since in [None, ago(10), ago(1_000)] {
                    for gens in 0..=2usize {
                        for active in [None, Some(0usize), Some(1)] {
                            for host_network in [false, true] {
                                for handoff in [None, ago(10), ago(1_000)] {
                                    for next_handoff in [None, ago(0).map(|t| t + Duration::from_secs(100))] {
                                        // replacement: none, present, ready briefly, ready and stable
                                        for replacement in 0..4 {
                                            for parent in [None, ago(5), ago(100)] {
                                                if active.is_some_and(|a| a >= gens) {
                                                    continue;
                                                }
                                                cases += 1;
                                                let generations: Vec<Generation> = (0..gens)
                                                    .map(|i| Generation {
                                                        uid: format!("g{i}"),
                                                        name: format!("p{i}"),
                                                        active: active == Some(i),
                                                        host_network,
                                                    })
                                                    .collect();
                                                let state = State {
                                                    generations,
                                                    handoff_started: handoff,
                                                    handoff_attempts: 0,
                                                    next_handoff,
                                                    unwanted_since,
                                                };
                                                let local = match replacement {
                                                    0 => vec![],
                                                    1 => vec![Local {
                                                        uid: "r".into(),
                                                        ready_since: None,
                                                    }],
                                                    2 => vec![Local {
                                                        uid: "r".into(),
                                                        ready_since: ago(10),
                                                    }],
                                                    _ => vec![Local {
                                                        uid: "r".into(),
                                                        ready_since: ago(1_000),
                                                    }],
                                                };
                                                let parents = parent
                                                    .map(|t| Parent {
                                                        uid: "r".into(),
                                                        name: "pr".into(),
                                                        ready_since: Some(t),
                                                        host_network,
                                                    })
                                                    .into_iter()
                                                    .collect();
                                                let obs = Observation {
                                                    now,
                                                    api_reachable: api,
                                                    parents,
                                                    local,
                                                    owner_wants_node: wants,
                                                };
                                                let (next, actions) = decide(&state, &obs, &cfg);
                                                let context = format!("{state:?} / {obs:?} -> {actions:?}");
                                                let retires =
                                                    actions.iter().any(|a| matches!(a, Action::Retire { .. }));
                                                if retires {
                                                    assert!(api, "retired with the API unreachable: {context}");
                                                    let confirmed = wants == Some(false)
                                                        && unwanted_since.is_some_and(|t| now - t >= cfg.retire_grace);
                                                    assert!(
                                                        replacement == 3 || confirmed,
                                                        "retired without proof: {context}"
                                                    );
                                                }
                                                if actions.iter().any(|a| matches!(a, Action::Checkpoint { .. })) {
                                                    assert!(
                                                        api && parent == ago(100),
                                                        "checkpointed an unproven parent: {context}"
                                                    );
                                                }
                                                let ready = replacement >= 2;
                                                if !next.generations.is_empty() && !ready {
                                                    let in_handoff = next
                                                        .handoff_started
                                                        .is_some_and(|t| now - t < cfg.handoff_timeout);
                                                    assert!(
                                                        next.generations.iter().any(|g| g.active) || in_handoff,
                                                        "node left bare: {context}"
                                                    );
                                                }
                                                if ready {
                                                    assert!(
                                                        next.generations.iter().all(|g| !g.active),
                                                        "a checkpoint active beside a Ready replacement: {context}"
                                                    );
                                                }
                                                assert!(
                                                    next.generations.iter().filter(|g| g.active).count() <= 1,
                                                    "{context}"
                                                );
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(cases > 10_000, "{cases}");
    }
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    struct Step {
        dt: u64,
        api: bool,
        parent: Option<(u8, bool)>,
        local: Option<(u8, bool)>,
        wants: Option<bool>,
        host_network: bool,
    }

    fn step() -> impl Strategy<Value = Step> {
        (
            1u64..90,
            any::<bool>(),
            proptest::option::of((0u8..3, any::<bool>())),
            proptest::option::of((0u8..3, any::<bool>())),
            proptest::option::of(any::<bool>()),
            any::<bool>(),
        )
            .prop_map(|(dt, api, parent, local, wants, host_network)| Step {
                dt,
                api,
                parent,
                local,
                wants,
                host_network,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Over random observation sequences: nothing is removed while the API is unreachable,
        /// an older generation is removed only with a replacement Ready for the stable window
        /// (or after two "unwanted" confirmations), and the node never lacks both an active
        /// checkpoint and a Ready replacement outside a bounded hand-off.
        #[test]
        fn guarded_invariants(steps in proptest::collection::vec(step(), 1..60)) {
            let cfg = Config { ready_window: Duration::from_secs(30), stable_window: Duration::from_secs(120), handoff_timeout: Duration::from_secs(60), retire_grace: Duration::from_secs(300), max_backoff: Duration::from_secs(600) };
            let mut state = State::default();
            let mut now = 0u64;
            let mut ready_since: std::collections::BTreeMap<String, u64> = Default::default();
            for st in steps {
                now += st.dt;
                let local: Vec<Local> = st.local.iter().map(|(id, ready)| {
                    let uid = format!("u{id}");
                    let since = if *ready { Some(*ready_since.entry(uid.clone()).or_insert(now)) } else { ready_since.remove(&uid); None };
                    Local { uid, ready_since: since.map(Duration::from_secs) }
                }).collect();
                let parents: Vec<Parent> = st.parent.iter().map(|(id, ready)| Parent {
                    uid: format!("u{id}"), name: format!("p{id}"),
                    ready_since: ready.then(|| Duration::from_secs(now.saturating_sub(40))),
                    host_network: st.host_network,
                }).collect();
                let obs = Observation { now: Duration::from_secs(now), api_reachable: st.api, parents, local: local.clone(), owner_wants_node: if st.api { st.wants } else { None } };
                let (next, actions) = decide(&state, &obs, &cfg);
                for a in &actions {
                    if let Action::Retire { .. } = a {
                        prop_assert!(st.api, "removed while the API was unreachable: {actions:?}");
                        let stable = local.iter().filter_map(|l| l.ready_since).any(|t| Duration::from_secs(now) - t >= cfg.stable_window);
                        let unwanted = st.wants == Some(false) && state.unwanted_since.is_some_and(|t| Duration::from_secs(now) - t >= cfg.retire_grace);
                        prop_assert!(stable || unwanted, "retired without a stable replacement or a confirmed decommission: {actions:?}");
                    }
                }
                let replacement_ready = local.iter().any(|l| l.ready_since.is_some());
                let any_active = next.generations.iter().any(|g| g.active);
                if !next.generations.is_empty() && !replacement_ready {
                    let handoff_ok = next.handoff_started.is_some_and(|t| Duration::from_secs(now) - t <= cfg.handoff_timeout);
                    prop_assert!(any_active || handoff_ok, "neither a checkpoint nor a Ready replacement: {next:?} after {actions:?}");
                }
                prop_assert!(next.generations.iter().filter(|g| g.active).count() <= 1);
                state = next;
            }
        }
    }
}
