//! `kube-anchor bootstrap`, the pure part: from the objects `helm template` renders (the same
//! ones `helm install` creates) to what each anchor DaemonSet would mount and see on one node.
//!
//! The charts stay the one source of truth from the first boot: the node gets exactly the inputs
//! its anchor pods will mount later, so the anchors find every file in place with the content
//! hash they would write, and adopt it. No filesystem here; the modes crate's `bootstrap_node` stages the
//! volumes and applies them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Secret, Volume};

use crate::decommission;

/// The env var by which an anchor DaemonSet's container names its config (the chart sets it).
pub(crate) const CONFIG_ENV: &str = "KUBE_ANCHOR_CONFIG";
/// The components of a control plane, in the order they must come up.
pub(crate) const CONTROL_PLANE: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    #[error("{source_name}: {problem}")]
    Yaml { source_name: String, problem: String },
    #[error("{source_name}: document {index}: {problem}")]
    Document {
        source_name: String,
        index: usize,
        problem: String,
    },
    #[error("{source_name}: {kind} {namespace}/{name} appears twice")]
    Duplicate {
        source_name: String,
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("DaemonSet {namespace}/{daemonset}: {problem}")]
    Unsupported {
        namespace: String,
        daemonset: String,
        problem: String,
    },
    #[error("DaemonSet {namespace}/{daemonset} mounts {kind} {name}, which the input does not hold")]
    MissingObject {
        namespace: String,
        daemonset: String,
        kind: &'static str,
        name: String,
    },
    #[error(
        "no anchor DaemonSet in the input selects node {node}{labels}: nothing to bootstrap (is it the output of `helm template` of the component charts, with the node's labels given by --node-label?)"
    )]
    NoAnchors { node: String, labels: String },
}

/// What bootstrap knows of the node: what a DaemonSet's nodeSelector and downward API see.
#[derive(Debug, Clone)]
pub struct ThisNode {
    pub name: String,
    pub ip: String,
    pub labels: BTreeMap<String, String>,
}

impl ThisNode {
    /// `kubernetes.io/hostname` is always the node's name, as the kubelet labels it.
    pub fn new(name: &str, ip: &str, labels: impl IntoIterator<Item = (String, String)>) -> Self {
        let mut labels: BTreeMap<String, String> = labels.into_iter().collect();
        labels.insert("kubernetes.io/hostname".into(), name.into());
        Self {
            name: name.into(),
            ip: ip.into(),
            labels,
        }
    }
}

/// The objects of one or more `helm template` outputs that bootstrap reads.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub daemonsets: Vec<DaemonSet>,
    config_maps: BTreeMap<(String, String), ConfigMap>,
    secrets: BTreeMap<(String, String), Secret>,
}

/// A file of a mounted ConfigMap or Secret, as the container sees it.
#[derive(Clone, PartialEq, Eq)]
pub struct MountedFile {
    /// Path in the container (mount path joined with the key).
    pub path: PathBuf,
    pub content: Vec<u8>,
    pub mode: u32,
}

impl std::fmt::Debug for MountedFile {
    // Secret volumes hold keys: never their bytes in a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountedFile")
            .field("path", &self.path)
            .field("bytes", &self.content.len())
            .field("mode", &format_args!("{:04o}", self.mode))
            .finish()
    }
}

/// One anchor DaemonSet as its pod on this node would run: its environment (downward API
/// resolved, `$(VAR)` expanded) and the files of its ConfigMap and Secret volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedAnchor {
    pub namespace: String,
    pub daemonset: String,
    pub env: BTreeMap<String, String>,
    pub files: Vec<MountedFile>,
    /// The ConfigMaps and Secrets the files came from (`Secret kube-apiserver`), for messages.
    pub sources: Vec<String>,
}

impl PlannedAnchor {
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }

    /// The config file's path in the container.
    pub fn config_path(&self) -> &Path {
        Path::new(self.env(CONFIG_ENV).expect("an anchor pod has a config"))
    }
}

