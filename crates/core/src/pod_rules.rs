//! What the kubelet of the pinned release (Kubernetes 1.36) refuses in a static pod, and what
//! the API server then refuses in its mirror pod. Pure.
//!
//! The kubelet decodes a manifest, names the pod `<name>-<node>`, binds it to its node
//! (`applyDefaults`, pkg/kubelet/config/common.go) and drops the file when
//! `validation.ValidatePodCreate` (pkg/apis/core/validation/validation.go) finds anything; the
//! API server runs the same validation on the mirror pod, then admission (Priority,
//! RuntimeClass, NodeRestriction). The rules below follow that code's order and field paths;
//! each function names the Go function it mirrors. Feature gates are the release's defaults.
//! Rules that depend on objects in the cluster (a PriorityClass or RuntimeClass other than the
//! built-in ones) cannot be judged on the node and are not checked.
//!
//! Parity is measured, not assumed: `tests/kubelet_rules.rs` asks the real API server about
//! every case these rules judge, and fails on any disagreement.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, HTTPGetAction, LifecycleHandler, Pod, PodSpec, Probe, ResourceRequirements, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// One reason Kubernetes refuses the pod: the field's path as Kubernetes writes it, and the
/// problem in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub problem: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// The kubelet appends `-<node name>`; with the node unknown, room for a one-letter name.
const NODE_SUFFIX_ROOM: usize = 2;
const MAX_INT32: i64 = i32::MAX as i64;

/// Every reason the kubelet (or the API server, for the mirror pod) refuses `pod` on node
/// `node`, in the order Kubernetes finds them.
pub fn validate(pod: &Pod, node: Option<&str>) -> Vec<FieldError> {
    let mut v = Errors::default();
    object_meta(&mut v, pod, node);
    if let Some(spec) = &pod.spec {
        pod_spec(&mut v, pod, spec);
        admission(&mut v, spec);
    }
    v.0
}

#[derive(Default)]
struct Errors(Vec<FieldError>);

impl Errors {
    fn add(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.0.push(FieldError {
            field: field.into(),
            problem: problem.into(),
        });
    }

    /// `value` must be one of `supported` (Kubernetes' `NotSupported`).
    fn one_of(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        if !supported.contains(&value) {
            let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
            self.add(field, format!("{value:?} is not one of {}", list.join(", ")));
        }
    }

    fn range(&mut self, field: impl Into<String>, value: i64, min: i64, max: i64) {
        if value < min || value > max {
            self.add(field, format!("{value} is not between {min} and {max}"));
        }
    }

    fn non_negative(&mut self, field: impl Into<String>, value: Option<i32>) {
        if let Some(n) = value.filter(|n| *n < 0) {
            self.add(field, format!("{n} is negative"));
        }
    }
}

// ---- Names -------------------------------------------------------------------------------

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, the part both of the API's DNS name rules share.
fn is_label_shaped(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 label (`IsDNS1123Label`): at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= 63 && is_label_shaped(s)
}

/// RFC 1123 subdomain (`IsDNS1123Subdomain`): dot-separated label-shaped parts, at most 253.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_label_shaped)
}

fn label_problem(s: &str) -> Option<String> {
    if s.len() > 63 {
        Some(format!("{s:?} is longer than 63 characters"))
    } else if !is_label_shaped(s) {
        Some(format!(
            "{s:?} is not a lowercase RFC 1123 label (a-z, 0-9 and '-', starting and ending with a letter or digit)"
        ))
    } else {
        None
    }
}

fn subdomain_problem(s: &str) -> Option<String> {
    if s.len() > 253 {
        Some(format!("{:?}… is longer than 253 characters", head(s)))
    } else if !is_dns1123_subdomain(s) {
        Some(format!(
            "{s:?} is not a lowercase RFC 1123 subdomain (a-z, 0-9, '-' and '.', each part starting and ending with a letter or digit)"
        ))
    } else {
        None
    }
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, the name part of a qualified name.
fn is_name_part(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the name at most 63
/// characters of letters, digits, '-', '_' and '.'.
fn qualified_name_problem(s: &str) -> Option<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some(format!("{s:?}: the prefix before '/' is empty"));
        }
        if !is_dns1123_subdomain(p) {
            return Some(format!("{s:?}: the prefix {p:?} is not a lowercase RFC 1123 subdomain"));
        }
    }
    if name.len() > 63 {
        return Some(format!("{s:?}: the name part is longer than 63 characters"));
    }
    if !is_name_part(name) {
        return Some(format!(
            "{s:?} is not a qualified name (letters, digits, '-', '_' and '.', starting and ending with a letter or digit, optionally after a DNS prefix and '/')"
        ));
    }
    None
}

/// `IsValidLabelValue`: empty, or a name part of at most 63 characters.
fn label_value_problem(s: &str) -> Option<String> {
    if s.len() > 63 {
        Some(format!("{s:?} is longer than 63 characters"))
    } else if !s.is_empty() && !is_name_part(s) {
        Some(format!(
            "{s:?} is not a label value (letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"
        ))
    } else {
        None
    }
}

/// `IsValidPortName`: an IANA service name.
fn port_name_problem(s: &str) -> Option<String> {
    if s.len() > 15 {
        Some(format!("{s:?} is longer than 15 characters"))
    } else if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some(format!("{s:?} may hold only a-z, 0-9 and '-'"))
    } else if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        Some(format!("{s:?} must hold at least one letter"))
    } else if s.contains("--") {
        Some(format!("{s:?} may not hold two '-' in a row"))
    } else if s.starts_with('-') || s.ends_with('-') {
        Some(format!("{s:?} may not start or end with '-'"))
    } else {
        None
    }
}

/// The first 20 characters of a long value, for a message.
fn head(s: &str) -> String {
    s.chars().take(20).collect()
}

/// An IP address as Kubernetes takes one: no IPv4-mapped IPv6 form.
fn is_ip(s: &str) -> bool {
    match s.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_none(),
        Ok(IpAddr::V4(_)) => true,
        Err(_) => false,
    }
}

/// An absolute-or-relative path without a `..` element (`validatePathNoBacksteps`).
fn has_backsteps(path: &str) -> bool {
    path.split('/').any(|part| part == "..")
}

// ---- Quantities ----------------------------------------------------------------------------

/// The value of a Kubernetes quantity (`resource.ParseQuantity`), or why it is none.
pub fn quantity_value(q: &str) -> Result<f64, String> {
    let bad = || {
        Err(format!(
            "{q:?} is not a quantity (a number with an optional suffix: Ki, Mi, Gi, Ti, Pi, Ei, n, u, m, k, M, G, T, P, E, or an exponent like e3)"
        ))
    };
    let split = q
        .char_indices()
        .find(|(i, c)| !(c.is_ascii_digit() || *c == '.' || (*i == 0 && (*c == '+' || *c == '-'))))
        .map_or(q.len(), |(i, _)| i);
    let (number, suffix) = q.split_at(split);
    let digits = number.trim_start_matches(['+', '-']);
    if digits.is_empty() || digits == "." || digits.matches('.').count() > 1 {
        return bad();
    }
    let Ok(mut value) = number.parse::<f64>() else {
        return bad();
    };
    let scale: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exp if exp.starts_with(['e', 'E']) => {
            let rest = &exp[1..];
            let body = rest.trim_start_matches(['+', '-']);
            if body.is_empty() || !body.bytes().all(|b| b.is_ascii_digit()) || rest.len() - body.len() > 1 {
                return bad();
            }
            match rest.parse::<i32>() {
                Ok(e) => 10f64.powi(e),
                Err(_) => return bad(),
            }
        }
        _ => return bad(),
    };
    value *= scale;
    Ok(value)
}

/// Every quantity of the pod, with its field path: one that does not parse makes the decoder
/// refuse the whole manifest (the API server answers 400, the kubelet cannot read the file).
fn quantities(spec: &PodSpec) -> Vec<(String, &Quantity)> {
    let mut out = Vec::new();
    for (list, containers) in container_lists(spec) {
        for (i, c) in containers.iter().enumerate() {
            if let Some(r) = &c.resources {
                for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
                    for (name, q) in map.iter().flatten() {
                        out.push((format!("spec.{list}[{i}].resources.{kind}[{name}]"), q));
                    }
                }
            }
        }
    }
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some(q) = v.empty_dir.as_ref().and_then(|e| e.size_limit.as_ref()) {
            out.push((format!("spec.volumes[{i}].emptyDir.sizeLimit"), q));
        }
    }
    for (name, q) in spec.overhead.iter().flatten() {
        out.push((format!("spec.overhead[{name}]"), q));
    }
    if let Some(r) = &spec.resources {
        for (kind, map) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (name, q) in map.iter().flatten() {
                out.push((format!("spec.resources.{kind}[{name}]"), q));
            }
        }
    }
    out
}

