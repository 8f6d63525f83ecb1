//! A `kube-anchor checkpointer` process, a node's checkpoint files, and pod readiness, for the
//! checkpointer tests.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::fixture::BIN;
use super::nodes::NodeHandle;
use super::poll::Poll;

/// A checkpointer process (killed on drop) and its log file.
pub struct CheckpointerProcess {
    pub child: Child,
    pub log: PathBuf,
}

impl Drop for CheckpointerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl CheckpointerProcess {
    /// `kube-anchor checkpointer` as the DaemonSet copy on `node` runs it, with `kubeconfig`, the
    /// node's kubelet, `<work>/boot_id` as the boot id and `args` (windows, interval); logs to
    /// `<work>/checkpointer.log`.
    pub fn start(node: &NodeHandle, kubeconfig: &Path, work: &Path, args: &[&str]) -> Self {
        let log = work.join("checkpointer.log");
        let child = Command::new(BIN)
            .args(["checkpointer", "--host-root"])
            .arg(node.host_root())
            .args(["--node-name", &node.name, "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--kubelet-url", &format!("http://127.0.0.1:{}", node.kubelet_port)])
            .arg("--boot-id-file")
            .arg(work.join("boot_id"))
            .args(args)
            .env("NO_COLOR", "1")
            .env_remove("KUBE_ANCHOR_CHECKPOINT_OF")
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Self { child, log }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls `check` every 50 ms until it holds, or panics after `timeout` with `what` and the log.
    pub fn wait_for(&self, timeout: Duration, what: &str, check: &dyn Fn() -> bool) {
        Poll::new(timeout, what)
            .every(Duration::from_millis(50))
            .context(|| format!("log:\n{}", self.log()))
            .until(check)
    }
}

/// A node's checkpoint files of the pods of namespace `ns`, as paths under its host root.
pub struct CheckpointFiles {
    root: PathBuf,
    ns: String,
}

impl CheckpointFiles {
    pub fn new(node: &NodeHandle, ns: &str) -> Self {
        Self {
            root: node.host_root(),
            ns: ns.into(),
        }
    }

    pub fn host(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }

    pub fn inactive(&self, pod: &str) -> PathBuf {
        self.host(&format!("/etc/kubernetes/inactive-manifests/{}-{pod}.json", self.ns))
    }

    pub fn active(&self, pod: &str) -> PathBuf {
        self.host(&format!("/etc/kubernetes/manifests/{}-{pod}.json", self.ns))
    }
}

pub fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
