//! `kube-anchor import`, the pure part: a kubeadm control plane's static pods and the files they
//! name, turned into Helm values for the component charts, so `helm install` takes the
//! components over.
//!
//! From the manifests' text ([`parse_manifest`]) and what the modes crate's IO layer found at the
//! paths they name ([`NodeInput`], [`HostEntry`]), [`plan`] decides one values document per chart
//! ([`values_document`]) and the list of files carried. No filesystem here: the modes crate's
//! `import` reads the nodes' files and writes the values files.
//!
//! What a chart fixes on its command line is stated once per chart in `chart_flags` (a unit
//! test checks it against each chart's `_pod.tpl`): a kubeadm flag equal to the chart's fixed one
//! needs no value; a different one goes to `component.extraArgs`, which the chart puts in the
//! fixed flag's place; a fixed flag kubeadm does not set goes to `component.omitArgs`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use crate::bootstrap::CONTROL_PLANE;

/// kubeadm's directory, the only one kube-anchor writes below.
pub(crate) const KUBERNETES_DIR: &str = "/etc/kubernetes";
/// kubeadm's static pod directory, where the IO layer finds the manifests.
pub const MANIFEST_DIR: &str = "/etc/kubernetes/manifests";
const ADVERTISE_ANNOTATION: &str = "kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint";

/// Why kubeadm nodes cannot be imported, naming the manifest, flag, path or node.
#[derive(Debug, thiserror::Error)]
pub enum ImportPlanError {
    #[error("{manifest}: not a kubeadm control-plane pod: {problem}")]
    NotKubeadmPod { manifest: String, problem: String },
    #[error("node {node}: no {component} manifest ({MANIFEST_DIR}/{component}.yaml); import needs all of {}", CONTROL_PLANE.join(", "))]
    MissingComponent { node: String, component: String },
    #[error("{manifest}: {arg:?} is not a --name=value flag")]
    NotAFlag { manifest: String, arg: String },
    #[error("{manifest}: --{flag} is given more than once; a chart states each flag once")]
    RepeatedFlag { manifest: String, flag: String },
    #[error("{manifest}: image {image:?} has no version tag a chart can state (vX.Y.Z or X.Y.Z[-n])")]
    Image { manifest: String, image: String },
    #[error("{manifest}: --{flag} names {path}, which is not on node {node}")]
    MissingFile {
        manifest: String,
        flag: String,
        path: String,
        node: String,
    },
    #[error(
        "{manifest}: --{flag} names {path}, a file outside {KUBERNETES_DIR}: kube-anchor writes only below {KUBERNETES_DIR}"
    )]
    OutsideKubernetesDir {
        manifest: String,
        flag: String,
        path: String,
    },
    #[error("{path} on node {node}: {problem}")]
    UnusableFile {
        path: String,
        node: String,
        problem: String,
    },
    #[error("{a} and {b} would both be credential {name:?}")]
    NameCollision { name: String, a: String, b: String },
    #[error("node {node}: etcd's --name={member} differs from the node name; ${{NODE_NAME}} renders the node name")]
    NodeName { node: String, member: String },
    #[error(
        "node {node}: no advertise address (annotation {ADVERTISE_ANNOTATION} or --advertise-address) in the kube-apiserver manifest"
    )]
    NoNodeIp { node: String },
    /// `first` and `second`: each node's name and what it has.
    #[error(
        "{component}: {what} differs between node {first} and node {second}; chart values state it once for every node"
    )]
    NodesDiffer {
        component: String,
        what: String,
        first: String,
        second: String,
    },
    #[error(
        "{component}: the chart probes {probe}, which --{flag}={value} does not serve; the component would be restarted as unhealthy"
    )]
    ProbeUnserved {
        component: String,
        probe: String,
        flag: String,
        value: String,
    },
    #[error(
        "{manifest}: --{flag} names {path}, which no volume of the imported pod mounts (the chart's: {mounts}); the component would look for it inside its container"
    )]
    Unmounted {
        manifest: String,
        flag: String,
        path: String,
        mounts: String,
    },
    #[error("{manifest}: volume {volume}: {problem}")]
    Volume {
        manifest: String,
        volume: String,
        problem: String,
    },
    #[error("node name {0:?} given twice")]
    DuplicateNode(String),
}

// ---------------------------------------------------------------------------------------------
// Pure: parsing a manifest

/// One kubeadm static pod, as read from a node.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentPod {
    pub component: String,
    /// The manifest's host path (for messages).
    pub manifest: String,
    pub image: String,
    /// `--name=value` flags in kubeadm's order.
    pub flags: Vec<(String, String)>,
    /// hostPath volumes: (path, type).
    pub host_paths: Vec<(String, String)>,
    /// The hostPath volumes the container mounts, in the manifest's order.
    pub mounts: Vec<HostMount>,
    pub resources: Option<Value>,
    pub annotations: BTreeMap<String, String>,
}

/// A hostPath volume and where the container mounts it: the shape of the charts'
/// `component.extraVolumes` (kubeadm's `HostPathMount`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostMount {
    pub name: String,
    pub host_path: String,
    pub mount_path: String,
    pub read_only: bool,
    pub path_type: String,
}

impl ComponentPod {
    pub fn flag(&self, name: &str) -> Option<&str> {
        self.flags.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Host paths the pod names that may be files to carry: absolute flag values and hostPath
    /// volumes of a file type. (The IO layer looks each one up.)
    pub fn named_paths(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .flags
            .iter()
            .filter(|(_, v)| v.starts_with('/'))
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        for (path, kind) in &self.host_paths {
            if matches!(kind.as_str(), "File" | "FileOrCreate") && !out.iter().any(|(_, p)| p == path) {
                out.push((format!("volume:{path}"), path.clone()));
            }
        }
        out
    }
}

fn not_kubeadm(manifest: &str, problem: impl Into<String>) -> ImportPlanError {
    ImportPlanError::NotKubeadmPod {
        manifest: manifest.into(),
        problem: problem.into(),
    }
}

/// Parses one manifest (`manifest` is its host path, for messages) as a kubeadm control-plane
/// pod: kind Pod in kube-system, labels `component` (one of `bootstrap::CONTROL_PLANE`, the
/// charts `import` writes values for) and `tier: control-plane`, one container running the
/// component with `--name=value` flags.
pub fn parse_manifest(manifest: &str, text: &str) -> Result<ComponentPod, ImportPlanError> {
    let raw = crate::yaml::document(text).map_err(|e| not_kubeadm(manifest, e.to_string()))?;
    let raw: Value =
        serde_json::to_value(raw).map_err(|e| not_kubeadm(manifest, format!("not JSON-shaped YAML: {e}")))?;
    if raw["apiVersion"] != "v1" || raw["kind"] != "Pod" {
        return Err(not_kubeadm(manifest, "not a v1 Pod"));
    }
    let pod: Pod = serde_json::from_value(raw).map_err(|e| not_kubeadm(manifest, format!("not a Pod: {e}")))?;
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let component = labels
        .get("component")
        .filter(|c| CONTROL_PLANE.contains(&c.as_str()))
        .ok_or_else(|| {
            not_kubeadm(
                manifest,
                format!("no label component: one of {}", CONTROL_PLANE.join(", ")),
            )
        })?
        .clone();
    if labels.get("tier").map(String::as_str) != Some("control-plane") {
        return Err(not_kubeadm(manifest, "no label tier: control-plane"));
    }
    if pod.metadata.namespace.as_deref() != Some("kube-system") {
        return Err(not_kubeadm(manifest, "not in namespace kube-system"));
    }
    let spec = pod.spec.ok_or_else(|| not_kubeadm(manifest, "no spec"))?;
    let [container] = spec.containers.as_slice() else {
        return Err(not_kubeadm(manifest, "not exactly one container"));
    };
    if spec.init_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(not_kubeadm(manifest, "has init containers"));
    }
    if container.args.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(not_kubeadm(
            manifest,
            "the container has args (kubeadm puts every flag in command)",
        ));
    }
    let command = container.command.clone().unwrap_or_default();
    if command.first().map(String::as_str) != Some(component.as_str()) {
        return Err(not_kubeadm(
            manifest,
            format!("the container's command does not run {component}"),
        ));
    }
    let mut flags: Vec<(String, String)> = Vec::new();
    for arg in &command[1..] {
        let (name, value) = arg
            .strip_prefix("--")
            .and_then(|a| a.split_once('='))
            .filter(|(n, _)| !n.is_empty())
            .ok_or_else(|| ImportPlanError::NotAFlag {
                manifest: manifest.into(),
                arg: arg.clone(),
            })?;
        if flags.iter().any(|(n, _)| n == name) {
            return Err(ImportPlanError::RepeatedFlag {
                manifest: manifest.into(),
                flag: name.into(),
            });
        }
        flags.push((name.into(), value.into()));
    }
    let image = container
        .image
        .clone()
        .ok_or_else(|| not_kubeadm(manifest, "the container has no image"))?;
    let volumes = spec.volumes.unwrap_or_default();
    let mut mounts = Vec::new();
    for volume in &volumes {
        let bad = |problem: &str| ImportPlanError::Volume {
            manifest: manifest.into(),
            volume: volume.name.clone(),
            problem: problem.into(),
        };
        let used: Vec<_> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == volume.name)
            .collect();
        let Some(host) = &volume.host_path else {
            if used.is_empty() {
                continue;
            }
            return Err(bad(
                "not a hostPath volume; only hostPath volumes (what kubeadm writes) can be carried into a chart",
            ));
        };
        match used.as_slice() {
            [] => {}
            [mount]
                if mount.sub_path.is_some() || mount.sub_path_expr.is_some() || mount.mount_propagation.is_some() =>
            {
                return Err(bad(
                    "mounted with subPath or mountPropagation, which the charts' extraVolumes cannot state",
                ));
            }
            [mount] => mounts.push(HostMount {
                name: volume.name.clone(),
                host_path: host.path.clone(),
                mount_path: mount.mount_path.clone(),
                read_only: mount.read_only.unwrap_or(false),
                path_type: host
                    .type_
                    .clone()
                    .filter(|t| !t.is_empty())
                    .unwrap_or_else(|| "DirectoryOrCreate".into()),
            }),
            _ => return Err(bad("mounted more than once")),
        }
    }
    let host_paths = volumes
        .into_iter()
        .filter_map(|v| v.host_path)
        .map(|h| (h.path, h.type_.unwrap_or_default()))
        .collect();
    let resources = container
        .resources
        .as_ref()
        .map(|r| serde_json::to_value(r).expect("resources serialize"))
        .filter(|v| v.as_object().is_some_and(|o| !o.is_empty()));
    Ok(ComponentPod {
        component,
        manifest: manifest.into(),
        image,
        flags,
        host_paths,
        mounts,
        resources,
        annotations: pod.metadata.annotations.unwrap_or_default().into_iter().collect(),
    })
}