fn container_lists(spec: &PodSpec) -> [(&'static str, &[Container]); 2] {
    [
        ("initContainers", spec.init_containers.as_deref().unwrap_or_default()),
        ("containers", &spec.containers[..]),
    ]
}

// ---- Object metadata -----------------------------------------------------------------------

/// The bytes of the annotations written beside the manifest's own: `kubernetes.io/config.hash`,
/// `config.mirror` (32 hex each), `config.seen` (RFC 3339 with nanoseconds), `config.source`
/// ("file"), and `kube-anchor.io/content-hash` (sha256:<64 hex>).
const ADDED_ANNOTATION_BYTES: usize = 25 + 32 + 27 + 32 + 25 + 30 + 27 + 4 + 27 + 71;

/// Finalizers, generateName and the annotations Kubernetes reads itself.
fn metadata_extras(v: &mut Errors, pod: &Pod) {
    let finalizers = pod.metadata.finalizers.as_deref().unwrap_or_default();
    for (i, f) in finalizers.iter().enumerate() {
        if f.contains('/') {
            if let Some(problem) = qualified_name_problem(f) {
                v.add(format!("metadata.finalizers[{i}]"), problem);
            }
        } else if !matches!(f.as_str(), "kubernetes" | "orphan" | "foregroundDeletion") {
            v.add(
                format!("metadata.finalizers[{i}]"),
                format!("{f:?} is neither a standard finalizer (kubernetes, orphan, foregroundDeletion) nor qualified by a domain"),
            );
        }
    }
    if finalizers.iter().any(|f| f == "orphan") && finalizers.iter().any(|f| f == "foregroundDeletion") {
        v.add(
            "metadata.finalizers",
            "orphan and foregroundDeletion cannot both be set",
        );
    }
    if let Some(prefix) = pod.metadata.generate_name.as_deref().filter(|p| !p.is_empty()) {
        // A prefix may end with '-' (`maskTrailingDash`).
        let masked = match prefix.strip_suffix('-') {
            Some(rest) => format!("{rest}a"),
            None => prefix.to_owned(),
        };
        if let Some(problem) = subdomain_problem(&masked) {
            v.add(
                "metadata.generateName",
                problem.replace(&format!("{masked:?}"), &format!("{prefix:?}")),
            );
        }
    }
    let annotations = pod.metadata.annotations.as_ref();
    if let Some(cost) = annotations.and_then(|a| a.get("controller.kubernetes.io/pod-deletion-cost")) {
        let canonical = cost == "0"
            || cost
                .strip_prefix('-')
                .unwrap_or(cost)
                .bytes()
                .enumerate()
                .all(|(i, b)| b.is_ascii_digit() && !(i == 0 && b == b'0'));
        if !canonical || cost.is_empty() || cost == "-" || cost.parse::<i32>().is_err() {
            v.add(
                "metadata.annotations[controller.kubernetes.io/pod-deletion-cost]",
                format!("{cost:?} is not a 32-bit integer written plainly"),
            );
        }
    }
    if let Some(text) = annotations
        .and_then(|a| a.get("scheduler.alpha.kubernetes.io/tolerations"))
        .filter(|t| !t.is_empty())
    {
        match serde_json::from_str::<Vec<k8s_openapi::api::core::v1::Toleration>>(text) {
            Err(e) => v.add(
                "metadata.annotations[scheduler.alpha.kubernetes.io/tolerations]",
                format!("not a JSON list of tolerations: {e}"),
            ),
            Ok(list) => toleration_list(
                v,
                "metadata.annotations.scheduler.alpha.kubernetes.io/tolerations",
                &list,
            ),
        }
    }
}

/// `ValidateObjectMeta` with `ValidatePodName`, after `applyDefaults` named the pod
/// `<name>-<node>`.
fn object_meta(v: &mut Errors, pod: &Pod, node: Option<&str>) {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let longest = 253usize.saturating_sub(node.map_or(NODE_SUFFIX_ROOM, |n| n.len() + 1));
    if !is_dns1123_subdomain(name) || name.len() > longest {
        let shown = if name.len() > 40 {
            format!("{:?}… ({} characters)", head(name), name.len())
        } else {
            format!("{name:?}")
        };
        let node_part = node.map_or_else(|| "-<node name>".to_owned(), |n| format!("-{n}"));
        v.add(
            "metadata.name",
            format!(
                "{shown} is not a lowercase RFC 1123 subdomain (a-z, 0-9, '-', '.') of at most {} characters (the kubelet appends {node_part} and the whole may have 253)",
                longest
            ),
        );
    }
    if let Some(ns) = pod.metadata.namespace.as_deref().filter(|ns| !ns.is_empty())
        && let Some(problem) = label_problem(ns)
    {
        v.add("metadata.namespace", problem);
    }
    for (key, value) in pod.metadata.labels.iter().flatten() {
        if let Some(problem) = qualified_name_problem(key) {
            v.add("metadata.labels", format!("key {problem}"));
        }
        if let Some(problem) = label_value_problem(value) {
            v.add(format!("metadata.labels[{key}]"), problem);
        }
    }
    metadata_extras(v, pod);
    // The kubelet and its mirror client add config.hash, config.seen, config.source and
    // config.mirror, kube-anchor its content hash: the limit counts them too.
    let mut annotation_bytes = ADDED_ANNOTATION_BYTES;
    for (key, value) in pod.metadata.annotations.iter().flatten() {
        if let Some(problem) = qualified_name_problem(&key.to_ascii_lowercase()) {
            v.add("metadata.annotations", format!("key {problem}"));
        }
        annotation_bytes += key.len() + value.len();
    }
    if annotation_bytes > 256 * 1024 {
        v.add(
            "metadata.annotations",
            format!("{annotation_bytes} bytes in all; at most 262144"),
        );
    }
}

// ---- Pod spec ------------------------------------------------------------------------------

const SECCOMP_POD: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER: &str = "container.seccomp.security.alpha.kubernetes.io/";
const APPARMOR_CONTAINER: &str = "container.apparmor.security.beta.kubernetes.io/";

/// `ValidatePodSpec` and the pod-level parts of `ValidatePodCreate`.
fn pod_spec(v: &mut Errors, pod: &Pod, spec: &PodSpec) {
    for (field, q) in quantities(spec) {
        if let Err(problem) = quantity_value(&q.0) {
            v.add(field, problem);
            return;
        }
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|c| !c.is_empty()) {
        v.add("spec.ephemeralContainers", "cannot be set on create");
    }
    if spec.scheduling_gates.as_ref().is_some_and(|g| !g.is_empty()) {
        v.add(
            "spec.schedulingGates",
            "cannot be set: the kubelet binds a static pod to its node",
        );
    }
    let volumes = volumes(v, spec);
    if spec.containers.is_empty() {
        v.add("spec.containers", "at least one container is required");
    }
    containers(v, spec, &volumes);
    if let Some(policy) = spec.restart_policy.as_deref().filter(|p| !p.is_empty()) {
        v.one_of("spec.restartPolicy", policy, &["Always", "OnFailure", "Never"]);
    }
    dns(v, spec);
    if let Some(n) = spec.active_deadline_seconds {
        v.range("spec.activeDeadlineSeconds", n, 1, MAX_INT32);
    }
    if let Some(selector) = &spec.node_selector {
        for (key, value) in selector {
            if let Some(problem) = qualified_name_problem(key) {
                v.add("spec.nodeSelector", format!("key {problem}"));
            }
            if let Some(problem) = label_value_problem(value) {
                v.add(format!("spec.nodeSelector[{key}]"), problem);
            }
        }
    }
    if let Some(hostname) = spec.hostname.as_deref().filter(|h| !h.is_empty())
        && let Some(problem) = label_problem(hostname)
    {
        v.add("spec.hostname", problem);
    }
    if let Some(sub) = spec.subdomain.as_deref().filter(|h| !h.is_empty())
        && let Some(problem) = label_problem(sub)
    {
        v.add("spec.subdomain", problem);
    }
    host_aliases(v, spec);
    tolerations(v, spec);
    pod_security_context(v, pod, spec);
    if let Some(name) = spec.priority_class_name.as_deref().filter(|n| !n.is_empty())
        && let Some(problem) = subdomain_problem(name)
    {
        v.add(
            "spec.priorityClassName",
            format!("{problem}: no PriorityClass can have that name"),
        );
    }
    if let Some(name) = spec.runtime_class_name.as_deref()
        && let Some(problem) = subdomain_problem(name)
    {
        v.add("spec.runtimeClassName", problem);
    }
    for (i, gate) in spec.readiness_gates.iter().flatten().enumerate() {
        if let Some(problem) = qualified_name_problem(&gate.condition_type) {
            v.add(format!("spec.readinessGates[{i}].conditionType"), problem);
        }
    }
    pod_resources(v, spec);
    topology_spread(v, spec);
    affinity(v, spec);
    os(v, spec);
    windows(v, spec);
    if let Some(p) = &spec.preemption_policy {
        v.one_of("spec.preemptionPolicy", p, &["Never", "PreemptLowerPriority"]);
    }
}

/// `ValidateVolumes`; returns the volumes' names with whether each is a PVC (none here).
fn volumes(v: &mut Errors, spec: &PodSpec) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (i, vol) in spec.volumes.iter().flatten().enumerate() {
        let at = |f: &str| format!("spec.volumes[{i}]{f}");
        if vol.name.is_empty() {
            v.add(at(".name"), "required");
        } else if let Some(problem) = label_problem(&vol.name) {
            v.add(at(".name"), problem);
        } else if !names.insert(vol.name.clone()) {
            v.add(at(".name"), format!("{:?} is the name of an earlier volume", vol.name));
        }
        volume_source(v, vol, &at);
    }
    names
}

