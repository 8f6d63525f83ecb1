//! `kube-anchor kubelet-pre-start`, the step the kubelet runs before it starts, on a temp
//! directory playing the node, with the kubelet's kubeconfig naming an address where nothing
//! answers (a single node after a reboot: its only API server is a static pod the kubelet has
//! not started yet). The bed runs it before each boot of its nodes (`tests/single_node.rs`).

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use kube_anchor_core::desired::Desired;
use kube_anchor_modes::engine::{Engine, Inputs};
use support::daemon::{ConfigVolume, anchor_config, refs};
use support::fixture::BIN;

const MANIFEST: &str = "/etc/kubernetes/manifests/kube-apiserver.yaml";
const CERT: &str = "/etc/kubernetes/pki/apiserver.crt";

fn pod(flag: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: kube-apiserver, namespace: kube-system}}\nspec:\n  hostNetwork: true\n  containers: [{{name: a, image: 'registry.k8s.io/kube-apiserver:v1.36.3', command: [kube-apiserver, '{flag}']}}]\n"
    )
}

struct Node {
    dir: tempfile::TempDir,
    volume: ConfigVolume,
}

impl Node {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("node/etc/kubernetes")).unwrap();
        // Nothing listens on port 1: the kubelet's API server does not answer.
        fs::write(
            dir.path().join("node/etc/kubernetes/kubelet.conf"),
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n",
        )
        .unwrap();
        let volume = ConfigVolume::new(
            &dir.path().join("config"),
            &refs(&Self::files(&pod("--v=1"), "cert v1")),
        );
        Self { dir, volume }
    }

    fn files(pod: &str, cert: &str) -> Vec<(&'static str, Vec<u8>)> {
        vec![
            (
                "anchor.yaml",
                anchor_config("kube-apiserver", &[("apiserver.crt", CERT, "0644")], MANIFEST).into_bytes(),
            ),
            ("pod.yaml", pod.as_bytes().to_vec()),
            ("apiserver.crt", cert.as_bytes().to_vec()),
        ]
    }

    fn root(&self) -> std::path::PathBuf {
        self.dir.path().join("node")
    }

    fn read(&self, path: &str) -> String {
        fs::read_to_string(self.root().join(path.trim_start_matches('/'))).unwrap()
    }

    fn engine(&self) -> Engine {
        Engine::new(&self.root(), "/var/lib/kube-anchor", &["/etc/kubernetes".to_string()]).unwrap()
    }

    /// The version `flag` and `cert` make, written as the anchor writes a version for its trial.
    fn write(&mut self, engine: &Engine, flag: &str, cert: &str) -> Desired {
        self.write_pod(engine, &pod(flag), cert)
    }

    /// [`Node::write`] of any pod.
    fn write_pod(&mut self, engine: &Engine, pod: &str, cert: &str) -> Desired {
        self.volume.update(&refs(&Self::files(pod, cert)));
        let inputs = Inputs::load(&self.volume.config(), engine.roots()).unwrap();
        let desired = inputs
            .desired(&kube_anchor_core::render::Variables::new(["NODE_NAME"], |_| {
                Some("cp-1".into())
            }))
            .unwrap();
        engine.apply(&desired, false).unwrap();
        desired
    }

    fn step(&self, extra: &[&str]) -> Output {
        Command::new(BIN)
            .arg("kubelet-pre-start")
            .arg("--host-root")
            .arg(self.root())
            .args(extra)
            .output()
            .unwrap()
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A kube-apiserver version on trial, the kubelet's API server silent, no anchor running (a
/// reboot): the step puts last-known-good back (manifest and credentials) and records the trial
/// as interrupted, for the anchor to try again; run again it finds nothing on trial and changes
/// nothing. The same version put back by a second reboot is recorded as bad.
#[test]
fn a_kube_apiserver_on_trial_goes_back_before_the_kubelet_starts() {
    let mut node = Node::new();
    let engine = node.engine();
    let good = node.write(&engine, "--v=1", "cert v1");
    engine.promote(&good).unwrap();
    let manifest_good = node.read(MANIFEST);
    let tried = node.write(&engine, "--no-such-flag=1", "cert v2");
    assert_ne!(node.read(MANIFEST), manifest_good);

    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "kube-apiserver: {} put back to last-known-good {}",
            tried.content_hash, good.content_hash
        )),
        "{said}"
    );
    assert_eq!(node.read(MANIFEST), manifest_good, "the manifest is last-known-good's");
    assert_eq!(node.read(CERT), "cert v1", "and so are its credentials");
    let ledger = engine.ledger("kube-apiserver").unwrap();
    assert_eq!(ledger.content_hash.as_deref(), Some(good.content_hash.as_str()));
    assert_eq!(ledger.bad_version(&tried.content_hash), None, "not judged, not bad");
    let interrupted = ledger.interrupted.expect("recorded as interrupted");
    assert_eq!(interrupted.hash, tried.content_hash);
    assert!(
        interrupted.reason.contains("no API server answering"),
        "{}",
        interrupted.reason
    );

    // `status` says so, in text and in its documented JSON.
    let status = |format: &str| {
        Command::new(BIN)
            .args(["status", "--output", format, "--config"])
            .arg(node.volume.config())
            .arg("--host-root")
            .arg(node.root())
            .env("NODE_NAME", "cp-1")
            .output()
            .unwrap()
    };
    let text = stdout(&status("text"));
    assert!(
        text.contains(&format!("INTERRUPTED   {}", tried.content_hash)),
        "{text}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&status("json").stdout).unwrap();
    assert_eq!(
        doc["interrupted"]["hash"].as_str(),
        Some(tried.content_hash.as_str()),
        "{doc}"
    );
    let (schemas, index) = support::fixture::status_schema();
    if let Err(e) = schemas.validate(&doc, index) {
        panic!("{doc:#} does not match schemas/status.v1.json: {e:#}");
    }

    let before = support::fixture::snapshot(&node.root());
    let again = node.step(&[]);
    assert!(again.status.success(), "{again:?}");
    assert_eq!(stdout(&again), "", "nothing on trial any more");
    assert_eq!(support::fixture::snapshot(&node.root()), before, "nothing changed");

    // Its anchor tries it again, and the node reboots in that trial too.
    node.write(&engine, "--no-such-flag=1", "cert v2");
    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(node.read(MANIFEST), manifest_good);
    let bad = engine
        .ledger("kube-apiserver")
        .unwrap()
        .bad_version(&tried.content_hash)
        .cloned()
        .expect("recorded as bad the second time");
    assert!(bad.reason.contains("the second reboot"), "{}", bad.reason);
    assert!(bad.reason.contains("kube-anchor retry"), "{}", bad.reason);
}