// ---------------------------------------------------------------------------------------------
// Pure: the charts' fixed flags

/// How a chart states one of its fixed flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fixed {
    /// The same value on every install (after `${NODE_NAME}`/`${NODE_IP}` rendering).
    Literal(&'static str),
    /// `component.<key>` of the values.
    Value(&'static str),
    /// `component.<key>` of the values, an integer.
    Port(&'static str),
}

/// The fixed flags of each chart's `_pod.tpl`, by flag name (a unit test reads the templates).
pub(crate) fn chart_flags(component: &str) -> &'static [(&'static str, Fixed)] {
    use Fixed::*;
    match component {
        "etcd" => &[
            ("name", Literal("${NODE_NAME}")),
            ("data-dir", Value("dataDir")),
            ("advertise-client-urls", Literal("https://${NODE_IP}:2379")),
            (
                "listen-client-urls",
                Literal("https://127.0.0.1:2379,https://${NODE_IP}:2379"),
            ),
            ("initial-advertise-peer-urls", Literal("https://${NODE_IP}:2380")),
            ("listen-peer-urls", Literal("https://${NODE_IP}:2380")),
            ("listen-metrics-urls", Literal("http://127.0.0.1:2381")),
            ("initial-cluster", Value("initialCluster")),
            ("initial-cluster-state", Value("initialClusterState")),
            ("client-cert-auth", Literal("true")),
            ("trusted-ca-file", Literal("/etc/kubernetes/pki/etcd/ca.crt")),
            ("cert-file", Literal("/etc/kubernetes/pki/etcd/server.crt")),
            ("key-file", Literal("/etc/kubernetes/pki/etcd/server.key")),
            ("peer-client-cert-auth", Literal("true")),
            ("peer-trusted-ca-file", Literal("/etc/kubernetes/pki/etcd/ca.crt")),
            ("peer-cert-file", Literal("/etc/kubernetes/pki/etcd/peer.crt")),
            ("peer-key-file", Literal("/etc/kubernetes/pki/etcd/peer.key")),
        ],
        "kube-apiserver" => &[
            ("advertise-address", Literal("${NODE_IP}")),
            ("secure-port", Port("securePort")),
            ("allow-privileged", Literal("true")),
            ("authorization-mode", Literal("Node,RBAC")),
            ("enable-admission-plugins", Literal("NodeRestriction")),
            ("client-ca-file", Literal("/etc/kubernetes/pki/ca.crt")),
            ("tls-cert-file", Literal("/etc/kubernetes/pki/apiserver.crt")),
            ("tls-private-key-file", Literal("/etc/kubernetes/pki/apiserver.key")),
            (
                "kubelet-client-certificate",
                Literal("/etc/kubernetes/pki/apiserver-kubelet-client.crt"),
            ),
            (
                "kubelet-client-key",
                Literal("/etc/kubernetes/pki/apiserver-kubelet-client.key"),
            ),
            ("etcd-servers", Value("etcdServers")),
            ("etcd-cafile", Literal("/etc/kubernetes/pki/etcd/ca.crt")),
            (
                "etcd-certfile",
                Literal("/etc/kubernetes/pki/apiserver-etcd-client.crt"),
            ),
            ("etcd-keyfile", Literal("/etc/kubernetes/pki/apiserver-etcd-client.key")),
            ("service-account-issuer", Value("serviceAccountIssuer")),
            ("service-account-key-file", Literal("/etc/kubernetes/pki/sa.pub")),
            (
                "service-account-signing-key-file",
                Literal("/etc/kubernetes/pki/sa.key"),
            ),
            ("service-cluster-ip-range", Value("serviceClusterIPRange")),
            (
                "encryption-provider-config",
                Literal("/etc/kubernetes/encryption/config.yaml"),
            ),
        ],
        "kube-controller-manager" => &[
            ("kubeconfig", Literal("/etc/kubernetes/controller-manager.conf")),
            (
                "authentication-kubeconfig",
                Literal("/etc/kubernetes/controller-manager.conf"),
            ),
            (
                "authorization-kubeconfig",
                Literal("/etc/kubernetes/controller-manager.conf"),
            ),
            ("bind-address", Literal("127.0.0.1")),
            ("client-ca-file", Literal("/etc/kubernetes/pki/ca.crt")),
            ("cluster-name", Value("clusterName")),
            ("cluster-signing-cert-file", Literal("/etc/kubernetes/pki/ca.crt")),
            ("cluster-signing-key-file", Literal("/etc/kubernetes/pki/ca.key")),
            ("root-ca-file", Literal("/etc/kubernetes/pki/ca.crt")),
            (
                "service-account-private-key-file",
                Literal("/etc/kubernetes/pki/sa.key"),
            ),
            ("use-service-account-credentials", Literal("true")),
            ("leader-elect", Literal("true")),
        ],
        "kube-scheduler" => &[
            ("kubeconfig", Literal("/etc/kubernetes/scheduler.conf")),
            ("authentication-kubeconfig", Literal("/etc/kubernetes/scheduler.conf")),
            ("authorization-kubeconfig", Literal("/etc/kubernetes/scheduler.conf")),
            ("bind-address", Literal("127.0.0.1")),
            ("leader-elect", Literal("true")),
        ],
        _ => &[],
    }
}

/// Host directories each chart's pod mounts: a file kubeadm's flags name elsewhere under
/// /etc/kubernetes would not be visible to the component.
pub(crate) fn chart_mounts(component: &str) -> &'static [&'static str] {
    match component {
        "etcd" => &["/etc/kubernetes/pki/etcd"],
        "kube-apiserver" => &["/etc/kubernetes/pki", "/etc/kubernetes/encryption"],
        "kube-controller-manager" => &["/etc/kubernetes/pki", "/etc/kubernetes/controller-manager.conf"],
        "kube-scheduler" => &["/etc/kubernetes/scheduler.conf"],
        _ => &[],
    }
}