fn volume_source(v: &mut Errors, vol: &Volume, at: &dyn Fn(&str) -> String) {
    let sources: Vec<&str> = [
        (vol.host_path.is_some(), "hostPath"),
        (vol.empty_dir.is_some(), "emptyDir"),
        (vol.secret.is_some(), "secret"),
        (vol.config_map.is_some(), "configMap"),
        (vol.downward_api.is_some(), "downwardAPI"),
        (vol.projected.is_some(), "projected"),
        (vol.nfs.is_some(), "nfs"),
        (vol.iscsi.is_some(), "iscsi"),
        (vol.persistent_volume_claim.is_some(), "persistentVolumeClaim"),
        (vol.ephemeral.is_some(), "ephemeral"),
        (vol.csi.is_some(), "csi"),
        (vol.fc.is_some(), "fc"),
        (vol.image.is_some(), "image"),
        (vol.git_repo.is_some(), "gitRepo"),
        (vol.glusterfs.is_some(), "glusterfs"),
        (vol.rbd.is_some(), "rbd"),
        (vol.cephfs.is_some(), "cephfs"),
        (vol.cinder.is_some(), "cinder"),
        (vol.flex_volume.is_some(), "flexVolume"),
        (vol.azure_file.is_some(), "azureFile"),
        (vol.azure_disk.is_some(), "azureDisk"),
        (vol.aws_elastic_block_store.is_some(), "awsElasticBlockStore"),
        (vol.gce_persistent_disk.is_some(), "gcePersistentDisk"),
        (vol.vsphere_volume.is_some(), "vsphereVolume"),
        (vol.quobyte.is_some(), "quobyte"),
        (vol.flocker.is_some(), "flocker"),
        (vol.photon_persistent_disk.is_some(), "photonPersistentDisk"),
        (vol.portworx_volume.is_some(), "portworxVolume"),
        (vol.scale_io.is_some(), "scaleIO"),
        (vol.storageos.is_some(), "storageos"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    if sources.len() > 1 {
        v.add(
            at(&format!(".{}", sources[1])),
            format!("a volume has one source; this one also has {}", sources[0]),
        );
        return;
    }
    if let Some(hp) = &vol.host_path {
        if hp.path.is_empty() {
            v.add(at(".hostPath.path"), "required");
        } else if has_backsteps(&hp.path) {
            v.add(at(".hostPath.path"), format!("{:?} may not contain '..'", hp.path));
        }
        if let Some(t) = &hp.type_ {
            v.one_of(
                at(".hostPath.type"),
                t,
                &[
                    "",
                    "DirectoryOrCreate",
                    "Directory",
                    "FileOrCreate",
                    "File",
                    "Socket",
                    "CharDevice",
                    "BlockDevice",
                ],
            );
        }
    }
    if let Some(ed) = &vol.empty_dir
        && let Some(q) = &ed.size_limit
        && quantity_value(&q.0).is_ok_and(|n| n < 0.0)
    {
        v.add(at(".emptyDir.sizeLimit"), format!("{:?} is negative", q.0));
    }
    if let Some(nfs) = &vol.nfs {
        if nfs.server.is_empty() {
            v.add(at(".nfs.server"), "required");
        }
        if !nfs.path.starts_with('/') {
            v.add(at(".nfs.path"), format!("{:?} is not an absolute path", nfs.path));
        }
    }
    if let Some(d) = &vol.downward_api {
        if let Some(mode) = d.default_mode {
            v.range(at(".downwardAPI.defaultMode"), mode.into(), 0, 0o777);
        }
        let mut paths = BTreeSet::new();
        downward_items(
            v,
            &at(".downwardAPI"),
            d.items.as_deref().unwrap_or_default(),
            &mut paths,
        );
    }
    if let Some(p) = &vol.projected {
        if let Some(mode) = p.default_mode {
            v.range(at(".projected.defaultMode"), mode.into(), 0, 0o777);
        }
        let mut paths = BTreeSet::new();
        for (k, source) in p.sources.iter().flatten().enumerate() {
            let at = at(&format!(".projected.sources[{k}]"));
            let kinds = [
                source.secret.is_some(),
                source.config_map.is_some(),
                source.downward_api.is_some(),
                source.service_account_token.is_some(),
                source.cluster_trust_bundle.is_some(),
                source.pod_certificate.is_some(),
            ]
            .iter()
            .filter(|b| **b)
            .count();
            if kinds != 1 {
                v.add(at.clone(), "a projected source names exactly one kind");
            }
            if let Some(d) = &source.downward_api {
                downward_items(
                    v,
                    &format!("{at}.downwardAPI"),
                    d.items.as_deref().unwrap_or_default(),
                    &mut paths,
                );
            }
        }
    }
    if let Some(g) = &vol.git_repo {
        if g.repository.is_empty() {
            v.add(at(".gitRepo.repository"), "required");
        }
        if let Some(dir) = g.directory.as_deref()
            && let Some(problem) = descending_path_problem(dir)
        {
            v.add(at(".gitRepo.directory"), problem);
        }
    }
    if let Some(policy) = vol
        .image
        .as_ref()
        .and_then(|i| i.pull_policy.as_deref())
        .filter(|p| !p.is_empty())
    {
        v.one_of(at(".image.pullPolicy"), policy, &["Always", "IfNotPresent", "Never"]);
    }
    if let Some(image) = &vol.image
        && image.reference.as_deref().is_none_or(str::is_empty)
    {
        v.add(at(".image.reference"), "required");
    }
}

/// The items of a downward API volume or projection (`validateDownwardAPIVolumeFile`): a
/// relative path without `..`, unique in the volume; one of fieldRef (metadata only) and
/// resourceFieldRef (with its containerName); a mode within 0777.
fn downward_items(
    v: &mut Errors,
    at: &str,
    items: &[k8s_openapi::api::core::v1::DownwardAPIVolumeFile],
    paths: &mut BTreeSet<String>,
) {
    const VOLUME_FIELDS: [&str; 5] = [
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "metadata.labels",
        "metadata.annotations",
    ];
    for (j, item) in items.iter().enumerate() {
        let p = &item.path;
        if p.is_empty() {
            v.add(format!("{at}.items[{j}].path"), "required");
        } else if let Some(problem) = descending_path_problem(p) {
            v.add(format!("{at}.items[{j}].path"), problem);
        } else if p.starts_with("..") {
            v.add(
                format!("{at}.items[{j}].path"),
                format!("{p:?} may not start with '..'"),
            );
        } else if !paths.insert(p.clone()) {
            v.add(
                format!("{at}.items[{j}].path"),
                format!("{p:?} is the path of an earlier item"),
            );
        }
        match (&item.field_ref, &item.resource_field_ref) {
            (Some(_), Some(_)) | (None, None) => v.add(
                format!("{at}.items[{j}]"),
                "names exactly one of fieldRef and resourceFieldRef",
            ),
            (Some(f), None) => {
                let subscripted = ["metadata.labels['", "metadata.annotations['"]
                    .iter()
                    .any(|pre| f.field_path.starts_with(pre));
                if !VOLUME_FIELDS.contains(&f.field_path.as_str()) && !subscripted {
                    v.add(
                        format!("{at}.items[{j}].fieldRef.fieldPath"),
                        format!(
                            "{:?}: a volume takes metadata fields only ({})",
                            f.field_path,
                            VOLUME_FIELDS.join(", ")
                        ),
                    );
                } else if let Some(problem) = field_path_problem(&f.field_path).filter(|_| subscripted) {
                    v.add(format!("{at}.items[{j}].fieldRef.fieldPath"), problem);
                }
            }
            (None, Some(r)) => {
                if r.container_name.as_deref().is_none_or(str::is_empty) {
                    v.add(
                        format!("{at}.items[{j}].resourceFieldRef.containerName"),
                        "required in a volume",
                    );
                }
                resource_field_ref(v, &format!("{at}.items[{j}].resourceFieldRef"), r);
            }
        }
        if let Some(mode) = item.mode {
            v.range(format!("{at}.items[{j}].mode"), mode.into(), 0, 0o777);
        }
    }
}

/// `validateContainers` and `validateInitContainers`, common parts first.
fn containers(v: &mut Errors, spec: &PodSpec, volumes: &BTreeSet<String>) {
    let host_network = spec.host_network == Some(true);
    // Defaulted to 30; a negative one is taken as 1.
    let grace = spec.termination_grace_period_seconds.map_or(30, |g| g.max(1));
    let mut names = BTreeSet::new();
    for (list, cs) in container_lists(spec) {
        let init = list == "initContainers";
        // AccumulateUniqueHostPorts: protocol/hostIP/hostPort over the regular containers, over
        // each init container alone (they run one after the other).
        let mut host_ports = BTreeSet::new();
        for (i, c) in cs.iter().enumerate() {
            if init {
                host_ports.clear();
            }
            let at = |field: &str| format!("spec.{list}[{i}]{field}");
            if c.name.is_empty() {
                v.add(at(".name"), "required");
            } else if let Some(problem) = label_problem(&c.name) {
                v.add(at(".name"), problem);
            } else if !names.insert(c.name.clone()) {
                v.add(at(".name"), format!("{:?} is the name of an earlier container", c.name));
            }
            match c.image.as_deref() {
                None | Some("") => v.add(at(".image"), "required"),
                Some(image) if image.trim() != image => {
                    v.add(at(".image"), format!("{image:?} has leading or trailing whitespace"))
                }
                Some(_) => {}
            }
            // An empty enum is unset: defaulting fills it in before validation.
            if let Some(p) = c.image_pull_policy.as_deref().filter(|p| !p.is_empty()) {
                v.one_of(at(".imagePullPolicy"), p, &["Always", "IfNotPresent", "Never"]);
            }
            if let Some(p) = c.termination_message_policy.as_deref().filter(|p| !p.is_empty()) {
                v.one_of(at(".terminationMessagePolicy"), p, &["File", "FallbackToLogsOnError"]);
            }
            let sidecar = init && c.restart_policy.as_deref() == Some("Always");
            if let Some(policy) = &c.restart_policy {
                v.one_of(at(".restartPolicy"), policy, &["Always", "OnFailure", "Never"]);
            } else if c.restart_policy_rules.as_ref().is_some_and(|r| !r.is_empty()) {
                v.add(at(".restartPolicy"), "required when restartPolicyRules are set");
            }
            if init && !sidecar {
                for (set, field) in [
                    (c.lifecycle.is_some(), ".lifecycle"),
                    (c.liveness_probe.is_some(), ".livenessProbe"),
                    (c.readiness_probe.is_some(), ".readinessProbe"),
                    (c.startup_probe.is_some(), ".startupProbe"),
                ] {
                    if set {
                        v.add(
                            at(field),
                            "may not be set on an init container unless its restartPolicy is Always (a sidecar)",
                        );
                    }
                }
            }
            ports(v, c, &at, host_network, !init, &mut host_ports);
            env(v, c, &at);
            resources(v, c.resources.as_ref(), &at);
            let mut resized = BTreeSet::new();
            for r in c.resize_policy.iter().flatten() {
                v.one_of(at(".resizePolicy"), &r.resource_name, &["cpu", "memory"]);
                v.one_of(
                    at(".resizePolicy"),
                    &r.restart_policy,
                    &["NotRequired", "RestartContainer"],
                );
                if !resized.insert(r.resource_name.as_str()) {
                    v.add(at(".resizePolicy"), format!("{:?} is listed twice", r.resource_name));
                }
                if spec.restart_policy.as_deref() == Some("Never") && r.restart_policy != "NotRequired" {
                    v.add(
                        at(".resizePolicy"),
                        format!(
                            "{:?} must be NotRequired when the pod's restartPolicy is Never",
                            r.restart_policy
                        ),
                    );
                }
            }
            for (field, probe, kind) in [
                (".livenessProbe", &c.liveness_probe, Kind::Liveness),
                (".readinessProbe", &c.readiness_probe, Kind::Readiness),
                (".startupProbe", &c.startup_probe, Kind::Startup),
            ] {
                if let Some(p) = probe {
                    validate_probe(v, p, &at(field), kind);
                }
            }
            if let Some(l) = &c.lifecycle {
                for (field, handler) in [(".postStart", &l.post_start), (".preStop", &l.pre_stop)] {
                    if let Some(h) = handler {
                        lifecycle_handler(v, h, &at(&format!(".lifecycle{field}")), grace);
                    }
                }
            }
            volume_mounts(v, c, &at, volumes);
            if let Some(sc) = &c.security_context {
                container_security(v, sc, &at(".securityContext"), spec);
            }
        }
    }
}

fn ports(
    v: &mut Errors,
    c: &Container,
    at: &dyn Fn(&str) -> String,
    host_network: bool,
    // The hostNetwork rule (hostPort equals containerPort) covers the regular containers only.
    equal_ports_rule: bool,
    host_ports: &mut BTreeSet<String>,
) {
    let mut names = BTreeSet::new();
    for (j, p) in c.ports.iter().flatten().enumerate() {
        let at = |f: &str| at(&format!(".ports[{j}]{f}"));
        if let Some(name) = p.name.as_deref().filter(|n| !n.is_empty()) {
            if let Some(problem) = port_name_problem(name) {
                v.add(at(".name"), problem);
            } else if !names.insert(name) {
                v.add(at(".name"), format!("{name:?} names an earlier port of this container"));
            }
        }
        if p.container_port == 0 {
            v.add(at(".containerPort"), "required");
        } else {
            v.range(at(".containerPort"), p.container_port.into(), 1, 65535);
        }
        // With hostNetwork the defaulting sets hostPort to containerPort.
        let host_port = match p.host_port {
            None | Some(0) if host_network => p.container_port,
            other => other.unwrap_or(0),
        };
        if host_port != 0 {
            v.range(at(".hostPort"), host_port.into(), 1, 65535);
        }
        if host_network && equal_ports_rule && host_port != p.container_port {
            v.add(
                at(".hostPort"),
                format!(
                    "{host_port} must equal containerPort ({}) when hostNetwork is true",
                    p.container_port
                ),
            );
        }
        let protocol = p.protocol.as_deref().filter(|p| !p.is_empty()).unwrap_or("TCP");
        v.one_of(at(".protocol"), protocol, &["SCTP", "TCP", "UDP"]);
        if host_port != 0 {
            let key = format!("{protocol}/{}/{host_port}", p.host_ip.as_deref().unwrap_or_default());
            if !host_ports.insert(key) {
                v.add(
                    at(".hostPort"),
                    format!("{protocol} port {host_port} is already taken on the host by an earlier port of the pod"),
                );
            }
        }
    }
}

/// Environment variable names: any printable ASCII but '=' (`RelaxedEnvironmentVariableValidation`,
/// on by default).
fn env_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        Some("required".into())
    } else if !name.bytes().all(|b| (32..=126).contains(&b) && b != b'=') {
        Some(format!(
            "{name:?} may hold only printable ASCII characters other than '='"
        ))
    } else {
        None
    }
}

const FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

fn field_path_problem(path: &str) -> Option<String> {
    // metadata.labels['key'] and metadata.annotations['key'] name one entry.
    for prefix in ["metadata.labels", "metadata.annotations"] {
        if let Some(rest) = path.strip_prefix(prefix)
            && let Some(key) = rest.strip_prefix("['").and_then(|r| r.strip_suffix("']"))
        {
            // Annotation keys are checked lowercased, as ValidateAnnotations does.
            let key = if prefix == "metadata.annotations" {
                key.to_ascii_lowercase()
            } else {
                key.to_owned()
            };
            return qualified_name_problem(&key).map(|p| format!("{path:?}: {p}"));
        }
    }
    // `spec.host` is converted to `spec.nodeName` before validation.
    if FIELD_PATHS.contains(&path) || path == "spec.host" {
        None
    } else {
        Some(format!(
            "{path:?} is not a field an environment variable can take (metadata.name, metadata.namespace, metadata.uid, metadata.labels['…'], metadata.annotations['…'], spec.nodeName, spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP, status.podIPs)"
        ))
    }
}

fn resource_field_problem(resource: &str) -> Option<String> {
    const PLAIN: [&str; 6] = [
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
    ];
    let hugepages = resource
        .strip_prefix("limits.hugepages-")
        .or_else(|| resource.strip_prefix("requests.hugepages-"))
        .is_some_and(|size| quantity_value(size).is_ok());
    if PLAIN.contains(&resource) || hugepages {
        None
    } else {
        Some(format!(
            "{resource:?} is not one of limits.cpu, limits.memory, limits.ephemeral-storage, requests.cpu, requests.memory, requests.ephemeral-storage, limits.hugepages-<size>, requests.hugepages-<size>"
        ))
    }
}

fn env(v: &mut Errors, c: &Container, at: &dyn Fn(&str) -> String) {
    for (j, var) in c.env.iter().flatten().enumerate() {
        env_var(v, var, &at(&format!(".env[{j}]")));
    }
    for source in c.env_from.iter().flatten() {
        if source.config_map_ref.is_none() && source.secret_ref.is_none() {
            v.add(at(".envFrom"), "an entry names no source (configMapRef or secretRef)");
        }
    }
}

