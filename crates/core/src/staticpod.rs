//! What makes a manifest a valid static pod, and the content-hash annotation. Pure.
//!
//! The kubelet runs any Pod it finds in its manifest directory, but the API server refuses the
//! matching mirror pod when the pod references API objects (NodeRestriction's
//! `HasAPIObjectReference` and the ServiceAccount admission plugin); without a mirror pod nobody
//! can see the pod run, so such a manifest is refused here, before anything is written.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, Pod, Volume};
use serde_yaml_ng::{Mapping, Value};

use crate::pod_rules;
use crate::yaml::{self, MAX_FLOW_DEPTH, YamlError};

pub const CONTENT_HASH_ANNOTATION: &str = "kube-anchor.io/content-hash";
pub const MAX_MANIFEST_BYTES: usize = 10 * 1024 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    #[error("{}: {size} bytes is larger than the {max} bytes a manifest may have", .file.display(), max = MAX_MANIFEST_BYTES)]
    TooLarge { file: PathBuf, size: usize },
    #[error("{}: not valid YAML: {reason}", .file.display())]
    Yaml { file: PathBuf, reason: String },
    #[error("{}: nests deeper than {max} levels of [ and {{ (the bracket at byte {offset})", .file.display(), max = MAX_FLOW_DEPTH)]
    TooDeep { file: PathBuf, offset: usize },
    #[error("{}: holds {count} YAML documents; a static pod manifest holds exactly one Pod", .file.display())]
    DocumentCount { file: PathBuf, count: usize },
    #[error("{}: {field}: {problem}", .file.display())]
    Invalid {
        file: PathBuf,
        field: String,
        problem: String,
    },
}

/// One reason the API server would refuse this pod as a mirror pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiReference {
    /// Field path, e.g. `spec.volumes[2].secret`.
    pub field: String,
    /// What it references, as the API server names it, e.g. `secrets`.
    pub resource: &'static str,
}

impl std::fmt::Display for ApiReference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: a static pod may not reference {}", self.field, self.resource)
    }
}

/// A rendered manifest that passed validation.
#[derive(Debug, Clone)]
pub struct StaticPod {
    pub name: String,
    pub namespace: String,
    /// The document as written by the operator; serialized again with the hash annotation.
    document: Value,
}

/// Parses `text` as exactly one static-pod-safe `v1` `Pod`, for a node whose name is unknown:
/// the name keeps room for the shortest node name.
pub fn parse(file: &Path, text: &str) -> Result<StaticPod, ManifestError> {
    parse_for_node(file, text, None)
}