impl Objects {
    /// Adds every object of a multi-document YAML text; kinds other than DaemonSet, ConfigMap
    /// and Secret (RBAC, ServiceAccounts, ...) are skipped.
    pub fn add_yaml(&mut self, source_name: &str, text: &str) -> Result<(), BootstrapError> {
        use serde::Deserialize;
        crate::yaml::check_flow_depth(text).map_err(|offset| BootstrapError::Yaml {
            source_name: source_name.into(),
            problem: crate::yaml::YamlError::TooDeep { offset }.to_string(),
        })?;
        for (index, document) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
            let bad = |problem: String| BootstrapError::Document {
                source_name: source_name.into(),
                index: index + 1,
                problem,
            };
            let mut value = serde_yaml_ng::Value::deserialize(document).map_err(|e| bad(e.to_string()))?;
            crate::yaml::refuse_merge_keys_and_tags(&value).map_err(|e| bad(e.to_string()))?;
            octal_modes(&mut value);
            if value.is_null() {
                continue; // `---` with nothing after it
            }
            let kind = value
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or_default()
                .to_owned();
            let api_version = value.get("apiVersion").and_then(|k| k.as_str()).unwrap_or_default();
            match (api_version, kind.as_str()) {
                ("apps/v1", "DaemonSet") => {
                    let ds: DaemonSet = serde_yaml_ng::from_value(value).map_err(|e| bad(format!("DaemonSet: {e}")))?;
                    let key = key_of(&ds.metadata);
                    if self.daemonsets.iter().any(|d| key_of(&d.metadata) == key) {
                        return Err(duplicate(source_name, "DaemonSet", key));
                    }
                    self.daemonsets.push(ds);
                }
                ("v1", "ConfigMap") => {
                    let cm: ConfigMap = serde_yaml_ng::from_value(value).map_err(|e| bad(format!("ConfigMap: {e}")))?;
                    let key = key_of(&cm.metadata);
                    if self.config_maps.insert(key.clone(), cm).is_some() {
                        return Err(duplicate(source_name, "ConfigMap", key));
                    }
                }
                ("v1", "Secret") => {
                    let secret: Secret = serde_yaml_ng::from_value(value).map_err(|e| bad(format!("Secret: {e}")))?;
                    let key = key_of(&secret.metadata);
                    if self.secrets.insert(key.clone(), secret).is_some() {
                        return Err(duplicate(source_name, "Secret", key));
                    }
                }
                ("", _) | (_, "") => return Err(bad("not a Kubernetes object (no apiVersion or kind)".into())),
                _ => {}
            }
        }
        Ok(())
    }

    /// The anchor pods the node would run: every DaemonSet whose container runs `kube-anchor run`
    /// and whose node selection (nodeSelector, required node affinity) the node satisfies.
    pub fn anchors_for(&self, node: &ThisNode) -> Result<Vec<PlannedAnchor>, BootstrapError> {
        let mut pods = Vec::new();
        for ds in &self.daemonsets {
            let (namespace, name) = key_of(&ds.metadata);
            let unsupported = |problem: String| BootstrapError::Unsupported {
                namespace: namespace.clone(),
                daemonset: name.clone(),
                problem,
            };
            let Some(spec) = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
                continue;
            };
            let Some(container) = spec.containers.iter().find(|c| is_anchor(c)) else {
                continue;
            };
            // The DaemonSet controller's rule (nodeSelector and required node affinity, judged
            // on the labels given for the node), the same one the removal evidence uses.
            if !decommission::matches_node(&decommission::NodeSelection::of(Some(spec)), &node.labels, &node.name) {
                continue;
            }
            let annotations = ds
                .spec
                .as_ref()
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.annotations.clone())
                .unwrap_or_default();
            let env = environment(container, node, &namespace, &name, &annotations).map_err(unsupported)?;
            let (files, sources) = self.mounted_files(
                container,
                spec.volumes.as_deref().unwrap_or_default(),
                &namespace,
                &name,
            )?;
            pods.push(PlannedAnchor {
                namespace,
                daemonset: name,
                env,
                files,
                sources,
            });
        }
        if pods.is_empty() {
            let labels = node
                .labels
                .iter()
                .filter(|(k, _)| k.as_str() != "kubernetes.io/hostname")
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            return Err(BootstrapError::NoAnchors {
                node: node.name.clone(),
                labels: if labels.is_empty() {
                    String::new()
                } else {
                    format!(" (labels {labels})")
                },
            });
        }
        Ok(pods)
    }

    fn mounted_files(
        &self,
        container: &Container,
        volumes: &[Volume],
        namespace: &str,
        daemonset: &str,
    ) -> Result<(Vec<MountedFile>, Vec<String>), BootstrapError> {
        let missing = |kind, name: &str| BootstrapError::MissingObject {
            namespace: namespace.into(),
            daemonset: daemonset.into(),
            kind,
            name: name.into(),
        };
        let mut files = Vec::new();
        let mut names = Vec::new();
        for mount in container.volume_mounts.as_deref().unwrap_or_default() {
            let Some(volume) = volumes.iter().find(|v| v.name == mount.name) else {
                continue;
            };
            let dir = Path::new(&mount.mount_path);
            // Each source: (kind, name, optional, default mode).
            let mut sources: Vec<(&'static str, String, bool, i32)> = Vec::new();
            if let Some(cm) = &volume.config_map {
                sources.push((
                    "ConfigMap",
                    cm.name.clone(),
                    cm.optional == Some(true),
                    cm.default_mode.unwrap_or(0o644),
                ));
            }
            if let Some(s) = &volume.secret {
                let name = s.secret_name.clone().unwrap_or_default();
                sources.push((
                    "Secret",
                    name,
                    s.optional == Some(true),
                    s.default_mode.unwrap_or(0o644),
                ));
            }
            if let Some(p) = &volume.projected {
                let mode = p.default_mode.unwrap_or(0o644);
                for source in p.sources.as_deref().unwrap_or_default() {
                    if let Some(s) = &source.secret {
                        sources.push(("Secret", s.name.clone(), s.optional == Some(true), mode));
                    }
                    if let Some(cm) = &source.config_map {
                        sources.push(("ConfigMap", cm.name.clone(), cm.optional == Some(true), mode));
                    }
                }
            }
            for (kind, name, optional, mode) in sources {
                let key = (namespace.to_owned(), name.clone());
                let data: Option<Vec<(String, Vec<u8>)>> = match kind {
                    "ConfigMap" => self.config_maps.get(&key).map(|cm| {
                        let text = cm
                            .data
                            .iter()
                            .flatten()
                            .map(|(k, v)| (k.clone(), v.clone().into_bytes()));
                        let binary = cm.binary_data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone()));
                        text.chain(binary).collect()
                    }),
                    _ => self.secrets.get(&key).map(|s| {
                        let data = s.data.iter().flatten().map(|(k, v)| (k.clone(), v.0.clone()));
                        let string_data = s
                            .string_data
                            .iter()
                            .flatten()
                            .map(|(k, v)| (k.clone(), v.clone().into_bytes()));
                        data.chain(string_data).collect()
                    }),
                };
                if data.is_some() {
                    names.push(format!("{kind} {name}"));
                }
                match data {
                    Some(entries) => files.extend(entries.into_iter().map(|(k, content)| MountedFile {
                        path: dir.join(k),
                        content,
                        mode: mode as u32 & 0o777,
                    })),
                    None if optional => {}
                    None => return Err(missing(kind, &name)),
                }
            }
        }
        Ok((files, names))
    }
}

