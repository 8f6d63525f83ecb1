//! This node's turn in its component's rollout (see [`crate::rollout`]), as `kube-anchor run`
//! keeps it: the turn held (if any) and the version waiting for one (if any). They coexist: a
//! node may hold the turn for a version still on trial while its inputs moved on to another
//! that waits (rolled back elsewhere, say). Pure: `step(state, event) -> (state, actions)`; the
//! daemon reads and writes the Lease and feeds the outcomes back as events.

use std::time::{Duration, Instant, SystemTime};

use crate::ledger::Ledger;
use crate::rollout::{self, silent_for};

/// How often a held Lease is renewed.
pub const TURN_RENEW: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    /// The version the turn is for (on trial here).
    pub version: String,
    /// When the Lease was last renewed.
    pub renewed: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub version: String,
    /// Why it waits (the `/readyz` reason).
    pub why: String,
}

/// The turn as this process holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Whether an earlier process on this node left it holding the turn is not known yet; the
    /// Lease is looked at again at every sync while no turn is held. `Some`: a turn taken
    /// meanwhile (that question waits until it is given back).
    Unrecovered(Option<Holding>),
    /// Not held.
    Free,
    Held(Holding),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub held: Held,
    pub waiting: Option<Waiting>,
}

impl Default for Turn {
    fn default() -> Self {
        Turn {
            held: Held::Unrecovered(None),
            waiting: None,
        }
    }
}