/// The volume names each chart's pod uses itself: an extra volume of the same name is renamed.
pub(crate) fn chart_volume_names(component: &str) -> &'static [&'static str] {
    match component {
        "etcd" => &["data", "pki"],
        "kube-apiserver" => &["pki", "encryption"],
        "kube-controller-manager" => &["pki", "kubeconfig"],
        "kube-scheduler" => &["kubeconfig"],
        _ => &[],
    }
}

// ---------------------------------------------------------------------------------------------
// Pure: node variables

/// What the IO layer found at a path a pod names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostEntry {
    File { content: Vec<u8>, mode: u32 },
    Directory,
    Symlink,
    Missing,
}

/// One node as read: its name (when given), its kubeadm pods, and what is at the paths they name.
#[derive(Debug, Clone)]
pub struct NodeInput {
    pub name: Option<String>,
    pub pods: Vec<ComponentPod>,
    pub files: BTreeMap<String, HostEntry>,
}

/// The node's name and address, which the charts render as `${NODE_NAME}` and `${NODE_IP}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeIdentity {
    pub name: String,
    pub ip: String,
}

fn identity(node: &NodeInput, label: &str) -> Result<NodeIdentity, ImportPlanError> {
    let pod = |c: &str| node.pods.iter().find(|p| p.component == c);
    let apiserver = pod("kube-apiserver").expect("checked by plan");
    let etcd = pod("etcd").expect("checked by plan");
    let ip = apiserver
        .annotations
        .get(ADVERTISE_ANNOTATION)
        .and_then(|e| e.rsplit_once(':').map(|(h, _)| h.trim_matches(['[', ']']).to_owned()))
        .or_else(|| apiserver.flag("advertise-address").map(str::to_owned))
        .ok_or_else(|| ImportPlanError::NoNodeIp { node: label.into() })?;
    let member = etcd.flag("name").unwrap_or_default().to_owned();
    let name = match &node.name {
        Some(name) if !member.is_empty() && *name != member => {
            return Err(ImportPlanError::NodeName {
                node: name.clone(),
                member,
            });
        }
        Some(name) => name.clone(),
        None if member.is_empty() => label.to_owned(),
        None => member,
    };
    Ok(NodeIdentity { name, ip })
}

/// `value` with the node's address written `${NODE_IP}` wherever it stands alone (not inside a
/// longer address or name), and, for etcd's member flags, its name written `${NODE_NAME}`.
pub(crate) fn with_variables(flag: &str, value: &str, node: &NodeIdentity) -> String {
    // etcd's member list is the same on every node, so it stays literal: rendered with the
    // node's own variables, every node would name only itself (the etcd chart refuses that).
    if flag == "initial-cluster" {
        return value.into();
    }
    let value = replace_token(value, &node.ip, "${NODE_IP}");
    match flag {
        "name" if value == node.name => "${NODE_NAME}".into(),
        _ => value,
    }
}

fn replace_token(text: &str, token: &str, with: &str) -> String {
    if token.is_empty() {
        return text.into();
    }
    let part_of_address = |c: char| c.is_ascii_alphanumeric() || c == '.' || (token.contains(':') && c == ':');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(token) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + token.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(part_of_address) || after.is_some_and(part_of_address) {
            out.push_str(token);
        } else {
            out.push_str(with);
        }
        rest = &rest[i + token.len()..];
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------------------
// Pure: the plan

/// A file the chart writes: its credential name, host path and mode.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CarriedFile {
    pub name: String,
    pub path: String,
    pub mode: String,
    /// Identical on every node (in `credentials`), or per node (in `perNode.<node>.credentials`).
    pub shared: bool,
}

/// One chart's values and what import did and did not carry over.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ComponentImport {
    pub component: String,
    pub image: String,
    pub version: String,
    /// Flags given to `extraArgs` (names only; values are in the values file).
    pub extra_args: Vec<String>,
    pub omit_args: Vec<String>,
    pub files: Vec<CarriedFile>,
    /// kubeadm's hostPath volumes the chart does not mount itself (the host's CA bundles, an
    /// audit log dir): carried as `component.extraVolumes`.
    pub extra_volumes: Vec<HostMount>,
    #[serde(skip)]
    pub values: Value,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ImportPlan {
    pub nodes: Vec<NodeIdentity>,
    pub components: Vec<ComponentImport>,
}

/// The credential name of a file under /etc/kubernetes: its path below it, `pki/` dropped and
/// `/` written `-` (pki/etcd/ca.crt is etcd-ca.crt, as in the charts' defaults).
pub(crate) fn credential_name(path: &str) -> String {
    let rel = path.trim_start_matches(KUBERNETES_DIR).trim_start_matches('/');
    let rel = rel.strip_prefix("pki/").unwrap_or(rel);
    rel.replace('/', "-")
}

fn under(path: &str, dir: &str) -> bool {
    path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// From every node's pods and files, the values of each chart. Checks everything before
/// anything is written: every component on every node, every named file present, no file
/// outside /etc/kubernetes, one command line for every node.
pub fn plan(nodes: &[NodeInput], labels: &[String]) -> Result<ImportPlan, ImportPlanError> {
    let mut identities = Vec::new();
    for (node, label) in nodes.iter().zip(labels) {
        for component in CONTROL_PLANE {
            let manifests: Vec<&str> = node
                .pods
                .iter()
                .filter(|p| p.component == component)
                .map(|p| p.manifest.as_str())
                .collect();
            match manifests.as_slice() {
                [] => {
                    return Err(ImportPlanError::MissingComponent {
                        node: label.clone(),
                        component: component.into(),
                    });
                }
                [_] => {}
                [a, b, ..] => {
                    // The kubelet would run both: which one is the component is not for import to guess.
                    return Err(ImportPlanError::NotKubeadmPod {
                        manifest: b.to_string(),
                        problem: format!("a second {component} pod on node {label} (the first is {a})"),
                    });
                }
            }
        }
        let id = identity(node, label)?;
        if identities.iter().any(|i: &NodeIdentity| i.name == id.name) {
            return Err(ImportPlanError::DuplicateNode(id.name));
        }
        identities.push(id);
    }
    let components = CONTROL_PLANE
        .iter()
        .map(|c| plan_component(c, nodes, &identities))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ImportPlan {
        nodes: identities,
        components,
    })
}

fn split_image(pod: &ComponentPod) -> Result<(String, String), ImportPlanError> {
    let bad = || ImportPlanError::Image {
        manifest: pod.manifest.clone(),
        image: pod.image.clone(),
    };
    let slash = pod.image.rfind('/').map_or(0, |i| i + 1);
    let colon = pod.image[slash..].rfind(':').ok_or_else(bad)? + slash;
    let (repo, tag) = (&pod.image[..colon], &pod.image[colon + 1..]);
    if pod.image.contains('@') {
        return Err(bad());
    }
    let version = if tag.starts_with('v') {
        tag.to_owned()
    } else {
        format!("v{tag}")
    };
    // The charts' schema: vMAJOR.MINOR.PATCH…; etcd's chart drops the v again.
    let numbers: Vec<&str> = version[1..].splitn(3, '.').collect();
    let patch_digits = numbers
        .get(2)
        .map(|p| p.chars().take_while(char::is_ascii_digit).count());
    if numbers.len() != 3
        || !numbers[..2]
            .iter()
            .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        || patch_digits.unwrap_or(0) == 0
    {
        return Err(bad());
    }
    if pod.component != "etcd" && !tag.starts_with('v') {
        return Err(bad());
    }
    Ok((repo.to_owned(), version))
}

/// One chart's values and what import carries, from the component's pod on every node.
fn plan_component(
    component: &str,
    nodes: &[NodeInput],
    ids: &[NodeIdentity],
) -> Result<ComponentImport, ImportPlanError> {
    let on = OnNodes {
        component,
        nodes,
        ids,
        pods: nodes
            .iter()
            .map(|n| n.pods.iter().find(|p| p.component == component).expect("checked"))
            .collect(),
    };
    let (image, version) = on.image()?;
    let flags = on.command_line()?;
    check_probes(component, &flags)?;
    let args = ChartArgs::of(component, &flags);
    let extra_volumes = on.extra_volumes(&flags)?;
    check_mounted(on.pods[0], &flags, &extra_volumes)?;
    let files = on.files(&extra_volumes)?;
    let values = values_of(&on, &image, &version, &flags, &args, &files, &extra_volumes);
    Ok(ComponentImport {
        component: component.into(),
        image,
        version,
        extra_args: args.extra_args.keys().cloned().collect(),
        omit_args: args.omit_args,
        files: files.carried,
        extra_volumes,
        values,
    })
}