/// A kubelet restart: the anchor's pod lives on (it holds its presence lock). A restart is no
/// verdict either: the version is recorded as interrupted, and the running anchor writes it again
/// only once the kubelet runs last-known-good through an API server (`machine`'s hold).
#[test]
fn with_an_anchor_running_the_version_is_recorded_as_interrupted_for_it() {
    let mut node = Node::new();
    let engine = node.engine();
    let good = node.write(&engine, "--v=1", "cert v1");
    engine.promote(&good).unwrap();
    let tried = node.write(&engine, "--no-such-flag=1", "cert v2");
    let _anchor = engine.hold_anchor_presence("kube-apiserver").unwrap();
    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(node.read(CERT), "cert v1");
    let ledger = engine.ledger("kube-apiserver").unwrap();
    assert_eq!(ledger.bad_version(&tried.content_hash), None, "not judged, not bad");
    let interrupted = ledger.interrupted.expect("recorded as interrupted");
    assert_eq!(interrupted.hash, tried.content_hash);
    assert_eq!(interrupted.boots, 0, "a kubelet restart is not counted");
    assert!(
        interrupted.reason.contains("a kubelet restart") && interrupted.reason.contains("still running"),
        "{}",
        interrupted.reason
    );
}

/// The same with a real `kube-anchor run` holding the lock: it does not write the version back
/// (a kubelet that reached no API server would never replace it), says why in `/readyz`, and
/// keeps it interrupted, not bad. It writes it again only once the kubelet runs last-known-good
/// through an API server, which this node without one never shows (`machine`'s unit test and the
/// fleet simulation's kubelet-restart scenarios follow it further).
#[test]
fn a_running_anchor_holds_the_version_put_back_until_the_kubelet_replaces_pods() {
    let mut node = Node::new();
    let engine = node.engine();
    let good = node.write(&engine, "--v=1", "cert v1");
    engine.promote(&good).unwrap();
    let manifest_good = node.read(MANIFEST);
    let tried = node.write(&engine, "--v=2", "cert v2");
    let health = support::daemon::health_server(|| 200);
    let url = format!("http://127.0.0.1:{health}/healthz");
    let anchor = support::daemon::Daemon::start(
        &node.volume.config(),
        &node.root(),
        "cp-1",
        &["--trial-period".into(), "1h".into(), "--health-url".into(), url],
        &node.dir.path().join("anchor.log"),
    );
    support::daemon::wait_until(
        std::time::Duration::from_secs(10),
        "the anchor to take up the version on trial",
        &anchor,
        || anchor.log_text().contains(&tried.content_hash),
    );
    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("put back to last-known-good"), "{}", stdout(&out));
    support::daemon::wait_until(
        std::time::Duration::from_secs(10),
        "/readyz to say why the version waits",
        &anchor,
        || {
            anchor
                .get("/readyz")
                .is_some_and(|(code, body)| code == 503 && body.contains("tried again once the kubelet runs"))
        },
    );
    // Given time to write it back, it has not.
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(node.read(MANIFEST), manifest_good, "{}", anchor.log_context());
    assert_eq!(node.read(CERT), "cert v1");
    let ledger = engine.ledger("kube-apiserver").unwrap();
    assert_eq!(ledger.content_hash.as_deref(), Some(good.content_hash.as_str()));
    assert_eq!(ledger.bad_version(&tried.content_hash), None);
    assert_eq!(
        ledger.interrupted.map(|i| i.hash).as_deref(),
        Some(tried.content_hash.as_str())
    );
}

