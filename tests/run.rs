//! `kube-anchor run` on temp directories, with no API server: inputs mounted like a ConfigMap
//! volume, drift on the host, bursts of changes, signals.

mod support;

use std::fs;
use std::time::Duration;

use support::daemon::*;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler, namespace: kube-system}\nspec:\n  hostNetwork: true\n  containers: [{name: s, image: 'registry.k8s.io/kube-scheduler:v1.36.3', args: ['--node=${NODE_NAME}']}]\n";
const MANIFEST: &str = "/etc/kubernetes/manifests/kube-scheduler.yaml";
const KUBECONFIG: &str = "/etc/kubernetes/scheduler.conf";
const WAIT: Duration = Duration::from_secs(10);

struct Setup {
    dir: tempfile::TempDir,
    volume: ConfigVolume,
}

impl Setup {
    fn new(kubeconfig: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("node")).unwrap();
        let files = Self::files(kubeconfig);
        let volume = ConfigVolume::new(&dir.path().join("config"), &refs(&files));
        Self { dir, volume }
    }

    fn files(kubeconfig: &str) -> Vec<(&'static str, Vec<u8>)> {
        vec![
            (
                "anchor.yaml",
                anchor_config("kube-scheduler", &[("scheduler.conf", KUBECONFIG, "0600")], MANIFEST).into_bytes(),
            ),
            ("pod.yaml", POD.as_bytes().to_vec()),
            ("scheduler.conf", kubeconfig.as_bytes().to_vec()),
        ]
    }

    fn update(&mut self, kubeconfig: &str) {
        let files = Self::files(kubeconfig);
        self.volume.update(&refs(&files));
    }

    fn host(&self, path: &str) -> std::path::PathBuf {
        self.dir.path().join("node").join(path.trim_start_matches('/'))
    }

    fn read(&self, path: &str) -> Option<String> {
        fs::read_to_string(self.host(path)).ok()
    }

    /// The engine on this setup's node, as the one-shot verbs and the daemon use it.
    fn engine(&self) -> kube_anchor_modes::engine::Engine {
        let node = self.dir.path().join("node");
        kube_anchor_modes::engine::Engine::new(&node, "/var/lib/kube-anchor", &["/etc/kubernetes".to_string()]).unwrap()
    }

    /// The version the current inputs make on node cp-1.
    fn desired(&self, engine: &kube_anchor_modes::engine::Engine) -> kube_anchor_core::desired::Desired {
        let inputs = kube_anchor_modes::engine::Inputs::load(&self.volume.config(), engine.roots()).unwrap();
        let vars = kube_anchor_core::render::Variables::new(["NODE_NAME"], |_| Some("cp-1".into()));
        inputs.desired(&vars).unwrap()
    }

    /// A one-shot verb on kube-scheduler on this setup's node: `kube-anchor <verb> --component
    /// kube-scheduler --host-root <node> <extra>`.
    fn verb(&self, verb: &str, extra: &[&str]) -> std::process::Output {
        std::process::Command::new(support::fixture::BIN)
            .args([verb, "--component", "kube-scheduler", "--host-root"])
            .arg(self.dir.path().join("node"))
            .args(extra)
            .output()
            .unwrap()
    }

    fn start(&self, extra: &[&str]) -> Daemon {
        let args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Daemon::start(
            &self.volume.config(),
            &self.dir.path().join("node"),
            "cp-1",
            &args,
            &self.dir.path().join("daemon.log"),
        )
    }
}

#[test]
fn applies_at_start_and_follows_a_configmap_data_swap() {
    let mut s = Setup::new("kubeconfig v1");
    let d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v1")
    });
    let manifest_v1 = s.read(MANIFEST).unwrap();
    assert!(manifest_v1.contains("--node=cp-1"), "{manifest_v1}");

    s.update("kubeconfig v2");
    wait_until(WAIT, "the ..data swap to reach the host", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v2")
    });
    wait_until(WAIT, "the manifest hash to follow the credential", &d, || {
        s.read(MANIFEST).is_some_and(|m| m != manifest_v1)
    });
    // The files are visible before the sync that wrote them has recorded and counted them.
    wait_until(WAIT, "the writes to be counted", &d, || {
        d.metric("kube_anchor_writes_total") >= 4.0
    });
    assert_eq!(d.metric("kube_anchor_repairs_total"), 0.0);
    // Without an API nothing can prove the pod runs: not ready, and says why.
    let (code, body) = d.get("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("no API client"), "{body}");
    assert_eq!(d.get("/healthz").unwrap().0, 200);
}

