//! From a running parent pod to the static pod the kubelet can start from disk after a reboot
//! with no API server (a checkpoint), compatible with bootkube's pod-checkpointer. Pure.
//!
//! Secret and ConfigMap volumes (plain or projected) become hostPath volumes over files the
//! checkpointer writes under `checkpoint-secrets/<ns>/<pod>/<volume>` (0600 or stricter, dirs
//! 0700); the service-account token volume and everything that ties the pod to the API or to
//! scheduling is dropped; the result must pass the same static-pod validation as `apply`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{HostPathVolumeSource, KeyToPath, Pod, PodSpec, Volume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::hostpath::{HostPath, HostPathError};
use crate::staticpod;

pub(crate) const CHECKPOINT_ANNOTATION: &str = "checkpointer.alpha.coreos.com/checkpoint";
pub const CHECKPOINT_OF_ANNOTATION: &str = "checkpointer.alpha.coreos.com/checkpoint-of";
/// `<kind>/<namespace>/<name>/<uid>` of the parent's controller: checkpoints are keyed by
/// owner, not pod name.
pub(crate) const CHECKPOINT_OWNER_ANNOTATION: &str = "kube-anchor.io/checkpoint-owner";
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SanitizeError {
    #[error("pod {pod}: {field}: {problem}")]
    NotCheckpointable {
        pod: String,
        field: String,
        problem: String,
    },
    #[error(transparent)]
    Path(#[from] HostPathError),
}

/// Where checkpoint files live on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub secrets: HostPath,
    pub configmaps: HostPath,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            secrets: HostPath::parse("/etc/kubernetes/checkpoint-secrets").expect("valid"),
            configmaps: HostPath::parse("/etc/kubernetes/checkpoint-configmaps").expect("valid"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub enum SourceKind {
    Secret,
    ConfigMap,
}

/// One Secret or ConfigMap whose keys become files in a checkpoint volume directory.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Source {
    pub kind: SourceKind,
    pub name: String,
    /// `None`: every key, as a file of its own name.
    pub items: Option<Vec<(String, String)>>,
    pub optional: bool,
}

/// A directory of files the checkpoint's hostPath volume points at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Material {
    pub volume: String,
    pub dir: HostPath,
    pub sources: Vec<Source>,
    /// Per-file mode: 0600, or the volume's own mode when stricter.
    pub mode: u32,
    pub owner: (u32, u32),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub pod: Pod,
    pub materials: Vec<Material>,
}

impl Checkpoint {
    /// The file name bootkube uses: `<namespace>-<name>.json`.
    pub fn file_name(&self) -> String {
        let m = &self.pod.metadata;
        format!(
            "{}-{}.json",
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default()
        )
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(&self.pod).expect("a Pod serializes");
        out.push(b'\n');
        out
    }
}

/// Is `pod` a parent (asks to be checkpointed, is not static, is not itself a checkpoint)?
pub fn is_parent(pod: &Pod) -> bool {
    let a = pod.metadata.annotations.as_ref();
    let get = |k: &str| a.and_then(|a| a.get(k)).map(String::as_str);
    get(CHECKPOINT_ANNOTATION) == Some("true")
        && get(CONFIG_SOURCE_ANNOTATION) != Some("file")
        && get(CHECKPOINT_OF_ANNOTATION).is_none()
}