/// Parses `text` as exactly one static-pod-safe `v1` `Pod` for node `node` (the kubelet names
/// the pod `<name>-<node>` before validating it).
pub fn parse_for_node(file: &Path, text: &str, node: Option<&str>) -> Result<StaticPod, ManifestError> {
    if text.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            file: file.into(),
            size: text.len(),
        });
    }
    let yaml_error = |e: YamlError| match e {
        YamlError::TooDeep { offset } => ManifestError::TooDeep {
            file: file.into(),
            offset,
        },
        YamlError::Syntax(reason) => ManifestError::Yaml {
            file: file.into(),
            reason,
        },
        YamlError::MergeKey { field } => ManifestError::Invalid {
            file: file.into(),
            field,
            problem: yaml::MERGE_KEY_PROBLEM.into(),
        },
        YamlError::Tag { field } => ManifestError::Invalid {
            file: file.into(),
            field,
            problem: yaml::TAG_PROBLEM.into(),
        },
    };
    let mut documents: Vec<Value> = yaml::documents(text).map_err(yaml_error)?;
    documents.retain(|d| !d.is_null());
    if documents.len() != 1 {
        return Err(ManifestError::DocumentCount {
            file: file.into(),
            count: documents.len(),
        });
    }
    let document = documents.pop().expect("one document");
    let invalid = |field: &str, problem: String| ManifestError::Invalid {
        file: file.into(),
        field: field.into(),
        problem,
    };
    if !document.is_mapping() {
        return Err(invalid("(top level)", "expected a mapping (a Pod object)".into()));
    }
    match document.get("apiVersion").and_then(Value::as_str) {
        Some("v1") => {}
        other => {
            return Err(invalid(
                "apiVersion",
                format!("expected \"v1\", found {}", found(other)),
            ));
        }
    }
    match document.get("kind").and_then(Value::as_str) {
        Some("Pod") => {}
        other => {
            return Err(invalid("kind", format!("expected \"Pod\", found {}", found(other))));
        }
    }
    yaml::refuse_merge_keys_and_tags(&document).map_err(yaml_error)?;
    let pod: Pod = serde_path_to_error::deserialize(document.clone()).map_err(|e| {
        let field = e.path().to_string();
        let field = if field == "." { "(Pod)".to_owned() } else { field };
        let inner = e.into_inner().to_string();
        invalid(&field, format!("{}{}", yaml::in_words(&inner), yaml11_hint(&inner)))
    })?;
    if let Some(field) = unknown_field(&document, &pod) {
        return Err(invalid(
            &field,
            "not a field of a v1 Pod (Kubernetes 1.36): the kubelet would ignore it, so the pod would run without it"
                .into(),
        ));
    }
    let name = pod.metadata.name.clone().filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| invalid("metadata.name", "required".into()))?;
    if pod.spec.is_none() {
        return Err(invalid("spec", "required".into()));
    }
    if let Some(refusal) = pod_rules::validate(&pod, node).into_iter().next() {
        return Err(invalid(&refusal.field, refusal.problem));
    }
    if let Some(reference) = api_references(&pod).into_iter().next() {
        return Err(invalid(
            &reference.field,
            format!("a static pod may not reference {}", reference.resource),
        ));
    }
    Ok(StaticPod {
        name,
        namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        document,
    })
}

/// A string field's value for a message: quoted, or "none".
fn found(value: Option<&str>) -> String {
    value.map_or_else(|| "none".to_owned(), |v| format!("{v:?}"))
}

/// The first field of `document` that decoding as a Pod dropped (a typo such as `hostNetwrok`),
/// as a dotted path. The kubelet's decoder drops unknown fields silently; the manifest then runs
/// without what its author meant. The Pod type of `k8s-openapi` is the field list: whatever it
/// does not write back, it did not know. A null value is dropped by both and is not unknown.
fn unknown_field(document: &Value, pod: &Pod) -> Option<String> {
    let decoded = serde_yaml_ng::to_value(pod).ok()?;
    first_dropped(document, &decoded, "")
}

fn first_dropped(written: &Value, decoded: &Value, at: &str) -> Option<String> {
    let join = |key: &str| {
        if at.is_empty() {
            key.to_owned()
        } else {
            format!("{at}.{key}")
        }
    };
    match (written, decoded) {
        (Value::Mapping(w), Value::Mapping(d)) => w.iter().find_map(|(key, value)| {
            let name = match key {
                Value::String(s) => s.clone(),
                other => serde_yaml_ng::to_string(other).unwrap_or_default().trim().to_owned(),
            };
            match d.get(key) {
                None if value.is_null() => None,
                None => Some(join(&name)),
                Some(back) => first_dropped(value, back, &join(&name)),
            }
        }),
        (Value::Sequence(w), Value::Sequence(d)) => w
            .iter()
            .zip(d)
            .enumerate()
            .find_map(|(i, (value, back))| first_dropped(value, back, &format!("{at}[{i}]"))),
        _ => None,
    }
}

/// Why a YAML 1.1 habit failed to decode: the kubelet's decoder reads `0644` as octal and `yes`
/// as true, the YAML 1.2 reader here keeps both as strings.
fn yaml11_hint(error: &str) -> &'static str {
    let Some(rest) = error.split("invalid type: string \"").nth(1) else {
        return "";
    };
    let value = rest.split('"').next().unwrap_or_default();
    if value.len() > 1 && value.starts_with('0') && value.bytes().all(|b| b.is_ascii_digit()) {
        "; a number with a leading 0 is octal only in YAML 1.1: write it in decimal (420 for 0644) or as 0o644"
    } else if ["yes", "no", "on", "off", "y", "n"].contains(&value.to_ascii_lowercase().as_str()) {
        "; write booleans as true or false"
    } else {
        ""
    }
}