/// What asking the Lease for a turn gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No API to ask.
    NoLease,
    /// Not asked: the cluster cannot afford the restart the version makes
    /// ([`crate::membership::restart_margin`]), and why.
    NoMargin(String),
    /// The Lease `lease` answered (or could not be read: the error's text).
    Lease {
        lease: String,
        turn: Result<rollout::LeaseAnswer, String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEvent<'a> {
    /// A sync would write `version`; `needed`: replacing what the node runs needs the turn
    /// ([`rollout::needs_turn`], in a fleet with an API).
    Gate { version: &'a str, needed: bool },
    /// Recovery: the Lease is not held by this node.
    NotHeldHere,
    /// Recovery: the Lease is held by this node (an earlier process took it). `accepted`: the
    /// version this pod's inputs describe, if known.
    HeldHere {
        ledger: &'a Ledger,
        accepted: Option<&'a str>,
        now: Instant,
    },
    /// [`TurnAction::GiveBackEarlier`] was done.
    EarlierGivenBack,
    /// The answer to asking for the waiting version's turn.
    Asked {
        answer: Answer,
        now: Instant,
        wall: SystemTime,
    },
    /// After an evaluation: the ledger says how the held turn's version fares; `written`: the
    /// version written here; `runs`: the same when the evaluation found it running converged
    /// (Ready), else `None`; `lkg_failing`: the last-known-good version kept in place of a bad
    /// one fails too ([`crate::lifecycle::LkgCheck`]).
    Review {
        ledger: &'a Ledger,
        written: Option<&'a str>,
        runs: Option<&'a str>,
        lkg_failing: bool,
        now: Instant,
    },
    /// [`TurnAction::GiveBack`] was done.
    GivenBack,
    /// [`TurnAction::Renew`] was done.
    Renewed { now: Instant },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnAction {
    /// Log that `version` waits for this node's turn.
    AnnounceWaiting { version: String },
    /// Log that this node holds the turn for `version`, on trial, and keeps it.
    Resume { version: String },
    /// Give back a turn an earlier process held for nothing written here.
    GiveBackEarlier,
    /// Log that it is this node's turn to roll `version` out (the sync writes it now).
    Go { version: String, lease: String },
    /// Log why the waiting version waits (it changed).
    NotYet { why: String },
    /// Give the turn back (recording the input revision when `failed`).
    GiveBack { version: String, failed: bool },
    /// Give the turn back, failed, though the node does not run a good version: its
    /// last-known-good one fails too. Said loudly: the other nodes may go on, through the
    /// margin that counts this one.
    GiveUp { version: String },
    /// Renew the held Lease.
    Renew,
}

impl Turn {
    /// The turn held, taken up or not.
    pub fn holding(&self) -> Option<&Holding> {
        match &self.held {
            Held::Unrecovered(holding) => holding.as_ref(),
            Held::Free => None,
            Held::Held(holding) => Some(holding),
        }
    }

    /// Whether to ask the Lease whether an earlier process left the turn held here.
    pub fn needs_recovery(&self) -> bool {
        self.held == Held::Unrecovered(None)
    }

    pub fn step(self, event: TurnEvent<'_>) -> (Self, Vec<TurnAction>) {
        let Turn { held, waiting } = self;
        match event {
            TurnEvent::Gate { version, needed } => {
                let holds = matches!(&held, Held::Unrecovered(Some(h)) | Held::Held(h) if h.version == version);
                if !needed || holds {
                    return (Turn { held, waiting: None }, vec![]);
                }
                match waiting {
                    Some(w) if w.version == version => (Turn { held, waiting: Some(w) }, vec![]),
                    _ => {
                        let waiting = Waiting {
                            version: version.to_owned(),
                            why: format!("version {version} waits for this node's turn to roll it out"),
                        };
                        (
                            Turn {
                                held,
                                waiting: Some(waiting),
                            },
                            vec![TurnAction::AnnounceWaiting {
                                version: version.to_owned(),
                            }],
                        )
                    }
                }
            }
            TurnEvent::NotHeldHere if held == Held::Unrecovered(None) => (
                Turn {
                    held: Held::Free,
                    waiting,
                },
                vec![],
            ),
            TurnEvent::HeldHere { ledger, accepted, now } if held == Held::Unrecovered(None) => {
                // The inputs' version if it was rolled back here, or put back before the kubelet
                // started (still owed its trial here), else the one written.
                let rolled_back = accepted.filter(|h| ledger.bad_version(h).is_some());
                let put_back = accepted.filter(|h| ledger.interrupted_version(h).is_some());
                match rolled_back.or(put_back).or(ledger.content_hash.as_deref()) {
                    Some(version) => {
                        let on_trial = ledger.is_unjudged(version);
                        let actions = if on_trial {
                            vec![TurnAction::Resume {
                                version: version.to_owned(),
                            }]
                        } else {
                            vec![]
                        };
                        let holding = Holding {
                            version: version.to_owned(),
                            renewed: now,
                        };
                        (
                            Turn {
                                held: Held::Held(holding),
                                waiting,
                            },
                            actions,
                        )
                    }
                    // Nothing written here: nothing to keep the turn for.
                    None => (Turn { held, waiting }, vec![TurnAction::GiveBackEarlier]),
                }
            }
            TurnEvent::EarlierGivenBack if held == Held::Unrecovered(None) => (
                Turn {
                    held: Held::Free,
                    waiting,
                },
                vec![],
            ),
            TurnEvent::Asked { answer, now, wall } => {
                let Some(w) = waiting else {
                    return (Turn { held, waiting }, vec![]);
                };
                let why = match answer {
                    Answer::NoLease => {
                        "no API to take the rollout Lease from: keeping the version the node runs".to_owned()
                    }
                    Answer::NoMargin(why) => why,
                    Answer::Lease { lease, turn } => match turn {
                        Ok(rollout::LeaseAnswer::Take) => {
                            let holding = Holding {
                                version: w.version.clone(),
                                renewed: now,
                            };
                            let held = match held {
                                Held::Unrecovered(_) => Held::Unrecovered(Some(holding)),
                                Held::Free | Held::Held(_) => Held::Held(holding),
                            };
                            return (
                                Turn { held, waiting: None },
                                vec![TurnAction::Go {
                                    version: w.version,
                                    lease,
                                }],
                            );
                        }
                        Ok(rollout::LeaseAnswer::Held {
                            by,
                            rolling_out,
                            renewed,
                        }) => {
                            match renewed.and_then(|r| silent_for(r, wall)) {
                                None if rolling_out.is_empty() => {
                                    format!("waiting for its turn: {by} holds the rollout turn (Lease {lease})")
                                }
                                None => format!(
                                    "waiting for its turn: {by} is rolling out {} (Lease {lease})",
                                    rolling_out.join(" and ")
                                ),
                                Some(quiet) => format!(
                                    "waiting for its turn: {by} holds the Lease {lease} but has not renewed it for {}; it keeps the turn until it gives it back or its Node is deleted (if {by} is gone for good: kubectl delete lease {lease})",
                                    // Whole minutes: the reason (and its log line) changes once a minute, not at every ask.
                                    humantime::format_duration(Duration::from_secs(quiet.as_secs() / 60 * 60)),
                                ),
                            }
                        }
                        Ok(rollout::LeaseAnswer::FailedElsewhere { node }) => format!(
                            "this input revision was rolled back on {node} (Lease {lease}); not trying it here until it runs on {node} (fix the values and helm upgrade, or kube-anchor retry on {node})"
                        ),
                        Err(e) => format!("cannot read the rollout Lease {lease}: {e}"),
                    },
                };
                let why = format!("version {} waits: {why}", w.version);
                let actions = if w.why != why {
                    vec![TurnAction::NotYet { why: why.clone() }]
                } else {
                    vec![]
                };
                (
                    Turn {
                        held,
                        waiting: Some(Waiting {
                            version: w.version,
                            why,
                        }),
                    },
                    actions,
                )
            }
            TurnEvent::Review {
                ledger,
                written,
                runs,
                lkg_failing,
                now,
            } => {
                let actions = match &held {
                    Held::Unrecovered(Some(h)) | Held::Held(h) => {
                        let failed = ledger.bad_version(&h.version).is_some();
                        let last_known_good = ledger.last_known_good.as_deref();
                        // Given back once the node runs a known-good version, not once the
                        // ledger names one: a return to last-known-good (inputs reverted, the
                        // turn's version abandoned for it, or rolled back after a failed trial)
                        // restarts the component as an upgrade does, and the next node must not
                        // restart its own meanwhile (two etcd members down at once is a quorum
                        // lost). A version promoted by its trial runs converged by then.
                        let settled = runs.is_some() && runs == last_known_good;
                        // After a failure with nothing good written (no last-known-good, or
                        // its snapshot unreadable) there is no return to wait for.
                        let returning = written.is_some() && written == last_known_good;
                        if settled || (failed && !returning) {
                            vec![TurnAction::GiveBack {
                                version: h.version.clone(),
                                failed,
                            }]
                        } else if failed && lkg_failing {
                            vec![TurnAction::GiveUp {
                                version: h.version.clone(),
                            }]
                        } else if now.saturating_duration_since(h.renewed) >= TURN_RENEW {
                            vec![TurnAction::Renew]
                        } else {
                            vec![]
                        }
                    }
                    _ => vec![],
                };
                (Turn { held, waiting }, actions)
            }
            TurnEvent::GivenBack => {
                let held = match held {
                    Held::Unrecovered(_) => Held::Unrecovered(None),
                    Held::Free | Held::Held(_) => Held::Free,
                };
                (Turn { held, waiting }, vec![])
            }
            TurnEvent::Renewed { now } => {
                let held = match held {
                    Held::Unrecovered(Some(h)) => Held::Unrecovered(Some(Holding { renewed: now, ..h })),
                    Held::Held(h) => Held::Held(Holding { renewed: now, ..h }),
                    other => other,
                };
                (Turn { held, waiting }, vec![])
            }
            // Recovery is over (or waits for a turn held now): nothing to recover.
            TurnEvent::NotHeldHere | TurnEvent::HeldHere { .. } | TurnEvent::EarlierGivenBack => {
                (Turn { held, waiting }, vec![])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::BadVersion;

    const LEASE: &str = "kube-anchor-kube-apiserver";

    fn ledger(content_hash: Option<&str>, last_known_good: Option<&str>, bad: &[&str]) -> Ledger {
        let mut ledger = Ledger::new("kube-apiserver");
        ledger.content_hash = content_hash.map(str::to_owned);
        ledger.last_known_good = last_known_good.map(str::to_owned);
        ledger.bad = bad
            .iter()
            .map(|h| BadVersion {
                hash: (*h).into(),
                at: "2025-01-01T00:00:00Z".into(),
                reason: "crash loop".into(),
            })
            .collect();
        ledger
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn turn_transitions() {
        use TurnAction::*;
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let holding = |version: &str, renewed: u64| Holding {
            version: version.into(),
            renewed: at(renewed),
        };
        let waiting = |version: &str, why: &str| {
            Some(Waiting {
                version: version.into(),
                why: why.into(),
            })
        };
        let first_why = |version: &str| format!("version {version} waits for this node's turn to roll it out");
        let turn = |held: Held, waiting: Option<Waiting>| Turn { held, waiting };
        let free = || turn(Held::Free, None);
        let unrecovered = || turn(Held::Unrecovered(None), None);
        let held = |version: &str, renewed: u64| turn(Held::Held(holding(version, renewed)), None);
        let gate = |version: &'static str, needed| TurnEvent::Gate { version, needed };
        let asked = |answer| TurnEvent::Asked {
            answer,
            now: at(3),
            wall,
        };
        let lease = |turn| Answer::Lease {
            lease: LEASE.into(),
            turn,
        };
        let go = |version: &str| Go {
            version: version.into(),
            lease: LEASE.into(),
        };
        let not_yet = |why: &str| NotYet {
            why: format!("version B waits: {why}"),
        };
        let held_by = |renewed: Option<u64>| {
            Ok(rollout::LeaseAnswer::Held {
                by: "cp-2".into(),
                rolling_out: vec!["kube-apiserver".into()],
                renewed: renewed.map(|ago| wall - Duration::from_secs(ago)),
            })
        };
        let no_api = "no API to take the rollout Lease from: keeping the version the node runs";
        let rolling = format!("waiting for its turn: cp-2 is rolling out kube-apiserver (Lease {LEASE})");
        let silent = format!(
            "waiting for its turn: cp-2 holds the Lease {LEASE} but has not renewed it for 2m; it keeps the turn until it gives it back or its Node is deleted (if cp-2 is gone for good: kubectl delete lease {LEASE})"
        );
        let elsewhere = format!(
            "this input revision was rolled back on cp-3 (Lease {LEASE}); not trying it here until it runs on cp-3 (fix the values and helm upgrade, or kube-anchor retry on cp-3)"
        );
        let unreadable = format!("cannot read the rollout Lease {LEASE}: connection refused");
        let on_trial = ledger(Some("B"), Some("A"), &[]);
        let promoted = ledger(Some("B"), Some("B"), &[]);
        let rolled_back = ledger(Some("A"), Some("A"), &["B"]);
        let fresh = ledger(None, None, &[]);
        let failed_first = ledger(Some("B"), None, &["B"]);
        let mut put_back = ledger(Some("A"), Some("A"), &[]);
        put_back.interrupted = Some(crate::ledger::Interrupted {
            hash: "B".into(),
            at: "2025-01-01T00:00:00Z".into(),
            reason: "on trial when the kubelet started".into(),
            boots: 1,
        });
        let held_here = |ledger, accepted| TurnEvent::HeldHere {
            ledger,
            accepted,
            now: at(1),
        };
        let review = |ledger, now| TurnEvent::Review {
            ledger,
            written: ledger.content_hash.as_deref(),
            runs: ledger.content_hash.as_deref(),
            lkg_failing: false,
            now: at(now),
        };
        // The node wrote its last-known-good version and does not run it yet.
        let restarting = |ledger, now| TurnEvent::Review {
            ledger,
            written: ledger.content_hash.as_deref(),
            runs: None,
            lkg_failing: false,
            now: at(now),
        };
        let back_to_good = ledger(Some("A"), Some("A"), &[]);
        let table: Vec<(&str, Turn, TurnEvent, Turn, Vec<TurnAction>)> = vec![
            // A sync gates the version it would write.
            ("no turn needed", unrecovered(), gate("B", false), unrecovered(), vec![]),
            (
                "no longer needed",
                turn(Held::Free, waiting("B", "w")),
                gate("C", false),
                free(),
                vec![],
            ),
            (
                "needed",
                free(),
                gate("B", true),
                turn(Held::Free, waiting("B", &first_why("B"))),
                vec![AnnounceWaiting { version: "B".into() }],
            ),
            (
                "still waiting: the reason stays",
                turn(Held::Free, waiting("B", "w")),
                gate("B", true),
                turn(Held::Free, waiting("B", "w")),
                vec![],
            ),
            (
                "another version waits",
                turn(Held::Free, waiting("B", "w")),
                gate("C", true),
                turn(Held::Free, waiting("C", &first_why("C"))),
                vec![AnnounceWaiting { version: "C".into() }],
            ),
            ("held for it", held("B", 0), gate("B", true), held("B", 0), vec![]),
            (
                "held for it before recovery",
                turn(Held::Unrecovered(Some(holding("B", 0))), waiting("B", "w")),
                gate("B", true),
                turn(Held::Unrecovered(Some(holding("B", 0))), None),
                vec![],
            ),
            (
                "held for another: waits",
                held("B", 0),
                gate("C", true),
                turn(Held::Held(holding("B", 0)), waiting("C", &first_why("C"))),
                vec![AnnounceWaiting { version: "C".into() }],
            ),
            // Recovery of a turn an earlier process held.
            (
                "not held here",
                turn(Held::Unrecovered(None), waiting("B", "w")),
                TurnEvent::NotHeldHere,
                turn(Held::Free, waiting("B", "w")),
                vec![],
            ),
            (
                "held here for the version on trial",
                unrecovered(),
                held_here(&on_trial, Some("B")),
                turn(Held::Held(holding("B", 1)), None),
                vec![Resume { version: "B".into() }],
            ),
            (
                "held here for a promoted version: given back quietly later",
                unrecovered(),
                held_here(&promoted, None),
                turn(Held::Held(holding("B", 1)), None),
                vec![],
            ),
            (
                "held here for the inputs' version rolled back",
                unrecovered(),
                held_here(&rolled_back, Some("B")),
                turn(Held::Held(holding("B", 1)), None),
                vec![],
            ),
            (
                "held here for the inputs' version put back before the kubelet started: still on trial",
                unrecovered(),
                held_here(&put_back, Some("B")),
                turn(Held::Held(holding("B", 1)), None),
                vec![Resume { version: "B".into() }],
            ),
            (
                "held here for nothing written",
                unrecovered(),
                held_here(&fresh, None),
                unrecovered(),
                vec![GiveBackEarlier],
            ),
            ("given back", unrecovered(), TurnEvent::EarlierGivenBack, free(), vec![]),
            ("recovered already", free(), held_here(&on_trial, None), free(), vec![]),
            (
                "recovered already: not held",
                held("B", 0),
                TurnEvent::NotHeldHere,
                held("B", 0),
                vec![],
            ),
            (
                "recovery waits while a turn is held",
                turn(Held::Unrecovered(Some(holding("C", 0))), None),
                held_here(&on_trial, None),
                turn(Held::Unrecovered(Some(holding("C", 0))), None),
                vec![],
            ),
            // Asking for the waiting version's turn.
            ("nothing waits", free(), asked(Answer::NoLease), free(), vec![]),
            (
                "taken",
                turn(Held::Free, waiting("B", "w")),
                asked(lease(Ok(rollout::LeaseAnswer::Take))),
                turn(Held::Held(holding("B", 3)), None),
                vec![go("B")],
            ),
            (
                "taken before recovery",
                turn(Held::Unrecovered(None), waiting("B", "w")),
                asked(lease(Ok(rollout::LeaseAnswer::Take))),
                turn(Held::Unrecovered(Some(holding("B", 3))), None),
                vec![go("B")],
            ),
            (
                "taken over the turn for the previous version",
                turn(Held::Held(holding("A", 0)), waiting("B", "w")),
                asked(lease(Ok(rollout::LeaseAnswer::Take))),
                turn(Held::Held(holding("B", 3)), None),
                vec![go("B")],
            ),
            (
                "no API",
                turn(Held::Free, waiting("B", "w")),
                asked(Answer::NoLease),
                turn(Held::Free, waiting("B", &format!("version B waits: {no_api}"))),
                vec![not_yet(no_api)],
            ),
            (
                "same reason: logged once",
                turn(Held::Free, waiting("B", &format!("version B waits: {no_api}"))),
                asked(Answer::NoLease),
                turn(Held::Free, waiting("B", &format!("version B waits: {no_api}"))),
                vec![],
            ),
            (
                "another node rolls out",
                turn(Held::Free, waiting("B", "w")),
                asked(lease(held_by(Some(10)))),
                turn(Held::Free, waiting("B", &format!("version B waits: {rolling}"))),
                vec![not_yet(&rolling)],
            ),
            (
                "it never renewed",
                turn(Held::Free, waiting("B", "w")),
                asked(lease(held_by(None))),
                turn(Held::Free, waiting("B", &format!("version B waits: {rolling}"))),
                vec![not_yet(&rolling)],
            ),
            (
                "it fell silent",
                turn(Held::Free, waiting("B", "w")),
                asked(lease(held_by(Some(150)))),
                turn(Held::Free, waiting("B", &format!("version B waits: {silent}"))),
                vec![not_yet(&silent)],
            ),
            (
                "rolled back elsewhere",
                turn(Held::Held(holding("A", 0)), waiting("B", "w")),
                asked(lease(Ok(rollout::LeaseAnswer::FailedElsewhere { node: "cp-3".into() }))),
                turn(
                    Held::Held(holding("A", 0)),
                    waiting("B", &format!("version B waits: {elsewhere}")),
                ),
                vec![not_yet(&elsewhere)],
            ),
            (
                "Lease unreadable",
                turn(Held::Free, waiting("B", "w")),
                asked(lease(Err("connection refused".into()))),
                turn(Held::Free, waiting("B", &format!("version B waits: {unreadable}"))),
                vec![not_yet(&unreadable)],
            ),
            // After an evaluation: keep the turn or give it back.
            (
                "nothing held",
                turn(Held::Free, waiting("B", "w")),
                review(&promoted, 30),
                turn(Held::Free, waiting("B", "w")),
                vec![],
            ),
            (
                "promoted: given back",
                held("B", 0),
                review(&promoted, 1),
                held("B", 0),
                vec![GiveBack {
                    version: "B".into(),
                    failed: false,
                }],
            ),
            (
                "rolled back: given back, failed",
                held("B", 0),
                review(&rolled_back, 1),
                held("B", 0),
                vec![GiveBack {
                    version: "B".into(),
                    failed: true,
                }],
            ),
            // Seed 50 of the lifecycle run: an etcd member on trial with B was cut off, its
            // inputs went back to A (last-known-good), and the new process took up the turn for
            // what it had written. Given back at once, the next node restarted its member while
            // this one still started: no quorum.
            (
                "back to last-known-good, not running it yet: kept",
                held("A", 0),
                restarting(&back_to_good, 5),
                held("A", 0),
                vec![],
            ),
            (
                "back to last-known-good, not running it yet: renewed",
                held("A", 0),
                restarting(&back_to_good, 10),
                held("A", 0),
                vec![Renew],
            ),
            (
                "back to last-known-good, running it: given back",
                held("A", 0),
                review(&back_to_good, 5),
                held("A", 0),
                vec![GiveBack {
                    version: "A".into(),
                    failed: false,
                }],
            ),
            (
                "the turn's version abandoned for last-known-good, not running yet: kept",
                held("B", 0),
                restarting(&back_to_good, 5),
                held("B", 0),
                vec![],
            ),
            (
                "the turn's version abandoned for last-known-good, running it: given back",
                held("B", 0),
                review(&back_to_good, 5),
                held("B", 0),
                vec![GiveBack {
                    version: "B".into(),
                    failed: false,
                }],
            ),
            // The return to last-known-good after a failed trial restarts the component: the
            // turn is kept through it, so no other node restarts its own beside it.
            (
                "rolled back, last-known-good not running yet: kept",
                held("B", 0),
                restarting(&rolled_back, 1),
                held("B", 0),
                vec![],
            ),
            (
                "rolled back, last-known-good not running yet: renewed",
                held("B", 0),
                restarting(&rolled_back, 10),
                held("B", 0),
                vec![Renew],
            ),
            (
                "rolled back, last-known-good fails too: given up, loudly",
                held("B", 0),
                TurnEvent::Review {
                    ledger: &rolled_back,
                    written: Some("A"),
                    runs: None,
                    lkg_failing: true,
                    now: at(1),
                },
                held("B", 0),
                vec![GiveUp { version: "B".into() }],
            ),
            (
                "failed with no last-known-good to go back to: given back, failed",
                held("B", 0),
                restarting(&failed_first, 1),
                held("B", 0),
                vec![GiveBack {
                    version: "B".into(),
                    failed: true,
                }],
            ),
            (
                "on trial, renewed lately",
                held("B", 0),
                review(&on_trial, 9),
                held("B", 0),
                vec![],
            ),
            (
                "on trial, renewal due",
                held("B", 0),
                review(&on_trial, 10),
                held("B", 0),
                vec![Renew],
            ),
            (
                "taken before recovery, renewal due",
                turn(Held::Unrecovered(Some(holding("B", 0))), None),
                review(&on_trial, 10),
                turn(Held::Unrecovered(Some(holding("B", 0))), None),
                vec![Renew],
            ),
            (
                "gave it back",
                turn(Held::Held(holding("B", 0)), waiting("C", "w")),
                TurnEvent::GivenBack,
                turn(Held::Free, waiting("C", "w")),
                vec![],
            ),
            (
                "gave it back before recovery: recovery resumes",
                turn(Held::Unrecovered(Some(holding("B", 0))), None),
                TurnEvent::GivenBack,
                unrecovered(),
                vec![],
            ),
            (
                "renewed",
                held("B", 0),
                TurnEvent::Renewed { now: at(12) },
                held("B", 12),
                vec![],
            ),
            (
                "renewed before recovery",
                turn(Held::Unrecovered(Some(holding("B", 0))), None),
                TurnEvent::Renewed { now: at(12) },
                turn(Held::Unrecovered(Some(holding("B", 12))), None),
                vec![],
            ),
            (
                "renewed, nothing held",
                free(),
                TurnEvent::Renewed { now: at(12) },
                free(),
                vec![],
            ),
        ];
        for (name, state, event, want_state, want_actions) in table {
            assert_eq!(state.step(event), (want_state, want_actions), "{name}");
        }
    }
}