/// Kubernetes reads manifests as YAML 1.1, where `defaultMode: 0400` is octal; YAML 1.2 (this
/// parser) reads it as a string. Only the file-mode fields are converted.
fn octal_modes(value: &mut serde_yaml_ng::Value) {
    use serde_yaml_ng::Value;
    match value {
        Value::Mapping(map) => {
            for (k, v) in map.iter_mut() {
                let is_mode = matches!(k.as_str(), Some("defaultMode" | "mode"));
                if let (true, Value::String(s)) = (is_mode, &*v)
                    && let Some(digits) = s.strip_prefix("0o").or_else(|| s.strip_prefix('0'))
                    && let Ok(mode) = u32::from_str_radix(if digits.is_empty() { "0" } else { digits }, 8)
                {
                    *v = Value::Number(mode.into());
                } else {
                    octal_modes(v);
                }
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(octal_modes),
        Value::Tagged(tagged) => octal_modes(&mut tagged.value),
        _ => {}
    }
}

fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_else(|| "default".into()),
        meta.name.clone().unwrap_or_default(),
    )
}

fn duplicate(source_name: &str, kind: &'static str, (namespace, name): (String, String)) -> BootstrapError {
    BootstrapError::Duplicate {
        source_name: source_name.into(),
        kind,
        namespace,
        name,
    }
}