impl StaticPod {
    /// The manifest as written to the node: the operator's document plus our hash annotation.
    pub fn to_yaml_with_hash(&self, content_hash: &str) -> Vec<u8> {
        let mut document = self.document.clone();
        let metadata = document
            .as_mapping_mut()
            .expect("validated as a mapping")
            .entry("metadata".into())
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        let metadata = metadata.as_mapping_mut().expect("metadata decoded as ObjectMeta");
        let annotations = metadata
            .entry("annotations".into())
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        if !annotations.is_mapping() {
            *annotations = Value::Mapping(Mapping::new());
        }
        annotations
            .as_mapping_mut()
            .expect("just made a mapping")
            .insert(CONTENT_HASH_ANNOTATION.into(), content_hash.into());
        // Strings serde_yaml_ng would write plain but the kubelet's YAML 1.1 decoder would read
        // as booleans or numbers are written single-quoted: stand-ins first, quoted after.
        let tag = &crate::digest::sha256_hex(content_hash.as_bytes())[..16];
        let mut quoted = Vec::new();
        quote_yaml11_scalars(&mut document, tag, &mut quoted);
        let mut text = serde_yaml_ng::to_string(&document).expect("a Value always serializes");
        for (stand_in, original) in quoted.iter().rev() {
            text = text.replacen(stand_in.as_str(), &format!("'{original}'"), 1);
        }
        text.into_bytes()
    }
}

/// True when go-yaml v2 (sigs.k8s.io/yaml, the kubelet's manifest decoder) resolves the plain
/// scalar `s` to something other than a string while serde_yaml_ng writes `s` plain: the YAML
/// 1.1 booleans (`yes`, `on`, `n`…) and numbers with `_` or a `0b` prefix
/// (go.yaml.in/yaml/v2 resolve.go: resolveMapList, ParseInt of the text without `_`).
fn yaml11_reads_as_non_string(s: &str) -> bool {
    const BOOLS: [&str; 16] = [
        "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "n", "N", "no", "No", "NO", "off", "Off", "OFF",
    ];
    let numeric = || {
        let plain: String = s.chars().filter(|c| *c != '_').collect();
        let digits = plain.trim_start_matches(['-', '+']);
        let (radix, body) = match digits.get(..2) {
            Some("0x" | "0X") => (16, &digits[2..]),
            Some("0o" | "0O") => (8, &digits[2..]),
            Some("0b" | "0B") => (2, &digits[2..]),
            _ => (10, digits),
        };
        let int = !body.is_empty() && body.chars().all(|c| c.is_digit(radix));
        int || (radix == 10 && plain.parse::<f64>().is_ok() && plain.chars().any(|c| c.is_ascii_digit()))
    };
    let plain_when_written = || serde_yaml_ng::to_string(s).is_ok_and(|out| !out.starts_with(['\'', '"']));
    (BOOLS.contains(&s) || (s.contains('_') || s.contains("0b") || s.contains("0B")) && numeric())
        && plain_when_written()
}

/// Replaces every string (key or value) that [`yaml11_reads_as_non_string`] with a plain stand-in
/// unique to this document, remembering the original.
fn quote_yaml11_scalars(value: &mut Value, tag: &str, quoted: &mut Vec<(String, String)>) {
    let stand_in = |original: &str, quoted: &mut Vec<(String, String)>| {
        let token = format!("kube-anchor-quoted-{tag}-{}", quoted.len());
        quoted.push((token.clone(), original.to_owned()));
        token
    };
    match value {
        Value::String(s) if yaml11_reads_as_non_string(s) => *s = stand_in(s, quoted),
        Value::Sequence(items) => items.iter_mut().for_each(|v| quote_yaml11_scalars(v, tag, quoted)),
        Value::Mapping(map) => {
            let entries: Vec<(Value, Value)> = std::mem::take(map).into_iter().collect();
            for (mut k, mut v) in entries {
                if let Value::String(key) = &mut k {
                    if yaml11_reads_as_non_string(key) {
                        *key = stand_in(key, quoted);
                    }
                } else {
                    quote_yaml11_scalars(&mut k, tag, quoted);
                }
                quote_yaml11_scalars(&mut v, tag, quoted);
                map.insert(k, v);
            }
        }
        Value::Tagged(tagged) => quote_yaml11_scalars(&mut tagged.value, tag, quoted),
        _ => {}
    }
}