#[test]
fn repairs_deleted_and_edited_files_and_counts_them() {
    let s = Setup::new("kubeconfig v1");
    let d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());
    let manifest = s.read(MANIFEST).unwrap();

    fs::remove_file(s.host(MANIFEST)).unwrap();
    wait_until(WAIT, "the deleted manifest to be restored", &d, || {
        s.read(MANIFEST).as_deref() == Some(manifest.as_str())
    });
    fs::write(s.host(KUBECONFIG), "tampered").unwrap();
    wait_until(WAIT, "the edited kubeconfig to be restored", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v1")
    });
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(s.host(KUBECONFIG), fs::Permissions::from_mode(0o644)).unwrap();
    wait_until(WAIT, "the mode to be restored", &d, || {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(s.host(KUBECONFIG))
            .map(|m| m.mode() & 0o777 == 0o600)
            .unwrap_or(false)
    });
    wait_until(WAIT, "the repairs to be counted", &d, || {
        d.metric("kube_anchor_repairs_total") >= 3.0
    });
}

#[test]
fn a_burst_of_changes_is_folded_and_never_rewrites_unchanged_files() {
    let mut s = Setup::new("kubeconfig 0");
    let d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || s.read(KUBECONFIG).is_some());
    let writes_before = d.metric("kube_anchor_writes_total");
    for i in 1..=40 {
        s.update(&format!("kubeconfig {i}"));
    }
    wait_until(WAIT, "the last change of the burst", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig 40")
    });
    std::thread::sleep(Duration::from_millis(300));
    let writes = d.metric("kube_anchor_writes_total") - writes_before;
    // Each sync that sees a change writes 2 files (kubeconfig + manifest): 80 writes if every
    // change got its own sync. Folding typically leaves a handful; the bound leaves room for a
    // loaded machine.
    assert!(
        writes < 60.0,
        "{writes} file writes for a burst of 40 changes: not debounced"
    );

    // A touch that changes nothing (same content swapped in again) writes nothing.
    let settled = d.metric("kube_anchor_writes_total");
    let inode = {
        use std::os::unix::fs::MetadataExt;
        fs::metadata(s.host(KUBECONFIG)).unwrap().ino()
    };
    s.update("kubeconfig 40");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(d.metric("kube_anchor_writes_total"), settled);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(s.host(KUBECONFIG)).unwrap().ino(), inode);
}

/// The generation number after `marker` in `text`, if the text is whole.
fn generation(text: &str, marker: &str) -> Option<u32> {
    let rest = &text[text.find(marker)? + marker.len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[test]
fn a_burst_of_100_changes_ends_in_the_last_content_and_is_never_torn() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    // Every generation changes both the credential and the manifest, so a sync that read the
    // kubeconfig of one generation and the pod of a later one (the kubelet swapped `..data` in
    // between) would write a manifest newer than its credentials.
    let files = |i: u32| -> Vec<(&'static str, Vec<u8>)> {
        let pod = POD.replace(
            "'--node=${NODE_NAME}'",
            &format!("'--node=${{NODE_NAME}}', '--gen={i}'"),
        );
        vec![
            (
                "anchor.yaml",
                anchor_config("kube-scheduler", &[("scheduler.conf", KUBECONFIG, "0600")], MANIFEST).into_bytes(),
            ),
            ("pod.yaml", pod.into_bytes()),
            ("scheduler.conf", format!("kubeconfig {i}\n").into_bytes()),
        ]
    };
    let mut s = Setup::new("unused");
    s.volume.update(&refs(&files(0)));
    let d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || {
        s.read(MANIFEST).is_some_and(|m| generation(&m, "--gen=") == Some(0))
    });

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        let manifest = s.host(MANIFEST);
        let kubeconfig = s.host(KUBECONFIG);
        std::thread::spawn(move || {
            let mut problems = Vec::new();
            let mut samples = 0;
            while !stop.load(Ordering::Relaxed) {
                let (Ok(m1), Ok(k), Ok(m2)) = (
                    fs::read_to_string(&manifest),
                    fs::read_to_string(&kubeconfig),
                    fs::read_to_string(&manifest),
                ) else {
                    problems.push("a managed file was missing".to_owned());
                    continue;
                };
                samples += 1;
                let (Some(m), Some(k)) = (generation(&m1, "--gen="), generation(&k, "kubeconfig ")) else {
                    problems.push(format!("a partial file: {k:?} / {m1:?}"));
                    continue;
                };
                // Credentials are committed before the manifest: with the manifest unchanged
                // around the read, its credentials are at least as new.
                if m1 == m2 && k < m {
                    problems.push(format!("manifest of generation {m} beside kubeconfig {k}"));
                }
            }
            (problems, samples)
        })
    };
    for i in 1..=100 {
        s.volume.update(&refs(&files(i)));
    }
    wait_until(WAIT, "the last change of the burst", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig 100\n")
            && s.read(MANIFEST).is_some_and(|m| generation(&m, "--gen=") == Some(100))
    });
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (problems, samples) = sampler.join().unwrap();
    assert!(samples > 0);
    assert!(
        problems.is_empty(),
        "{} torn samples of {samples}: {:?}",
        problems.len(),
        &problems[..problems.len().min(5)]
    );
    assert_eq!(d.metric("kube_anchor_sync_errors_total"), 0.0, "{}", d.log_text());
    // Bursts are folded: far fewer syncs than changes (each writes 2 files).
    let writes = d.metric("kube_anchor_writes_total");
    assert!(
        writes < 150.0,
        "{writes} file writes for a burst of 100 changes: not folded"
    );
    // And the node ends exactly as `apply` of the last generation would leave it.
    let ledger = fs::read_to_string(s.host("/var/lib/kube-anchor/v1/kube-scheduler.json")).unwrap();
    let manifest = s.read(MANIFEST).unwrap();
    let hash = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("kube-anchor.io/content-hash: "))
        .unwrap()
        .trim_matches('\'');
    assert!(ledger.contains(hash), "ledger does not record {hash}");
}

