//! Drain protection for a quorum component's static pod (etcd, kube-apiserver). Pure.
//!
//! Nothing evicts a static pod, so no PodDisruptionBudget can speak for one: `kubectl drain`
//! (and kured, cluster-autoscaler, Cluster API remediation) would take a second etcd node down
//! while the first still reboots. Each anchor therefore keeps a *guard pod* on its node: an
//! ordinary pod that does nothing, whose readiness probe is the static pod's own. The chart's
//! PodDisruptionBudget over the guards keeps `minAvailable` one below the number of nodes the
//! component's DaemonSet selects, so the Eviction API refuses a guard while another node's
//! static pod is not healthy, or its guard is missing. (OpenShift's static-pod operators guard
//! their operands the same way: library-go `staticpod/controller/guard`.)
//!
//! A drain evicts the guard of its node and cordons the node first; the anchor brings the guard
//! back only once the node is uncordoned, so a node on its way down (or still down) counts as
//! unavailable from its drain to its return. The guard's controller is the anchor pod: kubectl
//! drain evicts it (a pod a DaemonSet controls it would skip), and it goes with the anchor pod
//! when the node stops running the component.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile,
    SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use sha2::{Digest, Sha256};

/// The label every guard carries, its value the component: the chart's PodDisruptionBudget
/// selects on it.
pub const COMPONENT_LABEL: &str = "kube-anchor.io/drain-guard";
/// The digest of the guard's spec as the anchor built it: a guard whose spec differs (a new
/// probe, a new image) is replaced.
pub const SPEC_ANNOTATION: &str = "kube-anchor.io/guard-spec";

/// The guard of `component` on `node`.
pub fn guard_name(component: &str, node: &str) -> String {
    format!("{component}-guard-{node}")
}

/// The readiness probe of the static pod in `manifest` (its first container that has one), as a
/// guard elsewhere in the node can run it: an HTTP GET with an explicit host. The kubelet makes
/// HTTP probes from the node's own network, so the same request answers for the guard; a probe
/// with no host asked the static pod's own address, which for a host-network static pod is the
/// node's, `node_ip`. `None` when there is no HTTP readiness probe, or no host to give it.
pub fn readiness_probe(manifest: &Pod, node_ip: Option<&str>) -> Option<Probe> {
    let spec = manifest.spec.as_ref()?;
    let mut probe = spec.containers.iter().find_map(|c| c.readiness_probe.clone())?;
    let http = probe.http_get.as_mut()?;
    if http.host.as_deref().is_none_or(str::is_empty) {
        if !spec.host_network.unwrap_or(false) {
            return None;
        }
        http.host = Some(node_ip?.to_owned());
    }
    Some(probe)
}

/// What a guard is built from.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardSpec {
    pub component: String,
    pub node: String,
    pub namespace: String,
    /// The anchor's own image (the node has it already); the guard runs `kube-anchor guard`.
    pub image: String,
    pub probe: Probe,
    /// The anchor pod that controls the guard: (name, uid).
    pub owner: (String, String),
}

/// The guard pod: bound to its node (no scheduler: it must land on a cordoned node too), every
/// taint tolerated, no token, no privilege, a few MiB.
pub fn guard_pod(spec: &GuardSpec) -> Pod {
    let mut pod = Pod {
        metadata: ObjectMeta {
            name: Some(guard_name(&spec.component, &spec.node)),
            namespace: Some(spec.namespace.clone()),
            labels: Some(BTreeMap::from([
                ("app.kubernetes.io/name".to_owned(), "kube-anchor-guard".to_owned()),
                (COMPONENT_LABEL.to_owned(), spec.component.clone()),
            ])),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: spec.owner.0.clone(),
                uid: spec.owner.1.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(spec.node.clone()),
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(5),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(65534),
                run_as_group: Some(65534),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".into(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            containers: vec![Container {
                name: "guard".into(),
                image: Some(spec.image.clone()),
                image_pull_policy: Some("IfNotPresent".into()),
                command: Some(vec!["kube-anchor".into(), "guard".into()]),
                readiness_probe: Some(spec.probe.clone()),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".to_owned(), Quantity("5m".into())),
                        ("memory".to_owned(), Quantity("8Mi".into())),
                    ])),
                    limits: Some(BTreeMap::from([("memory".to_owned(), Quantity("32Mi".into()))])),
                    ..Default::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    read_only_root_filesystem: Some(true),
                    capabilities: Some(Capabilities {
                        drop: Some(vec!["ALL".into()]),
                        add: None,
                    }),
                    ..Default::default()
                }),
                termination_message_policy: Some("FallbackToLogsOnError".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let digest = spec_digest(&pod);
    pod.metadata.annotations = Some(BTreeMap::from([(SPEC_ANNOTATION.to_owned(), digest)]));
    pod
}