/// `kube-anchor run` with a config: the anchor container of a component chart.
fn is_anchor(c: &Container) -> bool {
    let runs = c.args.as_ref().and_then(|a| a.first()).is_some_and(|a| a == "run");
    let configured = c.env.iter().flatten().any(|e| e.name == CONFIG_ENV);
    runs && configured
}

/// The container's environment as the kubelet would give it on this node: the downward API
/// fields bootstrap can know, and `$(VAR)` references to earlier variables expanded.
fn environment(
    c: &Container,
    node: &ThisNode,
    namespace: &str,
    daemonset: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, String> {
    let mut env = BTreeMap::new();
    for var in c.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(v), _) => expand(v, &env),
            (None, Some(from)) => match &from.field_ref {
                Some(field) => match field.field_path.as_str() {
                    "spec.nodeName" => node.name.clone(),
                    "status.hostIP" | "status.podIP" => node.ip.clone(),
                    "metadata.namespace" => namespace.to_owned(),
                    "metadata.name" => format!("{daemonset}-bootstrap"),
                    path => match path
                        .strip_prefix("metadata.annotations['")
                        .and_then(|p| p.strip_suffix("']"))
                    {
                        Some(key) => annotations.get(key).cloned().unwrap_or_default(),
                        None => {
                            return Err(format!(
                                "env {}: field {path} is not known before the API exists",
                                var.name
                            ));
                        }
                    },
                },
                None => return Err(format!("env {}: only fieldRef is supported in valueFrom", var.name)),
            },
            (None, None) => String::new(),
        };
        env.insert(var.name.clone(), value);
    }
    Ok(env)
}

