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
pub struct Observation {
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
    pub fn from_pod(pod: &Pod) -> Self {
        let hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONTENT_HASH_ANNOTATION))
            .cloned();
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.clone());
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
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

pub fn assess(observation: &Observation, hash: &str, crash_loop_threshold: u32) -> Assessment {
    if let Some(Err(reason)) = &observation.health {
        return Assessment::NotConverged(format!("health check failing: {reason}"));
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

/// A version on trial. `observed` counts only time with evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    pub hash: String,
    pub observed: Duration,
    last_step: Duration,
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
            last_step: now,
        }
    }

    pub fn step(&mut self, assessment: &Assessment, now: Duration, period: Duration) -> TrialOutcome {
        let elapsed = now.saturating_sub(self.last_step);
        self.last_step = now;
        match assessment {
            Assessment::CrashLooping(reason) => TrialOutcome::Failed(reason.clone()),
            Assessment::Unknown(_) => TrialOutcome::Pending,
            Assessment::Converged | Assessment::NotConverged(_) => {
                self.observed += elapsed;
                if self.observed < period {
                    return TrialOutcome::Pending;
                }
                match assessment {
                    Assessment::Converged => TrialOutcome::Passed,
                    other => TrialOutcome::Failed(format!(
                        "not converged after a {} trial: {}",
                        humantime::format_duration(period),
                        other.reason().unwrap_or_default()
                    )),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "sha256:new";

    fn present(hash: &str, phase: &str, ready: bool, restarts: u32) -> Option<MirrorPod> {
        Some(MirrorPod::Present {
            hash: Some(hash.into()),
            phase: Some(phase.into()),
            ready,
            restarts,
        })
    }

    fn obs(mirror: Option<MirrorPod>, health: Option<Result<(), String>>) -> Observation {
        Observation {
            api_configured: true,
            mirror,
            health,
        }
    }

    #[test]
    fn assessment_table() {
        let ok = Some(Ok(()));
        let bad = Some(Err("500".to_string()));
        let cases: Vec<(Observation, fn(&Assessment) -> bool)> = vec![
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
            (obs(None, bad.clone()), |a| matches!(a, Assessment::NotConverged(_))),
            (
                Observation {
                    api_configured: false,
                    mirror: None,
                    health: None,
                },
                |a| matches!(a, Assessment::Unknown(r) if r.contains("no API client")),
            ),
            (
                Observation {
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
    fn passes_only_after_a_full_period_converged_at_its_end() {
        let mut t = Trial::start(H, secs(0));
        let period = secs(300);
        assert_eq!(
            t.step(&Assessment::NotConverged("starting".into()), secs(10), period),
            TrialOutcome::Pending
        );
        assert_eq!(t.step(&Assessment::Converged, secs(299), period), TrialOutcome::Pending);
        assert_eq!(t.step(&Assessment::Converged, secs(300), period), TrialOutcome::Passed);
    }

    #[test]
    fn fails_when_the_period_ends_unconverged_or_at_once_on_a_crash_loop() {
        let period = secs(300);
        let mut t = Trial::start(H, secs(0));
        assert_eq!(t.step(&Assessment::Converged, secs(100), period), TrialOutcome::Pending);
        assert!(
            matches!(t.step(&Assessment::NotConverged("x".into()), secs(301), period), TrialOutcome::Failed(r) if r.contains("5m"))
        );
        let mut t = Trial::start(H, secs(0));
        assert!(matches!(
            t.step(&Assessment::CrashLooping("r".into()), secs(1), period),
            TrialOutcome::Failed(_)
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