/// The digest a guard carries in [`SPEC_ANNOTATION`]: of everything the anchor sets but the
/// owner (a new anchor pod adopts a guard whose spec is the same).
fn spec_digest(pod: &Pod) -> String {
    let json = serde_json::to_vec(&(&pod.metadata.labels, &pod.spec)).expect("a Pod serializes");
    format!("sha256:{}", hex::encode(Sha256::digest(json)))
}

/// The digest of the guard [`guard_pod`] builds from `spec`.
pub fn wanted_digest(spec: &GuardSpec) -> String {
    spec_digest(&guard_pod(spec))
}

/// The guard in the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenGuard {
    /// Its [`SPEC_ANNOTATION`].
    pub digest: Option<String>,
    /// Being deleted already (an eviction's grace period).
    pub terminating: bool,
}

/// What one reconciliation reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardFacts {
    /// The digest of the guard this node should have; `None` when it should have none (no static
    /// pod of the component written here, no HTTP readiness probe in it, no budget).
    pub wanted: Option<String>,
    pub seen: Option<SeenGuard>,
    /// The Node's `spec.unschedulable`: a drain has begun (or the operator keeps it out).
    pub cordoned: bool,
    /// How many nodes the component's DaemonSet selects (`status.desiredNumberScheduled`).
    pub nodes: Option<i32>,
    /// The budget's `spec.minAvailable` as it stands (`None`: not set, or not an integer).
    pub min_available: Option<i32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardAction {
    Create,
    /// Delete the guard whose spec is out of date; [`GuardAction::Create`] follows next time.
    Replace,
    Delete,
    SetMinAvailable(i32),
}

/// Every node but one must be available: `minAvailable` is one below the nodes selected (0 on
/// a single node, where no margin can exist and a drain goes ahead).
pub fn min_available(nodes: i32) -> i32 {
    (nodes - 1).max(0)
}