fn env_var(v: &mut Errors, var: &EnvVar, at: &str) {
    if let Some(problem) = env_name_problem(&var.name) {
        v.add(format!("{at}.name"), problem);
    }
    let Some(from) = &var.value_from else { return };
    let sources = [
        from.field_ref.is_some(),
        from.resource_field_ref.is_some(),
        from.config_map_key_ref.is_some(),
        from.secret_key_ref.is_some(),
        from.file_key_ref.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if sources == 0 {
        v.add(
            format!("{at}.valueFrom"),
            "names no source (one of fieldRef, resourceFieldRef, configMapKeyRef, secretKeyRef, fileKeyRef)",
        );
    } else if sources > 1 {
        v.add(format!("{at}.valueFrom"), "may name only one source");
    }
    if var.value.as_deref().is_some_and(|s| !s.is_empty()) {
        v.add(format!("{at}.valueFrom"), "may not be set when value is set");
    }
    if let Some(f) = &from.field_ref {
        let version = f.api_version.as_deref().filter(|v| !v.is_empty()).unwrap_or("v1");
        if version != "v1" {
            v.add(
                format!("{at}.valueFrom.fieldRef.apiVersion"),
                format!("{version:?} is not \"v1\""),
            );
        } else if let Some(problem) = field_path_problem(&f.field_path) {
            v.add(format!("{at}.valueFrom.fieldRef.fieldPath"), problem);
        }
    }
    if let Some(r) = &from.resource_field_ref {
        resource_field_ref(v, &format!("{at}.valueFrom.resourceFieldRef"), r);
    }
}

/// A resourceFieldRef's resource and divisor (`validateContainerResourceDivisor`): cpu takes 1m
/// or 1; memory, ephemeral storage and hugepages 1 or a power of 1000 or 1024 up to E/Ei.
fn resource_field_ref(v: &mut Errors, at: &str, r: &k8s_openapi::api::core::v1::ResourceFieldSelector) {
    if let Some(problem) = resource_field_problem(&r.resource) {
        v.add(format!("{at}.resource"), problem);
        return;
    }
    let Some(divisor) = &r.divisor else { return };
    let Ok(value) = quantity_value(&divisor.0) else { return };
    if value == 0.0 {
        return; // unset
    }
    let cpu = r.resource.ends_with(".cpu");
    let allowed: Vec<f64> = if cpu {
        vec![0.001, 1.0]
    } else {
        let mut a = vec![1.0];
        a.extend((1..=6).map(|e| 1000f64.powi(e)));
        a.extend((1..=6).map(|e| 1024f64.powi(e)));
        a
    };
    if !allowed.contains(&value) {
        let which = if cpu { "1m or 1" } else { "1, or 1k…1E, or 1Ki…1Ei" };
        v.add(
            format!("{at}.divisor"),
            format!("{:?}: a divisor of {} is {which}", divisor.0, r.resource),
        );
    }
}

/// A resource name Kubernetes itself defines: no domain, or `kubernetes.io` (or below it).
fn is_native_resource(name: &str) -> bool {
    !name.contains('/')
        || name
            .split('/')
            .next()
            .is_some_and(|d| d == "kubernetes.io" || d.ends_with(".kubernetes.io"))
}

/// A quantity rounded up to thousandths, as Kubernetes compares requests with limits
/// (`MilliValue`).
fn milli(q: &Quantity) -> f64 {
    (quantity_value(&q.0).unwrap_or(0.0) * 1000.0).ceil()
}

/// `ValidateContainerResourceName` and `ValidateResourceRequirements`: unprefixed names are the
/// standard resources; names under kubernetes.io are Kubernetes' own (no further rule); others
/// are extended resources (whole numbers, request equal to limit). Hugepages cannot be
/// overcommitted either, and come in whole pages beside a cpu or memory request or limit.
fn resources(v: &mut Errors, r: Option<&ResourceRequirements>, at: &dyn Fn(&str) -> String) {
    let Some(r) = r else { return };
    let empty = BTreeMap::new();
    let limits = r.limits.as_ref().unwrap_or(&empty);
    let requests = r.requests.as_ref().unwrap_or(&empty);
    let standard =
        |name: &str| matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-");
    let extended = |name: &str| !is_native_resource(name);
    let hugepage = |name: &str| name.starts_with("hugepages-");
    let mut hugepages = false;
    for (kind, map) in [("limits", limits), ("requests", requests)] {
        for (name, q) in map {
            let field = at(&format!(".resources.{kind}[{name}]"));
            let value = quantity_value(&q.0).unwrap_or(0.0);
            if let Some(problem) = qualified_name_problem(name) {
                v.add(field.clone(), format!("resource name {problem}"));
                continue;
            }
            if !name.contains('/') && !standard(name) {
                v.add(
                    field.clone(),
                    format!("{name:?} is not a resource of a container (cpu, memory, ephemeral-storage, hugepages-<size>, or a resource with a domain)"),
                );
                continue;
            }
            if let Some(size) = name.strip_prefix("hugepages-") {
                hugepages = true;
                match quantity_value(size) {
                    Err(_) => v.add(field.clone(), format!("{name:?}: the page size is not a quantity")),
                    Ok(page) if page > 0.0 && (value / page).fract() != 0.0 => v.add(
                        field.clone(),
                        format!("{:?} is not a whole number of {size} pages", q.0),
                    ),
                    Ok(_) => {}
                }
            }
            if value < 0.0 {
                v.add(field.clone(), format!("{:?} is negative", q.0));
            }
            if extended(name) && milli(q) % 1000.0 != 0.0 {
                v.add(
                    field,
                    format!("{:?}: an extended resource takes whole numbers only", q.0),
                );
            }
        }
    }
    for (name, request) in requests {
        match limits.get(name) {
            Some(limit) => {
                if milli(request) > milli(limit) {
                    v.add(
                        at(&format!(".resources.requests[{name}]")),
                        format!("{:?} is more than the limit {:?}", request.0, limit.0),
                    );
                } else if (extended(name) || hugepage(name)) && milli(request) != milli(limit) {
                    v.add(
                        at(&format!(".resources.requests[{name}]")),
                        format!(
                            "{:?}: {name} cannot be overcommitted; its request must equal its limit",
                            request.0
                        ),
                    );
                }
            }
            None if extended(name) || hugepage(name) => v.add(
                at(".resources.limits"),
                format!("{name:?} is requested without a limit; it cannot be overcommitted, so it needs both, equal"),
            ),
            None => {}
        }
    }
    if hugepages {
        let cpu_or_memory = ["cpu", "memory"]
            .iter()
            .any(|n| limits.contains_key(*n) || requests.contains_key(*n));
        if !cpu_or_memory {
            v.add(
                at(".resources"),
                "hugepages need a cpu or memory request or limit beside them",
            );
        }
    }
}

/// `spec.resources` (pod-level resources): cpu, memory and hugepages only; requests default to
/// the sum of the regular containers' and must be at least that, and at most the limits.
fn pod_resources(v: &mut Errors, spec: &PodSpec) {
    let Some(r) = &spec.resources else { return };
    let empty = BTreeMap::new();
    let limits = r.limits.as_ref().unwrap_or(&empty);
    let requests = r.requests.as_ref().unwrap_or(&empty);
    for (kind, map) in [("limits", limits), ("requests", requests)] {
        for name in map.keys() {
            if !matches!(name.as_str(), "cpu" | "memory") && !name.starts_with("hugepages-") {
                v.add(
                    format!("spec.resources.{kind}[{name}]"),
                    format!("{name:?} is not one of \"cpu\", \"memory\", hugepages-<size> (pod-level resources)"),
                );
            }
        }
    }
    for name in ["cpu", "memory"] {
        let summed: f64 = spec
            .containers
            .iter()
            .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get(name))
            .map(milli)
            .sum();
        let request = requests.get(name).map(milli);
        if let Some(request) = request
            && request < summed
        {
            v.add(
                format!("spec.resources.requests[{name}]"),
                format!("{request}m is less than the containers' requests together ({summed}m)"),
            );
        }
        if let Some(limit) = limits.get(name).map(milli) {
            let effective = request.unwrap_or(summed);
            if effective > limit {
                v.add(
                    "spec.resources.requests",
                    format!("{name}: the pod's request ({effective}m) is more than its limit ({limit}m)"),
                );
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Liveness,
    Readiness,
    Startup,
}

/// `validateHandler`: a probe or lifecycle handler names exactly one of `handlers`.
fn one_handler(v: &mut Errors, at: &str, handlers: &[(bool, &str)]) {
    let set: Vec<&str> = handlers.iter().filter(|(s, _)| *s).map(|(_, n)| *n).collect();
    match set.len() {
        0 => {
            let names: Vec<&str> = handlers.iter().map(|(_, n)| *n).collect();
            v.add(at, format!("names no handler (one of {})", names.join(", ")))
        }
        1 => {}
        _ => v.add(
            format!("{at}.{}", set[1]),
            format!("a handler does one thing; this one also has {}", set[0]),
        ),
    }
}

/// An exec handler runs a command: it needs one.
fn exec_command(v: &mut Errors, at: &str, exec: Option<&k8s_openapi::api::core::v1::ExecAction>) {
    if exec.is_some_and(|e| e.command.as_ref().is_none_or(Vec::is_empty)) {
        v.add(format!("{at}.exec.command"), "required");
    }
}

/// `validateProbe` and `validateHandler`.
fn validate_probe(v: &mut Errors, p: &Probe, at: &str, kind: Kind) {
    one_handler(
        v,
        at,
        &[
            (p.exec.is_some(), "exec"),
            (p.http_get.is_some(), "httpGet"),
            (p.tcp_socket.is_some(), "tcpSocket"),
            (p.grpc.is_some(), "grpc"),
        ],
    );
    exec_command(v, at, p.exec.as_ref());
    for (field, value) in [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("periodSeconds", p.period_seconds),
        ("successThreshold", p.success_threshold),
        ("failureThreshold", p.failure_threshold),
    ] {
        v.non_negative(format!("{at}.{field}"), value);
    }
    // 0 is defaulted to 1.
    if kind != Kind::Readiness
        && let Some(n) = p.success_threshold.filter(|n| *n > 1)
    {
        v.add(
            format!("{at}.successThreshold"),
            format!("{n}: must be 1 for a liveness or startup probe"),
        );
    }
    if let Some(n) = p.termination_grace_period_seconds {
        if kind == Kind::Readiness {
            v.add(
                format!("{at}.terminationGracePeriodSeconds"),
                "may not be set on a readiness probe",
            );
        } else if n <= 0 {
            v.add(
                format!("{at}.terminationGracePeriodSeconds"),
                format!("{n} is not positive"),
            );
        }
    }
    if let Some(h) = &p.http_get {
        http_get(v, h, &format!("{at}.httpGet"));
    }

    if let Some(t) = &p.tcp_socket {
        port_number_or_name(v, &t.port, &format!("{at}.tcpSocket.port"));
    }
    if let Some(g) = &p.grpc {
        v.range(format!("{at}.grpc.port"), g.port.into(), 1, 65535);
    }
}

fn port_number_or_name(v: &mut Errors, port: &IntOrString, at: &str) {
    match port {
        IntOrString::Int(n) => v.range(at, (*n).into(), 1, 65535),
        IntOrString::String(s) => {
            if let Some(problem) = port_name_problem(s) {
                v.add(at, problem);
            }
        }
    }
}

fn http_get(v: &mut Errors, h: &HTTPGetAction, at: &str) {
    port_number_or_name(v, &h.port, &format!("{at}.port"));
    if let Some(scheme) = h.scheme.as_deref().filter(|s| !s.is_empty()) {
        v.one_of(format!("{at}.scheme"), scheme, &["HTTP", "HTTPS"]);
    }
    for header in h.http_headers.iter().flatten() {
        if header.name.is_empty() || !header.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            v.add(
                format!("{at}.httpHeaders"),
                format!("{:?} is not an HTTP header name (letters, digits and '-')", header.name),
            );
        }
    }
}

/// `validateLifecycleHandler`.
fn lifecycle_handler(v: &mut Errors, h: &LifecycleHandler, at: &str, grace: i64) {
    one_handler(
        v,
        at,
        &[
            (h.exec.is_some(), "exec"),
            (h.http_get.is_some(), "httpGet"),
            (h.tcp_socket.is_some(), "tcpSocket"),
            (h.sleep.is_some(), "sleep"),
        ],
    );
    exec_command(v, at, h.exec.as_ref());
    if let Some(hg) = &h.http_get {
        http_get(v, hg, &format!("{at}.httpGet"));
    }

    if let Some(t) = &h.tcp_socket {
        port_number_or_name(v, &t.port, &format!("{at}.tcpSocket.port"));
    }
    if let Some(s) = &h.sleep
        && (s.seconds < 0 || s.seconds > grace)
    {
        v.add(
            format!("{at}.sleep.seconds"),
            format!(
                "{} is not between 0 and the pod's terminationGracePeriodSeconds ({grace})",
                s.seconds
            ),
        );
    }
}

/// `ValidateVolumeMounts`.
fn volume_mounts(v: &mut Errors, c: &Container, at: &dyn Fn(&str) -> String, volumes: &BTreeSet<String>) {
    let privileged = c.security_context.as_ref().and_then(|s| s.privileged) == Some(true);
    let mut paths = BTreeSet::new();
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        let at = |f: &str| at(&format!(".volumeMounts[{j}]{f}"));
        volume_mount(v, m, &at, volumes, privileged, &mut paths);
    }
    for (j, d) in c.volume_devices.iter().flatten().enumerate() {
        v.add(
            at(&format!(".volumeDevices[{j}].name")),
            format!(
                "{:?}: a volume device needs a persistentVolumeClaim volume, which a static pod cannot have",
                d.name
            ),
        );
    }
}

fn volume_mount(
    v: &mut Errors,
    m: &VolumeMount,
    at: &dyn Fn(&str) -> String,
    volumes: &BTreeSet<String>,
    privileged: bool,
    paths: &mut BTreeSet<String>,
) {
    if m.name.is_empty() {
        v.add(at(".name"), "required");
    } else if !volumes.contains(&m.name) {
        v.add(at(".name"), format!("{:?} names no volume of the pod", m.name));
    }
    if m.mount_path.is_empty() {
        v.add(at(".mountPath"), "required");
    } else if !paths.insert(m.mount_path.clone()) {
        v.add(
            at(".mountPath"),
            format!("{:?} is the path of an earlier mount of this container", m.mount_path),
        );
    }
    let sub_path = m.sub_path.as_deref().unwrap_or_default();
    if !sub_path.is_empty() {
        if sub_path.starts_with('/') {
            v.add(at(".subPath"), format!("{sub_path:?} must be a relative path"));
        } else if has_backsteps(sub_path) {
            v.add(at(".subPath"), format!("{sub_path:?} may not contain '..'"));
        }
    }
    if let Some(expr) = m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
        if !sub_path.is_empty() {
            v.add(at(".subPathExpr"), "may not be set together with subPath");
        } else if expr.starts_with('/') {
            v.add(at(".subPathExpr"), format!("{expr:?} must be a relative path"));
        } else if has_backsteps(expr) {
            v.add(at(".subPathExpr"), format!("{expr:?} may not contain '..'"));
        }
    }
    let propagation = m.mount_propagation.as_deref();
    if let Some(p) = propagation {
        v.one_of(
            at(".mountPropagation"),
            p,
            &["Bidirectional", "HostToContainer", "None"],
        );
        if p == "Bidirectional" && !privileged {
            v.add(at(".mountPropagation"), "Bidirectional needs a privileged container");
        }
    }
    if let Some(rro) = &m.recursive_read_only {
        v.one_of(at(".recursiveReadOnly"), rro, &["Disabled", "IfPossible", "Enabled"]);
        if rro != "Disabled" {
            if m.read_only != Some(true) {
                v.add(at(".recursiveReadOnly"), format!("{rro:?} needs readOnly: true"));
            }
            if propagation.is_some_and(|p| p != "None") {
                v.add(at(".recursiveReadOnly"), format!("{rro:?} needs mountPropagation None"));
            }
        }
    }
}

