//! The real `kubectl` (tools/bin) against a cluster, as its admin.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use super::fixture::succeeded;
use super::processes::tool;

/// `kubectl --kubeconfig=KUBECONFIG ARGS…`.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(tool("kubectl"))
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .unwrap()
}

/// [`kubectl`], which must succeed: its stdout.
pub fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    succeeded(&format!("kubectl {args:?}"), &kubectl(kubeconfig, args))
}
