//! The anchor of one component on one node (`kube-anchor run`) as one pure machine: the version
//! written and its trial ([`Version`]), the judgement of a last-known-good version kept in place of
//! a bad one ([`LkgCheck`]) and the rollout turn ([`Turn`]), composed in the order a sync and an
//! evaluation take them.
//!
//! `step(input) -> effects`: an input is what an executor observed (the inputs' version and the
//! node's ledger at a sync, the Lease's answer, what the node shows of the version written at an
//! evaluation, an effect's outcome); an effect is what it must do (write a version, ask for or give
//! back the turn, record a promotion or a rollback, say why it is not Ready). No field is a handle
//! and nothing reads a clock: the fleet simulator (`kube-anchor-sim`) runs this machine in a
//! modelled control plane, node by node.

use std::time::{Duration, Instant, SystemTime};

use crate::ledger::Ledger;
use crate::lifecycle::{LkgAction, LkgCheck, LkgEvaluated, Version, VersionAction, VersionEvent};
use crate::rollout;
use crate::trial::{Assessment, VersionView, assess};
use crate::turn::{Answer, Turn, TurnAction, TurnEvent};

/// What does not change while the anchor runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub component: String,
    pub trial_period: Duration,
    pub crash_loop_threshold: u32,
    /// An anchor pod with an API: replacing what the node runs waits for the rollout turn.
    pub in_fleet: bool,
}

/// The anchor's state between steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub settings: Settings,
    pub turn: Turn,
    pub version: Version,
    pub lkg: LkgCheck,
    /// The version this process last accepted from its inputs.
    pub accepted: Option<String>,
    /// The version written on the node (what is judged).
    pub written: Option<String>,
    /// The last evaluation found `written` converged.
    pub converged: bool,
    /// Why the last sync wrote nothing (a refusal), for `/readyz`.
    pub refused: Option<String>,
}

/// What a sync pass sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncFacts<'a> {
    /// The version the inputs name (`None`: no inputs this pod may apply).
    pub desired: Option<&'a str>,
    /// The credentials check of `desired`, refused with its message.
    pub desired_refused: Option<String>,
    pub ledger: &'a Ledger,
    /// A static pod kube-anchor did not write sits where the manifest goes.
    pub unrecorded_manifest: bool,
    pub now: Duration,
}