fn id_range(v: &mut Errors, field: String, id: Option<i64>) {
    if let Some(id) = id {
        v.range(field, id, 0, MAX_INT32);
    }
}

/// A seccomp or AppArmor profile field: Localhost needs `localhostProfile` (set, for seccomp
/// even empty: a relative path without `..`; for AppArmor non-empty, unpadded, at most 4095),
/// any other type takes none, not even an empty one.
fn profile(v: &mut Errors, at: &str, kind: &str, type_: &str, localhost: Option<&str>) {
    v.one_of(
        format!("{at}.type"),
        type_,
        &["Localhost", "RuntimeDefault", "Unconfined"],
    );
    let field = format!("{at}.localhostProfile");
    match (type_, localhost) {
        ("Localhost", None) => v.add(field, format!("required when the {kind} type is Localhost")),
        ("Localhost", Some(p)) if kind == "seccomp" => {
            if let Some(problem) = descending_path_problem(p) {
                v.add(field, problem);
            }
        }
        ("Localhost", Some(p)) => {
            if p.is_empty() {
                v.add(field, format!("required when the {kind} type is Localhost"));
            } else if p.trim() != p {
                v.add(field, format!("{p:?} has leading or trailing whitespace"));
            } else if p.len() > 4095 {
                v.add(field, format!("{} characters; at most 4095", p.len()));
            }
        }
        (_, None) => {}
        (_, Some(_)) => v.add(field, format!("may be set only when the {kind} type is Localhost")),
    }
}

/// `validateLocalDescendingPath`: relative, without a `..` element.
fn descending_path_problem(p: &str) -> Option<String> {
    if p.starts_with('/') {
        Some(format!("{p:?} must be a relative path"))
    } else if has_backsteps(p) {
        Some(format!("{p:?} may not contain '..'"))
    } else {
        None
    }
}

/// `validateContainerSecurityContext` and `ValidateSecurityContext`.
fn container_security(v: &mut Errors, sc: &SecurityContext, at: &str, spec: &PodSpec) {
    id_range(v, format!("{at}.runAsUser"), sc.run_as_user);
    id_range(v, format!("{at}.runAsGroup"), sc.run_as_group);
    if sc.allow_privilege_escalation == Some(false) {
        if sc.privileged == Some(true) {
            v.add(
                format!("{at}.allowPrivilegeEscalation"),
                "cannot be false for a privileged container",
            );
        }
        let adds = sc.capabilities.as_ref().and_then(|c| c.add.as_ref());
        if adds.is_some_and(|a| a.iter().any(|c| c == "CAP_SYS_ADMIN")) {
            v.add(
                format!("{at}.allowPrivilegeEscalation"),
                "cannot be false for a container that adds CAP_SYS_ADMIN",
            );
        }
    }
    if let Some(pm) = &sc.proc_mount {
        v.one_of(format!("{at}.procMount"), pm, &["Default", "Unmasked"]);
        if pm == "Unmasked" && spec.host_users != Some(false) {
            v.add(format!("{at}.procMount"), "Unmasked needs hostUsers: false");
        }
    }
    if let Some(p) = &sc.seccomp_profile {
        profile(
            v,
            &format!("{at}.seccompProfile"),
            "seccomp",
            &p.type_,
            p.localhost_profile.as_deref(),
        );
    }
    if let Some(p) = &sc.app_armor_profile {
        profile(
            v,
            &format!("{at}.appArmorProfile"),
            "AppArmor",
            &p.type_,
            p.localhost_profile.as_deref(),
        );
    }
}

/// The pod's security context, the host namespaces and the legacy seccomp annotations.
fn pod_security_context(v: &mut Errors, pod: &Pod, spec: &PodSpec) {
    let host_network = spec.host_network == Some(true);
    if spec.share_process_namespace == Some(true) && spec.host_pid == Some(true) {
        v.add(
            "spec.securityContext.shareProcessNamespace",
            "cannot be true together with hostPID",
        );
    }
    if spec.host_users == Some(false) {
        for (set, field) in [
            (host_network, "spec.hostNetwork"),
            (spec.host_pid == Some(true), "spec.hostPID"),
            (spec.host_ipc == Some(true), "spec.hostIPC"),
        ] {
            if set {
                v.add(field, "cannot be true when hostUsers is false");
            }
        }
    }
    if let Some(sc) = &spec.security_context {
        id_range(v, "spec.securityContext.runAsUser".into(), sc.run_as_user);
        id_range(v, "spec.securityContext.runAsGroup".into(), sc.run_as_group);
        id_range(v, "spec.securityContext.fsGroup".into(), sc.fs_group);
        for (i, g) in sc.supplemental_groups.iter().flatten().enumerate() {
            id_range(v, format!("spec.securityContext.supplementalGroups[{i}]"), Some(*g));
        }
        if let Some(p) = &sc.fs_group_change_policy {
            v.one_of(
                "spec.securityContext.fsGroupChangePolicy",
                p,
                &["Always", "OnRootMismatch"],
            );
        }
        if let Some(p) = &sc.supplemental_groups_policy {
            v.one_of("spec.securityContext.supplementalGroupsPolicy", p, &["Merge", "Strict"]);
        }
        if let Some(p) = &sc.se_linux_change_policy {
            v.one_of("spec.securityContext.seLinuxChangePolicy", p, &["Recursive"]);
        }
        if let Some(p) = &sc.seccomp_profile {
            profile(
                v,
                "spec.securityContext.seccompProfile",
                "seccomp",
                &p.type_,
                p.localhost_profile.as_deref(),
            );
        }
        if let Some(p) = &sc.app_armor_profile {
            profile(
                v,
                "spec.securityContext.appArmorProfile",
                "AppArmor",
                &p.type_,
                p.localhost_profile.as_deref(),
            );
        }
        let mut names = BTreeSet::new();
        for (i, s) in sc.sysctls.iter().flatten().enumerate() {
            let at = format!("spec.securityContext.sysctls[{i}].name");
            if !is_sysctl_name(&s.name) {
                v.add(at, format!("{:?} is not a sysctl name", s.name));
            } else if !names.insert(s.name.clone()) {
                v.add(at, format!("{:?} is set twice", s.name));
            } else if host_network && is_net_sysctl(&s.name) {
                v.add(
                    at,
                    format!("{:?}: a network sysctl cannot be set with hostNetwork", s.name),
                );
            } else if spec.host_ipc == Some(true) && is_ipc_sysctl(&s.name) {
                v.add(at, format!("{:?}: an IPC sysctl cannot be set with hostIPC", s.name));
            }
        }
    }
    seccomp_annotations(v, pod, spec);
    apparmor_annotations(v, pod, spec);
}

/// `^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$`, at most 253.
fn is_sysctl_name(name: &str) -> bool {
    let segment = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && !s.starts_with(['-', '_'])
            && !s.ends_with(['-', '_'])
    };
    name.len() <= 253 && name.split(['.', '/']).all(segment)
}

fn is_net_sysctl(name: &str) -> bool {
    name.starts_with("net.") || name.starts_with("net/")
}

fn is_ipc_sysctl(name: &str) -> bool {
    let n = name.replace('/', ".");
    ["kernel.shm", "kernel.msg"].iter().any(|p| n.starts_with(p)) || n == "kernel.sem" || n.starts_with("fs.mqueue.")
}

/// The seccomp type a legacy annotation value stands for.
fn seccomp_annotation_type(value: &str) -> Option<&'static str> {
    match value {
        "runtime/default" | "docker/default" => Some("RuntimeDefault"),
        "unconfined" => Some("Unconfined"),
        v if v
            .strip_prefix("localhost/")
            .is_some_and(|p| descending_path_problem(p).is_none()) =>
        {
            Some("Localhost")
        }
        _ => None,
    }
}

/// `ValidateAppArmorProfileFormat` on the legacy per-container annotations.
fn apparmor_annotations(v: &mut Errors, pod: &Pod, spec: &PodSpec) {
    for (key, value) in pod.metadata.annotations.iter().flatten() {
        let Some(container) = key.strip_prefix(APPARMOR_CONTAINER) else {
            continue;
        };
        let Some((list, i, c)) = container_lists(spec)
            .into_iter()
            .flat_map(|(list, cs)| cs.iter().enumerate().map(move |(i, c)| (list, i, c)))
            .find(|(_, _, c)| c.name == container)
        else {
            v.add(
                format!("metadata.annotations[{key}]"),
                format!("{container:?} is no container of this pod"),
            );
            continue;
        };
        // validateAppArmorAnnotationsAndFieldsMatchOnCreate: the container's own profile must
        // say what the annotation says (the pod's is not compared; nor is a Windows pod).
        let windows = spec.os.as_ref().is_some_and(|o| o.name == "windows");
        let field = c.security_context.as_ref().and_then(|s| s.app_armor_profile.as_ref());
        if let Some(field) = field.filter(|_| !windows) {
            let matches = match field.type_.as_str() {
                "Unconfined" => value == "unconfined",
                "RuntimeDefault" => value == "runtime/default",
                "Localhost" => value.strip_prefix("localhost/") == field.localhost_profile.as_deref(),
                _ => true,
            };
            if !matches {
                v.add(
                    format!("spec.{list}[{i}].securityContext.appArmorProfile"),
                    format!("says {} but the annotation {key} says {value:?}", field.type_),
                );
            }
        }
        let known = matches!(value.as_str(), "" | "runtime/default" | "unconfined") || value.starts_with("localhost/");
        if !known {
            v.add(
                format!("metadata.annotations[{key}]"),
                format!("{value:?} is not an AppArmor profile (runtime/default, unconfined or localhost/<name>)"),
            );
        }
    }
}