/// One component's pod on every node, with the nodes it was read from.
struct OnNodes<'a> {
    component: &'a str,
    nodes: &'a [NodeInput],
    ids: &'a [NodeIdentity],
    /// In the nodes' order.
    pods: Vec<&'a ComponentPod>,
}

impl<'a> OnNodes<'a> {
    /// `what` differs between the first node (`va`) and node `i` (`vb`).
    fn differ(&self, what: &str, i: usize, va: &str, vb: &str) -> ImportPlanError {
        ImportPlanError::NodesDiffer {
            component: self.component.into(),
            what: what.into(),
            first: format!("{} ({va:?})", self.ids[0].name),
            second: format!("{} ({vb:?})", self.ids[i].name),
        }
    }

    /// Image and version: one for every node.
    fn image(&self) -> Result<(String, String), ImportPlanError> {
        let pods = &self.pods;
        let (image, version) = split_image(pods[0])?;
        for (i, pod) in pods.iter().enumerate().skip(1) {
            if pod.image != pods[0].image {
                return Err(self.differ("the image", i, &pods[0].image, &pod.image));
            }
        }
        Ok((image, version))
    }

    /// The command line, with each node's name and address as variables: one for every node.
    fn command_line(&self) -> Result<BTreeMap<String, String>, ImportPlanError> {
        let lines: Vec<BTreeMap<String, String>> = self
            .pods
            .iter()
            .zip(self.ids)
            .map(|(pod, id)| {
                pod.flags
                    .iter()
                    .map(|(n, v)| (n.clone(), with_variables(n, v, id)))
                    .collect()
            })
            .collect();
        let mut flags: BTreeMap<String, String> = lines[0].clone();
        // etcd reads --initial-cluster(-state) only to create a member whose data dir is empty; a
        // joined node's list names the members before it. One list of every member, state
        // `existing`, serves every node that already holds its data.
        let bootstrap_only = ["initial-cluster", "initial-cluster-state"];
        if self.component == "etcd" && self.nodes.len() > 1 {
            let mut members: Vec<String> = Vec::new();
            for pod in &self.pods {
                for m in pod.flag("initial-cluster").unwrap_or_default().split(',') {
                    if !m.is_empty() && !members.iter().any(|x| x == m) {
                        members.push(m.to_owned());
                    }
                }
            }
            flags.insert("initial-cluster".into(), members.join(","));
            flags.insert("initial-cluster-state".into(), "existing".into());
        }
        for (i, line) in lines.iter().enumerate().skip(1) {
            let names: BTreeSet<&String> = line.keys().chain(lines[0].keys()).collect();
            for name in names {
                if self.component == "etcd" && bootstrap_only.contains(&name.as_str()) {
                    continue;
                }
                let (a, b) = (lines[0].get(name), line.get(name));
                if a != b {
                    let show = |v: Option<&String>| v.map_or("not set".to_owned(), |v| format!("--{name}={v}"));
                    return Err(self.differ(&format!("--{name}"), i, &show(a), &show(b)));
                }
            }
        }
        Ok(flags)
    }

    /// The hostPath volumes kubeadm mounts that the chart does not mount itself, the same on
    /// every node. One the chart mounts at the same place is the chart's; a volume mounted where
    /// the chart mounts something else is refused.
    fn extra_volumes(&self, flags: &BTreeMap<String, String>) -> Result<Vec<HostMount>, ImportPlanError> {
        let chart = chart_mount_paths(self.component, flags);
        let of = |pod: &ComponentPod| -> Result<Vec<HostMount>, ImportPlanError> {
            let mut extra = Vec::new();
            for m in &pod.mounts {
                if chart.contains(&m.mount_path) {
                    if m.host_path == m.mount_path {
                        continue;
                    }
                    return Err(ImportPlanError::Volume {
                        manifest: pod.manifest.clone(),
                        volume: m.name.clone(),
                        problem: format!(
                            "mounts host path {} at {}, where the {} chart mounts the host's own {}",
                            m.host_path, m.mount_path, self.component, m.mount_path
                        ),
                    });
                }
                let mut m = m.clone();
                if chart_volume_names(self.component).contains(&m.name.as_str()) {
                    m.name = format!("kubeadm-{}", m.name);
                }
                extra.push(m);
            }
            Ok(extra)
        };
        let first = of(self.pods[0])?;
        for (i, pod) in self.pods.iter().enumerate().skip(1) {
            let other = of(pod)?;
            if other != first {
                let show = |v: &[HostMount]| {
                    v.iter()
                        .map(|m| format!("{}:{}", m.host_path, m.mount_path))
                        .collect::<Vec<_>>()
                        .join(",")
                };
                return Err(self.differ("hostPath volumes", i, &show(&first), &show(&other)));
            }
        }
        Ok(first)
    }

    /// Files: every path the pods name that is a file under /etc/kubernetes. A file in a carried
    /// volume outside /etc/kubernetes (an audit log) is the component's data, not carried.
    fn files(&self, extra: &[HostMount]) -> Result<Credentials, ImportPlanError> {
        let mut files = Credentials::default();
        let mut seen_paths = BTreeSet::new();
        for (flag, path) in self.pods.iter().flat_map(|p| p.named_paths()) {
            if !seen_paths.insert(path.clone()) {
                continue;
            }
            if !under(&path, KUBERNETES_DIR) && extra.iter().any(|v| under(&path, &v.host_path)) {
                continue;
            }
            let contents = self.contents(&flag, &path)?;
            if contents.is_empty() {
                continue; // a directory (a data dir) or an absent path outside /etc/kubernetes
            }
            let name = self.carried_name(&flag, &path, contents.len(), &files.carried, extra)?;
            let (texts, mode) = self.texts_and_mode(&path, &contents)?;
            files.add(self.ids, name, path, mode, &texts);
        }
        Ok(files)
    }

    /// The file at `path` on each node that has one: its content and mode. A symlink, or a
    /// file under /etc/kubernetes missing from a node, is refused.
    fn contents(&self, flag: &str, path: &str) -> Result<Vec<(&'a [u8], u32)>, ImportPlanError> {
        let mut contents: Vec<(&[u8], u32)> = Vec::new();
        for ((node, id), pod) in self.nodes.iter().zip(self.ids).zip(&self.pods) {
            match node.files.get(path).unwrap_or(&HostEntry::Missing) {
                HostEntry::File { content, mode } => contents.push((content, *mode)),
                HostEntry::Directory => {}
                HostEntry::Symlink => {
                    return Err(ImportPlanError::UnusableFile {
                        path: path.into(),
                        node: id.name.clone(),
                        problem: "a symlink; kube-anchor writes regular files".into(),
                    });
                }
                HostEntry::Missing if under(path, KUBERNETES_DIR) => {
                    return Err(ImportPlanError::MissingFile {
                        manifest: pod.manifest.clone(),
                        flag: flag.into(),
                        path: path.into(),
                        node: id.name.clone(),
                    });
                }
                HostEntry::Missing => {}
            }
        }
        Ok(contents)
    }

    /// The credential name of a file found on `found` nodes: it must be on every node, below
    /// a directory the chart mounts, and its name not taken by a file already `carried`.
    fn carried_name(
        &self,
        flag: &str,
        path: &str,
        found: usize,
        carried: &[CarriedFile],
        extra: &[HostMount],
    ) -> Result<String, ImportPlanError> {
        let component = self.component;
        if !under(path, KUBERNETES_DIR) {
            return Err(ImportPlanError::OutsideKubernetesDir {
                manifest: self.pods[0].manifest.clone(),
                flag: flag.into(),
                path: path.into(),
            });
        }
        if found != self.nodes.len() {
            return Err(self.differ(&format!("{path} (a file on one, not on the other)"), 1, "", ""));
        }
        // Visible to the component: below a chart mount, or a carried volume mounted where it
        // lies on the host.
        let in_extra = extra
            .iter()
            .any(|v| v.host_path == v.mount_path && under(path, &v.host_path));
        if !in_extra && !chart_mounts(component).iter().any(|m| under(path, m)) {
            return Err(ImportPlanError::UnusableFile {
                path: path.into(),
                node: self.ids[0].name.clone(),
                problem: format!(
                    "named by --{flag} but not below a directory the {component} chart mounts ({})",
                    chart_mounts(component).join(", ")
                ),
            });
        }
        let name = credential_name(path);
        if let Some(other) = carried.iter().find(|f| f.name == name) {
            return Err(ImportPlanError::NameCollision {
                name,
                a: other.path.clone(),
                b: path.into(),
            });
        }
        Ok(name)
    }