/// Every reference to an API object that makes the API server refuse a mirror pod.
pub fn api_references(pod: &Pod) -> Vec<ApiReference> {
    let mut found = Vec::new();
    let mut add = |field: String, resource: &'static str| found.push(ApiReference { field, resource });
    let Some(spec) = &pod.spec else { return found };
    for (field, value) in [
        ("spec.serviceAccountName", &spec.service_account_name),
        ("spec.serviceAccount", &spec.service_account),
    ] {
        if value.as_deref().is_some_and(|v| !v.is_empty()) {
            add(field.into(), "serviceaccounts");
        }
    }
    for (i, _) in spec.image_pull_secrets.iter().flatten().enumerate() {
        add(format!("spec.imagePullSecrets[{i}]"), "secrets");
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        add("spec.resourceClaims".into(), "resourceclaims");
    }
    let mut env_refs = |list: &str, i: usize, env: &Option<Vec<EnvVar>>, env_from: &Option<Vec<EnvFromSource>>| {
        for (j, var) in env.iter().flatten().enumerate() {
            let Some(source) = &var.value_from else {
                continue;
            };
            if source.secret_key_ref.is_some() {
                add(format!("spec.{list}[{i}].env[{j}].valueFrom.secretKeyRef"), "secrets");
            }
            if source.config_map_key_ref.is_some() {
                add(
                    format!("spec.{list}[{i}].env[{j}].valueFrom.configMapKeyRef"),
                    "configmaps",
                );
            }
        }
        for (j, source) in env_from.iter().flatten().enumerate() {
            if source.secret_ref.is_some() {
                add(format!("spec.{list}[{i}].envFrom[{j}].secretRef"), "secrets");
            }
            if source.config_map_ref.is_some() {
                add(format!("spec.{list}[{i}].envFrom[{j}].configMapRef"), "configmaps");
            }
        }
    };
    for (i, c) in spec.containers.iter().enumerate() {
        env_refs("containers", i, &c.env, &c.env_from);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        env_refs("initContainers", i, &c.env, &c.env_from);
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        env_refs("ephemeralContainers", i, &c.env, &c.env_from);
    }
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        for (source, resource) in volume_references(volume) {
            found.push(ApiReference {
                field: format!("spec.volumes[{i}].{source}"),
                resource,
            });
        }
    }
    found
}

