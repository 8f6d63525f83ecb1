//! The anchor's own least privilege: every file verb of the binary run under exactly the
//! privileges the component charts give the anchor's container (read from `helm template`), on
//! files the chart gives to another user; and each of those capabilities shown to be needed.
//!
//! The kernel enforces them: each verb runs under util-linux `setpriv`, which sets the user, the
//! bounding, inheritable and ambient capability sets and no_new_privs as runc does for a
//! container (the test bed's process runtime applies a pod's securityContext the same way, so
//! `run`, the preStop hook and the checkpointer run under the charts' privileges in every
//! cluster test too). Needs root, as CI runs.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_yaml_ng::Value;
use support::fixture::{BIN, snapshot_files, stderr, stdout};
use support::helm::{configmap_files, of_kind, secret_files, template};
use support::poll::Poll;

const KUBECONFIG: &str = "/etc/kubernetes/scheduler.conf";
const KEY: &str = "/etc/kubernetes/pki/scheduler-extra.key";
const MANIFEST: &str = "/etc/kubernetes/manifests/kube-scheduler.yaml";

/// A container's privileges as the chart renders them.
#[derive(Debug, Clone)]
struct Privileges {
    uid: u64,
    caps: Vec<String>,
    no_new_privs: bool,
}

impl Privileges {
    fn without(&self, cap: &str) -> Self {
        let mut p = self.clone();
        p.caps.retain(|c| c != cap);
        p
    }

    /// `command` run under these privileges, as runc runs a container's process.
    fn wrap(&self, command: &mut Command) -> Command {
        let mut bounding = String::from("-all");
        for c in &self.caps {
            bounding.push_str(&format!(",+{}", c.to_lowercase()));
        }
        let mut wrapped = Command::new("setpriv");
        wrapped.args(["--reuid", &self.uid.to_string(), "--regid", "0", "--clear-groups"]);
        wrapped.args([
            "--bounding-set",
            &bounding,
            "--inh-caps",
            "-all",
            "--ambient-caps",
            "-all",
        ]);
        if self.no_new_privs {
            wrapped.arg("--no-new-privs");
        }
        wrapped.arg("--").arg(command.get_program()).args(command.get_args());
        for (k, v) in command.get_envs() {
            match v {
                Some(v) => wrapped.env(k, v),
                None => wrapped.env_remove(k),
            };
        }
        wrapped
    }
}

/// The privileges of the container named `container` in the chart's DaemonSet.
fn privileges(docs: &[Value], container: &str) -> Privileges {
    let ds = of_kind(docs, "DaemonSet")[0];
    let c = ds["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == container)
        .unwrap_or_else(|| panic!("no container {container}"));
    let sc = &c["securityContext"];
    assert_eq!(sc["capabilities"]["drop"], Value::from(vec!["ALL"]), "{sc:?}");
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc:?}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{sc:?}");
    assert!(sc["privileged"].is_null() || sc["privileged"] == false, "{sc:?}");
    Privileges {
        uid: sc["runAsUser"].as_u64().expect("runAsUser"),
        caps: sc["capabilities"]["add"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_owned())
            .collect(),
        no_new_privs: true,
    }
}

/// An anchor pod's view of the chart: its volumes laid out as the kubelet lays them out, and a
/// node directory.
struct Pod {
    dir: tempfile::TempDir,
    privileges: Privileges,
}