/// Kubernetes' `$(VAR)` expansion: a defined variable is replaced, `$$` is a literal `$`, and
/// anything else is kept as written.
fn expand(value: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(v) = env.get(&inner[..end])
        {
            out.push_str(v);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The order components come up in: the control plane's first, then any other anchor by name.
pub fn boot_order(components: &[String]) -> Vec<String> {
    let mut order: Vec<String> = CONTROL_PLANE
        .iter()
        .filter(|c| components.iter().any(|x| x == *c))
        .map(|c| c.to_string())
        .collect();
    let mut others: Vec<String> = components
        .iter()
        .filter(|c| !CONTROL_PLANE.contains(&c.as_str()))
        .cloned()
        .collect();
    others.sort();
    others.dedup();
    order.extend(others);
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn expands_like_the_kubelet() {
        let e = env(&[("NODE_IP", "10.0.0.5"), ("NODE_NAME", "cp-1")]);
        assert_eq!(
            expand("https://$(NODE_IP):2381/health", &e),
            "https://10.0.0.5:2381/health"
        );
        assert_eq!(expand("$(NODE_NAME)-$(NODE_IP)", &e), "cp-1-10.0.0.5");
        assert_eq!(
            expand("$(UNKNOWN) $$(NODE_IP) ${NODE_IP} $", &e),
            "$(UNKNOWN) $(NODE_IP) ${NODE_IP} $"
        );
        assert_eq!(expand("$(NODE_IP", &e), "$(NODE_IP");
    }

    #[test]
    fn boots_the_control_plane_in_its_order_then_the_rest() {
        let given = ["kube-scheduler", "zz", "etcd", "aa", "kube-apiserver"].map(String::from);
        assert_eq!(
            boot_order(&given),
            ["etcd", "kube-apiserver", "kube-scheduler", "aa", "zz"].map(String::from)
        );
    }

    const TEMPLATE: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: etcd, namespace: kube-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: etcd, namespace: kube-system}
data: {anchor.yaml: "config", .inputs-config: abc}
---
apiVersion: v1
kind: Secret
metadata: {name: etcd, namespace: kube-system}
data: {server.key: a2V5}
---
apiVersion: v1
kind: Secret
metadata: {name: etcd-cp-1, namespace: kube-system}
data: {peer.key: cGVlcg==}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: etcd-cp-1, namespace: kube-system}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata:
      labels: {a: b}
      annotations: {kube-anchor.io/expect-inputs: "/etc/kube-anchor/config/.inputs-config=abc"}
    spec:
      nodeSelector: {node-role.kubernetes.io/control-plane: "", kubernetes.io/hostname: cp-1}
      containers:
        - name: anchor
          image: kube-anchor
          args: [run]
          env:
            - {name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
            - {name: NODE_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
            - {name: KUBE_ANCHOR_CONFIG, value: /etc/kube-anchor/config/anchor.yaml}
            - {name: KUBE_ANCHOR_EXPECT_INPUTS, valueFrom: {fieldRef: {fieldPath: "metadata.annotations['kube-anchor.io/expect-inputs']"}}}
            - {name: KUBE_ANCHOR_HEALTH_URL, value: "http://$(NODE_IP):2381/health"}
          volumeMounts:
            - {name: config, mountPath: /etc/kube-anchor/config}
            - {name: credentials, mountPath: /etc/kube-anchor/secrets}
            - {name: host-0, mountPath: /host/etc/kubernetes}
      volumes:
        - {name: config, configMap: {name: etcd}}
        - name: credentials
          projected:
            defaultMode: 0400
            sources: [{secret: {name: etcd}}, {secret: {name: etcd-cp-1}}]
        - {name: host-0, hostPath: {path: /etc/kubernetes}}
"#;

    fn objects(text: &str) -> Objects {
        let mut o = Objects::default();
        o.add_yaml("template.yaml", text).unwrap();
        o
    }

    fn control_plane_node(name: &str) -> ThisNode {
        ThisNode::new(
            name,
            "10.0.0.1",
            [("node-role.kubernetes.io/control-plane".into(), String::new())],
        )
    }

    #[test]
    fn a_node_gets_what_its_anchor_pod_would_mount() {
        let pods = objects(TEMPLATE).anchors_for(&control_plane_node("cp-1")).unwrap();
        assert_eq!(pods.len(), 1);
        let pod = &pods[0];
        assert_eq!(pod.daemonset, "etcd-cp-1");
        assert_eq!(pod.env("KUBE_ANCHOR_HEALTH_URL"), Some("http://10.0.0.1:2381/health"));
        assert_eq!(
            pod.env("KUBE_ANCHOR_EXPECT_INPUTS"),
            Some("/etc/kube-anchor/config/.inputs-config=abc")
        );
        assert_eq!(pod.config_path(), Path::new("/etc/kube-anchor/config/anchor.yaml"));
        let by_path: BTreeMap<_, _> = pod.files.iter().map(|f| (f.path.to_str().unwrap(), f)).collect();
        assert_eq!(by_path["/etc/kube-anchor/config/anchor.yaml"].content, b"config");
        assert_eq!(by_path["/etc/kube-anchor/config/anchor.yaml"].mode, 0o644);
        assert_eq!(by_path["/etc/kube-anchor/secrets/server.key"].content, b"key");
        assert_eq!(by_path["/etc/kube-anchor/secrets/peer.key"].content, b"peer");
        assert_eq!(by_path["/etc/kube-anchor/secrets/peer.key"].mode, 0o400);
        assert_eq!(pod.files.len(), 4, "hostPath volumes are not inputs: {:?}", pod.files);
    }

    /// Node affinity is judged as the DaemonSet controller judges it (the same rule as the
    /// removal evidence's): a chart that selects control-plane nodes by affinity bootstraps.
    #[test]
    fn required_node_affinity_selects_nodes_as_the_daemonset_controller_does() {
        let by_affinity = TEMPLATE.replace(
            "      nodeSelector: {node-role.kubernetes.io/control-plane: \"\", kubernetes.io/hostname: cp-1}\n",
            "      affinity:\n        nodeAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n            nodeSelectorTerms:\n              - matchExpressions: [{key: node-role.kubernetes.io/control-plane, operator: Exists}]\n                matchFields: [{key: metadata.name, operator: In, values: [cp-1]}]\n",
        );
        assert_ne!(by_affinity, TEMPLATE);
        let o = objects(&by_affinity);
        let pods = o.anchors_for(&control_plane_node("cp-1")).unwrap();
        assert_eq!(pods.len(), 1);
        assert!(matches!(
            o.anchors_for(&control_plane_node("cp-2")),
            Err(BootstrapError::NoAnchors { .. })
        ));
        assert!(matches!(
            o.anchors_for(&ThisNode::new("cp-1", "10.0.0.1", [])),
            Err(BootstrapError::NoAnchors { .. })
        ));
    }

    #[test]
    fn another_node_or_a_node_without_the_label_gets_nothing() {
        let o = objects(TEMPLATE);
        assert!(matches!(
            o.anchors_for(&control_plane_node("cp-2")),
            Err(BootstrapError::NoAnchors { .. })
        ));
        let unlabelled = ThisNode::new("cp-1", "10.0.0.1", []);
        let err = o.anchors_for(&unlabelled).unwrap_err();
        assert!(
            err.to_string()
                .contains("no anchor DaemonSet in the input selects node cp-1"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_secret_is_named() {
        let text = TEMPLATE.replace(
            "name: etcd-cp-1, namespace: kube-system}\ndata",
            "name: other, namespace: kube-system}\ndata",
        );
        let err = objects(&text).anchors_for(&control_plane_node("cp-1")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "DaemonSet kube-system/etcd-cp-1 mounts Secret etcd-cp-1, which the input does not hold"
        );
    }

    #[test]
    fn a_duplicate_object_and_a_non_object_are_refused() {
        let mut o = Objects::default();
        let twice = format!(
            "{TEMPLATE}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: etcd, namespace: kube-system}}\n"
        );
        let err = o.add_yaml("t.yaml", &twice).unwrap_err();
        assert!(matches!(err, BootstrapError::Duplicate { kind: "Secret", .. }), "{err}");
        let err = Objects::default().add_yaml("t.yaml", "hello: world\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.yaml: document 1: not a Kubernetes object (no apiVersion or kind)"
        );
    }

    /// `helm template` output is decoded through the same YAML guards as a manifest: Kubernetes
    /// merges `<<` keys that serde_yaml_ng keeps literally, so the DaemonSet read here would not
    /// be the one the API server stores.
    #[test]
    fn merge_keys_tags_and_deep_nesting_are_refused() {
        let merged =
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: kube-system}\ndata:\n  <<: {x: y}\n";
        let err = Objects::default().add_yaml("t.yaml", merged).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("t.yaml: document 1: data.<<: a YAML merge key"),
            "{err}"
        );
        let tagged = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: kube-system}\ndata: {x: !t y}\n";
        let err = Objects::default().add_yaml("t.yaml", tagged).unwrap_err();
        assert!(
            err.to_string().starts_with("t.yaml: document 1: data.x: a YAML tag"),
            "{err}"
        );
        let err = Objects::default().add_yaml("t.yaml", &"[".repeat(5000)).unwrap_err();
        assert!(
            err.to_string().starts_with("t.yaml: nests deeper than 1000 levels"),
            "{err}"
        );
    }

    #[test]
    fn secret_bytes_never_show_in_a_debug_print() {
        let pods = objects(TEMPLATE).anchors_for(&control_plane_node("cp-1")).unwrap();
        let printed = format!("{pods:?}");
        assert!(
            !printed.contains("peer\"") && !printed.contains("[112, 101"),
            "{printed}"
        );
    }
}