/// What the step leaves alone, each with its reason: a version the operator paused, one with
/// nothing to go back to, a component whose bad version leaves the API up, and one whose
/// ledger cannot be read (the kubelet starts all the same: exit 0).
#[test]
fn the_step_keeps_what_it_cannot_or_need_not_put_back_and_always_lets_the_kubelet_start() {
    // Nothing has passed a trial here yet.
    let mut node = Node::new();
    let engine = node.engine();
    node.write(&engine, "--v=1", "cert v1");
    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("nothing to go back to"), "{}", stdout(&out));

    // Paused by the operator.
    let good = node.write(&engine, "--v=1", "cert v1");
    engine.promote(&good).unwrap();
    node.write(&engine, "--v=2", "cert v2");
    engine.pause("kube-apiserver", "restoring etcd").unwrap();
    let snapshot = support::fixture::snapshot(&node.root());
    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("restoring etcd"), "{}", stdout(&out));
    assert_eq!(support::fixture::snapshot(&node.root()), snapshot, "nothing changed");
    engine.resume("kube-apiserver").unwrap();

    // A component whose bad version leaves the API up (its image and command are a scheduler's).
    let mut scheduler = Node::new();
    let s_engine = scheduler.engine();
    let s_pod = |flag: &str| {
        pod(flag)
            .replace("kube-apiserver:v1.36.3", "kube-scheduler:v1.36.3")
            .replace("command: [kube-apiserver", "command: [kube-scheduler")
    };
    let good = scheduler.write_pod(&s_engine, &s_pod("--v=1"), "cert");
    s_engine.promote(&good).unwrap();
    scheduler.write_pod(&s_engine, &s_pod("--v=2"), "cert");
    let out = scheduler.step(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("leaves the API up"), "{}", stdout(&out));

    // A ledger that does not parse: reported, and the kubelet starts.
    let ledger = node.root().join("var/lib/kube-anchor/v1/kube-apiserver.json");
    fs::write(&ledger, b"{\"truncated").unwrap();
    let out = node.step(&[]);
    assert!(out.status.success(), "{out:?}");
}

/// `--install` writes this binary into the state dir and the kubelet's drop-in that runs it; its
/// `ExecStartPre` line, run as systemd runs it, is the step. An anchor started later keeps the
/// binary its own.
#[test]
fn install_writes_the_drop_in_whose_line_runs_the_step() {
    let mut node = Node::new();
    let out = node.step(&["--install", "--allowed-root", "/etc/kubernetes,/srv/pki"]);
    assert!(out.status.success(), "{out:?}");
    let unit = node.read("/etc/systemd/system/kubelet.service.d/05-kube-anchor-pre-start.conf");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStartPre=-"))
        .unwrap_or_else(|| panic!("no ExecStartPre=- line: {unit}"));
    assert!(line.contains("--allowed-root /etc/kubernetes,/srv/pki"), "{line}");
    let installed = node.root().join("var/lib/kube-anchor/bin/kube-anchor");
    assert_eq!(fs::read(&installed).unwrap(), fs::read(BIN).unwrap());
    assert_eq!(fs::metadata(&installed).unwrap().permissions().mode() & 0o777, 0o755);

    let engine = node.engine();
    let good = node.write(&engine, "--v=1", "cert v1");
    engine.promote(&good).unwrap();
    let manifest_good = node.read(MANIFEST);
    node.write(&engine, "--v=2", "cert v2");
    let ran = support::fixture::run_exec_start_pre(line, &node.root());
    assert!(ran.status.success(), "{ran:?}");
    assert!(stdout(&ran).contains("put back to last-known-good"), "{}", stdout(&ran));
    assert_eq!(node.read(MANIFEST), manifest_good);

    // Another build recorded beside it (an older kube-anchor): an anchor's refresh writes its
    // own; the same build, or the step not installed, is left alone.
    let build = fs::read_to_string(node.root().join("var/lib/kube-anchor/bin/kube-anchor.version")).unwrap();
    let version = stdout(&Command::new(BIN).arg("--version").output().unwrap());
    assert_eq!(build.trim(), version.trim().trim_start_matches("kube-anchor "));
    fs::write(&installed, b"#!/bin/sh\nexit 0\n").unwrap();
    fs::write(
        node.root().join("var/lib/kube-anchor/bin/kube-anchor.version"),
        "0.0.1 (commit old)\n",
    )
    .unwrap();
    assert!(engine.refresh_pre_start_binary(build.trim(), || fs::read(BIN)).unwrap());
    assert_eq!(fs::read(&installed).unwrap(), fs::read(BIN).unwrap());
    assert!(
        !engine
            .refresh_pre_start_binary(build.trim(), || panic!("not read"))
            .unwrap()
    );
    fs::remove_file(&installed).unwrap();
    assert!(
        !engine
            .refresh_pre_start_binary("another", || panic!("not read"))
            .unwrap()
    );
    assert!(!installed.exists());
}