/// `ValidateSeccompPodAnnotations` and `validateSeccompAnnotationsAndFields`.
fn seccomp_annotations(v: &mut Errors, pod: &Pod, spec: &PodSpec) {
    let Some(annotations) = &pod.metadata.annotations else {
        return;
    };
    let pod_field = spec
        .security_context
        .as_ref()
        .and_then(|s| s.seccomp_profile.as_ref())
        .map(|p| p.type_.as_str());
    for (key, value) in annotations {
        let container = key.strip_prefix(SECCOMP_CONTAINER);
        if key != SECCOMP_POD && container.is_none() {
            continue;
        }
        let field = format!("metadata.annotations[{key}]");
        let Some(kind) = seccomp_annotation_type(value) else {
            v.add(
                field,
                format!("{value:?} is not a seccomp profile (runtime/default, unconfined or localhost/<file>)"),
            );
            continue;
        };
        let set = match container {
            None => pod_field,
            Some(name) => container_lists(spec)
                .iter()
                .flat_map(|(_, cs)| cs.iter())
                .find(|c| c.name == name)
                .and_then(|c| c.security_context.as_ref())
                .and_then(|s| s.seccomp_profile.as_ref())
                .map(|p| p.type_.as_str()),
        };
        if let Some(set) = set
            && set != kind
        {
            v.add(
                field,
                format!("{value:?} says {kind} but the securityContext's seccompProfile says {set}"),
            );
        }
    }
}

fn dns(v: &mut Errors, spec: &PodSpec) {
    let policy = spec
        .dns_policy
        .as_deref()
        .filter(|p| !p.is_empty())
        .unwrap_or("ClusterFirst");
    v.one_of(
        "spec.dnsPolicy",
        policy,
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
    );
    let Some(config) = &spec.dns_config else {
        if policy == "None" {
            v.add("spec.dnsConfig", "required when dnsPolicy is None");
        }
        return;
    };
    let nameservers = config.nameservers.as_deref().unwrap_or_default();
    if nameservers.len() > 3 {
        v.add(
            "spec.dnsConfig.nameservers",
            format!("{} nameservers; at most 3", nameservers.len()),
        );
    }
    for (i, ns) in nameservers.iter().enumerate() {
        if !is_ip(ns) {
            v.add(
                format!("spec.dnsConfig.nameservers[{i}]"),
                format!("{ns:?} is not an IP address"),
            );
        }
    }
    if policy == "None" && nameservers.is_empty() {
        v.add(
            "spec.dnsConfig.nameservers",
            "at least one nameserver is required when dnsPolicy is None",
        );
    }
    let searches = config.searches.as_deref().unwrap_or_default();
    if searches.len() > 32 {
        v.add(
            "spec.dnsConfig.searches",
            format!("{} search domains; at most 32", searches.len()),
        );
    }
    let total: usize = searches.iter().map(String::len).sum::<usize>() + searches.len().saturating_sub(1);
    if total > 2048 {
        v.add(
            "spec.dnsConfig.searches",
            format!("{total} characters in all; at most 2048"),
        );
    }
    for (i, s) in searches.iter().enumerate() {
        if !is_search_domain(s) {
            v.add(
                format!("spec.dnsConfig.searches[{i}]"),
                format!("{s:?} is not a search domain (lowercase DNS names whose labels may hold and start with '_', optionally ending with '.')"),
            );
        }
    }
    for (i, o) in config.options.iter().flatten().enumerate() {
        if o.name.as_deref().is_none_or(str::is_empty) {
            v.add(format!("spec.dnsConfig.options[{i}]"), "an option needs a name");
        }
    }
}

/// `ValidateDNS1123SubdomainWithUnderScore` after a trailing '.' is dropped; "." alone is the root.
fn is_search_domain(s: &str) -> bool {
    if s == "." {
        return true;
    }
    let s = s.strip_suffix('.').unwrap_or(s);
    let label = |l: &str| {
        let l = l.strip_prefix('_').unwrap_or(l);
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
            && l.as_bytes()[0].is_ascii_alphanumeric()
            && l.as_bytes()[l.len() - 1].is_ascii_alphanumeric()
    };
    s.len() <= 253 && s.split('.').all(label)
}

fn host_aliases(v: &mut Errors, spec: &PodSpec) {
    for (i, a) in spec.host_aliases.iter().flatten().enumerate() {
        if !is_ip(&a.ip) {
            v.add(
                format!("spec.hostAliases[{i}].ip"),
                format!("{:?} is not an IP address", a.ip),
            );
        }
        for (j, h) in a.hostnames.iter().flatten().enumerate() {
            if let Some(problem) = subdomain_problem(h) {
                v.add(format!("spec.hostAliases[{i}].hostnames[{j}]"), problem);
            }
        }
    }
}

/// `ValidateTolerations`.
fn tolerations(v: &mut Errors, spec: &PodSpec) {
    toleration_list(v, "spec.tolerations", spec.tolerations.as_deref().unwrap_or_default());
}

fn toleration_list(v: &mut Errors, at: &str, list: &[k8s_openapi::api::core::v1::Toleration]) {
    for (i, t) in list.iter().enumerate() {
        let at = |f: &str| format!("{at}[{i}].{f}");
        let key = t.key.as_deref().unwrap_or_default();
        if !key.is_empty()
            && let Some(problem) = qualified_name_problem(key)
        {
            v.add(at("key"), problem);
        }
        let operator = t.operator.as_deref().unwrap_or("Equal");
        if key.is_empty() && operator != "Exists" {
            v.add(
                at("operator"),
                format!("{operator:?}: an empty key needs operator Exists"),
            );
        }
        match operator {
            "Exists" => {
                if t.value.as_deref().is_some_and(|v| !v.is_empty()) {
                    v.add(at("operator"), "Exists takes no value");
                }
            }
            "Equal" => {
                if let Some(problem) = t.value.as_deref().and_then(label_value_problem) {
                    v.add(at("value"), problem);
                }
            }
            other => v.one_of(at("operator"), other, &["Equal", "Exists"]),
        }
        let effect = t.effect.as_deref().unwrap_or_default();
        if t.toleration_seconds.is_some() && effect != "NoExecute" {
            v.add(
                at("effect"),
                format!("{effect:?}: tolerationSeconds needs effect NoExecute"),
            );
        }
        if !effect.is_empty() {
            v.one_of(at("effect"), effect, &["NoSchedule", "PreferNoSchedule", "NoExecute"]);
        }
    }
}

fn topology_spread(v: &mut Errors, spec: &PodSpec) {
    let mut seen = BTreeSet::new();
    for (i, c) in spec.topology_spread_constraints.iter().flatten().enumerate() {
        let at = |f: &str| format!("spec.topologySpreadConstraints[{i}].{f}");
        if c.max_skew <= 0 {
            v.add(at("maxSkew"), format!("{} is not positive", c.max_skew));
        }
        // Only required: the key is the nodes' label, whatever its shape.
        if c.topology_key.is_empty() {
            v.add(at("topologyKey"), "required");
        }
        v.one_of(
            at("whenUnsatisfiable"),
            &c.when_unsatisfiable,
            &["DoNotSchedule", "ScheduleAnyway"],
        );
        if !seen.insert((c.topology_key.clone(), c.when_unsatisfiable.clone())) {
            v.add(
                at("{topologyKey, whenUnsatisfiable}"),
                "the same pair as an earlier constraint",
            );
        }
        if let Some(n) = c.min_domains {
            if n <= 0 {
                v.add(at("minDomains"), format!("{n} is not positive"));
            } else if c.when_unsatisfiable != "DoNotSchedule" {
                v.add(at("minDomains"), "may be set only with whenUnsatisfiable DoNotSchedule");
            }
        }
        for (field, policy) in [
            ("nodeAffinityPolicy", &c.node_affinity_policy),
            ("nodeTaintsPolicy", &c.node_taints_policy),
        ] {
            if let Some(p) = policy {
                v.one_of(at(field), p, &["Honor", "Ignore"]);
            }
        }
        let keys = c
            .label_selector
            .as_ref()
            .map(|s| label_selector(v, &at("labelSelector"), s))
            .unwrap_or_default();
        let matched = c.match_label_keys.as_deref().unwrap_or_default();
        if !matched.is_empty() && c.label_selector.is_none() {
            v.add(at("matchLabelKeys"), "needs a labelSelector");
        }
        label_keys(v, &format!("spec.topologySpreadConstraints[{i}]"), &keys, matched, &[]);
    }
}

/// `ValidateNodeSelectorRequirement`: values are label values, whatever the operator.
fn node_selector_requirement(v: &mut Errors, at: &str, key: &str, operator: &str, values: &[String]) {
    if let Some(problem) = qualified_name_problem(key) {
        v.add(format!("{at}.key"), problem);
    }
    match operator {
        "In" | "NotIn" if values.is_empty() => {
            v.add(format!("{at}.values"), format!("required with operator {operator}"))
        }
        "Exists" | "DoesNotExist" if !values.is_empty() => v.add(
            format!("{at}.values"),
            format!("must be empty with operator {operator}"),
        ),
        "Gt" | "Lt" if values.len() != 1 || values[0].parse::<i64>().is_err() => {
            v.add(format!("{at}.values"), format!("operator {operator} takes one integer"))
        }
        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt" => {}
        other => v.one_of(
            format!("{at}.operator"),
            other,
            &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"],
        ),
    }
    for (k, value) in values.iter().enumerate() {
        if let Some(problem) = label_value_problem(value) {
            v.add(format!("{at}.values[{k}]"), problem);
        }
    }
}

/// `validateNodeSelectorTerm`: expressions, and fields (only `metadata.name`, In or NotIn, one
/// value).
fn node_selector_term(v: &mut Errors, at: &str, term: &k8s_openapi::api::core::v1::NodeSelectorTerm) {
    for (j, e) in term.match_expressions.iter().flatten().enumerate() {
        node_selector_requirement(
            v,
            &format!("{at}.matchExpressions[{j}]"),
            &e.key,
            &e.operator,
            e.values.as_deref().unwrap_or_default(),
        );
    }
    for (j, f) in term.match_fields.iter().flatten().enumerate() {
        let at = format!("{at}.matchFields[{j}]");
        if f.key != "metadata.name" {
            v.add(
                format!("{at}.key"),
                format!("{:?} is not a supported field (metadata.name)", f.key),
            );
        }
        if !matches!(f.operator.as_str(), "In" | "NotIn") {
            v.add(
                format!("{at}.operator"),
                format!("{:?}: a field takes In or NotIn", f.operator),
            );
        }
        if f.values.as_ref().map_or(0, Vec::len) != 1 {
            v.add(format!("{at}.values"), "a field takes exactly one value");
        }
    }
}

/// `ValidateLabelSelector`; returns the keys it names.
fn label_selector(v: &mut Errors, at: &str, selector: &LabelSelector) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        if let Some(problem) = qualified_name_problem(key) {
            v.add(format!("{at}.matchLabels"), format!("key {problem}"));
        }
        if let Some(problem) = label_value_problem(value) {
            v.add(format!("{at}.matchLabels[{key}]"), problem);
        }
        keys.insert(key.clone());
    }
    for (j, e) in selector.match_expressions.iter().flatten().enumerate() {
        let at = format!("{at}.matchExpressions[{j}]");
        if let Some(problem) = qualified_name_problem(&e.key) {
            v.add(format!("{at}.key"), problem);
        }
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                v.add(format!("{at}.values"), format!("required with operator {}", e.operator))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => v.add(
                format!("{at}.values"),
                format!("must be empty with operator {}", e.operator),
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => v.one_of(
                format!("{at}.operator"),
                other,
                &["In", "NotIn", "Exists", "DoesNotExist"],
            ),
        }
        for (k, value) in values.iter().enumerate() {
            if let Some(problem) = label_value_problem(value) {
                v.add(format!("{at}.values[{k}]"), problem);
            }
        }
        keys.insert(e.key.clone());
    }
    keys
}