    /// Each node's content of a file as text, and the mode they share: UTF-8, no setuid,
    /// setgid or sticky bits, the same mode on every node.
    fn texts_and_mode(&self, path: &str, contents: &[(&'a [u8], u32)]) -> Result<(Vec<&'a str>, u32), ImportPlanError> {
        let ids = self.ids;
        let mut texts = Vec::new();
        for (&(content, _), id) in contents.iter().zip(ids) {
            let text = std::str::from_utf8(content).map_err(|_| ImportPlanError::UnusableFile {
                path: path.into(),
                node: id.name.clone(),
                problem: "not UTF-8 text; chart credentials are text".into(),
            })?;
            texts.push(text);
        }
        let mode = contents[0].1;
        if let Some(i) = contents.iter().position(|(_, m)| m & 0o7000 != 0) {
            return Err(ImportPlanError::UnusableFile {
                path: path.into(),
                node: ids[i].name.clone(),
                problem: format!(
                    "mode {:04o}: a credential cannot carry setuid, setgid or sticky bits",
                    contents[i].1
                ),
            });
        }
        if let Some(i) = contents.iter().position(|(_, m)| *m != mode) {
            return Err(self.differ(
                &format!("the mode of {path}"),
                i,
                &format!("{mode:04o}"),
                &format!("{:04o}", contents[i].1),
            ));
        }
        Ok((texts, mode))
    }
}

/// The files a chart carries and their contents: identical on every node in `credentials`,
/// else in `perNode.<node>.credentials`.
#[derive(Default)]
struct Credentials {
    carried: Vec<CarriedFile>,
    shared: serde_json::Map<String, Value>,
    per_node: BTreeMap<String, serde_json::Map<String, Value>>,
}

impl Credentials {
    /// The file at `path`, credential `name`: `texts` is its content on each node of `ids`.
    fn add(&mut self, ids: &[NodeIdentity], name: String, path: String, mode: u32, texts: &[&str]) {
        let shared = texts.iter().all(|t| *t == texts[0]);
        if shared {
            self.shared.insert(name.clone(), json!(texts[0]));
        } else {
            for (text, id) in texts.iter().zip(ids) {
                self.per_node
                    .entry(id.name.clone())
                    .or_default()
                    .insert(name.clone(), json!(text));
            }
        }
        self.carried.push(CarriedFile {
            name,
            path,
            mode: format!("{mode:04o}"),
            shared,
        });
    }
}

/// The command line against the chart's fixed one (see [`chart_flags`]).
struct ChartArgs {
    /// Flags the chart states as a value of its own (`component.<key>`).
    chart_values: Vec<(&'static str, Value)>,
    /// Flags the chart does not fix, or fixes to another value.
    extra_args: serde_json::Map<String, Value>,
    /// Flags the chart fixes that kubeadm does not set.
    omit_args: Vec<String>,
}

impl ChartArgs {
    fn of(component: &str, flags: &BTreeMap<String, String>) -> Self {
        let mut chart_values = Vec::new();
        let mut extra_args = serde_json::Map::new();
        let mut omit_args = Vec::new();
        let fixed = chart_flags(component);
        for (name, how) in fixed {
            match (flags.get(*name), how) {
                (None, _) => omit_args.push(name.to_string()),
                (Some(v), Fixed::Literal(want)) if v == want => {}
                (Some(v), Fixed::Literal(_)) => {
                    extra_args.insert(name.to_string(), json!(v));
                }
                (Some(v), Fixed::Value(key)) => chart_values.push((*key, json!(v))),
                (Some(v), Fixed::Port(key)) => match v.parse::<u16>() {
                    Ok(port) => chart_values.push((*key, json!(port))),
                    Err(_) => {
                        extra_args.insert(name.to_string(), json!(v));
                    }
                },
            }
        }
        for (name, v) in flags {
            if !fixed.iter().any(|(f, _)| f == name) {
                extra_args.insert(name.clone(), json!(v));
            }
        }
        ChartArgs {
            chart_values,
            extra_args,
            omit_args,
        }
    }
}

/// The directories (and files) the chart's own pod mounts, at the same path on the host and in
/// the container: its fixed mounts and etcd's data dir.
fn chart_mount_paths(component: &str, flags: &BTreeMap<String, String>) -> Vec<String> {
    let mut paths: Vec<String> = chart_mounts(component).iter().map(|m| m.to_string()).collect();
    if component == "etcd"
        && let Some(data_dir) = flags.get("data-dir")
    {
        paths.push(data_dir.clone());
    }
    paths
}

/// Every flag naming an absolute path must find it mounted in the imported pod (the chart's
/// mounts or the carried volumes): a path left to the container's own filesystem (an audit log
/// written into the image) would lose what the flag is for.
fn check_mounted(
    pod: &ComponentPod,
    flags: &BTreeMap<String, String>,
    extra: &[HostMount],
) -> Result<(), ImportPlanError> {
    let mut mounts = chart_mount_paths(&pod.component, flags);
    mounts.extend(extra.iter().map(|v| v.mount_path.clone()));
    for (flag, value) in flags {
        if value.starts_with('/') && !mounts.iter().any(|m| under(value, m)) {
            return Err(ImportPlanError::Unmounted {
                manifest: pod.manifest.clone(),
                flag: flag.clone(),
                path: value.clone(),
                mounts: chart_mount_paths(&pod.component, flags).join(", "),
            });
        }
    }
    Ok(())
}

/// The chart's values document.
fn values_of(
    on: &OnNodes,
    image: &str,
    version: &str,
    flags: &BTreeMap<String, String>,
    args: &ChartArgs,
    files: &Credentials,
    extra_volumes: &[HostMount],
) -> Value {
    let mut component_values = serde_json::Map::new();
    component_values.insert("image".into(), json!(image));
    component_values.insert("version".into(), json!(version));
    for (key, value) in &args.chart_values {
        component_values.insert(key.to_string(), value.clone());
    }
    component_values.insert("extraArgs".into(), Value::Object(args.extra_args.clone()));
    component_values.insert("omitArgs".into(), json!(args.omit_args));
    if let Some(resources) = &on.pods[0].resources {
        component_values.insert("resources".into(), resources.clone());
    }
    if !extra_volumes.is_empty() {
        component_values.insert("extraVolumes".into(), json!(extra_volumes));
    }
    let mut values = json!({
        "component": Value::Object(component_values),
        "files": files.carried.iter().map(|f| json!({"name": f.name, "path": f.path, "mode": f.mode})).collect::<Vec<_>>(),
        "credentials": Value::Object(files.shared.clone()),
        "perNode": files.per_node.iter().map(|(n, c)| (n.clone(), json!({"credentials": Value::Object(c.clone())}))).collect::<serde_json::Map<_, _>>(),
    });
    // The anchor's health check of the apiserver, on loopback at its port. Not verified against
    // a CA: kubeadm's serving certificate names the node's address and service IP, not
    // 127.0.0.1, so a verified check would never pass (and the endpoint answers only a status).
    // etcd's chart default (http://127.0.0.1:2381/health) is served: see check_probes.
    if on.component == "kube-apiserver" {
        let port = flags.get("secure-port").map_or("6443", String::as_str);
        values["anchor"] = json!({
            "healthURL": format!("https://127.0.0.1:{port}/readyz"),
            "healthCAFile": "",
        });
    }
    values
}

/// The charts' probes are fixed (etcd's metrics URL, the controller-manager's and scheduler's
/// secure ports on 127.0.0.1, the apiserver's on `${NODE_IP}`): a command line that serves them
/// elsewhere would have the kubelet restart the component as unhealthy, so it is refused.
pub(crate) fn check_probes(component: &str, flags: &BTreeMap<String, String>) -> Result<(), ImportPlanError> {
    let unserved = |probe: &str, flag: &str| ImportPlanError::ProbeUnserved {
        component: component.into(),
        probe: probe.into(),
        flag: flag.into(),
        value: flags.get(flag).cloned().unwrap_or_default(),
    };
    let binds = |probe_host: &str| {
        flags
            .get("bind-address")
            .is_none_or(|a| ["0.0.0.0", "::", probe_host].contains(&a.as_str()))
    };
    let port_is = |port: &str| flags.get("secure-port").is_none_or(|p| p == port);
    match component {
        "etcd" => {
            let probe = "http://127.0.0.1:2381";
            if !flags
                .get("listen-metrics-urls")
                .is_some_and(|urls| urls.split(',').any(|u| u.trim_end_matches('/') == probe))
            {
                return Err(unserved(probe, "listen-metrics-urls"));
            }
        }
        "kube-controller-manager" | "kube-scheduler" => {
            let port = if component == "kube-scheduler" {
                "10259"
            } else {
                "10257"
            };
            let probe = format!("https://127.0.0.1:{port}");
            if !binds("127.0.0.1") {
                return Err(unserved(&probe, "bind-address"));
            }
            if !port_is(port) {
                return Err(unserved(&probe, "secure-port"));
            }
        }
        // The probe's port follows securePort; its host is the node's address, and the anchor's
        // health check asks 127.0.0.1: both need every address.
        "kube-apiserver" if !binds("0.0.0.0") => {
            return Err(unserved(
                "https://${NODE_IP}:<secure-port> and https://127.0.0.1:<secure-port>",
                "bind-address",
            ));
        }
        _ => {}
    }
    Ok(())
}

/// The values file of one chart: a header comment and the values as YAML.
pub fn values_document(c: &ComponentImport, nodes: &[NodeIdentity]) -> String {
    let mut out = format!(
        "# Values for charts/{} made by `kube-anchor import` from the kubeadm node(s) {}.\n\
         # They hold private keys: keep this file as secret as the node's {KUBERNETES_DIR}.\n",
        c.component,
        nodes
            .iter()
            .map(|n| format!("{} (${{NODE_IP}}={})", n.name, n.ip))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str(&serde_yaml_ng::to_string(&c.values).expect("values serialize"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATES: [(&str, &str); 4] = [
        ("etcd", include_str!("../../../charts/etcd/templates/_pod.tpl")),
        (
            "kube-apiserver",
            include_str!("../../../charts/kube-apiserver/templates/_pod.tpl"),
        ),
        (
            "kube-controller-manager",
            include_str!("../../../charts/kube-controller-manager/templates/_pod.tpl"),
        ),
        (
            "kube-scheduler",
            include_str!("../../../charts/kube-scheduler/templates/_pod.tpl"),
        ),
    ];

    /// The fixed flags `import` knows are the ones each chart's template states.
    #[test]
    fn chart_flags_are_the_templates_fixed_flags() {
        for (component, tpl) in TEMPLATES {
            let mut in_template: Vec<String> = Vec::new();
            for piece in tpl.split("\"--").skip(1) {
                let flag = &piece[..piece.find('"').unwrap()];
                let name = flag.split('=').next().unwrap().to_owned();
                if !in_template.contains(&name) {
                    in_template.push(name);
                }
                let known = chart_flags(component)
                    .iter()
                    .find(|(n, _)| *n == flag.split('=').next().unwrap());
                match known {
                    // Flags following component.localAddress are the literal at its default
                    // (127.0.0.1); tests/import.rs compares whole rendered command lines.
                    Some((_, Fixed::Literal(v))) if !flag.contains('%') => {
                        assert_eq!(format!("{}={v}", known.unwrap().0), flag, "{component}")
                    }
                    // A value of the chart's, or the etcd member's recorded one (membership).
                    Some(_) => assert!(
                        flag.contains('%') || flag.contains("${ETCD_"),
                        "{component}: {flag} is not templated"
                    ),
                    None => panic!("{component}: --{flag} is missing from chart_flags"),
                }
            }
            let mut known: Vec<&str> = chart_flags(component).iter().map(|(n, _)| *n).collect();
            in_template.sort();
            known.sort();
            assert_eq!(in_template, known, "{component}");
        }
    }

    fn pod(component: &str, flags: &[&str], volumes: &[(&str, &str)]) -> String {
        pod_at("10.0.0.1", component, flags, volumes)
    }

    fn pod_at(ip: &str, component: &str, flags: &[&str], volumes: &[(&str, &str)]) -> String {
        let vols: Vec<Value> = volumes
            .iter()
            .enumerate()
            .map(|(i, (p, t))| json!({"name": format!("v{i}"), "hostPath": {"path": p, "type": t}}))
            .collect();
        // Mounted where they lie, read-only, as kubeadm does.
        let mounts: Vec<Value> = volumes
            .iter()
            .enumerate()
            .map(|(i, (p, _))| json!({"name": format!("v{i}"), "mountPath": p, "readOnly": true}))
            .collect();
        let mut command = vec![component.to_owned()];
        command.extend(flags.iter().map(|f| f.to_string()));
        let annotations = if component == "kube-apiserver" {
            json!({ADVERTISE_ANNOTATION: format!("{ip}:6443")})
        } else {
            json!({})
        };
        let image = if component == "etcd" {
            "registry.k8s.io/etcd:3.6.8-0".to_owned()
        } else {
            format!("registry.k8s.io/{component}:v1.36.3")
        };
        serde_yaml_ng::to_string(&json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": component, "namespace": "kube-system", "annotations": annotations,
                         "labels": {"component": component, "tier": "control-plane"}},
            "spec": {"containers": [{"name": component, "image": image, "command": command, "volumeMounts": mounts}], "volumes": vols},
        }))
        .unwrap()
    }

    fn file(content: &str, mode: u32) -> HostEntry {
        HostEntry::File {
            content: content.as_bytes().to_vec(),
            mode,
        }
    }

    /// A small kubeadm-like node: `ip` its address, `key` the content of its etcd peer key.
    fn node(name: &str, ip: &str, peer_key: &str) -> NodeInput {
        let etcd = pod(
            "etcd",
            &[
                &format!("--name={name}"),
                "--data-dir=/var/lib/etcd",
                &format!("--advertise-client-urls=https://{ip}:2379"),
                "--listen-metrics-urls=http://127.0.0.1:2381",
                &format!("--initial-cluster={name}=https://{ip}:2380"),
                "--peer-key-file=/etc/kubernetes/pki/etcd/peer.key",
                "--trusted-ca-file=/etc/kubernetes/pki/etcd/ca.crt",
                "--snapshot-count=10000",
            ],
            &[
                ("/var/lib/etcd", "DirectoryOrCreate"),
                ("/etc/kubernetes/pki/etcd", "DirectoryOrCreate"),
            ],
        );
        let apiserver = pod_at(
            ip,
            "kube-apiserver",
            &[
                &format!("--advertise-address={ip}"),
                "--secure-port=6443",
                "--client-ca-file=/etc/kubernetes/pki/ca.crt",
            ],
            &[
                ("/etc/ssl/certs", "DirectoryOrCreate"),
                ("/etc/kubernetes/pki", "DirectoryOrCreate"),
            ],
        );
        let kcm = pod(
            "kube-controller-manager",
            &["--kubeconfig=/etc/kubernetes/controller-manager.conf"],
            &[("/etc/kubernetes/controller-manager.conf", "FileOrCreate")],
        );
        let scheduler = pod("kube-scheduler", &["--leader-elect=true"], &[]);
        let pods = [etcd, apiserver, kcm, scheduler]
            .iter()
            .map(|t| parse_manifest("/etc/kubernetes/manifests/x.yaml", t).unwrap())
            .collect();
        let files = BTreeMap::from([
            ("/etc/kubernetes/pki/etcd/peer.key".to_owned(), file(peer_key, 0o600)),
            ("/etc/kubernetes/pki/etcd/ca.crt".to_owned(), file("etcd ca", 0o644)),
            ("/etc/kubernetes/pki/ca.crt".to_owned(), file("ca", 0o644)),
            (
                "/etc/kubernetes/controller-manager.conf".to_owned(),
                file("kubeconfig", 0o600),
            ),
            ("/var/lib/etcd".to_owned(), HostEntry::Directory),
        ]);
        NodeInput {
            name: Some(name.into()),
            pods,
            files,
        }
    }

    fn labels(nodes: &[NodeInput]) -> Vec<String> {
        nodes.iter().map(|n| n.name.clone().unwrap()).collect()
    }

    fn component<'a>(plan: &'a ImportPlan, c: &str) -> &'a ComponentImport {
        plan.components.iter().find(|x| x.component == c).unwrap()
    }

    #[test]
    fn one_node_carries_everything_in_credentials_and_flags_as_values() {
        let nodes = [node("cp-1", "10.0.0.1", "peer key 1")];
        let plan = plan(&nodes, &labels(&nodes)).unwrap();
        assert_eq!(
            plan.nodes,
            [NodeIdentity {
                name: "cp-1".into(),
                ip: "10.0.0.1".into()
            }]
        );
        let etcd = &component(&plan, "etcd").values;
        assert_eq!(etcd["component"]["version"], "v3.6.8-0");
        assert_eq!(etcd["component"]["image"], "registry.k8s.io/etcd");
        assert_eq!(etcd["component"]["dataDir"], "/var/lib/etcd");
        // Literal: the same member list on every node the chart selects.
        assert_eq!(etcd["component"]["initialCluster"], "cp-1=https://10.0.0.1:2380");
        // Equal to the chart's fixed flag after rendering: no value needed.
        assert!(etcd["component"]["extraArgs"].get("advertise-client-urls").is_none());
        assert!(etcd["component"]["extraArgs"].get("name").is_none());
        assert_eq!(etcd["component"]["extraArgs"]["snapshot-count"], "10000");
        let omitted = etcd["component"]["omitArgs"].as_array().unwrap();
        assert!(omitted.contains(&json!("initial-cluster-state")) && omitted.contains(&json!("cert-file")));
        assert_eq!(etcd["credentials"]["etcd-peer.key"], "peer key 1");
        assert_eq!(etcd["credentials"]["etcd-ca.crt"], "etcd ca");
        assert_eq!(etcd["perNode"], json!({}));
        let files = &component(&plan, "etcd").files;
        assert!(files.iter().all(|f| f.shared));
        assert_eq!(
            files
                .iter()
                .map(|f| (f.path.as_str(), f.mode.as_str()))
                .collect::<Vec<_>>(),
            [
                ("/etc/kubernetes/pki/etcd/peer.key", "0600"),
                ("/etc/kubernetes/pki/etcd/ca.crt", "0644")
            ]
        );
        let kcm = component(&plan, "kube-controller-manager");
        assert_eq!(kcm.values["credentials"]["controller-manager.conf"], "kubeconfig");
        let apiserver = component(&plan, "kube-apiserver");
        assert_eq!(apiserver.values["component"]["securePort"], 6443);
        assert_eq!(apiserver.values["anchor"]["healthCAFile"], "");
        assert_eq!(apiserver.values["anchor"]["healthURL"], "https://127.0.0.1:6443/readyz");
        assert_eq!(
            apiserver.extra_volumes,
            [HostMount {
                name: "v0".into(),
                host_path: "/etc/ssl/certs".into(),
                mount_path: "/etc/ssl/certs".into(),
                read_only: true,
                path_type: "DirectoryOrCreate".into(),
            }]
        );
        assert_eq!(
            apiserver.values["component"]["extraVolumes"][0]["hostPath"],
            "/etc/ssl/certs"
        );
    }

    /// kubeadm's audit logging: a policy file and a log dir, each a hostPath volume the charts
    /// do not mount. Both are carried, the policy as a credential, the log as data.
    #[test]
    fn every_hostpath_volume_is_carried_or_the_import_refused() {
        let mut n = node("cp-1", "10.0.0.1", "k");
        let audit = r#"apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system, labels: {component: kube-apiserver, tier: control-plane}, annotations: {"kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint": "10.0.0.1:6443"}}
spec:
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:v1.36.3
    command: [kube-apiserver, --advertise-address=10.0.0.1, --audit-policy-file=/etc/kubernetes/audit/policy.yaml, --audit-log-path=/var/log/kubernetes/audit/audit.log]
    volumeMounts:
    - {name: audit, mountPath: /etc/kubernetes/audit, readOnly: true}
    - {name: audit-log, mountPath: /var/log/kubernetes/audit}
    - {name: pki, mountPath: /etc/kubernetes/pki, readOnly: true}
  volumes:
  - {name: audit, hostPath: {path: /etc/kubernetes/audit, type: DirectoryOrCreate}}
  - {name: audit-log, hostPath: {path: /var/log/kubernetes/audit, type: DirectoryOrCreate}}
  - {name: pki, hostPath: {path: /etc/kubernetes/pki, type: DirectoryOrCreate}}
"#;
        let i = n.pods.iter().position(|p| p.component == "kube-apiserver").unwrap();
        n.pods[i] = parse_manifest("/etc/kubernetes/manifests/kube-apiserver.yaml", audit).unwrap();
        n.files
            .insert("/etc/kubernetes/audit/policy.yaml".into(), file("rules: []", 0o600));
        n.files
            .insert("/var/log/kubernetes/audit/audit.log".into(), file("{}", 0o600));
        let nodes = [n];
        let imported = plan(&nodes, &labels(&nodes)).unwrap();
        let apiserver = component(&imported, "kube-apiserver");
        let carried: Vec<(&str, &str, bool)> = apiserver
            .extra_volumes
            .iter()
            .map(|v| (v.name.as_str(), v.host_path.as_str(), v.read_only))
            .collect();
        assert_eq!(
            carried,
            [
                ("audit", "/etc/kubernetes/audit", true),
                ("audit-log", "/var/log/kubernetes/audit", false)
            ],
            "pki is the chart's own mount"
        );
        assert_eq!(apiserver.values["credentials"]["audit-policy.yaml"], "rules: []");
        assert!(
            apiserver.files.iter().all(|f| !f.path.starts_with("/var/log")),
            "a log is no credential"
        );

        // The same log flag with no volume: the log would go into the container; refused, naming it.
        let bare = audit.replace("    - {name: audit-log, mountPath: /var/log/kubernetes/audit}\n", "");
        let mut n = node("cp-1", "10.0.0.1", "k");
        n.pods[i] = parse_manifest("/etc/kubernetes/manifests/kube-apiserver.yaml", &bare).unwrap();
        n.files
            .insert("/etc/kubernetes/audit/policy.yaml".into(), file("rules: []", 0o600));
        let nodes = [n];
        let e = plan(&nodes, &labels(&nodes)).unwrap_err().to_string();
        assert!(
            e.contains("--audit-log-path") && e.contains("no volume of the imported pod mounts"),
            "{e}"
        );

        // A volume mounted where the chart mounts the host's own directory: refused.
        let moved = audit.replace(
            "{name: pki, hostPath: {path: /etc/kubernetes/pki,",
            "{name: pki, hostPath: {path: /srv/pki,",
        );
        let mut n = node("cp-1", "10.0.0.1", "k");
        n.pods[i] = parse_manifest("/etc/kubernetes/manifests/kube-apiserver.yaml", &moved).unwrap();
        n.files
            .insert("/etc/kubernetes/audit/policy.yaml".into(), file("rules: []", 0o600));
        let nodes = [n];
        let e = plan(&nodes, &labels(&nodes)).unwrap_err().to_string();
        assert!(e.contains("volume pki") && e.contains("/srv/pki"), "{e}");

        // Not a hostPath volume: refused.
        let empty_dir = audit.replace(
            "{name: audit-log, hostPath: {path: /var/log/kubernetes/audit, type: DirectoryOrCreate}}",
            "{name: audit-log, emptyDir: {}}",
        );
        let e = parse_manifest("/etc/kubernetes/manifests/kube-apiserver.yaml", &empty_dir)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("volume audit-log") && e.contains("not a hostPath volume"),
            "{e}"
        );
    }