/// What an evaluation sees of the version written. `view.runtime_restarts` is filled in here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvaluateFacts<'a> {
    pub view: VersionView,
    pub ledger: &'a Ledger,
    /// The API answered the anchor's last call (a held turn is reviewed only then).
    pub api_answers: bool,
    pub now: Duration,
    pub instant: Instant,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input<'a> {
    Sync(SyncFacts<'a>),
    /// The rollout Lease's answer to asking for the waiting version's turn.
    Asked {
        answer: Answer,
        instant: Instant,
        wall: SystemTime,
    },
    Evaluate(EvaluateFacts<'a>),
    /// [`Effect::RollBack`] was done: `to` is written in place of the failed version.
    RolledBack {
        to: String,
        note: String,
    },
    /// The answer to [`Effect::RecoverTurn`]: whether the Lease names this node as its holder.
    Recovered {
        held_here: bool,
        ledger: &'a Ledger,
        instant: Instant,
    },
    /// [`Effect::GiveBackEarlierTurn`] was done.
    EarlierGivenBack,
    /// [`Effect::GiveBackTurn`] was done.
    GivenBack,
    /// [`Effect::RenewTurn`] was done.
    Renewed {
        instant: Instant,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Write `version`'s files (or repair them).
    Write {
        version: String,
    },
    /// Ask the Lease for the turn of the waiting `version`; the answer comes back as
    /// [`Input::Asked`].
    AskTurn {
        version: String,
    },
    /// Sync again now (the turn was given).
    Resync,
    /// Record `version` as last-known-good.
    Promote {
        version: String,
    },
    /// Record `failed` as bad and write `to` (last-known-good); then [`Input::RolledBack`].
    RollBack {
        failed: String,
        to: String,
        reason: String,
    },
    /// Ask the Lease whether an earlier process on this node left it holding the turn; the
    /// answer comes back as [`Input::Recovered`].
    RecoverTurn,
    /// Give back a turn an earlier process held for nothing written here.
    GiveBackEarlierTurn,
    /// Give the turn back (recording the input revision as failed when `failed`).
    GiveBackTurn {
        version: String,
        failed: bool,
    },
    RenewTurn,
    /// Record the last-known-good version's failure (`None`: clear it).
    RecordLkgFailing {
        note: Option<String>,
    },
    /// An Event for operators.
    Event {
        warning: bool,
        reason: &'static str,
        note: String,
    },
    /// `/readyz`.
    Ready {
        ready: bool,
        reason: String,
    },
}

impl Anchor {
    pub fn new(settings: Settings) -> Self {
        Anchor {
            settings,
            turn: Turn::default(),
            version: Version::default(),
            lkg: LkgCheck::default(),
            accepted: None,
            written: None,
            converged: false,
            refused: None,
        }
    }

    /// The turn is asked for again while a version waits.
    pub fn waiting(&self) -> Option<&str> {
        self.turn.waiting.as_ref().map(|w| w.version.as_str())
    }

    /// Evaluated every trial tick while a version is on trial or not converged, or a turn is held.
    pub fn busy(&self) -> bool {
        self.version.trial().is_some() || (!self.converged && self.written.is_some()) || self.turn.holding().is_some()
    }

    pub fn step(&mut self, input: Input<'_>) -> Vec<Effect> {
        match input {
            Input::Sync(facts) => self.sync(facts),
            Input::Asked { answer, instant, wall } => {
                let component = self.settings.component.clone();
                let actions = self.step_turn(TurnEvent::Asked {
                    answer,
                    component: &component,
                    now: instant,
                    wall,
                });
                actions
                    .into_iter()
                    .filter_map(|a| match a {
                        // The turn is this node's: the sync that follows writes the version.
                        TurnAction::Go { .. } => Some(Effect::Resync),
                        _ => None,
                    })
                    .collect()
            }
            Input::Evaluate(facts) => self.evaluate(facts),
            Input::RolledBack { to, note } => {
                self.step_version(VersionEvent::RolledBack { note });
                self.written = Some(to);
                vec![]
            }
            Input::Recovered {
                held_here,
                ledger,
                instant,
            } => {
                let accepted = self.accepted.clone();
                let event = if held_here {
                    TurnEvent::HeldHere {
                        ledger,
                        accepted: accepted.as_deref(),
                        now: instant,
                    }
                } else {
                    TurnEvent::NotHeldHere
                };
                self.step_turn(event)
                    .into_iter()
                    .filter_map(|a| (a == TurnAction::GiveBackEarlier).then_some(Effect::GiveBackEarlierTurn))
                    .collect()
            }
            Input::EarlierGivenBack => {
                self.step_turn(TurnEvent::EarlierGivenBack);
                vec![]
            }
            Input::GivenBack => {
                self.step_turn(TurnEvent::GivenBack);
                vec![]
            }
            Input::Renewed { instant } => {
                self.step_turn(TurnEvent::Renewed { now: instant });
                vec![]
            }
        }
    }

    fn sync(&mut self, f: SyncFacts<'_>) -> Vec<Effect> {
        let desired = match f.desired {
            Some(d) => {
                self.accepted = Some(d.to_owned());
                d.to_owned()
            }
            // Keep what this process accepted (drift is still repaired); after a restart only the
            // last-known-good version is at hand, and only if it is what the node runs.
            None => match (&self.accepted, &f.ledger.last_known_good) {
                (Some(a), _) => a.clone(),
                (None, Some(lkg)) if f.ledger.content_hash.as_ref() == Some(lkg) => lkg.clone(),
                _ => return vec![],
            },
        };
        let (target, held_back) = match (f.ledger.bad_version(&desired), &f.ledger.last_known_good) {
            (Some(bad), Some(lkg)) => (
                lkg.clone(),
                Some(format!(
                    "the inputs are version {} which failed its trial at {} ({}); keeping last-known-good {lkg}",
                    bad.hash, bad.at, bad.reason
                )),
            ),
            _ => (desired.clone(), None),
        };
        // A refused version takes no turn and goes no further.
        if held_back.is_none()
            && let Some(refused) = f.desired_refused.filter(|_| f.desired == Some(target.as_str()))
        {
            self.refused = Some(format!("credentials refused, nothing written: {refused}"));
            return vec![];
        }
        self.refused = None;
        let on_node = f
            .ledger
            .content_hash
            .clone()
            .or_else(|| f.unrecorded_manifest.then(|| "an unrecorded manifest".to_owned()));
        let needed = self.settings.in_fleet
            && rollout::needs_turn(on_node.as_deref(), &target, f.ledger.last_known_good.as_deref());
        self.step_turn(TurnEvent::Gate {
            version: &target,
            needed,
        });
        // As the daemon does after every pass: an earlier process may have left the turn held.
        let recover = (self.settings.in_fleet && self.turn.needs_recovery()).then_some(Effect::RecoverTurn);
        if let Some(w) = &self.turn.waiting {
            let ask = Effect::AskTurn {
                version: w.version.clone(),
            };
            return recover.into_iter().chain([ask]).collect();
        }
        self.step_version(VersionEvent::Written {
            hash: &target,
            last_known_good: f.ledger.last_known_good.as_deref() == Some(target.as_str()),
            held_back,
            now: f.now,
        });
        self.written = Some(target.clone());
        [Effect::Write { version: target }].into_iter().chain(recover).collect()
    }

    fn evaluate(&mut self, f: EvaluateFacts<'_>) -> Vec<Effect> {
        let Some(written) = self.written.clone() else {
            let reason = self
                .refused
                .clone()
                .or_else(|| self.turn.waiting.as_ref().map(|w| w.why.clone()))
                .unwrap_or_else(|| "nothing written yet".into());
            return vec![Effect::Ready { ready: false, reason }];
        };
        let mut view = f.view;
        // Restarts are a trial's evidence, and only those it saw.
        match self.version.trial_mut().or(self.lkg.check_mut()) {
            Some(trial) => {
                trial.restarts_in_trial(&mut view.mirror);
                view.runtime_restarts = trial.runtime_restarts(view.runtime.as_ref());
            }
            None => {
                if let Some(mirror) = view.mirror.as_mut() {
                    mirror.forget_restarts();
                }
            }
        }
        let assessment = assess(&view, &written, self.settings.crash_loop_threshold);
        let mut effects = Vec::new();
        let actions = self.step_version(VersionEvent::Assessed {
            assessment: &assessment,
            now: f.now,
            period: self.settings.trial_period,
        });
        let mut rolled_back = false;
        for action in actions {
            match action {
                VersionAction::Promote => {
                    effects.push(Effect::Promote {
                        version: written.clone(),
                    });
                    effects.push(Effect::Event {
                        warning: false,
                        reason: "Promoted",
                        note: format!("{written} is now last-known-good"),
                    });
                }
                VersionAction::RollBack { reason } => match &f.ledger.last_known_good {
                    Some(lkg) if *lkg != written => {
                        effects.push(Effect::RollBack {
                            failed: written.clone(),
                            to: lkg.clone(),
                            reason,
                        });
                        rolled_back = true;
                    }
                    // The first version on a node is never rolled back to nothing.
                    _ => {
                        self.step_version(VersionEvent::NoLastKnownGood { now: f.now });
                    }
                },
                VersionAction::AnnounceTrial { .. } => {}
            }
        }
        // What was assessed is the version rolled back, not the last-known-good one written in
        // its place: that one is judged from the next evaluation on.
        if !rolled_back {
            let (lkg, actions) = std::mem::take(&mut self.lkg).step(LkgEvaluated {
                held_back: self.version.held_back().is_some(),
                hash: &written,
                assessment: &assessment,
                now: f.now,
                period: self.settings.trial_period,
            });
            self.lkg = lkg;
            for action in actions {
                match action {
                    LkgAction::Report { note } => effects.push(Effect::Event {
                        warning: true,
                        reason: "LastKnownGoodFailing",
                        note,
                    }),
                    LkgAction::Record { failing, .. } => effects.push(Effect::RecordLkgFailing {
                        note: failing.map(|f| f.note),
                    }),
                    LkgAction::ConvergedAgain => {}
                }
            }
        }
        self.converged = assessment == Assessment::Converged;
        let held_back = match (self.version.held_back(), self.lkg.failing()) {
            (Some(h), Some(failing)) => Some(format!("{failing}; {h}")),
            (h, _) => h.map(str::to_owned),
        };
        let reason = self
            .refused
            .clone()
            .or_else(|| self.turn.waiting.as_ref().map(|w| w.why.clone()))
            .or(held_back)
            .or_else(|| assessment.reason().map(str::to_owned));
        effects.push(Effect::Ready {
            ready: reason.is_none(),
            reason: reason.unwrap_or_default(),
        });
        // A held turn is reviewed only while the API answers (a renewal missed meanwhile is no
        // loss: no other node takes a turn over on a timer).
        if self.turn.holding().is_some() && f.api_answers {
            // After a rollback, the ledger the executor records names the failed version bad.
            let mut ledger = f.ledger.clone();
            for e in &effects {
                if let Effect::RollBack { failed, reason, .. } = e {
                    ledger.mark_bad(crate::ledger::BadVersion {
                        hash: failed.clone(),
                        at: String::new(),
                        reason: reason.clone(),
                    });
                }
            }
            let runs = self.written.clone().filter(|_| self.converged && !rolled_back);
            for action in self.step_turn(TurnEvent::Review {
                ledger: &ledger,
                runs: runs.as_deref(),
                now: f.instant,
            }) {
                match action {
                    TurnAction::GiveBack { version, failed } => effects.push(Effect::GiveBackTurn { version, failed }),
                    TurnAction::Renew => effects.push(Effect::RenewTurn),
                    _ => {}
                }
            }
        }
        effects
    }

    fn step_turn(&mut self, event: TurnEvent<'_>) -> Vec<TurnAction> {
        let (turn, actions) = std::mem::take(&mut self.turn).step(event);
        self.turn = turn;
        actions
    }

    fn step_version(&mut self, event: VersionEvent<'_>) -> Vec<VersionAction> {
        let (version, actions) = std::mem::take(&mut self.version).step(event);
        self.version = version;
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::Turn as LeaseTurn;
    use crate::trial::MirrorPod;

    const PERIOD: Duration = Duration::from_secs(300);

    fn anchor() -> Anchor {
        Anchor::new(Settings {
            component: "kube-apiserver".into(),
            trial_period: PERIOD,
            crash_loop_threshold: 3,
            in_fleet: true,
        })
    }

    fn ledger(on_node: Option<&str>, lkg: Option<&str>) -> Ledger {
        let mut ledger = Ledger::new("kube-apiserver");
        ledger.content_hash = on_node.map(str::to_owned);
        ledger.last_known_good = lkg.map(str::to_owned);
        ledger
    }

    fn sync<'a>(desired: &'a str, ledger: &'a Ledger, s: u64) -> Input<'a> {
        Input::Sync(SyncFacts {
            desired: Some(desired),
            desired_refused: None,
            ledger,
            unrecorded_manifest: false,
            now: Duration::from_secs(s),
        })
    }

    fn running(hash: &str, restarts: u32) -> VersionView {
        VersionView {
            api_configured: true,
            mirror: Some(MirrorPod::Present {
                hash: Some(hash.into()),
                phase: Some("Running".into()),
                ready: true,
                restarts,
            }),
            health: Some(Ok(())),
            runtime: None,
            runtime_restarts: 0,
            dependency_down: None,
        }
    }

    fn evaluate<'a>(view: VersionView, ledger: &'a Ledger, t0: Instant, s: u64) -> Input<'a> {
        Input::Evaluate(EvaluateFacts {
            view,
            ledger,
            api_answers: true,
            now: Duration::from_secs(s),
            instant: t0 + Duration::from_secs(s),
        })
    }

    fn asked(turn: LeaseTurn, t0: Instant) -> Input<'static> {
        Input::Asked {
            answer: Answer::Lease {
                lease: "kube-anchor-kube-apiserver".into(),
                turn: Ok(turn),
            },
            instant: t0,
            wall: SystemTime::UNIX_EPOCH,
        }
    }

    fn ready(effects: &[Effect]) -> Option<(bool, String)> {
        effects.iter().find_map(|e| match e {
            Effect::Ready { ready, reason } => Some((*ready, reason.clone())),
            _ => None,
        })
    }

    #[test]
    fn a_first_version_is_written_without_a_turn_and_promoted_after_its_trial() {
        let t0 = Instant::now();
        let mut a = anchor();
        let fresh = ledger(None, None);
        let effects = a.step(sync("A", &fresh, 0));
        assert_eq!(effects[0], Effect::Write { version: "A".into() });
        assert!(a.version.trial().is_some(), "on trial");
        let written = ledger(Some("A"), None);
        let effects = a.step(evaluate(running("A", 0), &written, t0, 100));
        assert_eq!(ready(&effects), Some((true, String::new())));
        assert!(!effects.iter().any(|e| matches!(e, Effect::Promote { .. })));
        let effects = a.step(evaluate(running("A", 0), &written, t0, 100 + PERIOD.as_secs()));
        assert!(
            effects.contains(&Effect::Promote { version: "A".into() }),
            "{effects:?}"
        );
    }

    #[test]
    fn an_upgrade_waits_for_the_turn_and_gives_it_back_once_promoted() {
        let t0 = Instant::now();
        let mut a = anchor();
        let on_node = ledger(Some("A"), Some("A"));
        let effects = a.step(sync("B", &on_node, 0));
        assert!(
            effects.contains(&Effect::AskTurn { version: "B".into() }),
            "{effects:?}"
        );
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Write { .. })),
            "nothing written before the turn"
        );
        let held = LeaseTurn::Held {
            by: "cp-2".into(),
            renewed: None,
        };
        assert_eq!(a.step(asked(held, t0)), vec![]);
        assert_eq!(a.waiting(), Some("B"));
        assert_eq!(a.step(asked(LeaseTurn::Take, t0)), vec![Effect::Resync]);
        let effects = a.step(sync("B", &on_node, 1));
        assert_eq!(effects[0], Effect::Write { version: "B".into() });
        let written = ledger(Some("B"), Some("A"));
        a.step(evaluate(running("B", 0), &written, t0, 2));
        let effects = a.step(evaluate(running("B", 0), &written, t0, 2 + PERIOD.as_secs()));
        assert!(
            effects.contains(&Effect::Promote { version: "B".into() }),
            "{effects:?}"
        );
        // The executor records the promotion; the next evaluation gives the turn back.
        let promoted = ledger(Some("B"), Some("B"));
        let effects = a.step(evaluate(running("B", 0), &promoted, t0, 3 + PERIOD.as_secs()));
        assert!(
            effects.contains(&Effect::GiveBackTurn {
                version: "B".into(),
                failed: false
            }),
            "{effects:?}"
        );
    }

    #[test]
    fn a_crash_loop_rolls_back_and_gives_the_turn_back_as_failed() {
        let t0 = Instant::now();
        let mut a = anchor();
        let on_node = ledger(Some("A"), Some("A"));
        a.step(sync("B", &on_node, 0));
        a.step(asked(LeaseTurn::Take, t0));
        a.step(sync("B", &on_node, 1));
        let written = ledger(Some("B"), Some("A"));
        a.step(evaluate(running("B", 0), &written, t0, 2));
        let effects = a.step(evaluate(running("B", 4), &written, t0, 40));
        assert!(
            matches!(&effects[0], Effect::RollBack { failed, to, .. } if failed == "B" && to == "A"),
            "{effects:?}"
        );
        assert!(
            effects.contains(&Effect::GiveBackTurn {
                version: "B".into(),
                failed: true
            }),
            "{effects:?}"
        );
        a.step(Input::RolledBack {
            to: "A".into(),
            note: "B failed".into(),
        });
        assert_eq!(a.written.as_deref(), Some("A"));
        assert_eq!(a.version.held_back(), Some("B failed"));
    }

    #[test]
    fn a_refused_version_is_not_written_and_says_why() {
        let t0 = Instant::now();
        let mut a = anchor();
        let fresh = ledger(None, None);
        let effects = a.step(Input::Sync(SyncFacts {
            desired: Some("A"),
            desired_refused: Some("tls.key does not match tls.crt".into()),
            ledger: &fresh,
            unrecorded_manifest: false,
            now: Duration::ZERO,
        }));
        assert_eq!(effects, vec![]);
        let effects = a.step(evaluate(running("A", 0), &fresh, t0, 1));
        let (ready, reason) = ready(&effects).expect("a readiness");
        assert!(!ready);
        assert!(reason.contains("tls.key does not match"), "{reason}");
    }
}