/// References of one volume, as (field below the volume, resource).
fn volume_references(v: &Volume) -> Vec<(String, &'static str)> {
    let mut out: Vec<(String, &'static str)> = Vec::new();
    let mut flag = |present: bool, field: &str, resource: &'static str| {
        if present {
            out.push((field.into(), resource));
        }
    };
    flag(v.secret.is_some(), "secret", "secrets");
    flag(v.config_map.is_some(), "configMap", "configmaps");
    flag(v.csi.is_some(), "csi", "csidrivers");
    flag(v.glusterfs.is_some(), "glusterfs", "endpoints");
    flag(
        v.persistent_volume_claim.is_some(),
        "persistentVolumeClaim",
        "persistentvolumeclaims",
    );
    flag(v.ephemeral.is_some(), "ephemeral", "persistentvolumeclaims");
    flag(v.azure_file.is_some(), "azureFile", "secrets");
    flag(
        v.cephfs.as_ref().is_some_and(|s| s.secret_ref.is_some()),
        "cephfs.secretRef",
        "secrets",
    );
    flag(
        v.cinder.as_ref().is_some_and(|s| s.secret_ref.is_some()),
        "cinder.secretRef",
        "secrets",
    );
    flag(
        v.flex_volume.as_ref().is_some_and(|s| s.secret_ref.is_some()),
        "flexVolume.secretRef",
        "secrets",
    );
    flag(
        v.iscsi.as_ref().is_some_and(|s| s.secret_ref.is_some()),
        "iscsi.secretRef",
        "secrets",
    );
    flag(
        v.rbd.as_ref().is_some_and(|s| s.secret_ref.is_some()),
        "rbd.secretRef",
        "secrets",
    );
    flag(v.scale_io.is_some(), "scaleIO.secretRef", "secrets");
    flag(
        v.storageos.as_ref().is_some_and(|s| s.secret_ref.is_some()),
        "storageos.secretRef",
        "secrets",
    );
    if let Some(projected) = &v.projected {
        for (k, s) in projected.sources.iter().flatten().enumerate() {
            let mut source = |present: bool, name: &str, resource: &'static str| {
                if present {
                    out.push((format!("projected.sources[{k}].{name}"), resource));
                }
            };
            source(s.secret.is_some(), "secret", "secrets");
            source(s.config_map.is_some(), "configMap", "configmaps");
            source(
                s.service_account_token.is_some(),
                "serviceAccountToken",
                "serviceaccounts",
            );
            source(
                s.cluster_trust_bundle.is_some(),
                "clusterTrustBundle",
                "clustertrustbundles",
            );
            source(s.pod_certificate.is_some(), "podCertificate", "podcertificates");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n  annotations:\n    keep: me\nspec:\n  hostNetwork: true\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.36.3\n    resources: {limits: {example.com/gpu: 1}}\n  volumes:\n  - name: pki\n    hostPath:\n      path: /etc/kubernetes/pki\n";

    fn p(text: &str) -> Result<StaticPod, ManifestError> {
        parse(Path::new("m.yaml"), text)
    }

    fn field_of(text: &str) -> String {
        match p(text).unwrap_err() {
            ManifestError::Invalid { field, .. } => field,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn accepts_a_plain_static_pod() {
        let pod = p(GOOD).unwrap();
        assert_eq!(
            (pod.name.as_str(), pod.namespace.as_str()),
            ("kube-apiserver", "kube-system")
        );
    }

    #[test]
    fn hash_annotation_is_added_and_everything_else_kept() {
        let out = String::from_utf8(p(GOOD).unwrap().to_yaml_with_hash("sha256:abc")).unwrap();
        let v: Value = serde_yaml_ng::from_str(&out).unwrap();
        assert_eq!(v["metadata"]["annotations"][CONTENT_HASH_ANNOTATION], "sha256:abc");
        assert_eq!(v["metadata"]["annotations"]["keep"], "me");
        assert_eq!(v["spec"]["containers"][0]["resources"]["limits"]["example.com/gpu"], 1);
        // An operator-supplied hash annotation is overwritten, not duplicated.
        let again = p(&out).unwrap().to_yaml_with_hash("sha256:def");
        let v: Value = serde_yaml_ng::from_slice(&again).unwrap();
        assert_eq!(v["metadata"]["annotations"][CONTENT_HASH_ANNOTATION], "sha256:def");
    }

    #[test]
    fn annotation_added_when_metadata_has_none() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n";
        let v: Value = serde_yaml_ng::from_slice(&p(text).unwrap().to_yaml_with_hash("sha256:1")).unwrap();
        assert_eq!(v["metadata"]["annotations"][CONTENT_HASH_ANNOTATION], "sha256:1");
        assert_eq!(p(text).unwrap().namespace, "default");
    }

    #[test]
    fn wrong_shapes_are_named() {
        assert_eq!(field_of(&GOOD.replace("kind: Pod", "kind: Deployment")), "kind");
        assert_eq!(
            field_of(&GOOD.replace("apiVersion: v1", "apiVersion: apps/v1")),
            "apiVersion"
        );
        assert_eq!(
            field_of(&GOOD.replace("name: kube-apiserver\n  namespace", "namespace")),
            "metadata.name"
        );
        assert_eq!(field_of("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n"), "spec");
        assert_eq!(field_of("- a\n- b\n"), "(top level)");
        assert_eq!(
            field_of(&GOOD.replace("hostNetwork: true", "hostNetwork: [1]")),
            "spec.hostNetwork"
        );
    }

    #[test]
    fn a_value_of_the_wrong_type_is_named_by_its_field_in_words() {
        let text = GOOD.replace(
            "resources: {limits: {example.com/gpu: 1}}",
            "ports: [{containerPort: \"6443\"}]",
        );
        let e = p(&text).unwrap_err().to_string();
        assert_eq!(
            e,
            "m.yaml: spec.containers[0].ports[0].containerPort: found string \"6443\", expected a whole number"
        );
        let e = p(&GOOD.replace("hostNetwork: true", "hostNetwork: [1]"))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("spec.hostNetwork: found sequence, expected a boolean"),
            "{e}"
        );
        let e = p(&GOOD.replace("  containers:\n", "  containers: 5\n  x:\n"))
            .unwrap_err()
            .to_string();
        assert!(!e.contains("Vec<") && !e.contains("struct "), "{e}");
    }

    #[test]
    fn document_count_must_be_one() {
        assert!(matches!(p(""), Err(ManifestError::DocumentCount { count: 0, .. })));
        assert!(matches!(
            p(&format!("{GOOD}---\n{GOOD}")),
            Err(ManifestError::DocumentCount { count: 2, .. })
        ));
        assert!(p(&format!("---\n{GOOD}---\n")).is_ok());
    }

    #[test]
    fn malformed_yaml_and_oversize_are_refused() {
        assert!(matches!(p("a: [1, 2"), Err(ManifestError::Yaml { .. })));
        let big = format!("{GOOD}#{}", "x".repeat(MAX_MANIFEST_BYTES));
        assert!(matches!(p(&big), Err(ManifestError::TooLarge { .. })));
    }

    #[test]
    fn api_object_references_are_refused_with_their_field() {
        let cases = [
            ("  serviceAccountName: default\n", "spec.serviceAccountName"),
            ("  imagePullSecrets: [{name: regcred}]\n", "spec.imagePullSecrets[0]"),
            (
                "  volumes:\n  - {name: s, secret: {secretName: x}}\n",
                "spec.volumes[0].secret",
            ),
            (
                "  volumes:\n  - {name: c, configMap: {name: x}}\n",
                "spec.volumes[0].configMap",
            ),
            (
                "  volumes:\n  - {name: v, persistentVolumeClaim: {claimName: x}}\n",
                "spec.volumes[0].persistentVolumeClaim",
            ),
            (
                "  volumes:\n  - name: kube-api-access\n    projected:\n      sources:\n      - downwardAPI: {items: []}\n      - serviceAccountToken: {path: token}\n",
                "spec.volumes[0].projected.sources[1].serviceAccountToken",
            ),
            (
                "  initContainers:\n  - name: i\n    image: i\n    env:\n    - {name: A, value: b}\n    - name: K\n      valueFrom: {secretKeyRef: {name: s, key: k}}\n",
                "spec.initContainers[0].env[1].valueFrom.secretKeyRef",
            ),
        ];
        let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n";
        for (extra, field) in cases {
            assert_eq!(field_of(&format!("{base}{extra}")), field, "{extra}");
        }
        let env_from = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i, envFrom: [{configMapRef: {name: x}}]}]\n";
        assert_eq!(field_of(env_from), "spec.containers[0].envFrom[0].configMapRef");
    }

    /// Each case breaks one rule `ValidatePodCreate` enforces in the kubelet of the pinned
    /// release (the test control plane's API server runs the same function; see
    /// tests/cli.rs for the command-line view).
    #[test]
    fn what_the_kubelet_refuses_is_refused_with_its_field() {
        let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler, namespace: kube-system}\nspec:\n  containers: [{name: c, image: i}]\n";
        let long_name = format!("name: {}", "a".repeat(300));
        let cases = [
            (
                base.replace("name: kube-scheduler", "name: Kube_Scheduler!!"),
                "metadata.name",
            ),
            (base.replace("name: kube-scheduler", &long_name), "metadata.name"),
            (base.replace("kube-system", "'NOT VALID'"), "metadata.namespace"),
            (
                base.replace("{name: c, image: i}", "{name: BAD NAME, image: i}"),
                "spec.containers[0].name",
            ),
            (
                base.replace("{name: c, image: i}", "{name: c}"),
                "spec.containers[0].image",
            ),
            (
                base.replace("{name: c, image: i}", "{name: c, image: ''}"),
                "spec.containers[0].image",
            ),
            (
                base.replace("{name: c, image: i}", "{image: i}"),
                "spec.containers[0].name",
            ),
            (
                base.replace("{name: c, image: i}", "{name: c, image: i}, {name: c, image: j}"),
                "spec.containers[1].name",
            ),
            (
                format!("{base}  initContainers: [{{name: c, image: i}}]\n"),
                "spec.containers[0].name",
            ),
            (
                format!("{base}  volumes: [{{name: v, emptyDir: {{}}}}, {{name: v, emptyDir: {{}}}}]\n"),
                "spec.volumes[1].name",
            ),
            (
                format!("{base}  volumes: [{{name: V_1, emptyDir: {{}}}}]\n"),
                "spec.volumes[0].name",
            ),
            (
                base.replace(
                    "{name: c, image: i}",
                    "{name: c, image: i, volumeMounts: [{name: nope, mountPath: /x}]}",
                ),
                "spec.containers[0].volumeMounts[0].name",
            ),
            (
                base.replace(
                    "spec:\n",
                    "spec:\n  <<: {serviceAccountName: foo, volumes: [{name: s, secret: {secretName: x}}]}\n",
                ),
                "spec.<<",
            ),
            (base.replace("spec:\n", "spec:\n  future: ! {a: b}\n"), "spec.future"),
            (base.replace("spec:\n", "spec:\n  future: !custom x\n"), "spec.future"),
        ];
        for (text, field) in cases {
            assert_eq!(field_of(&text), field, "{text}");
        }
        assert!(p(base).is_ok());
        assert!(
            p(&base.replace("name: kube-scheduler", "name: kube-scheduler.v2")).is_ok(),
            "a subdomain"
        );
    }

    #[test]
    fn a_field_the_pod_type_does_not_have_is_refused_naming_it() {
        let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {any-key: v}, annotations: {x: y}}\nspec:\n  hostNetwork: true\n  nodeSelector: {any/key: v}\n  containers:\n  - name: c\n    image: i\n    resources: {limits: {example.com/x: 1}}\n    env: [{name: A, value: null}]\n  volumes:\n  - name: v\n    hostPath: {path: /etc/kubernetes/pki, type: Directory}\n";
        assert!(p(base).is_ok(), "free-form maps keep any key, a null is no field");
        for (typo, field) in [
            ("hostNetwork: true", "spec.hostNetwrok"),
            ("    image: i", "spec.containers[0].imagePullPolcy"),
            ("type: Directory", "spec.volumes[0].hostPath.tpye"),
            ("kind: Pod", "metdata"),
        ] {
            let with = match typo {
                "hostNetwork: true" => base.replace("hostNetwork: true", "hostNetwrok: true"),
                "    image: i" => base.replace("    image: i", "    image: i\n    imagePullPolcy: Always"),
                "type: Directory" => base.replace("type: Directory", "tpye: Directory"),
                _ => base.replace("kind: Pod", "kind: Pod\nmetdata: {}"),
            };
            let e = p(&with).expect_err(field);
            let message = e.to_string();
            assert!(
                message.contains(field) && message.contains("not a field of a v1 Pod"),
                "{field}: {message}"
            );
        }
    }

    #[test]
    fn a_wrong_kind_is_quoted_not_debug_printed() {
        let e = p("apiVersion: v1\nkind: Deployment\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}]}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("found \"Deployment\"") && !e.contains("Some("), "{e}");
        let e = p("apiVersion: v1\nmetadata: {name: a}\n").unwrap_err().to_string();
        assert!(e.contains("found none"), "{e}");
    }

    /// Found by `cargo fuzz` (target `staticpod`): a `!` tag on an unknown field's mapping was
    /// accepted, and writing the manifest then panicked in the YAML emitter.
    #[test]
    fn a_yaml_tag_is_refused_not_a_panic() {
        let text = include_str!("../../../fuzz/seeds/staticpod/regression-yaml-tag.yaml");
        let e = parse(Path::new("pod.yaml"), text).expect_err("refused");
        assert!(e.to_string().contains("YAML tag"), "{e}");
        let tagged_key = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n  ? !k key\n  : v\n";
        let e = parse(Path::new("pod.yaml"), tagged_key).expect_err("a tagged key is refused");
        assert!(e.to_string().contains("YAML tag"), "{e}");
        // Whatever is accepted can be written, and is accepted again.
        let ok = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: i}], nodeSelector: {a: 'on'}}\n";
        let pod = parse(Path::new("pod.yaml"), ok).unwrap();
        let written = pod.to_yaml_with_hash("sha256:00");
        parse(Path::new("w.yaml"), std::str::from_utf8(&written).unwrap()).unwrap();
    }

    /// What the kubelet's go-yaml v2 reads as a boolean or number stays a string on disk.
    #[test]
    fn yaml11_booleans_and_numbers_are_written_quoted() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a, labels: {on: 'yes', n: x}}\nspec:\n  containers: [{name: c, image: 'on', env: [{name: A, value: 'NO'}, {name: B, value: '1_000'}, {name: C, value: '0b101'}, {name: D, value: '0644'}, {name: E, value: 'yes sir'}, {name: F, value: kube-anchor-quoted-x}]}]\n";
        let out = String::from_utf8(p(text).unwrap().to_yaml_with_hash("sha256:1")).unwrap();
        for quoted in [
            "image: 'on'",
            "value: 'NO'",
            "value: '1_000'",
            "value: '0b101'",
            "value: '0644'",
            "'on': 'yes'",
            "'n': x",
        ] {
            assert!(out.contains(quoted), "{quoted} in\n{out}");
        }
        assert!(
            out.contains("value: yes sir") && out.contains("value: kube-anchor-quoted-x"),
            "{out}"
        );
        // Read back by our own parser: the same document.
        let back: Value = serde_yaml_ng::from_str(&out).unwrap();
        assert_eq!(back["spec"]["containers"][0]["image"], "on");
        assert_eq!(back["metadata"]["labels"]["on"], "yes");
    }

    #[test]
    fn yaml11_habits_get_a_hint() {
        let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n";
        let octal = p(&format!(
            "{base}  volumes: [{{name: v, projected: {{defaultMode: 0644, sources: []}}}}]\n"
        ))
        .unwrap_err();
        assert!(octal.to_string().contains("420 for 0644"), "{octal}");
        let boolean = p(&format!("{base}  hostNetwork: yes\n")).unwrap_err();
        assert!(
            boolean.to_string().contains("write booleans as true or false"),
            "{boolean}"
        );
    }

    #[test]
    fn deep_flow_nesting_is_refused_before_parsing() {
        let deep = format!("{GOOD}x: {}", "[".repeat(100_000));
        let start = std::time::Instant::now();
        assert!(matches!(p(&deep), Err(ManifestError::TooDeep { offset, .. }) if offset > GOOD.len()));
        assert!(
            start.elapsed() < std::time::Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
        // Closed brackets do not add up; nesting up to the limit is for the parser to judge.
        assert!(yaml::check_flow_depth(&"[]".repeat(100_000)).is_ok());
        assert!(
            yaml::check_flow_depth(&format!("{}{}", "[".repeat(MAX_FLOW_DEPTH), "]".repeat(MAX_FLOW_DEPTH))).is_ok()
        );
    }

    #[test]
    fn allowed_volumes_pass() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n  volumes:\n  - {name: h, hostPath: {path: /x}}\n  - {name: e, emptyDir: {}}\n  - name: d\n    projected: {sources: [{downwardAPI: {items: []}}]}\n";
        assert!(p(text).is_ok());
    }
}
