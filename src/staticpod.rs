//! What makes a manifest a valid static pod, and the content-hash annotation. Pure.
//!
//! The kubelet runs any Pod it finds in its manifest directory, but the API server refuses the
//! matching mirror pod when the pod references API objects (NodeRestriction's
//! `HasAPIObjectReference` and the ServiceAccount admission plugin); without a mirror pod nobody
//! can see the pod run, so such a manifest is refused here, before anything is written.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{EnvFromSource, EnvVar, Pod, Volume};
use serde_yaml_ng::{Mapping, Value};

pub const CONTENT_HASH_ANNOTATION: &str = "kube-anchor.io/content-hash";
pub const MAX_MANIFEST_BYTES: usize = 10 * 1024 * 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ManifestError {
    #[error("{}: {size} bytes is larger than the {max} bytes a manifest may have", .file.display(), max = MAX_MANIFEST_BYTES)]
    TooLarge { file: PathBuf, size: usize },
    #[error("{}: not valid YAML: {reason}", .file.display())]
    Yaml { file: PathBuf, reason: String },
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

/// Parses `text` as exactly one static-pod-safe `v1` `Pod`.
pub fn parse(file: &Path, text: &str) -> Result<StaticPod, ManifestError> {
    if text.len() > MAX_MANIFEST_BYTES {
        return Err(ManifestError::TooLarge {
            file: file.into(),
            size: text.len(),
        });
    }
    let yaml_error = |e: serde_yaml_ng::Error| ManifestError::Yaml {
        file: file.into(),
        reason: e.to_string(),
    };
    let mut documents = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        let value: Value = serde::Deserialize::deserialize(document).map_err(yaml_error)?;
        if !value.is_null() {
            documents.push(value);
        }
    }
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
            return Err(invalid("apiVersion", format!("expected \"v1\", found {other:?}")));
        }
    }
    match document.get("kind").and_then(Value::as_str) {
        Some("Pod") => {}
        other => {
            return Err(invalid("kind", format!("expected \"Pod\", found {other:?}")));
        }
    }
    let pod: Pod = serde_yaml_ng::from_value(document.clone())
        .map_err(|e| invalid("(Pod)", format!("does not decode as a v1 Pod: {e}")))?;
    let name = pod.metadata.name.clone().filter(|n| !n.is_empty());
    let name = name.ok_or_else(|| invalid("metadata.name", "required".into()))?;
    let spec = pod.spec.as_ref().ok_or_else(|| invalid("spec", "required".into()))?;
    if spec.containers.is_empty() {
        return Err(invalid("spec.containers", "at least one container is required".into()));
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
        serde_yaml_ng::to_string(&document)
            .expect("a Value always serializes")
            .into_bytes()
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

    const GOOD: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n  annotations:\n    keep: me\nspec:\n  hostNetwork: true\n  containers:\n  - name: kube-apiserver\n    image: registry.k8s.io/kube-apiserver:v1.36.3\n    unknownFutureField: kept\n  volumes:\n  - name: pki\n    hostPath:\n      path: /etc/kubernetes/pki\n";

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
        assert_eq!(v["spec"]["containers"][0]["unknownFutureField"], "kept");
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
            "(Pod)"
        );
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

    #[test]
    fn allowed_volumes_pass() {
        let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec:\n  containers: [{name: c, image: i}]\n  volumes:\n  - {name: h, hostPath: {path: /x}}\n  - {name: e, emptyDir: {}}\n  - name: d\n    projected: {sources: [{downwardAPI: {items: []}}]}\n";
        assert!(p(text).is_ok());
    }
}
