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

/// Whether a container of the pod runs, as its status shows it.
pub fn has_running_container(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.state.as_ref().is_some_and(|st| st.running.is_some()))
        })
}

/// When the pod last became Ready, while it is Running and Ready.
pub fn ready_since(pod: &Pod) -> Option<&Time> {
    if !is_running_ready(pod) {
        return None;
    }
    ready_condition(pod)?.last_transition_time.as_ref()
}

/// The URL the kubelet's readiness probe of the pod's first container GETs (an `httpGet`
/// probe: its host, or the pod IP, which is the node's for a host-network pod; its port by
/// number or by the container port's name), for asking the copy itself from another node.
/// `None` without such a probe, and when the host is a loopback address other than the node's
/// own (`status.hostIP`): from another node it would reach that node's own copy, not this one.
pub fn readiness_url(pod: &Pod) -> Option<String> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let container = pod.spec.as_ref()?.containers.first()?;
    let get = container.readiness_probe.as_ref()?.http_get.as_ref()?;
    let host = match get.host.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => h.to_owned(),
        None => pod.status.as_ref()?.pod_ip.clone().filter(|ip| !ip.is_empty())?,
    };
    let loopback = host == "localhost"
        || host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    let node_ip = pod.status.as_ref().and_then(|s| s.host_ip.as_deref());
    if loopback && node_ip != Some(host.as_str()) {
        return None;
    }
    let port = match &get.port {
        IntOrString::Int(p) => *p,
        IntOrString::String(name) => {
            container
                .ports
                .as_ref()?
                .iter()
                .find(|p| p.name.as_deref() == Some(name.as_str()))?
                .container_port
        }
    };
    let scheme = get.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase();
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host
    };
    let path = get.path.as_deref().filter(|p| p.starts_with('/')).unwrap_or("/");
    Some(format!("{scheme}://{host}:{port}{path}"))
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

    #[test]
    fn the_readiness_url_is_the_kubelets_probe_seen_from_another_node() {
        let on = |get: serde_json::Value, pod_ip: &str, host_ip: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "kube-apiserver-cp-2"},
                "spec": {"containers": [{
                    "name": "kube-apiserver",
                    "ports": [{"name": "https", "containerPort": 6443}],
                    "readinessProbe": {"httpGet": get},
                }]},
                "status": {"podIP": pod_ip, "hostIP": host_ip},
            }))
            .unwrap()
        };
        let with = |get: serde_json::Value, pod_ip: &str| on(get, pod_ip, "10.0.0.2");
        let cases = [
            // The charts' kube-apiserver: the node IP rendered into the host.
            (
                serde_json::json!({"host": "10.0.0.2", "path": "/readyz", "port": 6443, "scheme": "HTTPS"}),
                "10.0.0.9",
                Some("https://10.0.0.2:6443/readyz"),
            ),
            // No host: the pod IP (a host-network pod's is its node's); a named port; HTTP by default.
            (
                serde_json::json!({"path": "/healthz", "port": "https"}),
                "10.0.0.2",
                Some("http://10.0.0.2:6443/healthz"),
            ),
            (
                serde_json::json!({"host": "fd00::2", "path": "/readyz", "port": 6443, "scheme": "HTTPS"}),
                "",
                Some("https://[fd00::2]:6443/readyz"),
            ),
            // Loopback: from another node it would answer for that node's own copy.
            (
                serde_json::json!({"host": "127.0.0.1", "path": "/healthz", "port": 10259}),
                "10.0.0.2",
                None,
            ),
            (
                serde_json::json!({"host": "::1", "path": "/healthz", "port": 10259}),
                "10.0.0.2",
                None,
            ),
            (
                serde_json::json!({"host": "localhost", "path": "/healthz", "port": 10259}),
                "10.0.0.2",
                None,
            ),
            // No host and no pod IP yet; a port name no container port has.
            (serde_json::json!({"path": "/readyz", "port": 6443}), "", None),
            (serde_json::json!({"host": "10.0.0.2", "port": "metrics"}), "", None),
        ];
        for (get, pod_ip, want) in cases {
            assert_eq!(
                readiness_url(&with(get.clone(), pod_ip)).as_deref(),
                want,
                "{get} {pod_ip}"
            );
        }
        // A node whose own address is a loopback one (nodes sharing one machine): askable.
        let own = serde_json::json!({"host": "127.0.1.2", "path": "/readyz", "port": 6443});
        assert_eq!(
            readiness_url(&on(own.clone(), "127.0.1.2", "127.0.1.2")).as_deref(),
            Some("http://127.0.1.2:6443/readyz")
        );
        assert_eq!(readiness_url(&on(own, "127.0.1.2", "127.0.1.3")), None);
        // No readiness probe at all.
        assert_eq!(readiness_url(&pod(serde_json::json!({"podIP": "10.0.0.2"}))), None);
    }
}
