//! Before this node's kube-apiserver restarts: the other nodes an anchor of the component runs
//! on, and what each one's API server answers at its own address
//! ([`kube_anchor_core::margin::api_server_margin`] judges them).

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use kube::{Api, Client};
use kube_anchor_core::decommission::{self, Lookup};
use kube_anchor_core::margin::{ApiServerPeer, MarginFacts, PeerAnswer};

use crate::direct::HealthCheck;
use crate::kubeapi::{API_TIMEOUT, list_all};

/// The anchor pods of `component` on other nodes than `node` (every namespace, by the anchors'
/// labels) and, for each node, what its API server says at `health_url` with the host replaced
/// by the node's address (`status.hostIP`), verified with `ca_file`. A pod lists its node while
/// the node is off, which the `kubernetes` Service's endpoints do not.
pub async fn api_server_peers(
    client: &Client,
    component: &str,
    node: &str,
    health_url: &str,
    ca_file: Option<&Path>,
) -> MarginFacts {
    let pods: Api<Pod> = Api::all(client.clone());
    let pods = match list_all(&pods, &decommission::anchor_selector(component), API_TIMEOUT).await {
        Lookup::Found(pods) => pods,
        Lookup::NotFound => return MarginFacts::Unknown("the API does not list pods".into()),
        Lookup::Unavailable(why) => {
            return MarginFacts::Unknown(format!("the other anchors of {component} cannot be listed: {why}"));
        }
    };
    // One address per node (a second DaemonSet of a renamed release lists the node twice).
    let mut nodes: BTreeMap<String, Option<String>> = BTreeMap::new();
    for pod in &pods {
        if decommission::anchor_pod(pod).static_copy {
            continue;
        }
        let Some(on) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        if on == node {
            continue;
        }
        let ip = pod.status.as_ref().and_then(|s| s.host_ip.clone());
        let known = nodes.entry(on).or_default();
        if known.is_none() {
            *known = ip;
        }
    }
    let asks = nodes.into_iter().map(|(node, ip)| async move {
        let answer = match ip {
            None => PeerAnswer::NoAnswer("the API gives its anchor pod no host IP".into()),
            Some(ip) => ask(&peer_url(health_url, &ip), ca_file).await,
        };
        ApiServerPeer { node, answer }
    });
    MarginFacts::ApiServers {
        peers: futures::future::join_all(asks).await,
    }
}

async fn ask(url: &str, ca_file: Option<&Path>) -> PeerAnswer {
    let check = match HealthCheck::new(url, ca_file) {
        Ok(check) => check,
        Err(e) => return PeerAnswer::NoAnswer(e.to_string()),
    };
    match check.check().await {
        Ok(()) => PeerAnswer::Serving,
        Err(failure) if failure.answered => PeerAnswer::Refused(failure.reason),
        Err(failure) => PeerAnswer::NoAnswer(failure.reason),
    }
}

/// `health_url` (`https://127.0.0.1:6443/readyz`) at another host: same scheme, port and path.
fn peer_url(health_url: &str, ip: &str) -> String {
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_owned()
    };
    match health_url.parse::<http::Uri>() {
        Ok(uri) => {
            let scheme = uri.scheme_str().unwrap_or("https");
            let port = uri.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
            let path = uri.path_and_query().map_or("/readyz", |p| p.as_str());
            format!("{scheme}://{host}{port}{path}")
        }
        Err(_) => format!("https://{host}:6443/readyz"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_asked_at_its_own_address_with_the_health_urls_port_and_path() {
        assert_eq!(
            peer_url("https://127.0.0.1:6443/readyz", "10.0.0.12"),
            "https://10.0.0.12:6443/readyz"
        );
        assert_eq!(
            peer_url("https://127.0.1.1:7443/readyz?verbose", "127.0.1.2"),
            "https://127.0.1.2:7443/readyz?verbose"
        );
        assert_eq!(
            peer_url("https://[::1]:6443/readyz", "fd00::2"),
            "https://[fd00::2]:6443/readyz"
        );
    }
}