#[test]
fn a_bad_push_is_reported_and_the_node_keeps_what_it_has() {
    let mut s = Setup::new("kubeconfig v1");
    let d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());
    let manifest = s.read(MANIFEST).unwrap();
    let mut files = Setup::files("kubeconfig v2");
    files[1].1 = b"apiVersion: v1\nkind: Pod\nspec: [broken\n".to_vec();
    s.volume.update(&refs(&files));
    wait_until(WAIT, "the sync error to be reported", &d, || {
        d.metric("kube_anchor_sync_errors_total") >= 1.0
    });
    let (code, body) = d.get("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("pod.yaml") && body.contains("not valid YAML"), "{body}");
    assert_eq!(s.read(MANIFEST).unwrap(), manifest);
    assert_eq!(
        s.read(KUBECONFIG).as_deref(),
        Some("kubeconfig v1"),
        "nothing of the bad push written"
    );
    // Fixing the inputs recovers.
    s.update("kubeconfig v3");
    wait_until(WAIT, "recovery", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v3")
    });
}

#[test]
fn sigterm_drains_and_exits_zero_leaving_every_file() {
    let s = Setup::new("kubeconfig v1");
    let mut d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());
    d.signal(libc::SIGTERM);
    let status = d.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "log:\n{}", d.log_text());
    assert!(d.log_text().contains("drained"), "{}", d.log_text());
    assert!(
        s.read(MANIFEST).is_some() && s.read(KUBECONFIG).is_some(),
        "a signal never deletes"
    );
}

/// `remove` while an anchor of the component runs on the node (holds its presence lock) is
/// refused with nothing removed: the anchor's next sync would write the files back. `--force`
/// removes them, and the running anchor does write them back; once the anchor has stopped,
/// `remove` removes them.
#[test]
fn remove_is_refused_while_the_anchor_runs_on_the_node() {
    let s = Setup::new("kubeconfig v1");
    let remove = |extra: &[&str]| s.verb("remove", extra);
    let mut d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());

    let out = remove(&[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nothing removed")
            && err.contains("an anchor of kube-scheduler runs on this node")
            && err.contains("/var/lib/kube-anchor/v1/kube-scheduler.anchor.lock"),
        "{err}"
    );
    assert!(s.read(MANIFEST).is_some() && s.read(KUBECONFIG).is_some());

    let out = remove(&["--force"]);
    assert!(out.status.success(), "{out:?}");
    let removed = String::from_utf8_lossy(&out.stdout);
    assert!(removed.contains(&format!("removed    {MANIFEST}")), "{removed}");
    wait_until(WAIT, "the running anchor to write the files back", &d, || {
        s.read(MANIFEST).is_some() && s.read(KUBECONFIG).as_deref() == Some("kubeconfig v1")
    });

    d.signal(libc::SIGTERM);
    assert_eq!(d.child.wait().unwrap().code(), Some(0), "{}", d.log_context());
    let out = remove(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(s.read(MANIFEST).is_none() && s.read(KUBECONFIG).is_none());
}

/// `pause` holds the running anchor: a deleted manifest stays deleted, `/readyz` and the metric
/// say why; `resume` lets it go on and the manifest comes back.
#[test]
fn a_paused_anchor_repairs_nothing_until_resumed() {
    let s = Setup::new("kubeconfig v1");
    let d = s.start(&[]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());

    let out = s.verb("pause", &["--reason", "restoring etcd"]);
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("paused on this node (restoring etcd)")
            && said.contains("the anchor running here writes nothing"),
        "{said}"
    );
    fs::remove_file(s.host(MANIFEST)).unwrap();
    wait_until(WAIT, "/readyz to say the anchor is paused", &d, || {
        d.get("/readyz")
            .is_some_and(|(code, b)| code == 503 && b.contains("paused on this node") && b.contains("restoring etcd"))
    });
    assert_eq!(d.metric("kube_anchor_paused"), 1.0);
    // The deletion was seen (the sync that said so ran on its event) and not repaired.
    std::thread::sleep(Duration::from_secs(2));
    assert!(s.read(MANIFEST).is_none(), "a paused anchor wrote the manifest back");
    assert_eq!(d.metric("kube_anchor_repairs_total"), 0.0);

    let again = s.verb("pause", &["--reason", "something else"]);
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("already paused"),
        "{again:?}"
    );
    assert!(!s.verb("pause", &["--reason", " "]).status.success());

    let out = s.verb("resume", &[]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("resumed (paused since"),
        "{out:?}"
    );
    wait_until(
        WAIT + Duration::from_secs(10),
        "the resumed anchor to write the manifest back",
        &d,
        || s.read(MANIFEST).is_some(),
    );
    wait_until(WAIT, "the metric to drop", &d, || d.metric("kube_anchor_paused") == 0.0);
    let out = s.verb("resume", &[]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("not paused"), "{out:?}");
}

