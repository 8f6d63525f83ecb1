//! What a pod's status says, read one way everywhere: its phase, and whether (and since when)
//! its Ready condition is True.

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

fn ready_condition(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

/// The Ready condition is True.
pub(crate) fn is_ready(pod: &Pod) -> bool {
    ready_condition(pod).is_some_and(|c| c.status == "True")
}

/// Running, and Ready.
pub fn is_running_ready(pod: &Pod) -> bool {
    phase(pod) == Some("Running") && is_ready(pod)
}

/// When the pod last became Ready, while it is Running and Ready.
pub fn ready_since(pod: &Pod) -> Option<&Time> {
    if !is_running_ready(pod) {
        return None;
    }
    ready_condition(pod)?.last_transition_time.as_ref()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    }

    #[test]
    fn readiness() {
        let t = "2026-11-25T08:00:00Z";
        let cases = [
            (serde_json::json!({}), None, false, false),
            (serde_json::json!({"phase": "Running"}), Some("Running"), false, false),
            (
                serde_json::json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": t}]}),
                Some("Running"),
                false,
                false,
            ),
            (
                serde_json::json!({"phase": "Pending", "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": t}]}),
                Some("Pending"),
                true,
                false,
            ),
            (
                serde_json::json!({"phase": "Running", "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True", "lastTransitionTime": t}]}),
                Some("Running"),
                true,
                true,
            ),
        ];
        for (status, want_phase, ready, running_ready) in cases {
            let p = pod(status.clone());
            assert_eq!(phase(&p), want_phase, "{status}");
            assert_eq!(is_ready(&p), ready, "{status}");
            assert_eq!(is_running_ready(&p), running_ready, "{status}");
            assert_eq!(ready_since(&p).is_some(), running_ready, "{status}");
        }
    }
}