pub fn sanitize(parent: &Pod, layout: &Layout) -> Result<Checkpoint, SanitizeError> {
    let name = parent.metadata.name.clone().unwrap_or_default();
    let namespace = parent.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    let pod_id = format!("{namespace}/{name}");
    let refuse = |field: String, problem: &str| SanitizeError::NotCheckpointable {
        pod: pod_id.clone(),
        field,
        problem: problem.into(),
    };
    let mut spec = parent.spec.clone().ok_or_else(|| refuse("spec".into(), "missing"))?;

    // Everything that binds the copy to the API, to scheduling, or to one incarnation.
    spec.service_account_name = None;
    spec.service_account = None;
    spec.automount_service_account_token = Some(false);
    spec.node_selector = None;
    spec.affinity = None;
    spec.node_name = None;
    spec.priority = None;
    spec.scheduling_gates = None;
    spec.ephemeral_containers = None;
    spec.image_pull_secrets = None;
    spec.resource_claims = None;

    let security = spec.security_context.as_ref();
    let owner = (
        security.and_then(|s| s.run_as_user).unwrap_or(0).max(0) as u32,
        security
            .and_then(|s| s.fs_group)
            .or_else(|| security.and_then(|s| s.run_as_group))
            .unwrap_or(0)
            .max(0) as u32,
    );
    let mut dropped = BTreeSet::new();
    let mut materials = Vec::new();
    let mut volumes = Vec::new();
    for (i, v) in spec.volumes.take().unwrap_or_default().into_iter().enumerate() {
        let field = format!("spec.volumes[{i}]");
        match convert_volume(v, &namespace, &name, layout, owner, &field).map_err(|p| refuse(field.clone(), &p))? {
            Converted::Keep(v) => volumes.push(v),
            Converted::Drop(volume_name) => {
                dropped.insert(volume_name);
            }
            Converted::HostPath(v, material) => {
                volumes.push(v);
                materials.push(material);
            }
        }
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    strip_mounts(&mut spec, &dropped);
    pin_node_addresses(&mut spec, parent).map_err(|(field, problem)| refuse(field, &problem))?;

    let mut annotations = BTreeMap::from([(CHECKPOINT_OF_ANNOTATION.to_string(), name.clone())]);
    if let Some(owner) = controller_key(parent) {
        annotations.insert(CHECKPOINT_OWNER_ANNOTATION.into(), owner);
    }
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace),
            labels: parent.metadata.labels.clone(),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    if let Some(reference) = staticpod::api_references(&pod).into_iter().next() {
        return Err(refuse(
            reference.field,
            &format!("references {} and cannot run as a static pod", reference.resource),
        ));
    }
    Ok(Checkpoint { pod, materials })
}

/// The owner a checkpoint belongs to: `<kind>/<namespace>/<name>` of the workload that keeps a
/// pod on this node. No UID: a DaemonSet recreated under the same name (`kubectl replace
/// --force`, orphan delete and create, uninstall and install) is the same owner, whose new pods
/// replace the old ones. A ReplicaSet is resolved to its Deployment (a rollout creates a new
/// ReplicaSet): a ReplicaSet whose pods carry `pod-template-hash=<h>` and whose name is
/// `<deployment>-<h>` belongs to that Deployment, which is how the Deployment controller names
/// them. A pod without a controller is its own owner.
pub fn controller_key(pod: &Pod) -> Option<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let owner = pod
        .metadata
        .owner_references
        .as_ref()
        .and_then(|o| o.iter().find(|r| r.controller == Some(true)));
    match owner {
        Some(o) => Some(owner_key(&o.kind, ns, &o.name, pod.metadata.labels.as_ref())),
        None => Some(format!("Pod/{ns}/{}", pod.metadata.name.as_deref()?)),
    }
}

/// `<kind>/<namespace>/<name>`, a ReplicaSet of a Deployment resolved to the Deployment.
pub(crate) fn owner_key(kind: &str, namespace: &str, name: &str, labels: Option<&BTreeMap<String, String>>) -> String {
    let hash = labels.and_then(|l| l.get("pod-template-hash"));
    if kind == "ReplicaSet"
        && let Some(deployment) = hash.and_then(|h| name.strip_suffix(&format!("-{h}")))
        && !deployment.is_empty()
    {
        return format!("Deployment/{namespace}/{deployment}");
    }
    format!("{kind}/{namespace}/{name}")
}

/// The owner of a checkpoint read from disk. Ours carry the owner annotation (older ones with a
/// `/<uid>` suffix, dropped here). bootkube's carry none: the owner is inferred from the labels
/// its controller puts on every pod — a DaemonSet pod has `controller-revision-hash` and
/// `pod-template-generation` and is named `<daemonset>-<5 chars>`; a Deployment pod has
/// `pod-template-hash=<h>` and is named `<deployment>-<h>-<5 chars>`. Anything else is keyed
/// as a bare pod of its name: never judged unwanted, so never retired on a timer.
pub fn checkpoint_owner(checkpoint: &Pod) -> Option<String> {
    let m = &checkpoint.metadata;
    let annotations = m.annotations.as_ref()?;
    let of = annotations.get(CHECKPOINT_OF_ANNOTATION)?;
    let ns = m.namespace.as_deref().unwrap_or("default");
    let labels = m.labels.as_ref();
    if let Some(owner) = annotations.get(CHECKPOINT_OWNER_ANNOTATION) {
        let mut parts = owner.splitn(4, '/');
        if let (Some(kind), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next())
            && !kind.is_empty()
            && !name.is_empty()
        {
            return Some(owner_key(kind, ns, name, labels));
        }
    }
    let generated_prefix = |name: &str| {
        let (prefix, suffix) = name.rsplit_once('-')?;
        (suffix.len() == 5 && suffix.bytes().all(|b| b.is_ascii_alphanumeric()) && !prefix.is_empty())
            .then(|| prefix.to_owned())
    };
    let label = |k: &str| labels.and_then(|l| l.get(k));
    if let Some(hash) = label("pod-template-hash")
        && let Some(rs) = generated_prefix(of)
        && rs.ends_with(&format!("-{hash}"))
    {
        return Some(owner_key("ReplicaSet", ns, &rs, labels));
    }
    if label("controller-revision-hash").is_some()
        && label("pod-template-generation").is_some()
        && let Some(ds) = generated_prefix(of)
    {
        return Some(format!("DaemonSet/{ns}/{ds}"));
    }
    Some(format!("Pod/{ns}/{of}"))
}