/// A second signal ends a step that waits (here on an API server that accepts and never
/// answers): the process exits 143 at once, not after the API timeout, and deletes nothing.
#[test]
fn a_second_sigterm_aborts_a_step_that_waits() {
    let s = Setup::new("kubeconfig v1");
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let kubeconfig = s.dir.path().join("silent.kubeconfig");
    fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
             current-context: c\n"
        ),
    )
    .unwrap();
    // Accepts every connection and never answers: each API call waits for its timeout.
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for conn in silent.incoming().flatten() {
            keep.lock().unwrap().push(conn);
        }
    });
    let args = [
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--pod-name",
        "anchor-x",
        "--pod-namespace",
        "kube-system",
    ];
    let mut d = s.start(&args);
    // The start reads the rollout Lease (a turn to recover), and a first write asks it again:
    // an API that never answers delays the write by twice the API timeout (no answer is no
    // word against it).
    wait_until(
        WAIT + 2 * kube_anchor_k8s::kubeapi::API_TIMEOUT,
        "the first apply and an API call waiting",
        &d,
        || s.read(MANIFEST).is_some() && !held.lock().unwrap().is_empty(),
    );
    d.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(200));
    let sent = std::time::Instant::now();
    d.signal(libc::SIGTERM);
    let status = d.child.wait().unwrap();
    let took = sent.elapsed();
    assert_eq!(status.code(), Some(143), "log:\n{}", d.log_text());
    assert!(
        took < kube_anchor_k8s::kubeapi::API_TIMEOUT / 2,
        "exited {took:?} after the second signal"
    );
    assert!(
        d.log_text().contains("aborted by a second signal (SIGTERM)"),
        "{}",
        d.log_text()
    );
    assert!(
        s.read(MANIFEST).is_some() && s.read(KUBECONFIG).is_some(),
        "a signal never deletes"
    );
}

#[test]
fn the_first_version_on_a_node_is_never_rolled_back_to_nothing() {
    let s = Setup::new("kubeconfig v1");
    // The component never becomes healthy, and there is no last-known-good version yet.
    let port = health_server(|| 500);
    let url = format!("http://127.0.0.1:{port}/healthz");
    let d = s.start(&["--trial-period", "1s", "--health-url", &url]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());
    let manifest = s.read(MANIFEST).unwrap();
    wait_until(WAIT, "the trial to end", &d, || {
        d.log_text().contains("there is no last-known-good version: kept")
    });
    assert_eq!(s.read(MANIFEST).unwrap(), manifest, "kept in place");
    assert_eq!(d.metric("kube_anchor_rollbacks_total"), 0.0);
    let (code, body) = d.get("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("HTTP 500"), "{body}");
    let out = std::process::Command::new(support::fixture::BIN)
        .args(["status", "--output", "json", "--config"])
        .arg(s.volume.config())
        .arg("--host-root")
        .arg(s.dir.path().join("node"))
        .env("NODE_NAME", "cp-1")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["badVersions"].as_array().is_none_or(|b| b.is_empty()), "{v}");
}