    #[test]
    fn files_that_differ_between_nodes_go_per_node() {
        let nodes = [
            node("cp-1", "10.0.0.1", "peer key 1"),
            node("cp-2", "10.0.0.2", "peer key 2"),
        ];
        let plan = plan(&nodes, &labels(&nodes)).unwrap();
        let etcd = &component(&plan, "etcd").values;
        assert_eq!(etcd["credentials"]["etcd-ca.crt"], "etcd ca");
        assert!(etcd["credentials"].get("etcd-peer.key").is_none());
        assert_eq!(etcd["perNode"]["cp-1"]["credentials"]["etcd-peer.key"], "peer key 1");
        assert_eq!(etcd["perNode"]["cp-2"]["credentials"]["etcd-peer.key"], "peer key 2");
        assert_eq!(
            etcd["component"]["initialCluster"],
            "cp-1=https://10.0.0.1:2380,cp-2=https://10.0.0.2:2380"
        );
        assert_eq!(etcd["component"]["initialClusterState"], "existing");
    }

    #[test]
    fn a_flag_that_differs_between_nodes_is_refused() {
        let mut second = node("cp-2", "10.0.0.2", "k");
        second.pods[0].flags.retain(|(n, _)| n != "snapshot-count");
        let nodes = [node("cp-1", "10.0.0.1", "k"), second];
        let err = plan(&nodes, &labels(&nodes)).unwrap_err().to_string();
        assert!(
            err.contains("etcd: --snapshot-count differs between node cp-1"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_referenced_file_names_the_manifest_flag_and_path() {
        let mut n = node("cp-1", "10.0.0.1", "k");
        n.files
            .insert("/etc/kubernetes/pki/etcd/peer.key".into(), HostEntry::Missing);
        let err = plan(&[n], &["cp-1".into()]).unwrap_err();
        assert!(
            matches!(err, ImportPlanError::MissingFile { ref flag, ref path, .. }
            if flag == "peer-key-file" && path == "/etc/kubernetes/pki/etcd/peer.key"),
            "{err}"
        );
    }

    #[test]
    fn a_file_outside_etc_kubernetes_is_refused() {
        let mut n = node("cp-1", "10.0.0.1", "k");
        n.pods[1]
            .flags
            .push(("oidc-ca-file".into(), "/etc/ssl/oidc.pem".into()));
        n.files.insert("/etc/ssl/oidc.pem".into(), file("pem", 0o644));
        // Not below any mount: kubeadm's pod could not read it either, and the chart's would not.
        let err = plan(std::slice::from_ref(&n), &["cp-1".into()]).unwrap_err();
        assert!(
            matches!(err, ImportPlanError::Unmounted { ref path, ref flag, .. } if path == "/etc/ssl/oidc.pem" && flag == "oidc-ca-file"),
            "{err}"
        );
        // Below a host directory the pod mounts (and import carries): the host's file, read
        // in place like the CA bundles, not a credential the anchor writes.
        n.pods[1].flags.retain(|(f, _)| f != "oidc-ca-file");
        n.pods[1]
            .flags
            .push(("oidc-ca-file".into(), "/etc/ssl/certs/oidc.pem".into()));
        n.files.insert("/etc/ssl/certs/oidc.pem".into(), file("pem", 0o644));
        let imported = plan(&[n], &["cp-1".into()]).unwrap();
        let apiserver = component(&imported, "kube-apiserver");
        assert!(apiserver.files.iter().all(|f| f.path != "/etc/ssl/certs/oidc.pem"));
        assert_eq!(apiserver.extra_volumes[0].host_path, "/etc/ssl/certs");
    }

    #[test]
    fn a_second_pod_of_a_component_is_refused() {
        let mut n = node("cp-1", "10.0.0.1", "k");
        let mut copy = n.pods[3].clone();
        copy.manifest = "/etc/kubernetes/manifests/kube-scheduler.yaml.bak".into();
        n.pods.push(copy);
        let err = plan(&[n], &["cp-1".into()]).unwrap_err().to_string();
        assert!(
            err.contains("kube-scheduler.yaml.bak: not a kubeadm control-plane pod: a second kube-scheduler pod"),
            "{err}"
        );
    }

    #[test]
    fn a_command_line_that_does_not_serve_the_charts_probes_is_refused() {
        let flags = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
        };
        let metrics = [("listen-metrics-urls", "http://127.0.0.1:2381")];
        assert!(check_probes("etcd", &flags(&metrics)).is_ok());
        let err = check_probes("etcd", &flags(&[("listen-metrics-urls", "http://${NODE_IP}:2381")])).unwrap_err();
        assert!(err.to_string().contains("etcd: the chart probes http://127.0.0.1:2381, which --listen-metrics-urls=http://${NODE_IP}:2381 does not serve"), "{err}");
        assert!(check_probes("kube-scheduler", &flags(&[("bind-address", "127.0.0.1")])).is_ok());
        assert!(check_probes("kube-scheduler", &flags(&[("bind-address", "0.0.0.0")])).is_ok());
        assert!(check_probes("kube-scheduler", &flags(&[("bind-address", "${NODE_IP}")])).is_err());
        assert!(check_probes("kube-controller-manager", &flags(&[("secure-port", "10300")])).is_err());
        assert!(check_probes("kube-apiserver", &flags(&[("bind-address", "127.0.0.1")])).is_err());
        assert!(check_probes("kube-apiserver", &flags(&[("secure-port", "7443")])).is_ok());
    }

    #[test]
    fn a_missing_component_is_refused() {
        let mut n = node("cp-1", "10.0.0.1", "k");
        n.pods.retain(|p| p.component != "kube-scheduler");
        let err = plan(&[n], &["cp-1".into()]).unwrap_err().to_string();
        assert!(err.contains("node cp-1: no kube-scheduler manifest"), "{err}");
    }

    #[test]
    fn a_pod_that_is_not_a_kubeadm_control_plane_pod_is_refused() {
        let text = pod("kube-scheduler", &[], &[]).replace("tier: control-plane", "tier: web");
        let err = parse_manifest("/etc/kubernetes/manifests/x.yaml", &text)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/etc/kubernetes/manifests/x.yaml: not a kubeadm control-plane pod"),
            "{err}"
        );
        // Through the YAML guards: the kubelet merges `<<`, serde_yaml_ng would not.
        let merged = pod("kube-scheduler", &[], &[]).replace("metadata:\n", "metadata:\n  <<: {labels: {}}\n");
        let err = parse_manifest("m", &merged).unwrap_err();
        assert!(err.to_string().contains("metadata.<<: a YAML merge key"), "{err}");
        let err = parse_manifest("m", &"{".repeat(2000)).unwrap_err();
        assert!(err.to_string().contains("nests deeper than 1000 levels"), "{err}");
        let err = parse_manifest("m", "kind: Deployment\napiVersion: apps/v1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a v1 Pod"), "{err}");
        let err = parse_manifest("m", &pod("kube-scheduler", &["--a=1", "--a=2"], &[])).unwrap_err();
        assert!(matches!(err, ImportPlanError::RepeatedFlag { .. }), "{err}");
        let err = parse_manifest("m", &pod("kube-scheduler", &["-v"], &[])).unwrap_err();
        assert!(matches!(err, ImportPlanError::NotAFlag { .. }), "{err}");
    }