impl Pod {
    /// kube-scheduler with two files given to other users: its kubeconfig to 1000:1000 (0600) and
    /// a key to 0:1000 (0640).
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let values = dir.path().join("values.yaml");
        fs::write(
            &values,
            format!(
                "files:
  - {{name: scheduler.conf, path: {KUBECONFIG}, mode: \"0600\", owner: \"1000:1000\"}}
  - {{name: extra.key, path: {KEY}, mode: \"0640\", owner: \"0:1000\"}}
credentials:
  scheduler.conf: \"apiVersion: v1\\nkind: Config\\n\"
  extra.key: \"KEY\\n\"
"
            ),
        )
        .unwrap();
        let docs = template("lp", "kube-scheduler", &["-f", values.to_str().unwrap()]);
        let config = configmap_files(of_kind(&docs, "ConfigMap")[0]);
        assert!(
            String::from_utf8_lossy(&config["anchor.yaml"]).contains("owner: \"1000:1000\""),
            "the chart passes `owner` on:\n{}",
            String::from_utf8_lossy(&config["anchor.yaml"])
        );
        let secrets = secret_files(of_kind(&docs, "Secret"));
        let pod = Self {
            privileges: privileges(&docs, "anchor"),
            dir,
        };
        // As the pod sees them: the config and Secret volumes side by side, root-owned, the
        // Secret's files 0400 (the chart's defaultMode).
        write_volume(&pod.dir.path().join("config"), &config, 0o644);
        write_volume(&pod.dir.path().join("secrets"), &secrets, 0o400);
        fs::create_dir_all(pod.node()).unwrap();
        pod
    }

    fn node(&self) -> PathBuf {
        self.dir.path().join("node")
    }

    fn host(&self, path: &str) -> PathBuf {
        self.node().join(path.trim_start_matches('/'))
    }

    fn command(&self, verb: &str) -> Command {
        let mut c = Command::new(BIN);
        c.arg(verb)
            .arg("--config")
            .arg(self.dir.path().join("config/anchor.yaml"))
            .arg("--host-root")
            .arg(self.node())
            .env("NODE_NAME", "cp-1")
            .env("NODE_IP", "10.0.0.10")
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG");
        c
    }

    /// `verb` under `privileges`.
    fn run_as(&self, privileges: &Privileges, verb: &str, extra: &[&str]) -> Output {
        privileges.wrap(self.command(verb).args(extra)).output().unwrap()
    }

    /// `verb` under the chart's privileges, which must succeed.
    fn run(&self, verb: &str, extra: &[&str]) -> Output {
        let out = self.run_as(&self.privileges, verb, extra);
        assert!(
            out.status.success(),
            "{verb} under {:?}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
            self.privileges,
            out.status.code(),
            stdout(&out),
            stderr(&out)
        );
        out
    }

    fn owner_and_mode(&self, path: &str) -> (u32, u32, u32) {
        let m = fs::metadata(self.host(path)).unwrap();
        (m.uid(), m.gid(), m.mode() & 0o7777)
    }
}

fn write_volume(dir: &Path, files: &BTreeMap<String, Vec<u8>>, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::create_dir_all(dir).unwrap();
    for (name, content) in files {
        let path = dir.join(name);
        fs::write(&path, content).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
}

fn only_root() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    assert!(
        unsafe { libc::geteuid() } == 0,
        "this test runs verbs under a container's privileges and needs root (CI runs as root)"
    );
}

/// Every file verb under the chart's privileges, on files owned by other users: each works as
/// it does for full root, and a drifted file owned by another user is repaired.
#[test]
fn every_verb_works_under_the_privileges_the_chart_grants() {
    only_root();
    let pod = Pod::new();
    assert_eq!(pod.privileges.uid, 0);
    pod.run("apply", &[]);
    assert_eq!(pod.owner_and_mode(KUBECONFIG), (1000, 1000, 0o600));
    assert_eq!(pod.owner_and_mode(KEY), (0, 1000, 0o640));
    let written = fs::read(pod.host(KUBECONFIG)).unwrap();

    // Again: every file is read back and found in place.
    let before = snapshot_files(&pod.node());
    let again = pod.run("apply", &[]);
    assert!(stdout(&again).contains("unchanged"), "{}", stdout(&again));
    assert_eq!(snapshot_files(&pod.node()), before, "a second apply changes nothing");

    let status = pod.run("status", &["--output", "json", "--runtime-endpoint", "none"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let files = status["files"].as_array().expect("files in status");
    assert!(
        files.iter().any(|f| f["path"] == KUBECONFIG && f["state"] == "in-sync"),
        "{status:#}"
    );

    // Drift on a file of another user: repaired.
    fs::write(pod.host(KUBECONFIG), "changed on the node\n").unwrap();
    pod.run("apply", &[]);
    assert_eq!(fs::read(pod.host(KUBECONFIG)).unwrap(), written);
    assert_eq!(pod.owner_and_mode(KUBECONFIG), (1000, 1000, 0o600));

    // The daemon: writes, and repairs a deleted file, with no API (a kubeconfig not mounted).
    fs::remove_file(pod.host(KUBECONFIG)).unwrap();
    let log = pod.dir.path().join("run.log");
    let missing = pod.dir.path().join("missing.kubeconfig");
    let mut daemon = pod
        .privileges
        .wrap(pod.command("run").args([
            "--kubeconfig",
            missing.to_str().unwrap(),
            "--resync-period",
            "1s",
            "--listen",
            "127.0.0.1:0",
            "--runtime-endpoint",
            "none",
        ]))
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .stdout(fs::File::create(&log).unwrap())
        .stderr(fs::File::create(pod.dir.path().join("run.err")).unwrap())
        .spawn()
        .unwrap();
    Poll::new(Duration::from_secs(30), "run restores the deleted kubeconfig")
        .every(Duration::from_millis(100))
        .context(|| fs::read_to_string(&log).unwrap_or_default())
        .until(|| fs::read(pod.host(KUBECONFIG)).ok() == Some(written.clone()));
    fs::write(pod.host(KEY), "drift\n").unwrap();
    Poll::new(Duration::from_secs(30), "run repairs the drifted key")
        .every(Duration::from_millis(100))
        .context(|| fs::read_to_string(&log).unwrap_or_default())
        .until(|| fs::read(pod.host(KEY)).ok().as_deref() == Some(&b"KEY\n"[..]));
    let _ = daemon.kill();
    let _ = daemon.wait();
    let log_text = fs::read_to_string(&log).unwrap_or_default();
    assert!(!log_text.contains("Permission denied"), "{log_text}");

    // Removal reads each file back before it unlinks it.
    pod.run("remove", &[]);
    for path in [KUBECONFIG, KEY, MANIFEST] {
        assert!(!pod.host(path).exists(), "{path} removed");
    }
}

/// Each capability the chart adds is needed: without it the first `apply` is refused, with an
/// error that names the file and the capability, and nothing is written.
#[test]
fn each_capability_the_chart_adds_is_needed() {
    only_root();
    let pod = Pod::new();
    assert_eq!(
        pod.privileges.caps,
        ["CHOWN", "DAC_READ_SEARCH"],
        "the charts' capabilities changed: prove the new set here"
    );
    // What the verbs write, without the lock file and directories every run creates first.
    let written = || {
        let mut files = snapshot_files(&pod.node());
        files.retain(|path, (_, mode, ..)| *mode & 0o170000 == 0o100000 && path.extension() != Some("lock".as_ref()));
        files
    };
    let before = written();
    assert!(before.is_empty());
    for (missing, says) in [
        ("CHOWN", "cannot set owner"),
        ("DAC_READ_SEARCH", "could not read it back"),
    ] {
        let out = pod.run_as(&pod.privileges.without(missing), "apply", &[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "without {missing}: {err}");
        assert!(
            err.contains(KUBECONFIG) && err.contains(says),
            "without {missing}: {err}"
        );
        assert_eq!(written(), before, "without {missing}: nothing written");
    }
    // Files written with the capability, read without it (an anchor of an older chart): the
    // error says which file and what is missing, and the files stay.
    pod.run("apply", &[]);
    let applied = written();
    for verb in ["status", "remove"] {
        let out = pod.run_as(&pod.privileges.without("DAC_READ_SEARCH"), verb, &[]);
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "{verb}: {err}");
        assert!(
            err.contains(KUBECONFIG) && err.contains("CAP_DAC_READ_SEARCH"),
            "{verb}: {err}"
        );
        assert_eq!(written(), applied, "{verb} changed nothing");
    }
}

/// The pod-checkpointer writes checkpointed Secrets owned by the checkpointed pod's user and
/// never reads them back (retiring removes whole directories): CHOWN alone, proven in the
/// cluster tests, where the process runtime enforces it.
#[test]
fn the_checkpointer_asks_for_chown_alone() {
    let docs = template("lp", "pod-checkpointer", &[]);
    let p = privileges(&docs, "checkpointer");
    assert_eq!((p.uid, p.caps), (0, vec!["CHOWN".to_owned()]));
}