/// The kubelet refreshes the volumes of a running pod on `helm upgrade`; a pod pinned to its own
/// template's inputs keeps the version it applied until the rollout replaces it.
#[test]
fn inputs_of_another_revision_wait_for_the_pod_to_be_replaced() {
    let mut s = Setup::new("kubeconfig v1");
    let with_marker = |kubeconfig: &str, marker: &str| {
        let mut files = Setup::files(kubeconfig);
        files.push((".inputs-config", marker.as_bytes().to_vec()));
        files
    };
    s.volume.update(&refs(&with_marker("kubeconfig v1", "rev1")));
    let marker = s.volume.dir.join(".inputs-config");
    let pin = |rev: &str| format!("{}={rev}", marker.display());
    let d = s.start(&["--expect-inputs", &pin("rev1")]);
    wait_until(WAIT, "the first apply", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v1") && s.read(MANIFEST).is_some()
    });
    let manifest_v1 = s.read(MANIFEST).unwrap();

    // helm upgrade: new content, new marker, under the running pod.
    s.volume.update(&refs(&with_marker("kubeconfig v2", "rev2")));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"), "{}", d.log_text());
    assert_eq!(s.read(MANIFEST).as_deref(), Some(manifest_v1.as_str()));
    assert_eq!(d.metric("kube_anchor_sync_errors_total"), 0.0);
    // Drift is repaired with the version the pod applied.
    fs::remove_file(s.host(KUBECONFIG)).unwrap();
    wait_until(WAIT, "the deleted kubeconfig restored at the pod's version", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v1")
    });
    drop(d);

    // A container restart of the old pod: nothing of the new revision is written, and the
    // readiness says why.
    let d = s.start(&["--expect-inputs", &pin("rev1")]);
    wait_until(WAIT, "the restarted container to explain itself", &d, || {
        d.get("/readyz")
            .is_some_and(|(_, body)| body.contains("another revision"))
    });
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));
    drop(d);

    // The rollout replaces the pod: the new one applies its own inputs.
    let d = s.start(&["--expect-inputs", &pin("rev2")]);
    wait_until(WAIT, "the replacement pod to apply rev2", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v2") && s.read(MANIFEST).is_some_and(|m| m != manifest_v1)
    });
}

/// Two anchors of one component on a node (a renamed release, a `perNode` toggle) share the
/// host network: the probes go over each pod's own socket, and a TCP port the other holds is
/// not fatal.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn probes_use_the_pod_socket_and_a_taken_port_is_not_fatal() {
    let s = Setup::new("kubeconfig v1");
    let first = s.start(&[]);
    let socket = s.dir.path().join("health.sock");
    let log = s.dir.path().join("second.log");
    // Killed however the test ends: a failed assertion must not leave a daemon running.
    let mut second = KillOnDrop(
        std::process::Command::new(support::fixture::BIN)
            .arg("run")
            .arg("--config")
            .arg(s.volume.config())
            .arg("--host-root")
            .arg(s.dir.path().join("node"))
            .arg("--health-socket")
            .arg(&socket)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", first.port))
            .env("NODE_NAME", "cp-1")
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBECONFIG")
            .stdout(fs::File::create(&log).unwrap())
            .stderr(fs::File::create(s.dir.path().join("second.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let probe = |endpoint: &str| {
        std::process::Command::new(support::fixture::BIN)
            .args(["probe", endpoint, "--socket"])
            .arg(&socket)
            .output()
            .unwrap()
    };
    wait_until(WAIT, "the socket to answer", &first, || {
        probe("healthz").status.success()
    });
    assert_eq!(String::from_utf8_lossy(&probe("healthz").stdout), "ok\n");
    // Not ready without an API, and the probe prints why.
    let ready = probe("readyz");
    assert_eq!(ready.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&ready.stdout).contains("no API client"),
        "{ready:?}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let stderr = fs::read_to_string(s.dir.path().join("second.err")).unwrap();
    assert!(
        second.0.try_wait().unwrap().is_none(),
        "a taken port must not stop the daemon:\n{stderr}"
    );
    assert!(stderr.contains("cannot listen"), "{stderr}");
    // The port still answers for the first anchor, which keeps running too.
    assert_eq!(first.get("/healthz").unwrap().0, 200);
    // No daemon behind the socket: the probe fails, naming the socket.
    second.0.kill().unwrap();
    second.0.wait().unwrap();
    let dead = probe("healthz");
    assert_eq!(dead.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&dead.stderr).contains("health.sock"),
        "{dead:?}"
    );
}

/// A missing kubeconfig (a Secret not mounted yet, a typo) means no API, which is no evidence:
/// the files are still kept in sync, and the client is tried again at every sync.
#[test]
fn an_unreadable_kubeconfig_does_not_stop_the_file_sync() {
    let s = Setup::new("kubeconfig v1");
    let missing = s.dir.path().join("missing.kubeconfig");
    let d = s.start(&["--kubeconfig", missing.to_str().unwrap(), "--resync-period", "1s"]);
    wait_until(WAIT, "the first apply", &d, || s.read(MANIFEST).is_some());
    let manifest = s.read(MANIFEST).unwrap();
    fs::remove_file(s.host(MANIFEST)).unwrap();
    wait_until(WAIT, "the deleted manifest restored", &d, || {
        s.read(MANIFEST).as_deref() == Some(manifest.as_str())
    });
    let (code, body) = d.get("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(body.contains("API unreachable"), "{body}");
    assert!(d.log_text().contains("missing.kubeconfig"), "{}", d.log_text());
    assert!(d.child_running(), "{}", d.log_text());
}

/// `retry` drops a version from the bad list; the daemon then applies it again.
#[test]
fn retry_lets_the_daemon_try_a_bad_version_again() {
    use kube_anchor_core::ledger::BadVersion;
    let mut s = Setup::new("kubeconfig v1");
    let engine = s.engine();
    // v1 ran and became last-known-good; v2 failed its trial.
    let v1 = s.desired(&engine);
    engine.apply(&v1, false).unwrap();
    engine.promote(&v1).unwrap();
    s.update("kubeconfig v2");
    let v2 = s.desired(&engine);
    engine
        .update_ledger("kube-scheduler", |l| {
            l.mark_bad(BadVersion {
                hash: v2.content_hash.clone(),
                at: "2026-11-23T00:00:00Z".into(),
                reason: "crash loop".into(),
            })
        })
        .unwrap();

    let d = s.start(&["--resync-period", "1s"]);
    wait_until(WAIT, "the bad version held back", &d, || {
        d.get("/readyz").is_some_and(|(_, b)| b.contains("failed its trial"))
    });
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));

    let retry = |hash: Option<&str>| match hash {
        Some(h) => s.verb("retry", &["--hash", h]),
        None => s.verb("retry", &[]),
    };
    let other = retry(Some("sha256:0000"));
    assert_eq!(other.status.code(), Some(1), "{other:?}");
    assert!(String::from_utf8_lossy(&other.stderr).contains("not recorded as bad"));
    let out = retry(Some(&v2.content_hash));
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("will be tried again"),
        "{out:?}"
    );
    wait_until(WAIT, "the forgiven version applied", &d, || {
        s.read(KUBECONFIG).as_deref() == Some("kubeconfig v2")
    });
    assert_eq!(retry(None).status.code(), Some(1), "nothing left to retry");
}

