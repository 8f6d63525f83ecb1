//! The guarded checkpoint state machine, one instance per owner (the workload: DaemonSet,
//! Deployment, StatefulSet or bare pod, by kind/namespace/name) on this node. Pure:
//! `decide(state, observation, config) -> (state, actions)`.
//!
//! A generation is the checkpoint of one parent pod (bootkube names its files after the pod).
//! Rules:
//! - Checkpoint a parent only once the API shows it Running and Ready for `ready_window`; older
//!   generations stay until the new one is proven.
//! - Activate the newest generation when no pod of the owner runs locally. When the kubelet
//!   cannot be asked, what runs is unknown, never "nothing": activate only when no pod of the
//!   owner has been seen running on this node since it booted (after a cold reboot nothing but
//!   static pods runs until the API is back), otherwise change nothing.
//! - Deactivate it once a replacement runs and is Ready locally; for a hostNetwork pod (which
//!   cannot start while its checkpoint holds the ports) hand off: deactivate, give the
//!   replacement `handoff_timeout`, re-activate if it is not Ready, and retry with backoff.
//! - The checkpointer's own checkpoint is always active: it is the copy that runs after a cold
//!   reboot, and it stands by (through the lock) while its DaemonSet copy runs.
//! - Retire an older generation only when a replacement has been Running and Ready locally for
//!   `stable_window` and the API is reachable; retire everything only when the API has said
//!   twice, `retire_grace` apart, that the owner no longer wants a pod on this node.
//! - When the checkpointer itself is decommissioned on this node: retire inactive checkpoints at
//!   once, an active one only once a replacement runs Ready here or its owner no longer wants the
//!   node, and the checkpointer's own checkpoint last, when nothing else is left.
//! - Never remove anything while the API is unreachable (but for the inactive checkpoints of a
//!   decommissioned checkpointer); never take "the API answers" as proof of anything local.

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

/// What runs on this node, from the kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalView {
    /// The kubelet answered: the pods of this owner it runs here (never a checkpoint copy).
    Known(Vec<Local>),
    /// The kubelet could not be asked. `seen_since_boot`: a pod of this owner was seen running
    /// here since the node booted, so one may well run now.
    Unknown { seen_since_boot: bool },
}

impl LocalView {
    fn known(&self) -> Option<&[Local]> {
        match self {
            LocalView::Known(l) => Some(l),
            LocalView::Unknown { .. } => None,
        }
    }
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
    pub local: LocalView,
    /// Does the owner still want a pod on this node? `None`: unknown (API unreachable, or an
    /// owner kind whose placement cannot be judged).
    pub owner_wants_node: Option<bool>,
    /// The owner is the checkpointer's own DaemonSet.
    pub is_self: bool,
    /// The checkpointer is decommissioned on this node (proved by its pre-stop hook).
    pub decommissioned: bool,
    /// For the checkpointer's own owner while decommissioned: other owners still have checkpoints.
    pub others_left: bool,
    /// An operator holds the checkpointer on this node (`crate::pause`).
    pub paused: bool,
    /// Whether a checkpoint copy of this owner runs here now, as the kubelet shows it (`None`:
    /// the kubelet could not be asked).
    pub copy_runs: Option<bool>,
}

/// One checkpoint on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generation {
    pub uid: String,
    pub name: String,
    pub active: bool,
    pub host_network: bool,
}

/// One pod's checkpoints on this node and the hand-off under way, as the checkpointer keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Checkpoints {
    /// Oldest first; the last one is the newest.
    pub generations: Vec<Generation>,
    /// A hostNetwork hand-off in progress: when the checkpoint was deactivated.
    pub handoff_started: Option<Duration>,
    pub handoff_attempts: u32,
    pub next_handoff: Option<Duration>,
    /// First time the API said the owner no longer wants this node.
    pub unwanted_since: Option<Duration>,
    /// Since when no checkpoint copy of this owner has run here (the kubelet's word); `None`
    /// while one runs, or before it was asked.
    pub copy_stopped_since: Option<Duration>,
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

/// The state after `action`, which [`decide`] assumed done, failed: the belief it changed is
/// taken back (from `before`, the state the decision started from), so the next step asks for
/// the same action again.
pub fn undo(mut next: Checkpoints, action: &Action, before: &Checkpoints) -> Checkpoints {
    match action {
        Action::Checkpoint { name, .. } => next.generations.retain(|g| &g.name != name),
        Action::Activate { name } => next
            .generations
            .iter_mut()
            .filter(|g| &g.name == name)
            .for_each(|g| g.active = false),
        Action::Deactivate { name } => next
            .generations
            .iter_mut()
            .filter(|g| &g.name == name)
            .for_each(|g| g.active = true),
        Action::Retire { .. } => next = before.clone(),
    }
    next
}

