//! Is the static pod running what we wrote, and does a new version survive its trial? Pure.
//!
//! The model follows the Kubelet's dynamic-config last-known-good design: a newly written
//! content hash is on trial; it becomes last-known-good only after it has been observed
//! converged for the whole trial period; crash loops or a trial spent not converged fail it.
//! Time without evidence (API unreachable and no health URL) does not count: an outage is never
//! taken as proof that a version is bad.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::staticpod::CONTENT_HASH_ANNOTATION;

/// What the node shows about the version we wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionView {
    /// Whether there is an API client at all (no kubeconfig and not in a cluster: none).
    pub api_configured: bool,
    /// The mirror pod as the API shows it; `None` when the API cannot be asked.
    pub mirror: Option<MirrorPod>,
    /// The component's own health endpoint; `None` when none is configured.
    pub health: Option<Result<(), String>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MirrorPod {
    /// The API answered: there is no mirror pod (yet).
    Absent,
    Present {
        hash: Option<String>,
        phase: Option<String>,
        ready: bool,
        restarts: u32,
    },
}

impl MirrorPod {
    /// Restarts are evidence only within a trial; past it, a version is judged by Running and
    /// Ready alone (restarts from reboots and from components exiting while the API was down
    /// add up on a mirror pod for good).
    pub fn forget_restarts(&mut self) {
        if let MirrorPod::Present { restarts, .. } = self {
            *restarts = 0;
        }
    }

    pub fn from_pod(pod: &Pod) -> Self {
        let hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONTENT_HASH_ANNOTATION))
            .cloned();
        let status = pod.status.as_ref();
        let phase = crate::pod_status::phase(pod).map(str::to_owned);
        let ready = crate::pod_status::is_ready(pod);
        let restarts = status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count.max(0) as u32).sum())
            .unwrap_or(0);
        MirrorPod::Present {
            hash,
            phase,
            ready,
            restarts,
        }
    }
}

/// The verdict on one observation of the version `hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Mirror pod with our hash, Running and Ready, and the health URL (if any) answers 2xx.
    Converged,
    /// Evidence that it does not (yet) run as it should.
    NotConverged(String),
    /// Evidence of a crash loop: fail the trial now.
    CrashLooping(String),
    /// No evidence either way.
    Unknown(String),
}

impl Assessment {
    pub fn reason(&self) -> Option<&str> {
        match self {
            Assessment::Converged => None,
            Assessment::NotConverged(r) | Assessment::CrashLooping(r) | Assessment::Unknown(r) => Some(r),
        }
    }
}

/// A failing health check counts against a version only when it cannot be blamed on the rest of
/// the control plane: with the API unreachable, or with the component saying it lacks etcd (or
/// etcd saying it lacks a leader), a perfectly good version fails its health check too.
fn health_failure_is_evidence(observation: &VersionView, reason: &str) -> Result<(), String> {
    if observation.api_configured && observation.mirror.is_none() {
        return Err(format!(
            "API unreachable, health check failing ({reason}): not evidence against the version"
        ));
    }
    const QUORUM_SIGNS: [&str; 3] = ["[-]etcd", "NO LEADER", "etcdserver: request timed out"];
    if QUORUM_SIGNS.iter().any(|sign| reason.contains(sign)) {
        return Err(format!("etcd unavailable ({reason}): not evidence against the version"));
    }
    Ok(())
}

pub fn assess(observation: &VersionView, hash: &str, crash_loop_threshold: u32) -> Assessment {
    if let Some(Err(reason)) = &observation.health {
        return match health_failure_is_evidence(observation, reason) {
            Ok(()) => Assessment::NotConverged(format!("health check failing: {reason}")),
            Err(why) => Assessment::Unknown(why),
        };
    }
    match &observation.mirror {
        None if !observation.api_configured => Assessment::Unknown("no API client: cannot see the mirror pod".into()),
        None if observation.health.is_some() => {
            Assessment::Unknown("API unreachable: cannot see the mirror pod (health URL answers)".into())
        }
        None => Assessment::Unknown("API unreachable: cannot see the mirror pod".into()),
        Some(MirrorPod::Absent) => Assessment::NotConverged("no mirror pod yet".into()),
        Some(MirrorPod::Present {
            hash: running,
            phase,
            ready,
            restarts,
        }) => {
            if running.as_deref() != Some(hash) {
                let running = running.as_deref().unwrap_or("no hash");
                return Assessment::NotConverged(format!("mirror pod runs {running}, not {hash} yet"));
            }
            if *restarts > crash_loop_threshold {
                return Assessment::CrashLooping(format!(
                    "containers restarted {restarts} times (threshold {crash_loop_threshold})"
                ));
            }
            match (phase.as_deref(), ready) {
                (Some("Running"), true) => Assessment::Converged,
                (Some("Running"), false) => Assessment::NotConverged("mirror pod Running but not Ready".into()),
                (phase, _) => Assessment::NotConverged(format!("mirror pod phase {}", phase.unwrap_or("unknown"))),
            }
        }
    }
}