/// `rollback`, the operator's lever on a node with no API and no anchor running: refused with
/// nothing changed while no version has passed a trial here; then the last-known-good files go
/// back, the version the node ran is recorded as bad, and an anchor started afterwards keeps it
/// out.
#[test]
fn rollback_puts_the_last_known_good_back_with_no_api_and_no_anchor() {
    let mut s = Setup::new("kubeconfig v1");
    let engine = s.engine();
    let v1 = s.desired(&engine);
    engine.apply(&v1, false).unwrap();
    let manifest = s.read(MANIFEST).unwrap();
    let refused = s.verb("rollback", &[]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no last-known-good version"),
        "{refused:?}"
    );
    assert_eq!(s.read(MANIFEST).as_deref(), Some(manifest.as_str()), "nothing changed");

    engine.promote(&v1).unwrap();
    s.update("kubeconfig v2");
    let v2 = s.desired(&engine);
    engine.apply(&v2, false).unwrap();
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v2"));
    let out = s.verb("rollback", &[]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&v1.content_hash) && stdout.contains(&v2.content_hash),
        "{stdout}"
    );
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));
    assert_eq!(s.read(MANIFEST).as_deref(), Some(manifest.as_str()));
    let ledger = engine.ledger("kube-scheduler").unwrap();
    assert_eq!(ledger.content_hash.as_deref(), Some(v1.content_hash.as_str()));
    let bad = ledger.bad_version(&v2.content_hash).expect("v2 recorded as bad");
    assert!(bad.reason.contains("by hand"), "{bad:?}");
    // Again: already there, nothing more recorded.
    let again = s.verb("rollback", &[]);
    assert!(again.status.success(), "{again:?}");
    assert!(String::from_utf8_lossy(&again.stdout).contains("already on last-known-good"));

    let d = s.start(&["--resync-period", "1s"]);
    wait_until(WAIT, "the rolled-back version held back", &d, || {
        d.get("/readyz").is_some_and(|(_, b)| b.contains("failed its trial"))
    });
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));
}

/// The last-known-good snapshot corrupt or gone: `rollback` goes back to the same version
/// from its history snapshot, saying so; with that one gone too, it refuses as with no
/// last-known-good, and nothing changes.
#[test]
fn a_corrupt_last_known_good_snapshot_falls_back_to_the_history_snapshot() {
    let mut s = Setup::new("kubeconfig v1");
    let engine = s.engine();
    let v1 = s.desired(&engine);
    engine.apply(&v1, false).unwrap();
    engine.promote(&v1).unwrap();
    let lkg = s.host(&format!(
        "/var/lib/kube-anchor/v1/{}",
        kube_anchor_core::ledger::Snapshot::file_name("kube-scheduler")
    ));
    let history = s.host(&format!(
        "/var/lib/kube-anchor/{}",
        kube_anchor_core::history::Revision::snapshot_name("kube-scheduler", &v1.content_hash)
    ));
    assert!(
        lkg.exists() && history.exists(),
        "{} {}",
        lkg.display(),
        history.display()
    );

    for (damage, then) in [("corrupt", "v2"), ("gone", "v3")] {
        s.update(&format!("kubeconfig {then}"));
        let next = s.desired(&engine);
        engine.apply(&next, false).unwrap();
        if damage == "corrupt" {
            fs::write(&lkg, b"{\"truncated").unwrap();
        } else {
            fs::remove_file(&lkg).unwrap();
        }
        let out = s.verb("rollback", &[]);
        assert!(out.status.success(), "{damage}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("using the same version's history snapshot"),
            "{damage}: {stderr}"
        );
        assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"), "{damage}");
    }

    s.update("kubeconfig v4");
    engine.apply(&s.desired(&engine), false).unwrap();
    fs::write(&lkg, b"{\"truncated").unwrap();
    fs::remove_file(&history).unwrap();
    let out = s.verb("rollback", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no last-known-good version"),
        "{out:?}"
    );
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v4"));
}