/// What to do about this node's guard and the budget.
pub fn decide(facts: &GuardFacts) -> Vec<GuardAction> {
    let mut actions = Vec::new();
    if let Some(nodes) = facts.nodes {
        let wanted = min_available(nodes);
        if facts.min_available != Some(wanted) {
            actions.push(GuardAction::SetMinAvailable(wanted));
        }
    }
    match (&facts.wanted, &facts.seen) {
        (_, Some(seen)) if seen.terminating => {}
        (None, Some(_)) => actions.push(GuardAction::Delete),
        // A cordoned node gets no new guard: its drain evicted the last one, and until it is
        // uncordoned it counts as the one node the budget lets be down.
        (Some(_), None) if !facts.cordoned => actions.push(GuardAction::Create),
        (Some(wanted), Some(seen)) if seen.digest.as_ref() != Some(wanted) && !facts.cordoned => {
            actions.push(GuardAction::Replace)
        }
        _ => {}
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::HTTPGetAction;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn manifest(host: Option<&str>, host_network: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                host_network: Some(host_network),
                containers: vec![Container {
                    name: "etcd".into(),
                    readiness_probe: Some(Probe {
                        http_get: Some(HTTPGetAction {
                            host: host.map(Into::into),
                            path: Some("/readyz".into()),
                            port: IntOrString::Int(2381),
                            ..Default::default()
                        }),
                        period_seconds: Some(1),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn spec(probe: Probe) -> GuardSpec {
        GuardSpec {
            component: "etcd".into(),
            node: "cp-1".into(),
            namespace: "kube-system".into(),
            image: "ghcr.io/kube-anchor/kube-anchor:1".into(),
            probe,
            owner: ("etcd-anchor-x".into(), "uid-1".into()),
        }
    }

    #[test]
    fn the_guard_probes_what_the_kubelet_probes_for_the_static_pod() {
        let probe = readiness_probe(&manifest(Some("127.0.0.1"), true), Some("10.0.0.1")).unwrap();
        assert_eq!(probe.http_get.unwrap().host.as_deref(), Some("127.0.0.1"));
        // No host: the static pod's own address, the node's on the host network.
        let probe = readiness_probe(&manifest(None, true), Some("10.0.0.1")).unwrap();
        assert_eq!(probe.http_get.unwrap().host.as_deref(), Some("10.0.0.1"));
        assert_eq!(readiness_probe(&manifest(None, true), None), None);
        assert_eq!(readiness_probe(&manifest(None, false), Some("10.0.0.1")), None);
        assert_eq!(readiness_probe(&Pod::default(), Some("10.0.0.1")), None);
    }

    #[test]
    fn a_guard_is_bound_to_its_node_controlled_by_the_anchor_pod_and_unprivileged() {
        let probe = readiness_probe(&manifest(Some("127.0.0.1"), true), None).unwrap();
        let pod = guard_pod(&spec(probe.clone()));
        assert_eq!(pod.metadata.name.as_deref(), Some("etcd-guard-cp-1"));
        let pod_spec = pod.spec.as_ref().unwrap();
        assert_eq!(pod_spec.node_name.as_deref(), Some("cp-1"));
        assert_eq!(pod_spec.automount_service_account_token, Some(false));
        assert_eq!(pod_spec.containers[0].readiness_probe.as_ref(), Some(&probe));
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        // A controller that is not a DaemonSet: kubectl drain evicts the guard.
        assert_eq!((owner.kind.as_str(), owner.controller), ("Pod", Some(true)));
        let digest = &pod.metadata.annotations.as_ref().unwrap()[SPEC_ANNOTATION];
        assert_eq!(digest, &wanted_digest(&spec(probe.clone())));
        // Another anchor pod builds the same guard; another probe does not.
        let mut adopted = spec(probe.clone());
        adopted.owner = ("etcd-anchor-y".into(), "uid-2".into());
        assert_eq!(wanted_digest(&adopted), *digest);
        let mut other = probe;
        other.period_seconds = Some(5);
        assert_ne!(wanted_digest(&spec(other)), *digest);
    }

    fn facts(wanted: Option<&str>, seen: Option<&str>, cordoned: bool) -> GuardFacts {
        GuardFacts {
            wanted: wanted.map(Into::into),
            seen: seen.map(|d| SeenGuard {
                digest: Some(d.into()),
                terminating: false,
            }),
            cordoned,
            nodes: Some(3),
            min_available: Some(2),
        }
    }

    #[test]
    fn a_guard_comes_back_only_once_its_node_is_uncordoned() {
        use GuardAction::*;
        assert_eq!(decide(&facts(Some("a"), None, false)), vec![Create]);
        assert_eq!(decide(&facts(Some("a"), None, true)), vec![]);
        assert_eq!(decide(&facts(Some("a"), Some("a"), true)), vec![]);
        assert_eq!(decide(&facts(Some("b"), Some("a"), false)), vec![Replace]);
        assert_eq!(decide(&facts(Some("b"), Some("a"), true)), vec![]);
        assert_eq!(decide(&facts(None, Some("a"), false)), vec![Delete]);
        assert_eq!(decide(&facts(None, Some("a"), true)), vec![Delete]);
        let mut evicted = facts(Some("a"), Some("a"), false);
        evicted.seen.as_mut().unwrap().terminating = true;
        assert_eq!(decide(&evicted), vec![]);
    }

    #[test]
    fn the_budget_lets_one_node_of_those_selected_be_down() {
        let mut f = facts(Some("a"), Some("a"), false);
        assert_eq!(decide(&f), vec![]);
        f.nodes = Some(5);
        assert_eq!(decide(&f), vec![GuardAction::SetMinAvailable(4)]);
        f.nodes = Some(1);
        f.min_available = None;
        assert_eq!(decide(&f), vec![GuardAction::SetMinAvailable(0)]);
        f.nodes = None;
        assert_eq!(decide(&f), vec![]);
        assert_eq!(min_available(0), 0);
    }
}