/// A version on trial, judged over the whole trial rather than by one sample at its end: it
/// passes after running converged without a break for the trial period, and fails on a crash
/// loop or once it has spent a whole trial period (in total) not converged. Only time with
/// evidence counts; time without (API unreachable, etcd down) pauses both clocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    pub hash: String,
    /// Time with evidence, converged or not.
    pub observed: Duration,
    /// Converged time since the last evidence of not being converged.
    pub converged_streak: Duration,
    /// Time with evidence of not being converged, in total.
    pub not_converged: Duration,
    last_step: Duration,
    /// The mirror pod's restart count when the trial first saw it run this version: restarts
    /// from before (an earlier process of the anchor, a reboot, a component that exited while
    /// the control plane was down) are not this trial's evidence.
    pub restarts_before: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrialOutcome {
    Pending,
    /// Survived the trial: becomes last-known-good.
    Passed,
    Failed(String),
}

impl Trial {
    /// `now` is any monotonic clock reading.
    pub fn start(hash: &str, now: Duration) -> Self {
        Self {
            hash: hash.into(),
            observed: Duration::ZERO,
            converged_streak: Duration::ZERO,
            not_converged: Duration::ZERO,
            last_step: now,
            restarts_before: None,
        }
    }

    /// Counts only the restarts since this trial first saw the mirror pod run its version.
    pub fn restarts_in_trial(&mut self, mirror: &mut Option<MirrorPod>) {
        if let Some(MirrorPod::Present {
            hash: Some(hash),
            restarts,
            ..
        }) = mirror
            && *hash == self.hash
        {
            let before = *self.restarts_before.get_or_insert(*restarts);
            *restarts = restarts.saturating_sub(before);
        }
    }

