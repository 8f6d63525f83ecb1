//! A config directory and a node directory in temp dirs, and a way to run the real binary.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_kube-anchor");

pub const MANIFEST: &str = "apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
spec:
  hostNetwork: true
  containers:
  - name: kube-apiserver
    image: registry.k8s.io/kube-apiserver:v1.36.3
    command: [kube-apiserver, --advertise-address=${NODE_IP}]
";

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub files: Vec<(String, String, String)>,
    pub extra_spec: String,
}

impl Fixture {
    /// A component with two credentials (`ca.crt` 0644, `apiserver.key` 0600) and a manifest.
    pub fn new() -> Self {
        let f = Self {
            dir: tempfile::tempdir().unwrap(),
            files: vec![
                ("ca.crt".into(), "/etc/kubernetes/pki/ca.crt".into(), "0644".into()),
                (
                    "apiserver.key".into(),
                    "/etc/kubernetes/pki/apiserver.key".into(),
                    "0600".into(),
                ),
            ],
            extra_spec: String::new(),
        };
        fs::create_dir_all(f.node()).unwrap();
        fs::create_dir_all(f.config_dir()).unwrap();
        f.source("ca.crt", "CA CERT\n");
        f.source("apiserver.key", "PRIVATE KEY\n");
        f.source("kube-apiserver.yaml", MANIFEST);
        f.write_config();
        f
    }

    pub fn node(&self) -> PathBuf {
        self.dir.path().join("node")
    }

    pub fn config_dir(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    pub fn config(&self) -> PathBuf {
        self.config_dir().join("anchor.yaml")
    }

    /// The real path of a host path.
    pub fn host(&self, path: &str) -> PathBuf {
        self.node().join(path.trim_start_matches('/'))
    }

    pub fn manifest_path(&self) -> PathBuf {
        self.host("/etc/kubernetes/manifests/kube-apiserver.yaml")
    }

    pub fn source(&self, name: &str, content: impl AsRef<[u8]>) {
        fs::write(self.config_dir().join(name), content).unwrap();
    }

    pub fn write_config(&self) {
        let mut text = String::from(
            "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata:\n  name: kube-apiserver\nspec:\n  variables: [NODE_NAME, NODE_IP]\n  files:\n",
        );
        for (source, path, mode) in &self.files {
            text.push_str(&format!(
                "  - source: {source}\n    path: {path}\n    mode: \"{mode}\"\n"
            ));
        }
        text.push_str(&self.extra_spec);
        text.push_str(
            "  manifest:\n    source: kube-apiserver.yaml\n    path: /etc/kubernetes/manifests/kube-apiserver.yaml\n",
        );
        fs::write(self.config(), text).unwrap();
    }

    pub fn set_config(&self, text: &str) {
        fs::write(self.config(), text).unwrap();
    }

    pub fn command(&self, verb: &str) -> Command {
        self.command_with(verb, &self.config())
    }

    /// `verb` with another anchor's config on this fixture's node (a component beside it).
    pub fn command_with(&self, verb: &str, config: &Path) -> Command {
        let mut c = Command::new(BIN);
        c.arg(verb)
            .arg("--config")
            .arg(config)
            .arg("--host-root")
            .arg(self.node())
            .env("NODE_NAME", "cp-1")
            .env("NODE_IP", "10.0.0.10")
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG");
        c
    }

    pub fn run(&self, verb: &str, extra: &[&str]) -> Output {
        self.command(verb).args(extra).output().unwrap()
    }

    pub fn apply(&self) -> Output {
        let out = self.run("apply", &[]);
        assert_success(&out);
        out
    }

    pub fn read(&self, host_path: &str) -> String {
        fs::read_to_string(self.host(host_path)).unwrap()
    }

    /// Every entry below the node, with what identifies a change: content, mode, inode, mtime.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32, u64, i64, i64)> {
        snapshot(&self.node())
    }

    pub fn snapshot_files(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32, u64, i64, i64)> {
        snapshot_files(&self.node())
    }
}

/// Like [`snapshot`], without directory mtimes: a temp file created and removed again changes
/// its directory's mtime but no file.
pub fn snapshot_files(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, u64, i64, i64)> {
    let mut s = snapshot(root);
    for (path, entry) in s.iter_mut() {
        if root.join(path).is_dir() {
            (entry.3, entry.4) = (0, 0);
        }
    }
    s
}

pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, u64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let meta = fs::symlink_metadata(entry.path()).unwrap();
            let content = if meta.is_file() {
                fs::read(entry.path()).unwrap()
            } else {
                Vec::new()
            };
            if meta.is_dir() {
                stack.push(entry.path());
            }
            out.insert(
                entry.path().strip_prefix(root).unwrap().to_path_buf(),
                (content, meta.mode(), meta.ino(), meta.mtime(), meta.mtime_nsec()),
            );
        }
    }
    out
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
}

/// Asserts that the run of `what` succeeded; its stdout.
pub fn succeeded(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts a failure with exit code 1 whose message contains every one of `needles`.
pub fn assert_error(out: &Output, needles: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        stdout(out),
        stderr(out)
    );
    let err = stderr(out);
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}:\n{err}");
    }
}

/// Non-dot files directly in `dir`.
pub fn visible_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// `schemas/status.v1.json`, compiled (with format assertions).
pub fn status_schema() -> (boon::Schemas, boon::SchemaIndex) {
    schema("status.v1.json")
}

/// One of the documented output schemas (`schemas/<name>`), compiled with format assertions.
pub fn schema(name: &str) -> (boon::Schemas, boon::SchemaIndex) {
    let path = super::processes::repo_root().join("schemas").join(name);
    let schema: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let mut schemas = boon::Schemas::new();
    let mut compiler = boon::Compiler::new();
    compiler.enable_format_assertions();
    compiler.add_resource(name, schema).unwrap();
    let index = compiler.compile(name, &mut schemas).unwrap();
    (schemas, index)
}

/// Runs a systemd drop-in's `ExecStartPre` command line (without its `-`) on a node whose `/` is
/// `root`: the binary below the root, every path the line names resolved there
/// (`KUBE_ANCHOR_HOST_ROOT`).
pub fn run_exec_start_pre(line: &str, root: &Path) -> Output {
    let mut words = line.split_whitespace();
    let binary = root.join(words.next().expect("a command").trim_start_matches('/'));
    Command::new(&binary)
        .args(words)
        .env("KUBE_ANCHOR_HOST_ROOT", root)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", binary.display()))
}