    #[test]
    fn the_node_address_becomes_a_variable_only_where_it_stands_alone() {
        let id = NodeIdentity {
            name: "cp-1".into(),
            ip: "10.0.0.1".into(),
        };
        assert_eq!(
            with_variables(
                "listen-client-urls",
                "https://127.0.0.1:2379,https://10.0.0.1:2379",
                &id
            ),
            "https://127.0.0.1:2379,https://${NODE_IP}:2379"
        );
        assert_eq!(with_variables("x", "10.0.0.10,110.0.0.1", &id), "10.0.0.10,110.0.0.1");
        assert_eq!(with_variables("name", "cp-1", &id), "${NODE_NAME}");
        assert_eq!(with_variables("cluster-name", "cp-1", &id), "cp-1");
        // The member list is the same on every node: literal.
        assert_eq!(
            with_variables(
                "initial-cluster",
                "cp-0=https://10.0.0.9:2380,cp-1=https://10.0.0.1:2380",
                &id
            ),
            "cp-0=https://10.0.0.9:2380,cp-1=https://10.0.0.1:2380"
        );
    }

    #[test]
    fn credential_names_follow_the_charts() {
        assert_eq!(credential_name("/etc/kubernetes/pki/ca.crt"), "ca.crt");
        assert_eq!(credential_name("/etc/kubernetes/pki/etcd/ca.crt"), "etcd-ca.crt");
        assert_eq!(credential_name("/etc/kubernetes/scheduler.conf"), "scheduler.conf");
    }
}