    /// Counts the time since the last step as what `assessment` shows now.
    pub fn step(&mut self, assessment: &Assessment, now: Duration, period: Duration) -> TrialOutcome {
        let elapsed = now.saturating_sub(self.last_step);
        self.last_step = now;
        match assessment {
            Assessment::CrashLooping(reason) => TrialOutcome::Failed(reason.clone()),
            Assessment::Unknown(_) => TrialOutcome::Pending,
            Assessment::Converged => {
                self.observed += elapsed;
                self.converged_streak += elapsed;
                if self.converged_streak >= period {
                    TrialOutcome::Passed
                } else {
                    TrialOutcome::Pending
                }
            }
            Assessment::NotConverged(reason) => {
                self.observed += elapsed;
                self.converged_streak = Duration::ZERO;
                self.not_converged += elapsed;
                if self.not_converged >= period {
                    TrialOutcome::Failed(format!(
                        "not converged for {} of its trial: {reason}",
                        humantime::format_duration(period)
                    ))
                } else {
                    TrialOutcome::Pending
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mirror pod keeps its restart count across anchor restarts and node reboots (the static
    /// pod keeps its UID); a restarted anchor's trial of the same version once read 5 restarts
    /// from before it started as a crash loop, failed at every evaluation, and never let the
    /// version pass.
    #[test]
    fn restarts_from_before_the_trial_are_not_a_crash_loop() {
        let period = Duration::from_secs(25);
        let mut trial = Trial::start(H, Duration::ZERO);
        let observe = |trial: &mut Trial, restarts: u32| {
            let mut mirror = present(H, "Running", true, restarts);
            trial.restarts_in_trial(&mut mirror);
            let observation = VersionView {
                api_configured: true,
                mirror,
                health: None,
            };
            assess(&observation, H, 3)
        };
        assert_eq!(observe(&mut trial, 5), Assessment::Converged, "5 restarts from before");
        assert_eq!(
            trial.step(&Assessment::Converged, Duration::from_secs(1), period),
            TrialOutcome::Pending
        );
        assert_eq!(
            observe(&mut trial, 8),
            Assessment::Converged,
            "3 in the trial: at the threshold"
        );
        assert!(
            matches!(observe(&mut trial, 9), Assessment::CrashLooping(_)),
            "4 in the trial"
        );
        // Past its trial a version with many restarts behind it is Ready when it runs Ready.
        let mut promoted = present(H, "Running", true, 12);
        if let Some(m) = promoted.as_mut() {
            m.forget_restarts();
        }
        let observation = VersionView {
            api_configured: true,
            mirror: promoted,
            health: None,
        };
        assert_eq!(assess(&observation, H, 3), Assessment::Converged);
        // Another version's mirror pod is left alone (it is not this trial's).
        let mut other = present("sha256:old", "Running", true, 7);
        trial.restarts_in_trial(&mut other);
        assert_eq!(other, present("sha256:old", "Running", true, 7));
    }

    const H: &str = "sha256:new";

    fn present(hash: &str, phase: &str, ready: bool, restarts: u32) -> Option<MirrorPod> {
        Some(MirrorPod::Present {
            hash: Some(hash.into()),
            phase: Some(phase.into()),
            ready,
            restarts,
        })
    }

    fn obs(mirror: Option<MirrorPod>, health: Option<Result<(), String>>) -> VersionView {
        VersionView {
            api_configured: true,
            mirror,
            health,
        }
    }

    #[test]
    fn assessment_table() {
        let ok = Some(Ok(()));
        let bad = Some(Err("500".to_string()));
        type Case = (VersionView, fn(&Assessment) -> bool);
        let cases: Vec<Case> = vec![
            (obs(present(H, "Running", true, 0), None), |a| {
                *a == Assessment::Converged
            }),
            (obs(present(H, "Running", true, 0), ok.clone()), |a| {
                *a == Assessment::Converged
            }),
            (
                obs(present(H, "Running", true, 0), bad.clone()),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("500")),
            ),
            (
                obs(present(H, "Running", false, 0), None),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("not Ready")),
            ),
            (
                obs(present(H, "Pending", false, 0), None),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("Pending")),
            ),
            (
                obs(present("sha256:old", "Running", true, 0), None),
                |a| matches!(a, Assessment::NotConverged(r) if r.contains("sha256:old")),
            ),
            (obs(present(H, "Running", true, 4), None), |a| {
                matches!(a, Assessment::CrashLooping(_))
            }),
            (obs(present(H, "Running", true, 3), None), |a| {
                *a == Assessment::Converged
            }),
            (obs(present("sha256:old", "Running", false, 9), None), |a| {
                matches!(a, Assessment::NotConverged(_))
            }),
            (obs(Some(MirrorPod::Absent), None), |a| {
                matches!(a, Assessment::NotConverged(_))
            }),
            (obs(None, None), |a| matches!(a, Assessment::Unknown(_))),
            (obs(None, ok), |a| matches!(a, Assessment::Unknown(_))),
            (obs(None, bad.clone()), |a| matches!(a, Assessment::Unknown(_))),
            (
                VersionView {
                    api_configured: false,
                    mirror: None,
                    health: None,
                },
                |a| matches!(a, Assessment::Unknown(r) if r.contains("no API client")),
            ),
            (
                VersionView {
                    api_configured: false,
                    mirror: None,
                    health: bad,
                },
                |a| matches!(a, Assessment::NotConverged(_)),
            ),
        ];
        for (i, (o, check)) in cases.iter().enumerate() {
            let a = assess(o, H, 3);
            assert!(check(&a), "case {i}: {o:?} -> {a:?}");
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn passes_only_after_a_full_period_converged_without_a_break() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(
            t.step(&Assessment::NotConverged("starting".into()), secs(10), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.step(&Assessment::Converged, secs(309), period), TrialOutcome::Pending);
        assert_eq!(t.step(&Assessment::Converged, secs(310), period), TrialOutcome::Passed);
    }

    #[test]
    fn one_converged_sample_at_the_end_does_not_pass_a_version() {
        // Not converged for most of the trial, converged at the moment it ends.
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(
            t.step(&Assessment::NotConverged("not Ready".into()), secs(290), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.step(&Assessment::Converged, secs(300), period), TrialOutcome::Pending);
        assert_eq!(t.step(&Assessment::Converged, secs(301), period), TrialOutcome::Pending);
        // A break in the streak starts it over.
        assert!(matches!(
            t.step(&Assessment::NotConverged("not Ready".into()), secs(311), period),
            TrialOutcome::Failed(r) if r.contains("not converged for 5m")
        ));
    }

    #[test]
    fn a_flapping_version_fails_once_a_period_not_converged_adds_up() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        let mut now = 0;
        let mut outcome = TrialOutcome::Pending;
        while outcome == TrialOutcome::Pending {
            now += 60;
            outcome = t.step(&Assessment::Converged, secs(now), period);
            assert_eq!(
                outcome,
                TrialOutcome::Pending,
                "a minute converged never passes a 5m trial"
            );
            now += 60;
            outcome = t.step(&Assessment::NotConverged("x".into()), secs(now), period);
        }
        assert!(matches!(outcome, TrialOutcome::Failed(_)));
        assert_eq!(t.not_converged, period);
    }

    #[test]
    fn fails_when_a_period_is_spent_unconverged_or_at_once_on_a_crash_loop() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(t.step(&Assessment::Converged, secs(100), period), TrialOutcome::Pending);
        assert_eq!(
            t.step(&Assessment::NotConverged("x".into()), secs(399), period),
            TrialOutcome::Pending
        );
        assert!(
            matches!(t.step(&Assessment::NotConverged("x".into()), secs(400), period), TrialOutcome::Failed(r) if r.contains("5m"))
        );
        let mut t = Trial::start(H, secs(0));
        assert!(matches!(
            t.step(&Assessment::CrashLooping("r".into()), secs(1), period),
            TrialOutcome::Failed(_)
        ));
    }

    #[test]
    fn a_health_failure_blamed_on_the_control_plane_is_no_evidence() {
        let running = || present(H, "Running", true, 0);
        let failing = |body: &str| Some(Err(format!("HTTP 500 from https://127.0.0.1:6443/readyz: {body}")));
        // API unreachable: whatever the health URL says is not held against the version.
        assert!(
            matches!(assess(&obs(None, failing("readyz check failed")), H, 3), Assessment::Unknown(r) if r.contains("API unreachable"))
        );
        // The API answers, but the component says etcd is what fails; or etcd has no leader.
        let etcd_down = "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed";
        assert!(
            matches!(assess(&obs(running(), failing(etcd_down)), H, 3), Assessment::Unknown(r) if r.contains("etcd"))
        );
        let no_leader = r#"{"health":"false","reason":"RAFT NO LEADER"}"#;
        assert!(matches!(
            assess(&obs(running(), failing(no_leader)), H, 3),
            Assessment::Unknown(_)
        ));
        // Anything else is evidence.
        let own = "[-]poststarthook/start-apiextensions-controllers failed: reason withheld";
        assert!(matches!(
            assess(&obs(running(), failing(own)), H, 3),
            Assessment::NotConverged(_)
        ));
    }

    #[test]
    fn time_without_evidence_does_not_count() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        // An hour of API outage with no health URL: still pending, clock paused.
        assert_eq!(
            t.step(&Assessment::Unknown("api down".into()), secs(3600), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.observed, Duration::ZERO);
        assert_eq!(
            t.step(&Assessment::NotConverged("x".into()), secs(3700), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.observed, secs(100));
    }

    #[test]
    fn mirror_pod_from_a_real_pod_shape() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kube-apiserver-n1", "annotations": {CONTENT_HASH_ANNOTATION: H}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                        "containerStatuses": [{"name": "a", "restartCount": 2, "ready": true, "image": "i", "imageID": ""},
                                              {"name": "b", "restartCount": 1, "ready": true, "image": "i", "imageID": ""}]}
        }))
        .unwrap();
        assert_eq!(MirrorPod::from_pod(&pod), present(H, "Running", true, 3).unwrap());
    }
}