/// A runtime socket that is missing, hangs or answers garbage while a version is on trial, with
/// no API either: no evidence, so nothing is rolled back however many trial periods pass, and
/// `/readyz` and the metric say why. (A real runtime cannot be made to hang or answer garbage:
/// the sockets here are stand-ins, as in `kube_anchor_k8s::cri`'s own tests.)
#[test]
fn an_unusable_runtime_socket_during_a_trial_rolls_nothing_back() {
    use std::io::Write;
    use std::os::unix::net::UnixListener;
    for kind in ["missing", "hung", "garbage"] {
        let mut s = Setup::new("kubeconfig v1");
        let engine = s.engine();
        let v1 = s.desired(&engine);
        engine.apply(&v1, false).unwrap();
        engine.promote(&v1).unwrap();
        s.update("kubeconfig v2");

        let socket = s.dir.path().join(format!("{kind}.sock"));
        if kind != "missing" {
            let listener = UnixListener::bind(&socket).unwrap();
            let garbage = kind == "garbage";
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for mut conn in listener.incoming().flatten() {
                    if garbage {
                        let _ = conn.write_all(b"\x00\x00\x04garbage, not HTTP/2");
                    }
                    held.push(conn);
                }
            });
        }
        let missing_kubeconfig = s.dir.path().join("missing.kubeconfig");
        let d = s.start(&[
            "--kubeconfig",
            missing_kubeconfig.to_str().unwrap(),
            "--trial-period",
            "2s",
            "--crash-loop-threshold",
            "0",
            "--runtime-endpoint",
            socket.to_str().unwrap(),
        ]);
        wait_until(WAIT, "the new version written", &d, || {
            s.read(KUBECONFIG).as_deref() == Some("kubeconfig v2")
        });
        // Several trial periods, each look at the runtime bounded by its own timeout.
        std::thread::sleep(Duration::from_secs(7));
        assert_eq!(
            s.read(KUBECONFIG).as_deref(),
            Some("kubeconfig v2"),
            "{kind}: rolled back"
        );
        assert!(engine.ledger("kube-scheduler").unwrap().bad.is_empty(), "{kind}");
        let (code, body) = d.get("/readyz").unwrap();
        assert_eq!(code, 503, "{kind}: {body}");
        assert!(
            body.contains("container runtime") && body.contains(&format!("{kind}.sock")),
            "{kind}: {body}"
        );
        let (_, metrics) = d.get("/metrics").unwrap();
        assert!(
            metrics.contains("kube_anchor_runtime_observed{component=\"kube-scheduler\"} 0"),
            "{kind}: {metrics}"
        );
        assert!(d.child_running(), "{kind}: {}", d.log_text());
    }
}

/// An operator's `rollback` while the anchor judges the version it replaces: the anchor's
/// promotion of that version, coming after, is refused and records nothing, so the rollback
/// stands (before, the anchor made the rolled-back version last-known-good and wrote it again).
#[test]
fn a_promotion_after_an_operators_rollback_is_refused() {
    let mut s = Setup::new("kubeconfig v1");
    let engine = s.engine();
    let v1 = s.desired(&engine);
    engine.apply(&v1, false).unwrap();
    engine.promote(&v1).unwrap();
    s.update("kubeconfig v2");
    let v2 = s.desired(&engine);
    engine.apply(&v2, false).unwrap();
    let out = std::process::Command::new(support::fixture::BIN)
        .args(["rollback", "--component", "kube-scheduler", "--host-root"])
        .arg(s.dir.path().join("node"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The anchor's trial of v2 ends now, converged as far as it saw.
    let refused = engine.promote(&v2).unwrap_err().to_string();
    assert!(refused.contains("not what the node runs"), "{refused}");
    let ledger = engine.ledger("kube-scheduler").unwrap();
    assert_eq!(ledger.last_known_good.as_deref(), Some(v1.content_hash.as_str()));
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));
    // Recorded bad, even where the node still ran it: refused as well.
    engine.apply(&v2, false).unwrap();
    let refused = engine.promote(&v2).unwrap_err().to_string();
    assert!(refused.contains("recorded as bad"), "{refused}");
}

