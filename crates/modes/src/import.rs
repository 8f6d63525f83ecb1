//! `kube-anchor import`, the IO layer: reads each node's kubeadm manifests and the files they
//! name ([`read_node`]), has the core's `import` decide ([`plan`], [`values_document`]), and writes
//! one values file per chart ([`write_values`]: 0600 in a 0700 directory, since they hold private
//! keys). What is carried and how is decided in `kube_anchor_core::import`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube_anchor_core::import::{
    HostEntry, ImportPlan, ImportPlanError, MANIFEST_DIR, NodeInput, parse_manifest, plan, values_document,
};
use kube_anchor_host::hostfs::{Follow, MAX_INPUT_BYTES, read_regular};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: cannot write: {source}", .path.display())]
    Write { path: PathBuf, source: std::io::Error },
    #[error("{}: {problem}", .path.display())]
    OutputDir { path: PathBuf, problem: String },
    #[error("--node {0:?}: expected NAME=ROOT")]
    NodeArg(String),
    #[error(transparent)]
    Plan(#[from] ImportPlanError),
}

/// Reads a node's kubeadm manifests and every path they name, below `root`. Each file is read
/// only when it is a regular file of at most [`MAX_INPUT_BYTES`]: a FIFO, a device or a huge
/// file is refused, naming it, and cannot hang or exhaust the import.
pub(crate) fn read_node(root: &Path, name: Option<String>) -> Result<NodeInput, ImportError> {
    let dir = root.join(MANIFEST_DIR.trim_start_matches('/'));
    let entries = std::fs::read_dir(&dir).map_err(|source| ImportError::Read {
        path: dir.clone(),
        source,
    })?;
    let mut names: Vec<String> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ImportError::Read {
            path: dir.clone(),
            source,
        })?;
        let file = entry.file_name().to_string_lossy().into_owned();
        // The kubelet skips dot files; kubeadm writes *.yaml.
        if !file.starts_with('.') {
            names.push(file);
        }
    }
    names.sort();
    let mut pods = Vec::new();
    for file in names {
        let path = dir.join(&file);
        let read_err = |source| ImportError::Read {
            path: path.clone(),
            source,
        };
        // A manifest is read through a symlink; the files it names are not (see read_entry).
        let bytes = read_regular(&path, MAX_INPUT_BYTES, Follow::Yes).map_err(read_err)?;
        let text = String::from_utf8(bytes).map_err(|_| {
            read_err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ))
        })?;
        pods.push(parse_manifest(&format!("{MANIFEST_DIR}/{file}"), &text)?);
    }
    let mut files = BTreeMap::new();
    for pod in &pods {
        for (_, path) in pod.named_paths() {
            if files.contains_key(&path) {
                continue;
            }
            let entry = read_entry(root, &path)?;
            files.insert(path, entry);
        }
    }
    Ok(NodeInput { name, pods, files })
}

fn read_entry(root: &Path, path: &str) -> Result<HostEntry, ImportError> {
    use std::os::unix::fs::PermissionsExt;
    let Ok(host) = kube_anchor_core::hostpath::HostPath::parse(path) else {
        return Ok(HostEntry::Missing);
    };
    let full = root.join(host.relative());
    let meta = match std::fs::symlink_metadata(&full) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HostEntry::Missing),
        Err(source) => return Err(ImportError::Read { path: full, source }),
    };
    Ok(if meta.file_type().is_symlink() {
        HostEntry::Symlink
    } else if meta.is_dir() {
        HostEntry::Directory
    } else {
        let content = read_regular(&full, MAX_INPUT_BYTES, Follow::No).map_err(|source| ImportError::Read {
            path: full.clone(),
            source,
        })?;
        HostEntry::File {
            content,
            mode: meta.permissions().mode() & 0o7777,
        }
    })
}

/// Writes `docs` (file name, content) into `dir` (created 0700; an existing one must not be
/// open to group or others), each 0600. All files are written to temporary names first and
/// renamed only once all of them are complete, so a failure leaves no partial values set.
pub(crate) fn write_values(dir: &Path, docs: &[(String, String)]) -> Result<Vec<PathBuf>, ImportError> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};

    use kube_anchor_core::config::FileMode;
    use kube_anchor_host::hostfs::{commit_file, stage_file};
    let out_err = |problem: String| ImportError::OutputDir {
        path: dir.into(),
        problem,
    };
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => return Err(out_err("exists and is not a directory".into())),
        Ok(m) if m.permissions().mode() & 0o077 != 0 => {
            return Err(out_err(format!(
                "mode {:04o}: open to group or others; values hold private keys (want 0700)",
                m.permissions().mode() & 0o7777
            )));
        }
        Ok(_) => {}
        Err(_) => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| ImportError::Write {
                path: dir.into(),
                source,
            })?,
    }
    // Every file complete (written and fsynced) before the first rename; a temp file not
    // renamed is removed when dropped.
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |(_, source): (&'static str, std::io::Error)| ImportError::Write { path, source }
    };
    let mut staged = Vec::new();
    for (name, content) in docs {
        let path = dir.join(name);
        let temp = stage_file(&path, FileMode(0o600), None, |file| {
            file.write_all(content.as_bytes())?;
            file.sync_all()
        })
        .map_err(write_err(&path))?;
        staged.push((temp, path));
    }
    let mut written = Vec::new();
    for (temp, path) in staged {
        commit_file(temp, &path).map_err(write_err(&path))?;
        written.push(path);
    }
    Ok(written)
}

