//! From a config and its source bytes to the exact files that belong on the node. Pure.
//!
//! Everything is rendered and validated here, in memory, so that a bad input is refused
//! before the first byte reaches the node.

use sha2::{Digest, Sha256};

use crate::config::{Anchor, FileMode, Owner, Role};
use crate::hostpath::HostPath;
use crate::render::{RenderError, Variables, render};
use crate::staticpod::{self, ManifestError};

#[derive(Debug, thiserror::Error)]
pub enum DesiredError {
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredFile {
    pub path: HostPath,
    pub content: Vec<u8>,
    pub mode: FileMode,
    pub owner: Option<Owner>,
    pub role: Role,
}

#[derive(Debug, Clone)]
pub struct Desired {
    pub component: String,
    /// Credentials first, the manifest last: the order they are written in.
    pub files: Vec<DesiredFile>,
    /// `sha256:<hex>` over the rendered manifest and every `restartOnChange` file.
    pub content_hash: String,
    pub pod_name: String,
    pub pod_namespace: String,
    /// `NODE_IP` where the config declares it: a serving certificate must cover it
    /// (`credentials::check`). `None` for a version read back from the ledger.
    pub node_ip: Option<std::net::IpAddr>,
    /// `spec.droppedServingNames`: names a serving certificate may drop (`credentials::check`).
    pub dropped_serving_names: Vec<String>,
}

impl Desired {
    pub fn manifest(&self) -> &DesiredFile {
        self.files.last().expect("the manifest is always last")
    }

    /// The manifest as the Pod it renders (`None` if it does not read as one): what its guard
    /// probes and which images it runs.
    pub fn pod(&self) -> Option<k8s_openapi::api::core::v1::Pod> {
        serde_yaml_ng::from_slice(&self.manifest().content).ok()
    }
}

/// `sources[i]` holds the bytes of `anchor.files[i].source`.
pub fn build(anchor: &Anchor, sources: &[Vec<u8>], vars: &Variables) -> Result<Desired, DesiredError> {
    assert_eq!(anchor.files.len(), sources.len(), "one source per file");
    let mut files = Vec::with_capacity(sources.len());
    for (spec, bytes) in anchor.files.iter().zip(sources) {
        let content = if spec.template {
            render(&spec.source, bytes, vars)?.into_bytes()
        } else {
            bytes.clone()
        };
        files.push(DesiredFile {
            path: spec.path.clone(),
            content,
            mode: spec.mode,
            owner: spec.owner,
            role: spec.role,
        });
    }
    let manifest_spec = anchor.manifest();
    let manifest_text = std::str::from_utf8(&files.last().expect("manifest").content).expect("rendered text is UTF-8");
    // The kubelet names the pod `<name>-<node>`: the name's room depends on this node's name.
    let pod = staticpod::parse_for_node(&manifest_spec.source, manifest_text, vars.get("NODE_NAME"))?;

    // Framed fields, so that moving bytes between two files always changes the hash.
    let mut hasher = Sha256::new();
    hasher.update(b"kube-anchor content-hash v1\0");
    for (spec, file) in anchor.files.iter().zip(&files) {
        if spec.restart_on_change {
            for field in [file.path.to_string().as_bytes(), &file.content] {
                hasher.update((field.len() as u64).to_le_bytes());
                hasher.update(field);
            }
        }
    }
    let content_hash = format!("sha256:{}", hex::encode(hasher.finalize()));
    files.last_mut().expect("manifest").content = pod.to_yaml_with_hash(&content_hash);
    Ok(Desired {
        component: anchor.name.clone(),
        files,
        content_hash,
        pod_name: pod.name,
        pod_namespace: pod.namespace,
        node_ip: vars.get("NODE_IP").and_then(|ip| ip.trim().parse().ok()),
        dropped_serving_names: anchor.dropped_serving_names.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config;
    use crate::hostpath::AllowedRoots;

    const CONFIG: &str = "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata: {name: c}\nspec:\n  variables: [NODE_IP]\n  files:\n  - {source: a, path: /etc/kubernetes/a, mode: \"0600\"}\n  - {source: b, path: /etc/kubernetes/b, mode: \"0644\", restartOnChange: false, template: true}\n  manifest: {source: m.yaml, path: /etc/kubernetes/manifests/c.yaml}\n";
    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: c, namespace: kube-system}\nspec: {containers: [{name: c, image: 'i', args: ['--ip=${NODE_IP}']}]}\n";

    fn desired(a: &str, b: &str, manifest: &str) -> Result<Desired, DesiredError> {
        let roots = AllowedRoots::new([HostPath::parse("/etc/kubernetes").unwrap()]);
        let anchor = config::parse(Path::new("/cfg/anchor.yaml"), CONFIG, &roots).unwrap();
        let vars = Variables::new(["NODE_IP"], |_| Some("10.1.2.3".into()));
        build(&anchor, &[a.into(), b.into(), manifest.into()], &vars)
    }

    #[test]
    fn renders_and_annotates_the_manifest_last() {
        let d = desired("A", "b ${NODE_IP}", MANIFEST).unwrap();
        assert_eq!(
            d.files.iter().map(|f| f.role).collect::<Vec<_>>(),
            [Role::Credential, Role::Credential, Role::Manifest]
        );
        assert_eq!(d.files[1].content, b"b 10.1.2.3");
        let manifest = String::from_utf8(d.manifest().content.clone()).unwrap();
        assert!(manifest.contains("--ip=10.1.2.3"), "{manifest}");
        assert!(
            manifest.contains(&format!("kube-anchor.io/content-hash: {}", d.content_hash)),
            "{manifest}"
        );
        assert_eq!((d.pod_name.as_str(), d.pod_namespace.as_str()), ("c", "kube-system"));
    }

    #[test]
    fn hash_follows_restart_on_change_files_only() {
        let base = desired("A", "B", MANIFEST).unwrap().content_hash;
        assert_eq!(desired("A", "B", MANIFEST).unwrap().content_hash, base, "deterministic");
        assert_ne!(
            desired("A2", "B", MANIFEST).unwrap().content_hash,
            base,
            "credential change restarts"
        );
        assert_eq!(
            desired("A", "B2", MANIFEST).unwrap().content_hash,
            base,
            "restartOnChange: false"
        );
        assert_ne!(
            desired("A", "B", &MANIFEST.replace("image: 'i'", "image: 'j'"))
                .unwrap()
                .content_hash,
            base
        );
    }

    #[test]
    fn bad_inputs_are_typed_errors() {
        assert!(matches!(
            desired("A", "${NOPE}", MANIFEST),
            Err(DesiredError::Render(_))
        ));
        assert!(matches!(desired("A", "B", "kind: Pod"), Err(DesiredError::Manifest(_))));
    }
}
