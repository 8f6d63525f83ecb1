//! The real `helm` (tools/bin) rendering the project's charts, and the rendered objects turned
//! into what an anchor pod sees: its ConfigMap and Secret volumes and its container's env.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output};
use std::sync::Mutex;

use serde_yaml_ng::Value;

use super::fixture::succeeded;
use super::processes::{repo_root, tool};

/// `helm ARGS…`.
pub fn helm(args: &[&str]) -> Output {
    Command::new(tool("helm")).args(args).output().unwrap()
}

/// [`helm`], which must succeed: its stdout.
pub fn helm_ok(args: &[&str]) -> String {
    succeeded(&format!("helm {args:?}"), &helm(args))
}

pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr:\n{}\nstdout:\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The chart's directory, its library dependency built when missing or stale
/// (tools/chart-deps.sh, which says why a build must not run while others read the chart).
pub fn chart(name: &str) -> String {
    static CHECKED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let dir = repo_root().join("charts").join(name);
    let mut checked = CHECKED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if !checked.contains(name) {
        ok(&Command::new(repo_root().join("tools/chart-deps.sh"))
            .arg(name)
            .env("HELM", tool("helm"))
            .output()
            .unwrap());
        checked.insert(name.to_owned());
    }
    dir.display().to_string()
}

pub fn documents(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

pub fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// `helm template <release> charts/<chart> <extra…>` as objects.
pub fn template(release: &str, chart_name: &str, extra: &[&str]) -> Vec<Value> {
    let dir = chart(chart_name);
    let mut args = vec!["template", release, dir.as_str(), "--namespace", "kube-system"];
    args.extend(extra);
    documents(&ok(&helm(&args)))
}

pub fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}

/// The files of a ConfigMap volume.
pub fn configmap_files(cm: &Value) -> BTreeMap<String, Vec<u8>> {
    cm["data"]
        .as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), v.as_str().unwrap().as_bytes().to_vec()))
        .collect()
}

/// The files of a (projected) Secret volume.
pub fn secret_files<'a>(secrets: impl IntoIterator<Item = &'a Value>) -> BTreeMap<String, Vec<u8>> {
    secrets
        .into_iter()
        .flat_map(|s| s["data"].as_mapping().into_iter().flatten())
        .map(|(k, v)| (k.as_str().unwrap().to_owned(), base64_decode(v.as_str().unwrap())))
        .collect()
}

/// An annotation of a DaemonSet's pod template.
pub fn template_annotation(ds: &Value, key: &str) -> String {
    ds["spec"]["template"]["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no annotation {key}"))
        .to_owned()
}