enum Converted {
    Keep(Volume),
    Drop(String),
    HostPath(Volume, Material),
}

fn items(list: &Option<Vec<KeyToPath>>) -> (Option<Vec<(String, String)>>, Option<i32>) {
    let strictest = list
        .iter()
        .flatten()
        .filter_map(|k| k.mode)
        .max_by_key(|m| std::cmp::Reverse(*m));
    (
        list.as_ref()
            .map(|l| l.iter().map(|k| (k.key.clone(), k.path.clone())).collect()),
        strictest,
    )
}

/// 0600, or `mode` when it grants less.
fn file_mode(mode: Option<i32>) -> u32 {
    mode.map(|m| (m as u32) & 0o600).unwrap_or(0o600)
}

fn convert_volume(
    v: Volume,
    ns: &str,
    pod: &str,
    layout: &Layout,
    owner: (u32, u32),
    field: &str,
) -> Result<Converted, String> {
    let host = |base: &HostPath, volume: &str| base.join(&format!("{ns}/{pod}/{volume}")).map_err(|e| e.to_string());
    let hostpath_volume = |name: &str, dir: &HostPath| Volume {
        name: name.into(),
        host_path: Some(HostPathVolumeSource {
            path: dir.to_string(),
            type_: Some("Directory".into()),
        }),
        ..Default::default()
    };
    // A plain Secret or ConfigMap volume: one source, one directory named after it.
    let single = |kind: SourceKind,
                  name: &str,
                  base: &HostPath,
                  list: &Option<Vec<KeyToPath>>,
                  optional: Option<bool>,
                  default_mode: Option<i32>| {
        let (items, item_mode) = items(list);
        let dir = host(base, name)?;
        let source = Source {
            kind,
            name: name.to_owned(),
            items,
            optional: optional.unwrap_or(false),
        };
        let material = Material {
            volume: v.name.clone(),
            dir: dir.clone(),
            sources: vec![source],
            mode: file_mode(item_mode.or(default_mode)),
            owner,
        };
        Ok::<_, String>(Converted::HostPath(hostpath_volume(&v.name, &dir), material))
    };
    if let Some(secret) = &v.secret {
        let name = secret.secret_name.as_deref().unwrap_or(&v.name);
        return single(
            SourceKind::Secret,
            name,
            &layout.secrets,
            &secret.items,
            secret.optional,
            secret.default_mode,
        );
    }
    if let Some(cm) = &v.config_map {
        return single(
            SourceKind::ConfigMap,
            &cm.name,
            &layout.configmaps,
            &cm.items,
            cm.optional,
            cm.default_mode,
        );
    }
    if let Some(projected) = &v.projected {
        let all = projected.sources.clone().unwrap_or_default();
        let mut sources = Vec::new();
        let mut strictest = projected.default_mode;
        let mut has_downward = false;
        for (k, s) in all.iter().enumerate() {
            if s.service_account_token.is_some() {
                continue; // the API token: meaningless without the API
            } else if let Some(secret) = &s.secret {
                let (items, m) = items(&secret.items);
                strictest = min_mode(strictest, m);
                sources.push(Source {
                    kind: SourceKind::Secret,
                    name: secret.name.clone(),
                    items,
                    optional: secret.optional.unwrap_or(false),
                });
            } else if let Some(cm) = &s.config_map {
                let (items, m) = items(&cm.items);
                strictest = min_mode(strictest, m);
                sources.push(Source {
                    kind: SourceKind::ConfigMap,
                    name: cm.name.clone(),
                    items,
                    optional: cm.optional.unwrap_or(false),
                });
            } else if s.downward_api.is_some() {
                has_downward = true;
            } else {
                return Err(format!("projected.sources[{k}] of {field} has no static equivalent"));
            }
        }
        return Ok(match (sources.is_empty(), has_downward) {
            // The kube-api-access-* volume: token, CA configmap and namespace. Without the API
            // none of it means anything.
            (_, _)
                if all.iter().any(|s| s.service_account_token.is_some()) && v.name.starts_with("kube-api-access-") =>
            {
                Converted::Drop(v.name)
            }
            (true, true) => Converted::Keep(v),
            (true, false) => Converted::Drop(v.name),
            (false, true) => {
                return Err(format!(
                    "{field}: a projected volume mixing downwardAPI with secrets or configmaps has no static equivalent"
                ));
            }
            (false, false) => {
                let dir = host(&layout.secrets, &v.name)?;
                let material = Material {
                    volume: v.name.clone(),
                    dir: dir.clone(),
                    sources,
                    mode: file_mode(strictest),
                    owner,
                };
                Converted::HostPath(hostpath_volume(&v.name, &dir), material)
            }
        });
    }
    Ok(Converted::Keep(v))
}