/// `matchLabelKeys` and `mismatchLabelKeys`: qualified names, in neither the selector nor both.
fn label_keys(v: &mut Errors, at: &str, selector_keys: &BTreeSet<String>, matched: &[String], mismatched: &[String]) {
    for (field, keys) in [("matchLabelKeys", matched), ("mismatchLabelKeys", mismatched)] {
        for (k, key) in keys.iter().enumerate() {
            if let Some(problem) = qualified_name_problem(key) {
                v.add(format!("{at}.{field}[{k}]"), problem);
            } else if selector_keys.contains(key) {
                v.add(
                    format!("{at}.{field}[{k}]"),
                    format!("{key:?} is already in the labelSelector"),
                );
            }
        }
    }
    for key in matched.iter().filter(|k| mismatched.contains(k)) {
        v.add(
            format!("{at}.mismatchLabelKeys"),
            format!("{key:?} is also in matchLabelKeys"),
        );
    }
}

fn affinity(v: &mut Errors, spec: &PodSpec) {
    let Some(a) = &spec.affinity else { return };
    if let Some(na) = &a.node_affinity {
        if let Some(required) = &na.required_during_scheduling_ignored_during_execution {
            let at = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
            if required.node_selector_terms.is_empty() {
                v.add(at, "at least one term is required");
            }
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                node_selector_term(v, &format!("{at}[{i}]"), term);
            }
        }
        for (i, p) in na
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let at = format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            v.range(format!("{at}.weight"), p.weight.into(), 1, 100);
            node_selector_term(v, &format!("{at}.preference"), &p.preference);
        }
    }
    let kinds = [
        (
            "podAffinity",
            a.pod_affinity.as_ref().map(|p| {
                (
                    &p.required_during_scheduling_ignored_during_execution,
                    &p.preferred_during_scheduling_ignored_during_execution,
                )
            }),
        ),
        (
            "podAntiAffinity",
            a.pod_anti_affinity.as_ref().map(|p| {
                (
                    &p.required_during_scheduling_ignored_during_execution,
                    &p.preferred_during_scheduling_ignored_during_execution,
                )
            }),
        ),
    ];
    for (kind, lists) in kinds {
        let Some((required, preferred)) = lists else { continue };
        for (i, term) in required.iter().flatten().enumerate() {
            pod_affinity_term(
                v,
                &format!("spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
                term,
            );
        }
        for (i, w) in preferred.iter().flatten().enumerate() {
            let at = format!("spec.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}]");
            v.range(format!("{at}.weight"), w.weight.into(), 1, 100);
            pod_affinity_term(v, &format!("{at}.podAffinityTerm"), &w.pod_affinity_term);
        }
    }
}

/// `validatePodAffinityTerm`.
fn pod_affinity_term(v: &mut Errors, at: &str, term: &k8s_openapi::api::core::v1::PodAffinityTerm) {
    if term.topology_key.is_empty() {
        v.add(format!("{at}.topologyKey"), "required");
    } else if let Some(problem) = qualified_name_problem(&term.topology_key) {
        v.add(format!("{at}.topologyKey"), problem);
    }
    let keys = term
        .label_selector
        .as_ref()
        .map(|s| label_selector(v, &format!("{at}.labelSelector"), s))
        .unwrap_or_default();
    if let Some(s) = &term.namespace_selector {
        label_selector(v, &format!("{at}.namespaceSelector"), s);
    }
    for (k, ns) in term.namespaces.iter().flatten().enumerate() {
        if let Some(problem) = label_problem(ns) {
            v.add(format!("{at}.namespaces[{k}]"), problem);
        }
    }
    label_keys(
        v,
        at,
        &keys,
        term.match_label_keys.as_deref().unwrap_or_default(),
        term.mismatch_label_keys.as_deref().unwrap_or_default(),
    );
}

/// `validateWindowsSecurityContextOptions`: GMSA, the user name Windows runs as.
fn windows_options(v: &mut Errors, at: &str, o: &k8s_openapi::api::core::v1::WindowsSecurityContextOptions) {
    if let Some(name) = &o.gmsa_credential_spec_name
        && let Some(problem) = subdomain_problem(name)
    {
        v.add(format!("{at}.gmsaCredentialSpecName"), problem);
    }
    if let Some(spec) = &o.gmsa_credential_spec {
        if spec.is_empty() {
            v.add(format!("{at}.gmsaCredentialSpec"), "may not be empty");
        } else if spec.len() > 64 * 1024 {
            v.add(
                format!("{at}.gmsaCredentialSpec"),
                format!("{} bytes; at most 65536", spec.len()),
            );
        }
    }
    if let Some(user) = &o.run_as_user_name
        && let Some(problem) = windows_user_problem(user)
    {
        v.add(format!("{at}.runAsUserName"), problem);
    }
}

/// A Windows user name: `[domain\]user`, the domain a NetBIOS or DNS name, the user at most
/// 104 characters of neither control characters nor `"/\[]:;|=,+*?<>@`, not dots and spaces only.
fn windows_user_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("may not be empty".into());
    }
    if name.chars().count() > 256 {
        return Some(format!("{} characters; at most 256", name.chars().count()));
    }
    if name.chars().any(char::is_control) {
        return Some(format!("{name:?} holds a control character"));
    }
    let parts: Vec<&str> = name.split('\\').collect();
    if parts.len() > 2 {
        return Some(format!("{name:?} holds more than one backslash"));
    }
    let (domain, user) = if parts.len() == 2 {
        (Some(parts[0]), parts[1])
    } else {
        (None, parts[0])
    };
    if let Some(domain) = domain {
        let netbios = !domain.is_empty()
            && domain.len() <= 15
            && !domain.starts_with('.')
            && !domain.chars().any(|c| "\\/:*?\"<>|".contains(c));
        let dns = domain.len() <= 255
            && !domain.is_empty()
            && domain.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !netbios && !dns {
            return Some(format!(
                "{name:?}: the domain {domain:?} is neither a NetBIOS nor a DNS name"
            ));
        }
    }
    if user.is_empty() || user.chars().count() > 104 {
        return Some(format!("{name:?}: the user must have 1 to 104 characters"));
    }
    if user.chars().all(|c| c == '.' || c == ' ') {
        return Some(format!("{name:?}: the user may not be dots and spaces only"));
    }
    if user.chars().any(|c| "\"/\\[]:;|=,+*?<>@".contains(c)) {
        return Some(format!("{name:?}: the user may not hold any of \"/\\[]:;|=,+*?<>@"));
    }
    None
}

/// Windows options in a pod: refused in a Linux pod, checked otherwise, and host process
/// containers all or none, with hostNetwork (`validateWindowsHostProcessPod`).
fn windows(v: &mut Errors, spec: &PodSpec) {
    let linux = spec.os.as_ref().is_some_and(|o| o.name == "linux");
    let pod_options = spec.security_context.as_ref().and_then(|s| s.windows_options.as_ref());
    let mut all = vec![("spec.securityContext.windowsOptions".to_owned(), pod_options)];
    for (list, cs) in container_lists(spec) {
        for (i, c) in cs.iter().enumerate() {
            all.push((
                format!("spec.{list}[{i}].securityContext.windowsOptions"),
                c.security_context.as_ref().and_then(|s| s.windows_options.as_ref()),
            ));
        }
    }
    for (at, options) in &all {
        let Some(o) = options else { continue };
        if linux {
            v.add(at.clone(), "cannot be set for a Linux pod");
        } else {
            windows_options(v, at, o);
        }
    }
    let pod_host_process = pod_options.and_then(|o| o.host_process);
    let mut any = pod_host_process == Some(true);
    let mut every = true;
    for (at, options) in all.iter().skip(1) {
        let own = options.and_then(|o| o.host_process);
        if let (Some(own), Some(pod)) = (own, pod_host_process)
            && own != pod
        {
            v.add(
                format!("{at}.hostProcess"),
                format!("{own} differs from the pod's {pod}; set both alike"),
            );
        }
        let effective = own.or(pod_host_process).unwrap_or(false);
        any |= effective;
        every &= effective;
    }
    if any {
        if spec.host_network != Some(true) {
            v.add("spec.hostNetwork", "must be true in a pod with host process containers");
        }
        if !every {
            v.add(
                "spec",
                "a pod with host process containers must have every container a host process container",
            );
        }
    }
}

/// `validateOS` and `validateWindows`: a Windows pod takes none of Linux's security fields.
fn os(v: &mut Errors, spec: &PodSpec) {
    let Some(os) = &spec.os else { return };
    v.one_of("spec.os.name", &os.name, &["linux", "windows"]);
    if os.name != "windows" {
        return;
    }
    if let Some(sc) = &spec.security_context {
        for (set, field) in [
            (sc.seccomp_profile.is_some(), "seccompProfile"),
            (sc.app_armor_profile.is_some(), "appArmorProfile"),
            (sc.se_linux_options.is_some(), "seLinuxOptions"),
            (sc.run_as_user.is_some(), "runAsUser"),
            (sc.run_as_group.is_some(), "runAsGroup"),
            (sc.fs_group.is_some(), "fsGroup"),
            (sc.fs_group_change_policy.is_some(), "fsGroupChangePolicy"),
            (sc.sysctls.as_ref().is_some_and(|s| !s.is_empty()), "sysctls"),
            (
                sc.supplemental_groups.as_ref().is_some_and(|s| !s.is_empty()),
                "supplementalGroups",
            ),
            (sc.supplemental_groups_policy.is_some(), "supplementalGroupsPolicy"),
            (sc.se_linux_change_policy.is_some(), "seLinuxChangePolicy"),
        ] {
            if set {
                v.add(
                    format!("spec.securityContext.{field}"),
                    "cannot be set for a Windows pod",
                );
            }
        }
    }
    if spec.host_pid == Some(true) {
        v.add("spec.hostPID", "cannot be true for a Windows pod");
    }
    if spec.share_process_namespace.is_some() {
        v.add("spec.shareProcessNamespace", "cannot be set for a Windows pod");
    }
    if spec.host_ipc == Some(true) {
        v.add("spec.hostIPC", "cannot be true for a Windows pod");
    }
    if spec.host_users.is_some() {
        v.add("spec.hostUsers", "cannot be set for a Windows pod");
    }
    for (list, cs) in container_lists(spec) {
        for (i, c) in cs.iter().enumerate() {
            let Some(sc) = &c.security_context else { continue };
            for (set, field) in [
                (sc.seccomp_profile.is_some(), "seccompProfile"),
                (sc.app_armor_profile.is_some(), "appArmorProfile"),
                (sc.se_linux_options.is_some(), "seLinuxOptions"),
                (sc.run_as_user.is_some(), "runAsUser"),
                (sc.run_as_group.is_some(), "runAsGroup"),
                (sc.privileged.is_some(), "privileged"),
                (sc.allow_privilege_escalation.is_some(), "allowPrivilegeEscalation"),
                (sc.proc_mount.is_some(), "procMount"),
                (sc.capabilities.is_some(), "capabilities"),
                (sc.read_only_root_filesystem.is_some(), "readOnlyRootFilesystem"),
            ] {
                if set {
                    v.add(
                        format!("spec.{list}[{i}].securityContext.{field}"),
                        "cannot be set for a Windows pod",
                    );
                }
            }
        }
    }
}

/// The built-in PriorityClasses (`scheduling.SystemPriorityClasses`) and their values.
fn builtin_priority(name: &str) -> Option<i32> {
    match name {
        "system-node-critical" => Some(2_000_001_000),
        "system-cluster-critical" => Some(2_000_000_000),
        _ => None,
    }
}