pub fn decide(state: &Checkpoints, obs: &Observation, cfg: &Config) -> (Checkpoints, Vec<Action>) {
    let mut s = state.clone();
    let mut actions = Vec::new();
    // Held: nothing is written, activated or removed, and no clock (retire grace, hand-off
    // back-off) moves.
    if obs.paused {
        return (s, actions);
    }
    let now = obs.now;
    let local = obs.local.known();
    match obs.copy_runs {
        Some(true) => s.copy_stopped_since = None,
        Some(false) => {
            s.copy_stopped_since.get_or_insert(now);
        }
        None => {}
    }
    // A hostNetwork checkpoint that runs answers its replacement's readiness probe
    // (`127.0.0.1:<port>`): that Ready is borrowed. It counts only from the moment no copy runs,
    // and only once it has lasted the ready window past it (a probe that starts failing takes
    // its failure threshold to show), so a bad replacement never ends a hand-off nor resets its
    // back-off.
    let host_network = s.generations.last().is_some_and(|g| g.host_network);
    let replacement_ready_for = local
        .unwrap_or_default()
        .iter()
        .filter_map(|l| l.ready_since)
        .filter_map(|t| match (host_network, s.copy_stopped_since) {
            (false, _) => Some(now.saturating_sub(t)),
            (true, Some(stopped)) => {
                let own = now.saturating_sub(t.max(stopped));
                (own >= cfg.ready_window).then_some(own)
            }
            (true, None) => None,
        })
        .max();
    // A replacement Ready since the copy stopped, not yet for the ready window: the hand-off
    // waits for it to prove itself (at most the ready window past the stop).
    let proving = host_network
        && replacement_ready_for.is_none()
        && s.copy_stopped_since
            .is_some_and(|stopped| now.saturating_sub(stopped) < cfg.ready_window)
        && local.unwrap_or_default().iter().any(|l| l.ready_since.is_some());

    if obs.decommissioned {
        return decommission(s, obs, replacement_ready_for.is_some());
    }

    // The owner gone (or this node deselected): retire everything, but only on two API
    // confirmations `retire_grace` apart. Unknown or unreachable changes nothing. The
    // checkpointer's own owner goes only through its decommission (everything else first).
    if obs.api_reachable && !obs.is_self {
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

    let Some(newest) = s.generations.len().checked_sub(1) else {
        return (s, actions);
    };

    if obs.is_self {
        // The copy that takes over after a cold reboot: always on disk and active. Its DaemonSet
        // copy and it share the work through the lock, never through the manifest directory.
        s.handoff_started = None;
        activate(&mut s, newest, &mut actions);
    } else if let Some(local) = local {
        if replacement_ready_for.is_some() {
            // A replacement runs and is Ready here: no copy needs to be active.
            for g in s.generations.iter_mut().filter(|g| g.active) {
                g.active = false;
                actions.push(Action::Deactivate { name: g.name.clone() });
            }
            s.handoff_started = None;
            s.handoff_attempts = 0;
            s.next_handoff = None;
        } else if !(proving || handoff_expired(&mut s, now, cfg, newest, &mut actions)) && s.handoff_started.is_none() {
            let g = &s.generations[newest];
            let may_hand_off = g.host_network && !local.is_empty() && s.next_handoff.is_none_or(|t| now >= t);
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
    } else if let LocalView::Unknown { seen_since_boot } = obs.local {
        // Nothing is known about what runs: never step aside. A hand-off that ran out comes
        // back; and after a boot in which no pod of the owner was ever seen here, the checkpoint
        // is what must run.
        if !handoff_expired(&mut s, now, cfg, newest, &mut actions) && s.handoff_started.is_none() && !seen_since_boot {
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

/// A hand-off whose replacement did not become Ready in time: bring the checkpoint back and
/// retry later. True when it ran out now.
fn handoff_expired(s: &mut Checkpoints, now: Duration, cfg: &Config, newest: usize, actions: &mut Vec<Action>) -> bool {
    let Some(started) = s.handoff_started else {
        return false;
    };
    if now.saturating_sub(started) < cfg.handoff_timeout {
        return false;
    }
    s.handoff_started = None;
    s.handoff_attempts += 1;
    let backoff = cfg
        .handoff_timeout
        .saturating_mul(1 << s.handoff_attempts.min(16))
        .min(cfg.max_backoff);
    s.next_handoff = Some(now + backoff);
    activate(s, newest, actions);
    true
}

/// The checkpointer leaves the node: nothing will manage a checkpoint after it. Inactive ones go
/// at once (with their secrets); an active one only when a replacement runs Ready here or the
/// owner no longer wants the node (else it would take the component down); its own last.
fn decommission(mut s: Checkpoints, obs: &Observation, replacement_ready: bool) -> (Checkpoints, Vec<Action>) {
    let mut actions = Vec::new();
    if obs.is_self {
        if !obs.others_left {
            for g in s.generations.drain(..) {
                actions.push(Action::Retire { name: g.name });
            }
        } else if let Some(newest) = s.generations.len().checked_sub(1) {
            // Still needed to finish the work after its DaemonSet pod is gone.
            activate(&mut s, newest, &mut actions);
        }
        return (s, actions);
    }
    let may_stop = replacement_ready || (obs.api_reachable && obs.owner_wants_node == Some(false));
    // A newest generation that stepped aside for a hand-off still counts as the running copy.
    let handing_off = s
        .handoff_started
        .is_some()
        .then(|| s.generations.len().saturating_sub(1));
    type Indexed = Vec<(usize, Generation)>;
    let (retire, keep): (Indexed, Indexed) = s
        .generations
        .drain(..)
        .enumerate()
        .partition(|(i, g)| may_stop || (!g.active && handing_off != Some(*i)));
    for (_, g) in retire {
        actions.push(Action::Retire { name: g.name });
    }
    s.generations = keep.into_iter().map(|(_, g)| g).collect();
    s.handoff_started = None;
    if let Some(i) = s.generations.len().checked_sub(1)
        && !s.generations[i].active
    {
        activate(&mut s, i, &mut actions);
    }
    (s, actions)
}

fn activate(s: &mut Checkpoints, index: usize, actions: &mut Vec<Action>) {
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
            local: LocalView::Known(local),
            owner_wants_node: wants,
            is_self: false,
            decommissioned: false,
            others_left: false,
            paused: false,
            copy_runs: Some(false),
        }
    }

    fn unknown(now: u64, api: bool, seen_since_boot: bool) -> Observation {
        Observation {
            local: LocalView::Unknown { seen_since_boot },
            copy_runs: None,
            ..obs(now, api, vec![], vec![], None)
        }
    }

    /// `o`, the kubelet showing the checkpoint copy running.
    fn copy_running(o: Observation) -> Observation {
        Observation {
            copy_runs: Some(true),
            ..o
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

    /// A failed action takes back exactly the belief it changed, so the next step asks again.
    #[test]
    fn undo_takes_back_what_a_failed_action_changed() {
        let before = Checkpoints {
            unwanted_since: Some(Duration::from_secs(3)),
            ..with(vec![generation("a", true, false)])
        };
        let name = |uid: &str| format!("pod-{uid}");
        let cases = [
            (
                with(vec![generation("a", true, false), generation("b", false, false)]),
                Action::Checkpoint {
                    uid: "b".into(),
                    name: name("b"),
                },
                with(vec![generation("a", true, false)]),
            ),
            (
                with(vec![generation("a", true, false)]),
                Action::Activate { name: name("a") },
                with(vec![generation("a", false, false)]),
            ),
            (
                with(vec![generation("a", false, true)]),
                Action::Deactivate { name: name("a") },
                with(vec![generation("a", true, true)]),
            ),
            (with(vec![]), Action::Retire { name: name("a") }, before.clone()),
            // Another generation's action leaves this one alone.
            (
                with(vec![generation("a", true, false)]),
                Action::Activate { name: name("z") },
                with(vec![generation("a", true, false)]),
            ),
        ];
        for (next, action, want) in cases {
            assert_eq!(undo(next.clone(), &action, &before), want, "{action:?} after {next:?}");
        }
    }

    /// `gens`, no copy having run here since the node booted (at 0) unless a test says so.
    fn with(gens: Vec<Generation>) -> Checkpoints {
        Checkpoints {
            generations: gens,
            copy_stopped_since: Some(Duration::ZERO),
            ..Default::default()
        }
    }

    #[test]
    fn checkpoints_only_after_the_ready_window() {
        let s = Checkpoints::default();
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
    fn a_paused_checkpointer_activates_and_retires_nothing() {
        let state = with(vec![generation("a", false, true)]);
        let held = Observation {
            paused: true,
            ..obs(5, false, vec![], vec![], None)
        };
        assert_eq!(decide(&state, &held, &cfg()), (state.clone(), vec![]));
        // Unwanted by its owner for longer than the retire grace: kept while paused.
        let unwanted = Checkpoints {
            unwanted_since: Some(Duration::ZERO),
            ..state.clone()
        };
        let held = Observation {
            paused: true,
            ..obs(10_000, true, vec![], vec![], Some(false))
        };
        assert_eq!(decide(&unwanted, &held, &cfg()), (unwanted.clone(), vec![]));
        let (_, acted) = decide(&unwanted, &Observation { paused: false, ..held }, &cfg());
        assert!(acted.iter().any(|a| matches!(a, Action::Retire { .. })), "{acted:?}");
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
    #[test]
    fn a_failed_kubelet_query_is_unknown_never_nothing_runs() {
        // Something of the owner was seen running since boot: change nothing, either way.
        for active in [false, true] {
            let s = with(vec![generation("a", active, true)]);
            for api in [false, true] {
                let (next, a) = decide(&s, &unknown(100, api, true), &cfg());
                assert!(a.is_empty(), "active {active}, api {api}: {a:?}");
                assert_eq!(next.generations, s.generations);
            }
        }
        // A hand-off that runs out while the kubelet cannot be asked comes back.
        let s = Checkpoints {
            handoff_started: Some(secs(0)),
            ..with(vec![generation("a", false, true)])
        };
        let (_, a) = decide(&s, &unknown(30, true, true), &cfg());
        assert!(a.is_empty(), "{a:?}");
        let (_, a) = decide(&s, &unknown(61, true, true), &cfg());
        assert_eq!(a, [Action::Activate { name: "pod-a".into() }]);
    }

    #[test]
    fn after_a_cold_boot_with_no_kubelet_view_the_checkpoint_runs() {
        let s = with(vec![generation("a", false, true)]);
        for api in [false, true] {
            let (next, a) = decide(&s, &unknown(5, api, false), &cfg());
            assert_eq!(a, [Action::Activate { name: "pod-a".into() }], "api {api}");
            assert!(next.generations[0].active);
        }
    }

    fn own(o: Observation) -> Observation {
        Observation { is_self: true, ..o }
    }

    #[test]
    fn the_checkpointers_own_checkpoint_stays_active_beside_its_daemonset_copy() {
        // Its DaemonSet copy runs Ready here: the checkpoint is still activated and kept.
        let s = with(vec![generation("a", false, true)]);
        let ds_copy = || vec![local("a", Some(0))];
        let (s, a) = decide(&s, &own(obs(500, true, vec![], ds_copy(), Some(true))), &cfg());
        assert_eq!(a, [Action::Activate { name: "pod-a".into() }]);
        for t in [505, 1000, 5000] {
            let (_, a) = decide(&s, &own(obs(t, true, vec![], ds_copy(), Some(true))), &cfg());
            assert!(a.is_empty(), "t={t}: {a:?}");
        }
        // Even an unwanted verdict does not retire it: only the checkpointer's decommission does.
        let (s2, _) = decide(&s, &own(obs(0, true, vec![], ds_copy(), Some(false))), &cfg());
        let (_, a) = decide(&s2, &own(obs(1000, true, vec![], ds_copy(), Some(false))), &cfg());
        assert!(a.is_empty(), "{a:?}");
        // A new generation of the checkpointer takes over the active slot; the old one retires
        // once the new DaemonSet copy is stable.
        let s = with(vec![generation("a", true, true), generation("b", false, true)]);
        let (s, a) = decide(
            &s,
            &own(obs(100, true, vec![], vec![local("b", Some(90))], Some(true))),
            &cfg(),
        );
        assert_eq!(
            a,
            [
                Action::Deactivate { name: "pod-a".into() },
                Action::Activate { name: "pod-b".into() }
            ]
        );
        let (s, a) = decide(
            &s,
            &own(obs(300, true, vec![], vec![local("b", Some(90))], Some(true))),
            &cfg(),
        );
        assert_eq!(a, [Action::Retire { name: "pod-a".into() }]);
        assert_eq!(s.generations, [generation("b", true, true)]);
    }

    #[test]
    fn the_cold_reboot_sequence() {
        // Steady state: the app's pod runs Ready here, its checkpoint inactive; the
        // checkpointer's own checkpoint active.
        let app = with(vec![generation("a", false, true)]);
        let me = with(vec![generation("c", true, true)]);
        // Power back: the static copy has neither API nor kubelet view, and nothing was seen
        // running since this boot.
        let (app, a) = decide(&app, &unknown(10, false, false), &cfg());
        assert_eq!(a, [Action::Activate { name: "pod-a".into() }]);
        let (me, a) = decide(&me, &own(unknown(10, false, false)), &cfg());
        assert!(a.is_empty(), "{a:?}");
        // The API is back; the static copy still cannot ask the kubelet: nothing changes.
        let (app, a) = decide(&app, &unknown(200, true, false), &cfg());
        assert!(a.is_empty(), "{a:?}");
        // The DaemonSet copy takes the lock and sees the app's new pod (its Ready borrowed from
        // the copy that runs and answers its probe): the hand-off.
        let (app, a) = decide(
            &app,
            &copy_running(obs(300, true, vec![], vec![local("b", Some(299))], Some(true))),
            &cfg(),
        );
        assert_eq!(a, [Action::Deactivate { name: "pod-a".into() }]);
        // The copy stopped: the new pod's Ready counts once it has lasted the ready window
        // since, and ends the hand-off.
        let (app, a) = decide(
            &app,
            &obs(310, true, vec![], vec![local("b", Some(299))], Some(true)),
            &cfg(),
        );
        assert!(a.is_empty() && app.handoff_started.is_some(), "{a:?}");
        let (app, a) = decide(
            &app,
            &obs(341, true, vec![], vec![local("b", Some(299))], Some(true)),
            &cfg(),
        );
        assert!(a.is_empty(), "{a:?}");
        assert!(app.handoff_started.is_none() && !app.generations[0].active);
        assert_eq!((app.handoff_attempts, app.next_handoff), (0, None));
        let (me, a) = decide(
            &me,
            &own(obs(300, true, vec![], vec![local("d", Some(290))], Some(true))),
            &cfg(),
        );
        assert!(a.is_empty() && me.generations[0].active, "{a:?}");
    }

    /// A hostNetwork replacement's readiness probe (`127.0.0.1:<port>`) is answered by the
    /// checkpoint while it runs: that Ready neither ends a hand-off nor resets its back-off, so a
    /// bad replacement cannot make the checkpoint step aside again and again.
    #[test]
    fn a_borrowed_ready_neither_ends_a_hand_off_nor_resets_its_back_off() {
        let s = Checkpoints {
            copy_stopped_since: None,
            ..with(vec![generation("a", true, true)])
        };
        // Ready for minutes, all borrowed: the copy runs. The hand-off is tried.
        let (s, a) = decide(
            &s,
            &copy_running(obs(300, true, vec![], vec![local("r", Some(100))], Some(true))),
            &cfg(),
        );
        assert_eq!(a, [Action::Deactivate { name: "pod-a".into() }]);
        // The copy stopped; the replacement no longer answers its probe (it is bad): the
        // hand-off runs out and the copy comes back, with a back-off.
        let (s, a) = decide(&s, &obs(320, true, vec![], vec![local("r", None)], Some(true)), &cfg());
        assert!(a.is_empty(), "{a:?}");
        let (s, a) = decide(&s, &obs(361, true, vec![], vec![local("r", None)], Some(true)), &cfg());
        assert_eq!(a, [Action::Activate { name: "pod-a".into() }]);
        let backoff = (s.handoff_attempts, s.next_handoff);
        assert_eq!(backoff.0, 1);
        // The copy runs again and lends its Ready again: nothing changes, the back-off stays.
        let (s, a) = decide(
            &s,
            &copy_running(obs(400, true, vec![], vec![local("r", Some(370))], Some(true))),
            &cfg(),
        );
        assert!(a.is_empty(), "{a:?}");
        assert!(s.generations[0].active);
        assert_eq!((s.handoff_attempts, s.next_handoff), backoff);
        // A good one: the copy takes 50 s to stop (its grace period); the replacement, Ready
        // since, proves itself for the ready window though the hand-off timeout passes meanwhile.
        let s = Checkpoints {
            copy_stopped_since: None,
            ..with(vec![generation("a", true, true)])
        };
        let (s, _) = decide(
            &s,
            &copy_running(obs(1000, true, vec![], vec![local("g", Some(990))], Some(true))),
            &cfg(),
        );
        let (s, _) = decide(
            &s,
            &copy_running(obs(1050, true, vec![], vec![local("g", Some(990))], Some(true))),
            &cfg(),
        );
        let (s, a) = decide(
            &s,
            &obs(1051, true, vec![], vec![local("g", Some(990))], Some(true)),
            &cfg(),
        );
        assert!(a.is_empty(), "{a:?}");
        let (s, a) = decide(
            &s,
            &obs(1070, true, vec![], vec![local("g", Some(990))], Some(true)),
            &cfg(),
        );
        assert!(
            a.is_empty() && s.handoff_started.is_some(),
            "past the hand-off timeout, proving: {a:?}"
        );
        let (s, a) = decide(
            &s,
            &obs(1082, true, vec![], vec![local("g", Some(990))], Some(true)),
            &cfg(),
        );
        assert!(a.is_empty() && s.handoff_started.is_none(), "{a:?} {s:?}");
        assert!(!s.generations[0].active);
        // A replacement that is not on the host network has a Ready of its own.
        let pod = Checkpoints {
            copy_stopped_since: None,
            ..with(vec![generation("p", true, false)])
        };
        let (_, a) = decide(
            &pod,
            &copy_running(obs(400, true, vec![], vec![local("r", Some(399))], Some(true))),
            &cfg(),
        );
        assert_eq!(a, [Action::Deactivate { name: "pod-p".into() }]);
    }

    fn decommissioned(o: Observation, others_left: bool) -> Observation {
        Observation {
            decommissioned: true,
            others_left,
            ..o
        }
    }

    #[test]
    fn a_decommissioned_checkpointer_retires_what_it_manages_then_itself() {
        // Inactive: at once, with or without an API.
        let s = with(vec![generation("a", false, true), generation("b", false, true)]);
        let (next, a) = decide(&s, &decommissioned(unknown(0, false, true), false), &cfg());
        assert_eq!(
            a,
            [
                Action::Retire { name: "pod-a".into() },
                Action::Retire { name: "pod-b".into() }
            ]
        );
        assert!(next.generations.is_empty());
        // Active: kept while nothing replaces it and the owner still wants the node...
        let s = with(vec![generation("a", false, true), generation("b", true, true)]);
        let (next, a) = decide(
            &s,
            &decommissioned(obs(0, true, vec![], vec![local("r", None)], Some(true)), false),
            &cfg(),
        );
        assert_eq!(a, [Action::Retire { name: "pod-a".into() }]);
        assert_eq!(next.generations, [generation("b", true, true)]);
        let (_, a) = decide(&next, &decommissioned(unknown(5, false, true), false), &cfg());
        assert!(a.is_empty(), "{a:?}");
        // ...and goes once a replacement runs Ready, or the owner no longer wants the node.
        let (_, a) = decide(
            &next,
            &decommissioned(obs(60, true, vec![], vec![local("r", Some(9))], Some(true)), false),
            &cfg(),
        );
        assert_eq!(a, [Action::Retire { name: "pod-b".into() }]);
        let (_, a) = decide(
            &next,
            &decommissioned(obs(10, true, vec![], vec![], Some(false)), false),
            &cfg(),
        );
        assert_eq!(a, [Action::Retire { name: "pod-b".into() }]);
        // A checkpoint that stepped aside for a hand-off is the running copy: kept and back.
        let s = Checkpoints {
            handoff_started: Some(secs(0)),
            ..with(vec![generation("a", false, true)])
        };
        let (next, a) = decide(
            &s,
            &decommissioned(obs(10, true, vec![], vec![local("r", None)], Some(true)), false),
            &cfg(),
        );
        assert_eq!(a, [Action::Activate { name: "pod-a".into() }]);
        assert_eq!(next.generations, [generation("a", true, true)]);
        // Its own checkpoint: only when nothing else is left.
        let me = with(vec![generation("c", true, true)]);
        let (_, a) = decide(&me, &own(decommissioned(unknown(0, false, true), true)), &cfg());
        assert!(a.is_empty(), "{a:?}");
        let (next, a) = decide(&me, &own(decommissioned(unknown(0, false, true), false)), &cfg());
        assert_eq!(a, [Action::Retire { name: "pod-c".into() }]);
        assert!(next.generations.is_empty());
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
        let combos = itertools_product();
        for (api, wants, unwanted_since, gens, active, host_network) in combos {
            for handoff in [None, ago(10), ago(1_000)] {
                for next_handoff in [None, ago(0).map(|t| t + Duration::from_secs(100))] {
                    // replacement: none, present, ready briefly, ready and stable (the kubelet
                    // answered); unknown with nothing / something seen since boot.
                    for replacement in 0..6 {
                        for parent in [None, ago(5), ago(100)] {
                            for is_self in [false, true] {
                                // 0: running; 1: decommissioned, nothing else left; 2: others left
                                // copy: the kubelet not asked; a checkpoint copy running; none
                                // running for long
                                for (decommission, copy) in (0..3).flat_map(|d| (0..3).map(move |c| (d, c))) {
                                    if active.is_some_and(|a| a >= gens) {
                                        continue;
                                    }
                                    let (copy_runs, copy_stopped_since) =
                                        [(None, None), (Some(true), None), (Some(false), ago(1_000))][copy];
                                    cases += 1;
                                    let generations: Vec<Generation> = (0..gens)
                                        .map(|i| Generation {
                                            uid: format!("g{i}"),
                                            name: format!("p{i}"),
                                            active: active == Some(i),
                                            host_network,
                                        })
                                        .collect();
                                    let state = Checkpoints {
                                        generations,
                                        handoff_started: handoff,
                                        handoff_attempts: 0,
                                        next_handoff,
                                        unwanted_since,
                                        copy_stopped_since,
                                    };
                                    let one = |ready_since| {
                                        LocalView::Known(vec![Local {
                                            uid: "r".into(),
                                            ready_since,
                                        }])
                                    };
                                    let local = match replacement {
                                        0 => LocalView::Known(vec![]),
                                        1 => one(None),
                                        2 => one(ago(10)),
                                        3 => one(ago(1_000)),
                                        4 => LocalView::Unknown { seen_since_boot: false },
                                        _ => LocalView::Unknown { seen_since_boot: true },
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
                                        is_self,
                                        decommissioned: decommission > 0,
                                        others_left: decommission == 2,
                                        paused: false,
                                        copy_runs,
                                    };
                                    check(&cfg, now, &state, &obs, replacement, parent == ago(100));
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(cases > 100_000, "{cases}");
    }

    #[allow(clippy::type_complexity)]
    fn itertools_product() -> Vec<(bool, Option<bool>, Option<Duration>, usize, Option<usize>, bool)> {
        let now = Duration::from_secs(10_000);
        let ago = |s: u64| Some(now - Duration::from_secs(s));
        let mut out = Vec::new();
        for api in [false, true] {
            for wants in [None, Some(true), Some(false)] {
                for unwanted_since in [None, ago(10), ago(1_000)] {
                    for gens in 0..=2usize {
                        for active in [None, Some(0usize), Some(1)] {
                            for host_network in [false, true] {
                                out.push((api, wants, unwanted_since, gens, active, host_network));
                            }
                        }
                    }
                }
            }
        }
        out
    }

    fn check(
        cfg: &Config,
        now: Duration,
        state: &Checkpoints,
        obs: &Observation,
        replacement: u8,
        proven_parent: bool,
    ) {
        let (next, actions) = decide(state, obs, cfg);
        let context = format!("{state:?} / {obs:?} -> {actions:?}");
        let api = obs.api_reachable;
        let known = replacement < 4;
        // A hostNetwork replacement's Ready counts only once no copy has run for the ready
        // window (a running copy answers its probe).
        let host_network = state.generations.last().is_some_and(|g| g.host_network);
        let own_ready = !host_network || (obs.copy_runs != Some(true) && state.copy_stopped_since.is_some());
        let ready = own_ready
            && (if host_network {
                replacement == 3
            } else {
                (2..4).contains(&replacement)
            });
        let stable = own_ready && replacement == 3;
        let was_active = |name: &str| state.generations.iter().any(|g| g.name == name && g.active);
        let newest = state.generations.last().map(|g| g.name.clone());
        for a in &actions {
            if let Action::Retire { name } = a {
                if obs.decommissioned {
                    if obs.is_self {
                        assert!(!obs.others_left, "retired itself before the rest: {context}");
                    } else {
                        let in_handoff = state.handoff_started.is_some() && newest.as_deref() == Some(name);
                        let running_copy = was_active(name) || in_handoff;
                        assert!(
                            !running_copy || ready || (api && obs.owner_wants_node == Some(false)),
                            "retired the running copy with nothing to take over: {context}"
                        );
                    }
                    continue;
                }
                assert!(api, "retired with the API unreachable: {context}");
                assert!(
                    !obs.is_self || !next.generations.is_empty(),
                    "retired its own last checkpoint outside a decommission: {context}"
                );
                let confirmed = obs.owner_wants_node == Some(false)
                    && state.unwanted_since.is_some_and(|t| now - t >= cfg.retire_grace);
                assert!(stable || confirmed, "retired without proof: {context}");
            }
        }
        if actions.iter().any(|a| matches!(a, Action::Checkpoint { .. })) {
            assert!(
                api && proven_parent && !obs.decommissioned,
                "checkpointed an unproven parent: {context}"
            );
        }
        let any_active = next.generations.iter().any(|g| g.active);
        if !known {
            // Nothing is known about what runs: never step aside.
            let was = state.generations.iter().any(|g| g.active);
            assert!(
                !was || any_active || next.generations.is_empty(),
                "stepped aside blind: {context}"
            );
            assert!(
                !actions.iter().any(|a| matches!(a, Action::Deactivate { name } if !next.generations.iter().any(|g| g.active && &g.name != name) && next.generations.iter().any(|g| &g.name == name))),
                "deactivated with no view of the node: {context}"
            );
        }
        let blind_but_seen = replacement == 5;
        let exempt = ready || blind_but_seen || (obs.decommissioned && obs.is_self);
        if !next.generations.is_empty() && !exempt {
            let in_handoff = next.handoff_started.is_some_and(|t| now - t < cfg.handoff_timeout);
            assert!(any_active || in_handoff, "node left bare: {context}");
        }
        if obs.is_self && !next.generations.is_empty() {
            assert!(
                next.generations.last().unwrap().active,
                "own checkpoint not active: {context}"
            );
        }
        if ready && !obs.is_self {
            assert!(!any_active, "a checkpoint active beside a Ready replacement: {context}");
        }
        assert!(next.generations.iter().filter(|g| g.active).count() <= 1, "{context}");
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
        /// The kubelet could not be asked.
        blind: bool,
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
            proptest::bool::weighted(0.2),
        )
            .prop_map(|(dt, api, parent, local, wants, host_network, blind)| Step {
                dt,
                api,
                parent,
                local,
                blind,
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
            let mut state = Checkpoints::default();
            let mut now = 0u64;
            let mut ready_since: std::collections::BTreeMap<String, u64> = Default::default();
            let mut seen = false;
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
                // Seen since boot: every sequence starts at a boot.
                seen |= !st.blind && !local.is_empty();
                let view = if st.blind { LocalView::Unknown { seen_since_boot: seen } } else { LocalView::Known(local.clone()) };
                let obs = Observation { now: Duration::from_secs(now), api_reachable: st.api, parents, local: view, owner_wants_node: if st.api { st.wants } else { None }, is_self: false, decommissioned: false, others_left: false, paused: false, copy_runs: None };
                let (next, actions) = decide(&state, &obs, &cfg);
                for a in &actions {
                    if let Action::Retire { .. } = a {
                        prop_assert!(st.api, "removed while the API was unreachable: {actions:?}");
                        let stable = !st.blind && local.iter().filter_map(|l| l.ready_since).any(|t| Duration::from_secs(now) - t >= cfg.stable_window);
                        let unwanted = st.wants == Some(false) && state.unwanted_since.is_some_and(|t| Duration::from_secs(now) - t >= cfg.retire_grace);
                        prop_assert!(stable || unwanted, "retired without a stable replacement or a confirmed decommission: {actions:?}");
                    }
                }
                let replacement_ready = !st.blind && local.iter().any(|l| l.ready_since.is_some());
                let any_active = next.generations.iter().any(|g| g.active);
                if st.blind {
                    let retired = actions.iter().any(|a| matches!(a, Action::Retire { .. }));
                    prop_assert!(!state.generations.iter().any(|g| g.active) || any_active || retired, "stepped aside blind: {actions:?}");
                }
                let exempt = replacement_ready || (st.blind && seen);
                if !next.generations.is_empty() && !exempt {
                    let handoff_ok = next.handoff_started.is_some_and(|t| Duration::from_secs(now) - t <= cfg.handoff_timeout);
                    prop_assert!(any_active || handoff_ok, "neither a checkpoint nor a Ready replacement: {next:?} after {actions:?}");
                }
                prop_assert!(next.generations.iter().filter(|g| g.active).count() <= 1);
                state = next;
            }
        }
    }
}