fn min_mode(a: Option<i32>, b: Option<i32>) -> Option<i32> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a & b),
        (a, b) => a.or(b),
    }
}

/// Environment variables whose downward-API value is the node's address (`status.hostIP(s)`,
/// and `status.podIP(s)` of a host-network pod) become that value, as the parent's status has
/// it. The kubelet resolves those from its Node, which it knows with no API only when it can
/// name its own address; with `--cloud-provider=external` the addresses come from the cloud
/// controller manager through the API, and a checkpoint asking for them would fail to start
/// (`CreateContainerConfigError`) exactly when it is needed, after a cold reboot. A control-plane
/// node's address does not change across reboots (etcd's peers and the serving certificates
/// name it). A pod network address (`status.podIP` without the host network) is the sandbox's
/// own and stays as it is.
fn pin_node_addresses(spec: &mut PodSpec, parent: &Pod) -> Result<(), (String, String)> {
    let status = parent.status.clone().unwrap_or_default();
    let host_ips: Vec<&str> = status.host_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
    let pod_ips: Vec<&str> = status.pod_ips.iter().flatten().map(|i| i.ip.as_str()).collect();
    let host_network = spec.host_network == Some(true);
    let containers = spec
        .init_containers
        .iter_mut()
        .flatten()
        .map(|c| ("initContainers", c))
        .chain(spec.containers.iter_mut().map(|c| ("containers", c)));
    for (kind, container) in containers {
        for var in container.env.iter_mut().flatten() {
            let Some(path) = var
                .value_from
                .as_ref()
                .and_then(|f| f.field_ref.as_ref())
                .map(|f| f.field_path.clone())
            else {
                continue;
            };
            let value = match path.as_str() {
                "status.hostIP" => status.host_ip.clone(),
                "status.hostIPs" => Some(host_ips.join(",")),
                "status.podIP" if host_network => status.pod_ip.clone(),
                "status.podIPs" if host_network => Some(pod_ips.join(",")),
                _ => continue,
            };
            let field = format!("spec.{kind}[{}].env[{}]", container.name, var.name);
            let value = value
                .filter(|v| !v.is_empty())
                .ok_or_else(|| (field, format!("{path} is not in the parent's status yet")))?;
            var.value = Some(value);
            var.value_from = None;
        }
    }
    Ok(())
}