/// The mirror pod's admission: Priority computes `priority` and `preemptionPolicy` from the
/// class and refuses other values; RuntimeClass refuses an `overhead` it did not compute. Only
/// the built-in classes (and none) can be judged here; another class's value is the cluster's.
fn admission(v: &mut Errors, spec: &PodSpec) {
    let class = spec.priority_class_name.as_deref().filter(|c| !c.is_empty());
    let computed = match class {
        None => Some(0),
        Some(name) => builtin_priority(name),
    };
    if let (Some(set), Some(computed)) = (spec.priority, computed)
        && set != computed
    {
        v.add(
            "spec.priority",
            format!(
                "{set}: the API server sets it from the priority class ({computed}{}); leave it out",
                class.map(|c| format!(" for {c}")).unwrap_or_default()
            ),
        );
    }
    if computed.is_some()
        && let Some(p) = spec.preemption_policy.as_deref()
        && p != "PreemptLowerPriority"
    {
        v.add(
            "spec.preemptionPolicy",
            format!("{p:?}: the API server sets it from the priority class (PreemptLowerPriority); leave it out"),
        );
    }
    if spec.overhead.as_ref().is_some_and(|o| !o.is_empty()) && spec.runtime_class_name.is_none() {
        v.add(
            "spec.overhead",
            "set without a runtimeClassName: the API server computes it from the RuntimeClass",
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A kubeadm-like kube-apiserver pod with `change` merged into its first container (keys
    /// starting with `pod.` go to the pod spec, `meta.` to the metadata).
    fn judge(change: Value) -> Vec<String> {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
            "spec": {
                "hostNetwork": true,
                "priorityClassName": "system-node-critical",
                "containers": [{
                    "name": "kube-apiserver",
                    "image": "registry.k8s.io/kube-apiserver:v1.36.3",
                    "ports": [{"name": "probe-port", "containerPort": 6443}],
                    "livenessProbe": {"httpGet": {"port": 6443, "path": "/livez", "scheme": "HTTPS"}},
                    "volumeMounts": [{"name": "pki", "mountPath": "/etc/kubernetes/pki", "readOnly": true}]
                }],
                "volumes": [{"name": "pki", "hostPath": {"path": "/etc/kubernetes/pki", "type": "DirectoryOrCreate"}}]
            }
        });
        for (key, value) in change.as_object().unwrap() {
            if let Some(k) = key.strip_prefix("pod.") {
                pod["spec"][k] = value.clone();
            } else if let Some(k) = key.strip_prefix("meta.") {
                pod["metadata"][k] = value.clone();
            } else {
                pod["spec"]["containers"][0][key] = value.clone();
            }
        }
        let pod: Pod = serde_json::from_value(pod).unwrap();
        validate(&pod, Some("cp-1")).into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_kubeadm_like_pod_passes() {
        assert_eq!(judge(json!({})), Vec::<String>::new());
    }

    /// One row per rule family: the change and the first field Kubernetes names (checked
    /// against the real API server by tests/kubelet_rules.rs).
    #[test]
    fn each_rule_names_its_field() {
        let rows: Vec<(Value, Option<&str>)> = vec![
            (json!({"meta.name": "a".repeat(249)}), Some("metadata.name")),
            (json!({"meta.name": "a".repeat(248)}), None),
            (json!({"meta.labels": {"tier": "-x"}}), Some("metadata.labels[tier]")),
            (json!({"meta.annotations": {"-bad": "x"}}), Some("metadata.annotations")),
            (
                json!({"image": " registry.k8s.io/x:1"}),
                Some("spec.containers[0].image"),
            ),
            (
                json!({"imagePullPolicy": "Sometimes"}),
                Some("spec.containers[0].imagePullPolicy"),
            ),
            (
                json!({"ports": [{"containerPort": 6443, "hostPort": 6444}]}),
                Some("spec.containers[0].ports[0].hostPort"),
            ),
            (
                json!({"ports": [{"containerPort": 6443}, {"containerPort": 6443}]}),
                Some("spec.containers[0].ports[1].hostPort"),
            ),
            (
                json!({"ports": [{"name": "a-sixteen-chars1", "containerPort": 1}]}),
                Some("spec.containers[0].ports[0].name"),
            ),
            (
                json!({"ports": [{"containerPort": 6443, "protocol": "tcp"}]}),
                Some("spec.containers[0].ports[0].protocol"),
            ),
            (
                json!({"env": [{"name": "A=B", "value": "x"}]}),
                Some("spec.containers[0].env[0].name"),
            ),
            (json!({"env": [{"name": "A B", "value": "x"}]}), None),
            (
                json!({"env": [{"name": "X", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}),
                Some("spec.containers[0].env[0].valueFrom"),
            ),
            (
                json!({"env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}),
                Some("spec.containers[0].env[0].valueFrom.fieldRef.fieldPath"),
            ),
            (
                json!({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}),
                Some("spec.containers[0].resources.requests[cpu]"),
            ),
            (
                json!({"resources": {"limits": {"hugepages-2Mi": "1Gi"}}}),
                Some("spec.containers[0].resources"),
            ),
            (
                json!({"resources": {"requests": {"example.com/gpu": "1"}}}),
                Some("spec.containers[0].resources.limits"),
            ),
            (
                json!({"resources": {"requests": {"memory": "2GiB"}}}),
                Some("spec.containers[0].resources.requests[memory]"),
            ),
            (
                json!({"livenessProbe": {"httpGet": {"port": 6443}, "successThreshold": 2}}),
                Some("spec.containers[0].livenessProbe.successThreshold"),
            ),
            (
                json!({"livenessProbe": {"httpGet": {"port": 6443}, "successThreshold": 0}}),
                None,
            ),
            (
                json!({"livenessProbe": {"httpGet": {"port": 6443}, "tcpSocket": {"port": 6443}}}),
                Some("spec.containers[0].livenessProbe.tcpSocket"),
            ),
            (
                json!({"readinessProbe": {"httpGet": {"port": 6443}, "terminationGracePeriodSeconds": 5}}),
                Some("spec.containers[0].readinessProbe.terminationGracePeriodSeconds"),
            ),
            (
                json!({"lifecycle": {"preStop": {"sleep": {"seconds": 31}}}}),
                Some("spec.containers[0].lifecycle.preStop.sleep.seconds"),
            ),
            (
                json!({"securityContext": {"allowPrivilegeEscalation": false, "privileged": true}}),
                Some("spec.containers[0].securityContext.allowPrivilegeEscalation"),
            ),
            (
                json!({"securityContext": {"procMount": "Unmasked"}}),
                Some("spec.containers[0].securityContext.procMount"),
            ),
            (
                json!({"volumeMounts": [{"name": "pki", "mountPath": "/x", "subPath": "../y"}]}),
                Some("spec.containers[0].volumeMounts[0].subPath"),
            ),
            (
                json!({"volumeMounts": [{"name": "pki", "mountPath": "/x", "recursiveReadOnly": "Enabled"}]}),
                Some("spec.containers[0].volumeMounts[0].recursiveReadOnly"),
            ),
            (
                json!({"volumeMounts": [{"name": "pki", "mountPath": "/x", "mountPropagation": "Bidirectional"}]}),
                Some("spec.containers[0].volumeMounts[0].mountPropagation"),
            ),
            (
                json!({"pod.volumes": [{"name": "pki", "hostPath": {"path": "/x"}, "emptyDir": {}}]}),
                Some("spec.volumes[0].emptyDir"),
            ),
            (json!({"pod.hostUsers": false}), Some("spec.hostNetwork")),
            (
                json!({"pod.securityContext": {"sysctls": [{"name": "net.ipv4.ip_forward", "value": "1"}]}}),
                Some("spec.securityContext.sysctls[0].name"),
            ),
            (
                json!({"pod.securityContext": {"supplementalGroups": [-1]}}),
                Some("spec.securityContext.supplementalGroups[0]"),
            ),
            (
                json!({"pod.securityContext": {"seccompProfile": {"type": "Localhost"}}}),
                Some("spec.securityContext.seccompProfile.localhostProfile"),
            ),
            (
                json!({"pod.hostAliases": [{"ip": "x", "hostnames": ["a"]}]}),
                Some("spec.hostAliases[0].ip"),
            ),
            (
                json!({"pod.activeDeadlineSeconds": 0}),
                Some("spec.activeDeadlineSeconds"),
            ),
            (json!({"pod.dnsPolicy": "None"}), Some("spec.dnsConfig")),
            (json!({"pod.os": {"name": "plan9"}}), Some("spec.os.name")),
            (
                json!({"pod.tolerations": [{"operator": "Equal", "value": "x"}]}),
                Some("spec.tolerations[0].operator"),
            ),
            (
                json!({"pod.topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]}),
                Some("spec.topologySpreadConstraints[0].maxSkew"),
            ),
            (json!({"pod.priority": 5}), Some("spec.priority")),
            (json!({"pod.priority": 2_000_001_000}), None),
            (json!({"pod.overhead": {"cpu": "10m"}}), Some("spec.overhead")),
        ];
        for (change, want) in rows {
            let got = judge(change.clone());
            assert_eq!(got.first().map(String::as_str), want, "{change}: {got:?}");
        }
    }

    #[test]
    fn quantities_parse_as_kubernetes_parses_them() {
        for (q, want) in [
            ("1", Some(1.0)),
            ("250m", Some(0.25)),
            ("1Gi", Some(1024f64.powi(3))),
            ("1.5k", Some(1500.0)),
            ("1e3", Some(1000.0)),
            ("-1", Some(-1.0)),
            ("2GiB", None),
            ("", None),
            ("Gi", None),
            ("1..5", None),
            ("1e", None),
        ] {
            assert_eq!(quantity_value(q).ok(), want, "{q}");
        }
    }

    proptest::proptest! {
        /// Any text in the fields the rules slice, parse or compare never panics.
        #[test]
        fn any_text_is_judged_without_panicking(text in "\\PC{0,300}", n in proptest::prelude::any::<i32>()) {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": text, "namespace": text, "labels": {text.clone(): text}, "annotations": {
                    format!("container.apparmor.security.beta.kubernetes.io/{text}"): text,
                    "seccomp.security.alpha.kubernetes.io/pod": text}},
                "spec": {
                    "hostname": text, "dnsConfig": {"searches": [text], "nameservers": [text]},
                    "hostAliases": [{"ip": text, "hostnames": [text]}],
                    "tolerations": [{"key": text, "value": text, "operator": text, "effect": text}],
                    "volumes": [{"name": text, "hostPath": {"path": text, "type": text}}],
                    "containers": [{
                        "name": text, "image": text,
                        "ports": [{"name": text, "containerPort": n, "hostPort": n, "protocol": text}],
                        "env": [{"name": text, "valueFrom": {"fieldRef": {"fieldPath": text}, "resourceFieldRef": {"resource": text}}}],
                        "resources": {"requests": {text.clone(): text}, "limits": {"cpu": text}},
                        "livenessProbe": {"httpGet": {"port": text, "httpHeaders": [{"name": text, "value": text}]}, "successThreshold": n},
                        "volumeMounts": [{"name": text, "mountPath": text, "subPath": text, "mountPropagation": text}]
                    }]
                }
            }))
            .unwrap();
            let _ = validate(&pod, Some(&text));
        }
    }

    #[test]
    fn long_values_of_any_characters_are_shown_without_panicking() {
        let name = "é".repeat(300);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "i"}], "hostAliases": [{"ip": "10.0.0.1", "hostnames": [name]}]}
        }))
        .unwrap();
        let errors = validate(&pod, None);
        assert_eq!(errors[0].field, "metadata.name");
        assert!(
            errors.iter().any(|e| e.field == "spec.hostAliases[0].hostnames[0]"),
            "{errors:?}"
        );
    }

    #[test]
    fn problems_speak_words_not_rust() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "a".repeat(300)},
            "spec": {"containers": [{"name": "a".repeat(64), "image": "i", "ports": [{"containerPort": 0, "protocol": "tcp"}]}]}
        }))
        .unwrap();
        let all = validate(&pod, Some("cp-1"));
        let text: Vec<String> = all.iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|t| t.contains("longer than 63 characters")), "{text:?}");
        for t in &text {
            assert!(!t.contains("Some(") && !t.contains("None"), "{t}");
        }
    }
}