/// The revision history through the binary: every version the node ran, newest first, with how
/// it ended (`status`); `rollback --to` goes back to an older version that passed, not only the
/// last-known-good one, and that version becomes the last-known-good; a version that failed, or
/// one the history let go (`--keep-revisions`, its snapshot removed with it), is refused by
/// name and nothing on the node changes.
#[test]
fn rollback_goes_back_to_any_kept_version_that_passed() {
    let mut s = Setup::new("kubeconfig v1");
    let engine = s.engine();
    let node = s.dir.path().join("node");
    let verb = |args: &[&str]| {
        std::process::Command::new(support::fixture::BIN)
            .args(args)
            .arg("--host-root")
            .arg(&node)
            .output()
            .unwrap()
    };
    let mut passed = Vec::new();
    for v in 1..=3 {
        s.update(&format!("kubeconfig v{v}"));
        let d = s.desired(&engine);
        engine.apply(&d, false).unwrap();
        engine.promote(&d).unwrap();
        passed.push(d.content_hash);
    }
    s.update("kubeconfig v4");
    let v4 = s.desired(&engine);
    engine.apply(&v4, false).unwrap();
    // v4 fails: the plain rollback goes to the last-known-good, v3.
    let out = verb(&["rollback", "--component", "kube-scheduler", "--reason", "crash loop"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v3"));

    // v1 by a prefix of its hash, as status shows it.
    let v1 = passed[0].strip_prefix("sha256:").unwrap();
    let out = verb(&["rollback", "--component", "kube-scheduler", "--to", &v1[..12]]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("rolled back to revision"),
        "{out:?}"
    );
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));
    let ledger = engine.ledger("kube-scheduler").unwrap();
    assert_eq!(ledger.last_known_good.as_deref(), Some(passed[0].as_str()));
    assert_eq!(
        ledger.bad_version(&passed[2]).map(|b| b.reason.as_str()),
        Some("rolled back by hand (kube-anchor rollback)")
    );
    // The node's fallback is v1 now: the plain rollback keeps it.
    assert_eq!(
        engine.last_known_good("kube-scheduler").unwrap().unwrap().content_hash,
        passed[0]
    );

    let status = std::process::Command::new(support::fixture::BIN)
        .args(["status", "--output", "json", "--runtime-endpoint", "none", "--config"])
        .arg(s.volume.config())
        .arg("--host-root")
        .arg(&node)
        .env("NODE_NAME", "cp-1")
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&status.stderr)));
    let revisions: Vec<(String, String)> = doc["revisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["hash"].as_str().unwrap().to_owned(),
                r["result"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expect = |hash: &str, result: &str| (hash.to_owned(), result.to_owned());
    assert_eq!(
        revisions,
        [
            expect(&passed[0], "passed"),
            expect(&passed[2], "failed"),
            expect(&v4.content_hash, "failed"),
            expect(&passed[1], "passed"),
        ],
        "{doc:#}"
    );

    // A version that failed is no target; nothing changes.
    let out = verb(&["rollback", "--component", "kube-scheduler", "--to", &v4.content_hash]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did not pass a trial on this node (failed)"), "{err}");
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v1"));

    // Kept to one passed and one failed version: v2 is let go with its snapshot, the
    // last-known-good v1 stays.
    let snapshot = |hash: &str| {
        s.host("/var/lib/kube-anchor")
            .join(kube_anchor_core::history::Revision::snapshot_name(
                "kube-scheduler",
                hash,
            ))
    };
    assert!(snapshot(&passed[1]).exists());
    let out = verb(&[
        "rollback",
        "--component",
        "kube-scheduler",
        "--to",
        &passed[1],
        "--keep-revisions",
        "1",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v2"));
    let ledger = engine.ledger("kube-scheduler").unwrap();
    let kept: Vec<&str> = ledger.history.iter().map(|r| r.hash.as_str()).collect();
    // v2 applied and last-known-good; v1 failed by this rollback; the older ones let go.
    assert_eq!(kept, [passed[1].as_str(), passed[0].as_str()], "{ledger:#?}");
    assert!(!snapshot(&passed[2]).exists() && snapshot(&passed[1]).exists());
    let out = verb(&["rollback", "--component", "kube-scheduler", "--to", &passed[2]]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("is not a revision kept on this node"),
        "{err}"
    );
    assert_eq!(s.read(KUBECONFIG).as_deref(), Some("kubeconfig v2"));

    // `remove` takes the snapshots with the files: they hold keys.
    let out = verb(&["remove", "--component", "kube-scheduler"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!snapshot(&passed[1]).exists());
}