/// Parses `NAME=ROOT` of `--node`.
pub(crate) fn parse_node_arg(raw: &str) -> Result<(String, PathBuf), ImportError> {
    match raw.split_once('=') {
        Some((name, root)) if !name.is_empty() && !root.is_empty() => Ok((name.into(), root.into())),
        _ => Err(ImportError::NodeArg(raw.into())),
    }
}

/// Reads every node, plans, and writes one values file per chart into `output_dir`.
pub(crate) fn import(
    nodes: &[(Option<String>, PathBuf)],
    output_dir: &Path,
) -> Result<(ImportPlan, Vec<PathBuf>), ImportError> {
    let mut inputs = Vec::new();
    let mut labels = Vec::new();
    for (name, root) in nodes {
        if name.is_some() && labels.contains(name.as_ref().unwrap()) {
            return Err(ImportPlanError::DuplicateNode(name.clone().unwrap()).into());
        }
        labels.push(name.clone().unwrap_or_else(|| root.display().to_string()));
        inputs.push(read_node(root, name.clone())?);
    }
    let plan = plan(&inputs, &labels)?;
    let docs: Vec<(String, String)> = plan
        .components
        .iter()
        .map(|c| (format!("{}.yaml", c.component), values_document(c, &plan.nodes)))
        .collect();
    let written = write_values(output_dir, &docs)?;
    tracing::info!(output_dir = %output_dir.display(), files = written.len(), "import: values written");
    Ok((plan, written))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubeadm's scheduler pod, naming its kubeconfig.
    const SCHEDULER: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: kube-scheduler, namespace: kube-system, labels: {component: kube-scheduler, tier: control-plane}}
spec:
  containers:
  - name: kube-scheduler
    image: registry.k8s.io/kube-scheduler:v1.36.3
    command: [kube-scheduler, --kubeconfig=/etc/kubernetes/scheduler.conf]
"#;

    /// A root whose manifest directory holds `manifests` (file name, text).
    fn node_root(manifests: &[(&str, String)]) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(MANIFEST_DIR.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in manifests {
            std::fs::write(dir.join(name), text).unwrap();
        }
        root
    }

    /// `read_node` on another thread, so that a read that waits forever fails the test.
    fn read_node_within(root: &Path) -> Result<NodeInput, ImportError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let root = root.to_owned();
        std::thread::spawn(move || tx.send(read_node(&root, None)));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("read_node still reading after 10 s")
    }

    #[test]
    fn a_manifest_that_is_a_fifo_is_refused_naming_it() {
        let root = node_root(&[]);
        let fifo = root.path().join("etc/kubernetes/manifests/etcd.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success(), "mkfifo {}", fifo.display());
        let err = read_node_within(root.path()).unwrap_err();
        assert!(
            matches!(err, ImportError::Read { ref path, .. } if *path == fifo),
            "{err}"
        );
        assert!(err.to_string().contains("is a FIFO, not a regular file"), "{err}");
    }

    #[test]
    fn a_named_file_over_the_input_bound_is_refused_naming_it() {
        let root = node_root(&[("kube-scheduler.yaml", SCHEDULER.to_owned())]);
        let conf = root.path().join("etc/kubernetes/scheduler.conf");
        // Sparse: no bytes written.
        std::fs::File::create(&conf)
            .unwrap()
            .set_len(MAX_INPUT_BYTES + 1)
            .unwrap();
        let err = read_node_within(root.path()).unwrap_err();
        assert!(
            matches!(err, ImportError::Read { ref path, .. } if *path == conf),
            "{err}"
        );
        assert!(err.to_string().contains("larger than the limit"), "{err}");
        // At the bound it is read.
        std::fs::File::create(&conf).unwrap().set_len(MAX_INPUT_BYTES).unwrap();
        let node = read_node_within(root.path()).unwrap();
        assert!(matches!(
            node.files.get("/etc/kubernetes/scheduler.conf"),
            Some(HostEntry::File { content, .. }) if content.len() as u64 == MAX_INPUT_BYTES
        ));
    }
}