fn strip_mounts(spec: &mut PodSpec, dropped: &BTreeSet<String>) {
    let keep = |mounts: &mut Option<Vec<k8s_openapi::api::core::v1::VolumeMount>>| {
        if let Some(m) = mounts {
            m.retain(|m| !dropped.contains(&m.name));
        }
    };
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        keep(&mut c.volume_mounts);
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MaterializeError {
    #[error("{kind:?} {name} is needed by volume {volume} and was not found")]
    Missing {
        kind: SourceKind,
        name: String,
        volume: String,
    },
    #[error("{kind:?} {name} has no key {key} (volume {volume})")]
    MissingKey {
        kind: SourceKind,
        name: String,
        key: String,
        volume: String,
    },
    #[error("volume {volume}: file path {path:?}: {source}")]
    Path {
        volume: String,
        path: String,
        source: HostPathError,
    },
}

/// The data of each Secret/ConfigMap by (kind, name), as fetched; `None` means not found.
pub(crate) type Fetched = BTreeMap<(SourceKind, String), Option<BTreeMap<String, Vec<u8>>>>;

/// The files of one checkpoint volume, from what was `fetched`.
pub fn materialize(material: &Material, fetched: &Fetched) -> Result<Vec<(HostPath, Vec<u8>)>, MaterializeError> {
    let mut files = Vec::new();
    for source in &material.sources {
        let data = match fetched
            .get(&(source.kind, source.name.clone()))
            .and_then(Option::as_ref)
        {
            Some(data) => data,
            None if source.optional => continue,
            None => {
                return Err(MaterializeError::Missing {
                    kind: source.kind,
                    name: source.name.clone(),
                    volume: material.volume.clone(),
                });
            }
        };
        let wanted: Vec<(String, String)> = match &source.items {
            Some(items) => items.clone(),
            None => data.keys().map(|k| (k.clone(), k.clone())).collect(),
        };
        for (key, path) in wanted {
            let Some(content) = data.get(&key) else {
                if source.optional {
                    continue;
                }
                return Err(MaterializeError::MissingKey {
                    kind: source.kind,
                    name: source.name.clone(),
                    key,
                    volume: material.volume.clone(),
                });
            };
            let host = material.dir.join(&path).map_err(|e| MaterializeError::Path {
                volume: material.volume.clone(),
                path: path.clone(),
                source: e,
            })?;
            if !host.starts_with(&material.dir) || host == material.dir {
                return Err(MaterializeError::Path {
                    volume: material.volume.clone(),
                    path: path.clone(),
                    source: HostPathError::ParentComponent { path },
                });
            }
            files.push((host, content.clone()));
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A DaemonSet pod as the API returns it, with the projected token volume every pod has had
    /// since Kubernetes 1.21, a secret volume with items, a configmap volume and a security context.
    fn parent() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "kube-apiserver-x7k2p", "namespace": "kube-system", "uid": "pod-uid-1",
                "resourceVersion": "123", "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"k8s-app": "kube-apiserver"},
                "annotations": {CHECKPOINT_ANNOTATION: "true", "other": "x"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-apiserver", "uid": "ds-uid", "controller": true}]
            },
            "spec": {
                "nodeName": "cp-1", "serviceAccountName": "kube-apiserver", "serviceAccount": "kube-apiserver",
                "priority": 2000001000, "priorityClassName": "system-node-critical", "hostNetwork": true,
                "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
                "affinity": {"nodeAffinity": {}},
                "securityContext": {"runAsUser": 1000, "fsGroup": 2000},
                "imagePullSecrets": [{"name": "regcred"}],
                "containers": [{
                    "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.36.3",
                    "volumeMounts": [
                        {"name": "secrets", "mountPath": "/etc/kubernetes/secrets"},
                        {"name": "config", "mountPath": "/etc/kubernetes/config"},
                        {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
                    ]
                }],
                "volumes": [
                    {"name": "secrets", "secret": {"secretName": "kube-apiserver", "defaultMode": 0o644,
                        "items": [{"key": "apiserver.key", "path": "apiserver.key", "mode": 0o400}, {"key": "apiserver.crt", "path": "tls/apiserver.crt"}]}},
                    {"name": "config", "configMap": {"name": "kube-apiserver-config"}},
                    {"name": "kube-api-access-abcde", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}
                    ]}},
                    {"name": "host", "hostPath": {"path": "/etc/ssl"}}
                ]
            },
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    #[test]
    fn parents_are_recognized() {
        let mut p = parent();
        assert!(is_parent(&p));
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CONFIG_SOURCE_ANNOTATION.into(), "file".into());
        assert!(!is_parent(&p), "static pods are not parents");
        let mut p = parent();
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CHECKPOINT_OF_ANNOTATION.into(), "x".into());
        assert!(!is_parent(&p), "checkpoints are not parents");
        let mut p = parent();
        p.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(CHECKPOINT_ANNOTATION.into(), "false".into());
        assert!(!is_parent(&p));
    }

    /// The parent's first container with `env`, its status with `status`.
    fn with_env(host_network: bool, env: serde_json::Value, status: serde_json::Value) -> Pod {
        let mut p = parent();
        let spec = p.spec.as_mut().unwrap();
        spec.host_network = Some(host_network);
        spec.containers[0].env = Some(serde_json::from_value(env).unwrap());
        p.status = Some(serde_json::from_value(status).unwrap());
        p
    }

    fn env_of(c: &Checkpoint) -> Vec<(String, Option<String>, bool)> {
        c.pod.spec.as_ref().unwrap().containers[0]
            .env
            .iter()
            .flatten()
            .map(|v| (v.name.clone(), v.value.clone(), v.value_from.is_some()))
            .collect()
    }

    #[test]
    fn the_node_address_is_pinned_for_a_copy_that_must_start_without_an_api() {
        let fields = |paths: &[&str]| -> serde_json::Value {
            paths
                .iter()
                .map(|p| serde_json::json!({"name": p.replace('.', "_"), "valueFrom": {"fieldRef": {"fieldPath": p}}}))
                .collect()
        };
        let status = serde_json::json!({
            "phase": "Running", "hostIP": "10.0.0.11", "hostIPs": [{"ip": "10.0.0.11"}, {"ip": "fd00::11"}],
            "podIP": "10.0.0.11", "podIPs": [{"ip": "10.0.0.11"}, {"ip": "fd00::11"}]
        });
        let all = [
            "status.hostIP",
            "status.hostIPs",
            "status.podIP",
            "status.podIPs",
            "spec.nodeName",
            "metadata.name",
        ];
        let host = sanitize(&with_env(true, fields(&all), status.clone()), &Layout::default()).unwrap();
        let pinned = |v: &str| (Some(v.to_owned()), false);
        let got: Vec<(Option<String>, bool)> = env_of(&host).into_iter().map(|(_, v, f)| (v, f)).collect();
        assert_eq!(
            got,
            [
                pinned("10.0.0.11"),
                pinned("10.0.0.11,fd00::11"),
                pinned("10.0.0.11"),
                pinned("10.0.0.11,fd00::11"),
                // The kubelet knows these of a static pod by itself.
                (None, true),
                (None, true),
            ]
        );
        // A pod network address belongs to the sandbox the kubelet makes: left to the kubelet.
        let pod_network = sanitize(&with_env(false, fields(&all), status), &Layout::default()).unwrap();
        let from_field: Vec<bool> = env_of(&pod_network).into_iter().map(|(_, _, f)| f).collect();
        assert_eq!(from_field, [false, false, true, true, true, true]);
    }

    #[test]
    fn a_node_address_missing_from_the_status_is_refused_by_name() {
        let env = serde_json::json!([{"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]);
        let err = sanitize(
            &with_env(true, env, serde_json::json!({"phase": "Pending"})),
            &Layout::default(),
        )
        .unwrap_err();
        assert_eq!(
            err,
            SanitizeError::NotCheckpointable {
                pod: "kube-system/kube-apiserver-x7k2p".into(),
                field: "spec.containers[kube-apiserver].env[HOST_IP]".into(),
                problem: "status.hostIP is not in the parent's status yet".into(),
            }
        );
    }

    #[test]
    fn sanitized_pod_is_a_valid_static_pod() {
        let c = sanitize(&parent(), &Layout::default()).unwrap();
        assert!(staticpod::api_references(&c.pod).is_empty());
        let m = &c.pod.metadata;
        assert_eq!(m.name.as_deref(), Some("kube-apiserver-x7k2p"));
        assert_eq!(m.labels.as_ref().unwrap()["k8s-app"], "kube-apiserver");
        let a = m.annotations.as_ref().unwrap();
        assert_eq!(a[CHECKPOINT_OF_ANNOTATION], "kube-apiserver-x7k2p");
        assert_eq!(a[CHECKPOINT_OWNER_ANNOTATION], "DaemonSet/kube-system/kube-apiserver");
        assert!(!a.contains_key(CHECKPOINT_ANNOTATION) && !a.contains_key("other"));
        assert!(
            m.uid.is_none()
                && m.resource_version.is_none()
                && m.owner_references.is_none()
                && m.creation_timestamp.is_none()
        );
        assert!(c.pod.status.is_none());
        let s = c.pod.spec.as_ref().unwrap();
        assert!(
            s.service_account_name.is_none()
                && s.node_selector.is_none()
                && s.affinity.is_none()
                && s.node_name.is_none()
        );
        assert!(s.priority.is_none() && s.image_pull_secrets.is_none());
        assert_eq!(s.priority_class_name.as_deref(), Some("system-node-critical"));
        assert_eq!(c.file_name(), "kube-system-kube-apiserver-x7k2p.json");
        // Valid for `apply`'s own check too (round trip through JSON text).
        staticpod::parse(
            std::path::Path::new("checkpoint.json"),
            std::str::from_utf8(&c.to_json()).unwrap(),
        )
        .unwrap();
    }

    #[test]
    fn token_volume_and_its_mounts_go_and_secrets_become_host_paths() {
        let c = sanitize(&parent(), &Layout::default()).unwrap();
        let s = c.pod.spec.as_ref().unwrap();
        let volumes: Vec<(String, Option<String>)> = s
            .volumes
            .as_ref()
            .unwrap()
            .iter()
            .map(|v| (v.name.clone(), v.host_path.as_ref().map(|h| h.path.clone())))
            .collect();
        assert_eq!(
            volumes,
            [
                (
                    "secrets".to_string(),
                    Some(
                        "/etc/kubernetes/checkpoint-secrets/kube-system/kube-apiserver-x7k2p/kube-apiserver"
                            .to_string()
                    )
                ),
                (
                    "config".to_string(),
                    Some(
                        "/etc/kubernetes/checkpoint-configmaps/kube-system/kube-apiserver-x7k2p/kube-apiserver-config"
                            .to_string()
                    )
                ),
                ("host".to_string(), Some("/etc/ssl".to_string())),
            ]
        );
        let mounts: Vec<&str> = s.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(mounts, ["secrets", "config"]);
        assert_eq!(c.materials.len(), 2);
        // Strictest of the items (0400) wins over 0600; owner from runAsUser / fsGroup.
        assert_eq!((c.materials[0].mode, c.materials[0].owner), (0o400, (1000, 2000)));
        assert_eq!(c.materials[1].mode, 0o600);
    }

    #[test]
    fn materialized_files_follow_items_and_refuse_escapes() {
        let c = sanitize(&parent(), &Layout::default()).unwrap();
        let mut fetched = BTreeMap::new();
        fetched.insert(
            (SourceKind::Secret, "kube-apiserver".to_string()),
            Some(BTreeMap::from([
                ("apiserver.key".to_string(), b"KEY".to_vec()),
                ("apiserver.crt".to_string(), b"CRT".to_vec()),
                ("unlisted".to_string(), b"X".to_vec()),
            ])),
        );
        let files = materialize(&c.materials[0], &fetched).unwrap();
        let paths: Vec<String> = files.iter().map(|(p, _)| p.to_string()).collect();
        assert_eq!(
            paths,
            [
                "/etc/kubernetes/checkpoint-secrets/kube-system/kube-apiserver-x7k2p/kube-apiserver/apiserver.key",
                "/etc/kubernetes/checkpoint-secrets/kube-system/kube-apiserver-x7k2p/kube-apiserver/tls/apiserver.crt"
            ]
        );
        assert_eq!(
            materialize(&c.materials[1], &fetched).unwrap_err(),
            MaterializeError::Missing {
                kind: SourceKind::ConfigMap,
                name: "kube-apiserver-config".into(),
                volume: "config".into()
            }
        );
        let mut evil = c.materials[0].clone();
        evil.sources[0].items = Some(vec![("apiserver.key".into(), "../../../../../shadow".into())]);
        assert!(matches!(
            materialize(&evil, &fetched),
            Err(MaterializeError::Path { .. })
        ));
    }

    #[test]
    fn projected_secrets_become_one_directory_and_env_references_are_refused() {
        let mut p = parent();
        let spec = p.spec.as_mut().unwrap();
        spec.volumes.as_mut().unwrap().push(serde_json::from_value(serde_json::json!(
            {"name": "bundle", "projected": {"defaultMode": 0o440, "sources": [{"secret": {"name": "a"}}, {"configMap": {"name": "b", "items": [{"key": "k", "path": "k"}]}}]}}
        )).unwrap());
        let c = sanitize(&p, &Layout::default()).unwrap();
        let bundle = c.materials.iter().find(|m| m.volume == "bundle").unwrap();
        assert_eq!(bundle.sources.len(), 2);
        assert_eq!(bundle.mode, 0o400);
        assert!(bundle.dir.to_string().ends_with("/kube-apiserver-x7k2p/bundle"));

        let mut p = parent();
        p.spec.as_mut().unwrap().containers[0].env = Some(vec![
            serde_json::from_value(serde_json::json!(
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}
            ))
            .unwrap(),
        ]);
        let err = sanitize(&p, &Layout::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("spec.containers[0].env[0].valueFrom.secretKeyRef"),
            "{err}"
        );
    }
    fn pod_with(
        name: &str,
        labels: serde_json::Value,
        owner: Option<(&str, &str)>,
        annotations: serde_json::Value,
    ) -> Pod {
        let owners: Vec<serde_json::Value> = owner
            .map(|(kind, name)| serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u1", "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": "pod-uid", "labels": labels,
                "annotations": annotations, "ownerReferences": owners},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap()
    }

    #[test]
    fn owners_are_workloads_by_name_a_replicaset_resolved_to_its_deployment() {
        let key = |p: &Pod| controller_key(p).unwrap();
        let rs = pod_with(
            "web-7d9f8c6b5d-x2x9q",
            serde_json::json!({"pod-template-hash": "7d9f8c6b5d"}),
            Some(("ReplicaSet", "web-7d9f8c6b5d")),
            serde_json::json!({}),
        );
        assert_eq!(key(&rs), "Deployment/ns/web");
        // The next rollout's ReplicaSet is the same owner.
        let rs2 = pod_with(
            "web-55b6f7c7d8-abcde",
            serde_json::json!({"pod-template-hash": "55b6f7c7d8"}),
            Some(("ReplicaSet", "web-55b6f7c7d8")),
            serde_json::json!({}),
        );
        assert_eq!(key(&rs2), key(&rs));
        // A ReplicaSet of its own (no matching hash label) stays a ReplicaSet.
        let bare_rs = pod_with(
            "batch-abcde",
            serde_json::json!({}),
            Some(("ReplicaSet", "batch")),
            serde_json::json!({}),
        );
        assert_eq!(key(&bare_rs), "ReplicaSet/ns/batch");
        // A DaemonSet by name: a recreated one (another UID) is the same owner.
        let ds = pod_with(
            "agent-abcde",
            serde_json::json!({}),
            Some(("DaemonSet", "agent")),
            serde_json::json!({}),
        );
        assert_eq!(key(&ds), "DaemonSet/ns/agent");
        let bare = pod_with("solo", serde_json::json!({}), None, serde_json::json!({}));
        assert_eq!(key(&bare), "Pod/ns/solo");
        // The checkpoint carries it.
        let mut parent = rs.clone();
        parent.metadata.annotations = Some([(CHECKPOINT_ANNOTATION.to_string(), "true".to_string())].into());
        let c = sanitize(&parent, &Layout::default()).unwrap();
        assert_eq!(checkpoint_owner(&c.pod).as_deref(), Some("Deployment/ns/web"));
    }

    #[test]
    fn owners_of_checkpoints_on_disk_older_formats_included() {
        let of = |name: &str| serde_json::json!({CHECKPOINT_OF_ANNOTATION: name});
        // Ours, from before owners were keyed by name: the UID is dropped.
        let mut a = of("agent-abcde");
        a[CHECKPOINT_OWNER_ANNOTATION] = "DaemonSet/ns/agent/0b5c".into();
        let old = pod_with("agent-abcde", serde_json::json!({}), None, a);
        assert_eq!(checkpoint_owner(&old).as_deref(), Some("DaemonSet/ns/agent"));
        let mut a = of("web-7d9f8c6b5d-x2x9q");
        a[CHECKPOINT_OWNER_ANNOTATION] = "ReplicaSet/ns/web-7d9f8c6b5d/0b5c".into();
        let old_rs = pod_with(
            "web-7d9f8c6b5d-x2x9q",
            serde_json::json!({"pod-template-hash": "7d9f8c6b5d"}),
            None,
            a,
        );
        assert_eq!(checkpoint_owner(&old_rs).as_deref(), Some("Deployment/ns/web"));
        // bootkube's: inferred from the labels its controller sets and the generated name.
        let ds = pod_with(
            "kube-apiserver-7hx2p",
            serde_json::json!({"controller-revision-hash": "5f7", "pod-template-generation": "3"}),
            None,
            of("kube-apiserver-7hx2p"),
        );
        assert_eq!(checkpoint_owner(&ds).as_deref(), Some("DaemonSet/ns/kube-apiserver"));
        let deploy = pod_with(
            "web-7d9f8c6b5d-x2x9q",
            serde_json::json!({"pod-template-hash": "7d9f8c6b5d"}),
            None,
            of("web-7d9f8c6b5d-x2x9q"),
        );
        assert_eq!(checkpoint_owner(&deploy).as_deref(), Some("Deployment/ns/web"));
        let unknown = pod_with("thing", serde_json::json!({}), None, of("thing"));
        assert_eq!(checkpoint_owner(&unknown).as_deref(), Some("Pod/ns/thing"));
        // Not a checkpoint.
        let plain = pod_with("x", serde_json::json!({}), None, serde_json::json!({}));
        assert_eq!(checkpoint_owner(&plain), None);
    }

    #[test]
    fn an_emptydir_survives_for_the_health_socket_of_the_static_copy() {
        let mut p = parent();
        let spec = p.spec.as_mut().unwrap();
        spec.volumes.as_mut().unwrap().push(
            serde_json::from_value(
                serde_json::json!({"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}),
            )
            .unwrap(),
        );
        spec.containers[0]
            .volume_mounts
            .as_mut()
            .unwrap()
            .push(serde_json::from_value(serde_json::json!({"name": "run", "mountPath": "/run/kube-anchor"})).unwrap());
        let c = sanitize(&p, &Layout::default()).unwrap();
        let s = c.pod.spec.as_ref().unwrap();
        assert!(
            s.volumes
                .as_ref()
                .unwrap()
                .iter()
                .any(|v| v.name == "run" && v.empty_dir.is_some())
        );
        assert!(
            s.containers[0]
                .volume_mounts
                .as_ref()
                .unwrap()
                .iter()
                .any(|m| m.name == "run")
        );
    }
}
