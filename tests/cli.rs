//! The one-shot verbs, run as the real binary against temp directories.

mod support;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};

use support::fixture::*;

#[test]
fn apply_writes_credentials_and_the_annotated_manifest_with_exact_modes() {
    let f = Fixture::new();
    let out = f.apply();
    assert!(stdout(&out).contains("kube-apiserver: applied"), "{}", stdout(&out));
    assert_eq!(f.read("/etc/kubernetes/pki/ca.crt"), "CA CERT\n");
    let mode = |p: &str| fs::metadata(f.host(p)).unwrap().mode() & 0o7777;
    assert_eq!(mode("/etc/kubernetes/pki/ca.crt"), 0o644);
    assert_eq!(mode("/etc/kubernetes/pki/apiserver.key"), 0o600);
    assert_eq!(mode("/etc/kubernetes/manifests/kube-apiserver.yaml"), 0o600);
    let manifest = f.read("/etc/kubernetes/manifests/kube-apiserver.yaml");
    assert!(manifest.contains("--advertise-address=10.0.0.10"), "{manifest}");
    assert!(manifest.contains("kube-anchor.io/content-hash: sha256:"), "{manifest}");
    // The ledger is private.
    assert_eq!(mode("/var/lib/kube-anchor/v1/kube-apiserver.json"), 0o600);
    // Credentials reached their final place before the manifest did (rename sets ctime).
    let ctime = |p: &str| {
        let m = fs::metadata(f.host(p)).unwrap();
        (m.ctime(), m.ctime_nsec())
    };
    assert!(ctime("/etc/kubernetes/pki/ca.crt") <= ctime("/etc/kubernetes/manifests/kube-apiserver.yaml"));
    assert!(ctime("/etc/kubernetes/pki/apiserver.key") <= ctime("/etc/kubernetes/manifests/kube-apiserver.yaml"));
}

#[test]
fn a_second_apply_changes_nothing_on_disk() {
    let f = Fixture::new();
    f.apply();
    let before = f.snapshot();
    let out = f.apply();
    assert!(stdout(&out).contains("kube-apiserver: unchanged"), "{}", stdout(&out));
    assert_eq!(
        f.snapshot(),
        before,
        "same content, mode, inode and mtime everywhere, ledger included"
    );
}

#[test]
fn a_credential_change_rewrites_it_and_changes_the_manifest_hash() {
    let f = Fixture::new();
    f.apply();
    let manifest_before = f.read("/etc/kubernetes/manifests/kube-apiserver.yaml");
    let ca_inode = fs::metadata(f.host("/etc/kubernetes/pki/ca.crt")).unwrap().ino();
    f.source("apiserver.key", "ROTATED KEY\n");
    let out = f.run("apply", &["--output", "json"]);
    assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let written: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["action"] == "written")
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        written,
        [
            "/etc/kubernetes/pki/apiserver.key",
            "/etc/kubernetes/manifests/kube-apiserver.yaml"
        ]
    );
    assert_eq!(f.read("/etc/kubernetes/pki/apiserver.key"), "ROTATED KEY\n");
    assert_ne!(f.read("/etc/kubernetes/manifests/kube-apiserver.yaml"), manifest_before);
    assert_eq!(
        fs::metadata(f.host("/etc/kubernetes/pki/ca.crt")).unwrap().ino(),
        ca_inode,
        "untouched file kept"
    );
}

#[test]
fn bad_inputs_fail_clearly_and_change_nothing() {
    let f = Fixture::new();
    f.apply();
    let before = f.snapshot();
    let good_config = fs::read_to_string(f.config()).unwrap();

    // (how to break it, what the message must name)
    type Breaker = Box<dyn Fn(&Fixture)>;
    let cases: Vec<(&str, Breaker, Vec<&str>)> = vec![
        (
            "malformed manifest",
            Box::new(|f| f.source("kube-apiserver.yaml", "apiVersion: v1\nkind: [Pod\n")),
            vec!["kube-apiserver.yaml", "not valid YAML"],
        ),
        (
            "not a pod",
            Box::new(|f| f.source("kube-apiserver.yaml", MANIFEST.replace("kind: Pod", "kind: Service"))),
            vec!["kube-apiserver.yaml", "kind"],
        ),
        (
            "secret volume",
            Box::new(|f| {
                f.source(
                    "kube-apiserver.yaml",
                    format!("{MANIFEST}  volumes:\n  - name: s\n    secret: {{secretName: x}}\n"),
                )
            }),
            vec!["kube-apiserver.yaml", "spec.volumes[0].secret", "secrets"],
        ),
        (
            "unknown variable",
            Box::new(|f| f.source("kube-apiserver.yaml", MANIFEST.replace("${NODE_IP}", "${HOSTNAME}"))),
            vec!["kube-apiserver.yaml:11", "${HOSTNAME}"],
        ),
        (
            "bad mode",
            Box::new(|f| f.set_config(&fs::read_to_string(f.config()).unwrap().replace("\"0600\"", "\"0999\""))),
            vec!["anchor.yaml", "mode", "0999"],
        ),
        (
            "path outside the allowed roots",
            Box::new(|f| {
                f.set_config(
                    &fs::read_to_string(f.config())
                        .unwrap()
                        .replace("/etc/kubernetes/pki/ca.crt", "/etc/ssh/ca.crt"),
                )
            }),
            vec![
                "anchor.yaml",
                "spec.files[0].path",
                "/etc/ssh/ca.crt",
                "outside the allowed roots",
            ],
        ),
        (
            "parent escape",
            Box::new(|f| {
                f.set_config(
                    &fs::read_to_string(f.config())
                        .unwrap()
                        .replace("/etc/kubernetes/pki/ca.crt", "/etc/kubernetes/../shadow"),
                )
            }),
            vec!["anchor.yaml", "spec.files[0].path", ".."],
        ),
        (
            "missing source",
            Box::new(|f| fs::remove_file(f.config_dir().join("ca.crt")).unwrap()),
            vec!["ca.crt", "spec.files[0].source", "No such file"],
        ),
        (
            "config is not YAML",
            Box::new(|f| f.set_config("spec: [")),
            vec!["anchor.yaml"],
        ),
    ];
    for (name, break_it, needles) in cases {
        f.source("ca.crt", "CA CERT v2\n"); // a real change is pending, so nothing written proves the refusal
        break_it(&f);
        let out = f.run("apply", &[]);
        assert_error(&out, &needles);
        assert_eq!(f.snapshot(), before, "{name}: the node changed");
        // Restore.
        f.set_config(&good_config);
        f.source("ca.crt", "CA CERT\n");
        f.source("kube-apiserver.yaml", MANIFEST);
    }
}

#[test]
fn unset_variable_is_named() {
    let f = Fixture::new();
    let out = f.command("apply").env_remove("NODE_IP").output().unwrap();
    assert_error(
        &out,
        &["kube-apiserver.yaml:11", "${NODE_IP}", "not set in the environment"],
    );
    assert!(!f.host("/etc").exists());
}

#[test]
fn status_reports_each_state_and_exits_3_when_out_of_sync() {
    let f = Fixture::new();
    let out = f.run("status", &["--output", "json"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["files"].as_array().unwrap().iter().all(|f| f["state"] == "missing"),
        "{v}"
    );

    f.apply();
    let out = f.run("status", &["--output", "json"]);
    assert_success(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["inSync"], true);
    assert_eq!(v["files"].as_array().unwrap().len(), 3);

    fs::write(f.host("/etc/kubernetes/pki/ca.crt"), "tampered").unwrap();
    fs::remove_file(f.host("/etc/kubernetes/pki/apiserver.key")).unwrap();
    let out = f.run("status", &["--output", "json"]);
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let state = |path: &str| {
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap()["state"]
            .clone()
    };
    assert_eq!(state("/etc/kubernetes/pki/ca.crt"), "drifted");
    assert_eq!(state("/etc/kubernetes/pki/apiserver.key"), "missing");
    assert_eq!(state("/etc/kubernetes/manifests/kube-apiserver.yaml"), "in-sync");
    // Text output names states too, and status is read-only.
    let before = f.snapshot();
    let out = f.run("status", &[]);
    assert!(
        stdout(&out).contains("drifted") && stdout(&out).contains("missing"),
        "{}",
        stdout(&out)
    );
    assert_eq!(f.snapshot(), before);
}

#[test]
fn status_calls_files_unmanaged_until_apply_adopts_them() {
    let f = Fixture::new();
    fs::create_dir_all(f.host("/etc/kubernetes/pki")).unwrap();
    fs::write(f.host("/etc/kubernetes/pki/ca.crt"), "CA CERT\n").unwrap();
    fs::set_permissions(f.host("/etc/kubernetes/pki/ca.crt"), fs::Permissions::from_mode(0o644)).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&f.run("status", &["--output", "json"]).stdout).unwrap();
    assert_eq!(v["files"][0]["state"], "unmanaged");
    let inode = fs::metadata(f.host("/etc/kubernetes/pki/ca.crt")).unwrap().ino();
    f.apply();
    assert_eq!(
        fs::metadata(f.host("/etc/kubernetes/pki/ca.crt")).unwrap().ino(),
        inode,
        "adopted, not rewritten"
    );
    let v: serde_json::Value = serde_json::from_slice(&f.run("status", &["--output", "json"]).stdout).unwrap();
    assert_eq!(v["files"][0]["state"], "in-sync");
}

#[test]
fn remove_takes_only_what_still_holds_what_was_written_and_is_idempotent() {
    let f = Fixture::new();
    f.apply();
    fs::write(f.host("/etc/kubernetes/pki/ca.crt"), "edited by an operator").unwrap();
    fs::write(f.host("/etc/kubernetes/pki/unrelated"), "not ours").unwrap();
    let out = f.run("remove", &[]);
    assert_success(&out);
    let text = stdout(&out);
    assert!(
        text.contains("/etc/kubernetes/pki/ca.crt: changed since kube-anchor wrote it; left in place"),
        "{text}"
    );
    let removed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("removed"))
        .map(str::trim)
        .collect();
    assert_eq!(
        removed,
        [
            "/etc/kubernetes/manifests/kube-apiserver.yaml",
            "/etc/kubernetes/pki/apiserver.key"
        ],
        "manifest first"
    );
    assert_eq!(f.read("/etc/kubernetes/pki/ca.crt"), "edited by an operator");
    assert!(f.host("/etc/kubernetes/pki/unrelated").exists());
    assert!(
        !f.host("/var/lib/kube-anchor/v1/kube-apiserver.json").exists(),
        "ledger entry gone"
    );
    // Again: nothing to do, still success.
    assert_success(&f.run("remove", &[]));
    // By a name typed by hand: nothing recorded is refused as a likely typo, naming what is
    // recorded, unless told it may be missing.
    let by_name = |name: &str, extra: &[&str]| {
        std::process::Command::new(BIN)
            .args(["remove", "--component", name])
            .args(extra)
            .arg("--host-root")
            .arg(f.node())
            .output()
            .unwrap()
    };
    let out = by_name("kube-apiserver", &["--ignore-not-found"]);
    assert_success(&out);
    assert!(stdout(&out).contains("0 file(s) removed"));
    let out = by_name("kube-apiserver", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    f.apply();
    let out = by_name("kube-apiserver-typo", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("kube-apiserver-typo: nothing recorded") && err.contains("recorded there: kube-apiserver)"),
        "{err}"
    );
    assert!(
        f.host("/etc/kubernetes/manifests/kube-apiserver.yaml").exists(),
        "nothing removed"
    );
}

#[test]
fn remove_with_no_ledger_removes_nothing() {
    let f = Fixture::new();
    f.apply();
    fs::remove_file(f.host("/var/lib/kube-anchor/v1/kube-apiserver.json")).unwrap();
    let before = f.snapshot();
    assert_success(&f.run("remove", &[]));
    assert_eq!(f.snapshot(), before, "no proof of ownership, no deletion");
}

#[test]
fn corrupt_ledger_is_moved_aside_reported_and_not_fatal() {
    let f = Fixture::new();
    f.apply();
    let ledger = f.host("/var/lib/kube-anchor/v1/kube-apiserver.json");
    let mut bytes = fs::read(&ledger).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x20;
    fs::write(&ledger, &bytes).unwrap();
    // Remove refuses to trust it: nothing is deleted.
    let out = f.run("remove", &[]);
    assert_success(&out);
    assert!(stdout(&out).contains("was unusable"), "{}", stdout(&out));
    assert!(f.manifest_path().exists());
    let aside: Vec<_> = fs::read_dir(f.host("/var/lib/kube-anchor/v1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("kube-apiserver.json.corrupt-"))
        .collect();
    assert_eq!(aside.len(), 1);
    // Apply adopts the files that match and writes a fresh ledger.
    let out = f.apply();
    assert!(stdout(&out).contains("kube-apiserver: adopted"), "{}", stdout(&out));
    assert!(ledger.exists());
    assert_success(&f.run("status", &[]));
}

#[test]
fn orphans_are_kept_unless_pruned() {
    let f = Fixture::new();
    f.apply();
    // Drop apiserver.key from the same config.
    let text = fs::read_to_string(f.config()).unwrap();
    let cut = text.find("  - source: apiserver.key").unwrap();
    let end = text[cut..].find("  manifest:").unwrap() + cut;
    f.set_config(&format!("{}{}", &text[..cut], &text[end..]));
    let out = f.apply();
    assert!(
        stdout(&out).contains("no longer in the config; kept"),
        "{}",
        stdout(&out)
    );
    assert!(f.host("/etc/kubernetes/pki/apiserver.key").exists());
    let v: serde_json::Value = serde_json::from_slice(&f.run("status", &["--output", "json"]).stdout).unwrap();
    assert!(
        v["files"].as_array().unwrap().iter().any(|x| x["state"] == "orphaned"),
        "{v}"
    );
    let out = f.run("apply", &["--prune"]);
    assert_success(&out);
    assert!(!f.host("/etc/kubernetes/pki/apiserver.key").exists());
    assert_success(&f.run("status", &[]));
}

#[test]
fn symlinked_parent_outside_the_root_is_refused_and_nothing_leaks() {
    let f = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(f.host("/etc/kubernetes")).unwrap();
    symlink(outside.path(), f.host("/etc/kubernetes/pki")).unwrap();
    let out = f.run("apply", &[]);
    assert_error(
        &out,
        &["/etc/kubernetes/pki/ca.crt", "resolves to", "outside /etc/kubernetes"],
    );
    assert!(fs::read_dir(outside.path()).unwrap().next().is_none());
    assert!(!f.manifest_path().exists());
}

#[test]
fn symlink_at_a_destination_is_replaced_never_written_through() {
    let f = Fixture::new();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("shadow");
    fs::write(&victim, "root:x:0:0").unwrap();
    fs::create_dir_all(f.host("/etc/kubernetes/pki")).unwrap();
    symlink(&victim, f.host("/etc/kubernetes/pki/apiserver.key")).unwrap();
    let out = f.run("apply", &["--output", "json"]);
    assert_success(&out);
    assert!(stdout(&out).contains("replace-symlink"), "{}", stdout(&out));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "root:x:0:0");
    assert!(
        fs::symlink_metadata(f.host("/etc/kubernetes/pki/apiserver.key"))
            .unwrap()
            .is_file()
    );
}

#[test]
fn a_directory_in_the_way_is_an_error_that_changes_nothing() {
    let f = Fixture::new();
    fs::create_dir_all(f.host("/etc/kubernetes/pki/apiserver.key")).unwrap();
    let etc = f.host("/etc");
    let before = snapshot(&etc);
    assert_error(
        &f.run("apply", &[]),
        &["/etc/kubernetes/pki/apiserver.key", "directory"],
    );
    assert_eq!(snapshot(&etc), before);
    assert!(
        !f.host("/var/lib/kube-anchor/v1/kube-apiserver.json").exists(),
        "no ledger for a failed apply"
    );
}

#[test]
fn our_own_temp_leftovers_are_cleaned_and_others_kept() {
    let f = Fixture::new();
    f.apply();
    let dir = f.host("/etc/kubernetes/manifests");
    fs::write(dir.join(".kube-apiserver.yaml.AbC123.kube-anchor.tmp"), "half").unwrap();
    fs::write(dir.join(".etcd.yaml.swp"), "someone else's").unwrap();
    f.apply();
    let mut names: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, [".etcd.yaml.swp", "kube-apiserver.yaml"]);
}

#[test]
fn log_format_json_emits_json_lines_without_secrets() {
    let f = Fixture::new();
    let out = f.run("apply", &["--log-format", "json"]);
    assert_success(&out);
    let err = stderr(&out);
    let line = err.lines().next().expect("a log line");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_eq!(v["component"], "kube-apiserver");
    assert!(!err.contains("PRIVATE KEY") && !stdout(&out).contains("PRIVATE KEY"));
}

#[test]
fn checkpointer_sanitize_shows_the_checkpoint_and_refuses_what_cannot_be_one() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver-x1\n  namespace: kube-system\n  uid: u1\n  annotations: {checkpointer.alpha.coreos.com/checkpoint: \"true\"}\n  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: kube-apiserver, uid: ds1, controller: true}]\nspec:\n  serviceAccountName: kube-apiserver\n  containers: [{name: c, image: i, volumeMounts: [{name: certs, mountPath: /certs}]}]\n  volumes: [{name: certs, secret: {secretName: apiserver-certs}}]\n";
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pod.yaml");
    fs::write(&file, pod).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["checkpointer", "sanitize", "--node", "CP-1"])
        .arg(&file)
        .output()
        .unwrap();
    assert_success(&out);
    let checkpoint: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        checkpoint["metadata"]["annotations"]["checkpointer.alpha.coreos.com/checkpoint-of"],
        "kube-apiserver-x1"
    );
    assert!(checkpoint["spec"]["serviceAccountName"].is_null());
    assert_eq!(
        checkpoint["spec"]["volumes"][0]["hostPath"]["path"],
        "/etc/kubernetes/checkpoint-secrets/kube-system/kube-apiserver-x1/apiserver-certs"
    );
    let err = stderr(&out);
    assert!(
        err.contains("kube-system-kube-apiserver-x1.json") && err.contains("mirror pod kube-apiserver-x1-cp-1"),
        "{err}"
    );

    let bad = pod.replace(
        "volumeMounts",
        "env: [{name: T, valueFrom: {secretKeyRef: {name: s, key: k}}}], volumeMounts",
    );
    fs::write(&file, bad).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["checkpointer", "sanitize"])
        .arg(&file)
        .output()
        .unwrap();
    assert_error(
        &out,
        &[
            "cannot be checkpointed",
            "spec.containers[0].env[0].valueFrom.secretKeyRef",
        ],
    );
}

/// Runs `cmd` and fails the test (killing it) when it does not finish within `limit`.
fn output_within(mut cmd: std::process::Command, limit: std::time::Duration) -> std::process::Output {
    use std::process::Stdio;
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}; killed\nstdout:\n{}\nstderr:\n{}",
                stdout(&out),
                stderr(&out)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

const QUICK: std::time::Duration = std::time::Duration::from_secs(10);

/// The state a crash (or a failed ledger write) between the renames and the ledger record left
/// behind before the ledger recorded its intent first: new content on disk, the old record in
/// the ledger. The next apply must correct the ledger, and `remove` must then take everything.
#[test]
fn a_stale_ledger_left_by_a_crash_is_corrected_and_remove_takes_everything() {
    let f = Fixture::new();
    f.apply();
    let ledger = f.host("/var/lib/kube-anchor/v1/kube-apiserver.json");
    let old_ledger = fs::read(&ledger).unwrap();
    f.source("apiserver.key", "ROTATED KEY\n");
    f.apply();
    fs::write(&ledger, &old_ledger).unwrap();

    let out = f.apply();
    let text = stdout(&out);
    assert!(text.contains("kube-apiserver: adopted"), "{text}");
    assert!(text.contains("adopted    /etc/kubernetes/pki/apiserver.key"), "{text}");
    assert_success(&f.run("status", &[]));
    let out = f.run("remove", &[]);
    assert_success(&out);
    assert_eq!(
        visible_files(&f.host("/etc/kubernetes/pki")),
        Vec::<String>::new(),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        visible_files(&f.host("/etc/kubernetes/manifests")),
        Vec::<String>::new()
    );
}

/// A FIFO (no writer) as a source, as the config or as the ledger never hangs a verb: sources
/// and the config are refused naming the file; the ledger is set aside like any unusable one.
#[test]
fn fifos_never_hang_a_verb() {
    let mkfifo = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    };
    let f = Fixture::new();
    f.apply();
    let before = f.snapshot();
    let key = f.config_dir().join("apiserver.key");
    fs::remove_file(&key).unwrap();
    mkfifo(&key);
    for verb in ["apply", "status"] {
        let out = output_within(f.command(verb), QUICK);
        assert_error(
            &out,
            &["apiserver.key", "spec.files[1].source", "is a FIFO, not a regular file"],
        );
    }
    assert_eq!(f.snapshot(), before);
    fs::remove_file(&key).unwrap();
    f.source("apiserver.key", "PRIVATE KEY\n");

    let config = f.config();
    let text = fs::read_to_string(&config).unwrap();
    fs::remove_file(&config).unwrap();
    mkfifo(&config);
    let out = output_within(f.command("remove"), QUICK);
    assert_error(&out, &["anchor.yaml", "is a FIFO"]);
    fs::remove_file(&config).unwrap();
    f.set_config(&text);

    let ledger = f.host("/var/lib/kube-anchor/v1/kube-apiserver.json");
    fs::remove_file(&ledger).unwrap();
    mkfifo(&ledger);
    let out = output_within(f.command("status"), QUICK);
    assert!(stdout(&out).contains("is a FIFO"), "{}", stdout(&out));
    let out = output_within(f.command("remove"), QUICK);
    assert_success(&out);
    assert!(stdout(&out).contains("is a FIFO"), "{}", stdout(&out));
    assert!(f.manifest_path().exists(), "an unusable ledger proves nothing");
    let out = output_within(f.command("apply"), QUICK);
    assert_success(&out);
    assert!(fs::symlink_metadata(&ledger).unwrap().is_file());

    // A directory where the ledger belongs: the same for every verb.
    fs::remove_file(&ledger).unwrap();
    fs::create_dir(&ledger).unwrap();
    let out = f.run("status", &[]);
    assert!(
        stdout(&out).contains("is unusable (unreadable: is a directory, not a regular file)"),
        "{}",
        stdout(&out)
    );
    assert_ne!(out.status.code(), Some(1), "status recovers like the other verbs");
    let out = f.apply();
    assert!(stdout(&out).contains("is a directory"), "{}", stdout(&out));
    assert!(fs::symlink_metadata(&ledger).unwrap().is_file());
}

/// Devices and oversized sources are refused while reading, fast and with the file named:
/// `/dev/zero` never fills memory, `/dev/null` never writes an empty credential.
#[test]
fn devices_and_oversized_sources_are_refused() {
    let f = Fixture::new();
    f.apply();
    let before = f.snapshot();
    let key = f.config_dir().join("apiserver.key");
    for device in ["/dev/zero", "/dev/null"] {
        fs::remove_file(&key).unwrap();
        symlink(device, &key).unwrap();
        let out = output_within(f.command("apply"), QUICK);
        assert_error(&out, &["apiserver.key", "is a character device, not a regular file"]);
        assert_eq!(f.snapshot(), before, "{device}");
    }
    fs::remove_file(&key).unwrap();
    f.source("apiserver.key", vec![b'k'; 16 * 1024 * 1024 + 1]);
    let out = output_within(f.command("apply"), QUICK);
    assert_error(&out, &["apiserver.key", "larger than the limit of 16777216 bytes"]);
    assert_eq!(f.snapshot(), before);
    // Exactly at the limit is fine.
    f.source("apiserver.key", vec![b'k'; 16 * 1024 * 1024]);
    f.apply();
    // Together the sources may hold 32 MiB (the last-known-good snapshot keeps them all).
    f.source("ca.crt", vec![b'c'; 16 * 1024 * 1024]);
    let before = f.snapshot();
    let out = output_within(f.command("apply"), QUICK);
    assert_error(
        &out,
        &[
            "kube-apiserver.yaml",
            "the sources together are larger than the limit of 33554432 bytes",
        ],
    );
    assert_eq!(f.snapshot(), before);
}

/// Two components, and the same component twice, applied at once on an empty node: directory
/// creation tolerates the other creator (the lock file's directory too).
#[test]
fn concurrent_first_runs_on_a_fresh_node_both_succeed() {
    for round in 0..15 {
        let f = Fixture::new();
        // A second component sharing every directory.
        let scheduler = f.config_dir().join("scheduler");
        fs::create_dir_all(&scheduler).unwrap();
        fs::write(scheduler.join("kc"), "KUBECONFIG\n").unwrap();
        fs::write(
            scheduler.join("pod.yaml"),
            MANIFEST.replace("kube-apiserver", "kube-scheduler"),
        )
        .unwrap();
        fs::write(
            scheduler.join("anchor.yaml"),
            "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata: {name: kube-scheduler}\nspec:\n  variables: [NODE_IP]\n  files:\n  - {source: kc, path: /etc/kubernetes/pki/scheduler.conf, mode: \"0600\"}\n  manifest: {source: pod.yaml, path: /etc/kubernetes/manifests/kube-scheduler.yaml}\n",
        )
        .unwrap();
        let mut other = std::process::Command::new(BIN);
        other
            .arg("apply")
            .arg("--config")
            .arg(scheduler.join("anchor.yaml"))
            .arg("--host-root")
            .arg(f.node())
            .env("NODE_IP", "10.0.0.10");
        let runs: Vec<_> = [f.command("apply"), other, f.command("apply")]
            .into_iter()
            .map(|mut c| {
                c.stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for run in runs {
            let out = run.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {}", stderr(&out));
        }
        assert_eq!(
            visible_files(&f.host("/etc/kubernetes/manifests")),
            ["kube-apiserver.yaml", "kube-scheduler.yaml"]
        );
    }
}

/// The state dir is kube-anchor's alone: config paths may not reach it, and a state dir of `/`
/// or above an allowed root is refused.
#[test]
fn the_state_dir_is_out_of_reach_of_configs() {
    let f = Fixture::new();
    f.apply();
    let before = f.snapshot();
    let good = fs::read_to_string(f.config()).unwrap();
    for target in [
        "/var/lib/kube-anchor/v1/kube-apiserver.json",
        "/var/lib/kube-anchor/v1/etcd.json",
    ] {
        f.set_config(&good.replace("/etc/kubernetes/pki/ca.crt", target));
        let out = f.run("apply", &[]);
        assert_error(&out, &["anchor.yaml", "spec.files[0].path", target, "state dir"]);
        assert_eq!(f.snapshot(), before);
    }
    f.set_config(&good);
    for state_dir in ["/", "/etc", "/etc/kubernetes"] {
        let out = f.run("apply", &["--state-dir", state_dir]);
        assert_error(&out, &["state dir", state_dir]);
        assert_eq!(f.snapshot(), before);
    }
}

/// The lock file is never opened through a symlink (that would create a file wherever it
/// points, outside the host root).
#[test]
fn a_symlinked_lock_file_is_refused() {
    let f = Fixture::new();
    f.apply();
    let outside = tempfile::tempdir().unwrap();
    let lock = f.host("/var/lib/kube-anchor/v1/kube-apiserver.lock");
    fs::remove_file(&lock).unwrap();
    symlink(outside.path().join("created"), &lock).unwrap();
    let out = f.run("apply", &[]);
    assert_error(&out, &["/var/lib/kube-anchor/v1/kube-apiserver.lock", "lock file"]);
    assert!(!outside.path().join("created").exists());
}

/// An unusable ledger found by `apply` is reported: where it went, and which files were adopted.
#[test]
fn apply_reports_a_ledger_it_set_aside_and_the_files_it_adopted() {
    let f = Fixture::new();
    f.apply();
    let ledger = f.host("/var/lib/kube-anchor/v1/kube-apiserver.json");
    fs::write(&ledger, "{garbage").unwrap();
    let out = f.apply();
    let text = stdout(&out);
    assert!(text.contains("kube-apiserver: adopted"), "{text}");
    assert!(
        text.contains("ledger /var/lib/kube-anchor/v1/kube-apiserver.json was unusable")
            && text.contains("moved to /var/lib/kube-anchor/v1/kube-apiserver.json.corrupt-"),
        "{text}"
    );
    assert_eq!(text.matches("  adopted    ").count(), 3, "{text}");
}

/// `status` reads the ledger as `apply` and `remove` do: another component's ledger at this
/// component's path proves nothing.
#[test]
fn status_does_not_trust_another_components_ledger() {
    let f = Fixture::new();
    let other = f.config_dir().join("other.yaml");
    let text = fs::read_to_string(f.config()).unwrap();
    fs::write(&other, text.replace("  name: kube-apiserver\n", "  name: other\n")).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["apply", "--config"])
        .arg(&other)
        .arg("--host-root")
        .arg(f.node())
        .env("NODE_IP", "10.0.0.10")
        .output()
        .unwrap();
    assert_success(&out);
    let state = f.host("/var/lib/kube-anchor/v1");
    fs::copy(state.join("other.json"), state.join("kube-apiserver.json")).unwrap();
    let out = f.run("status", &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("belongs to component \"other\""),
        "{}",
        stdout(&out)
    );
}

/// A manifest edited by hand is kept by `remove`, and so are the credentials its pod may read;
/// once the operator removes the manifest, `remove` takes the credentials.
#[test]
fn remove_keeps_the_credentials_of_a_hand_edited_manifest() {
    let f = Fixture::new();
    f.apply();
    let edited = f.read("/etc/kubernetes/manifests/kube-apiserver.yaml") + "# tuned by hand\n";
    fs::write(f.manifest_path(), &edited).unwrap();
    let out = f.run("remove", &[]);
    assert_success(&out);
    let text = stdout(&out);
    assert!(text.contains("0 file(s) removed"), "{text}");
    assert!(text.contains("/etc/kubernetes/pki/apiserver.key: kept, because /etc/kubernetes/manifests/kube-apiserver.yaml was changed by hand"), "{text}");
    assert_eq!(f.read("/etc/kubernetes/pki/apiserver.key"), "PRIVATE KEY\n");
    assert_eq!(f.read("/etc/kubernetes/manifests/kube-apiserver.yaml"), edited);
    fs::remove_file(f.manifest_path()).unwrap();
    let out = f.run("remove", &[]);
    assert_success(&out);
    assert_eq!(
        visible_files(&f.host("/etc/kubernetes/pki")),
        Vec::<String>::new(),
        "{}",
        stdout(&out)
    );
}

/// A deeply nested manifest is refused before parsing, in well under a second.
#[test]
fn deep_nesting_is_refused_fast() {
    let f = Fixture::new();
    f.source(
        "kube-apiserver.yaml",
        format!("{MANIFEST}  x: {}\n", "[".repeat(100_000)),
    );
    let start = std::time::Instant::now();
    let out = output_within(f.command("apply"), QUICK);
    assert_error(&out, &["kube-apiserver.yaml", "nests deeper than 1000 levels"]);
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

/// Manifests the kubelet refuses are refused before they replace a good one.
#[test]
fn manifests_the_kubelet_refuses_are_not_written() {
    let f = Fixture::new();
    f.apply();
    let before = f.snapshot();
    let cases = [
        (
            MANIFEST.replace(
                "name: kube-apiserver\n  namespace",
                "name: Kube_Apiserver!!\n  namespace",
            ),
            "metadata.name",
        ),
        (
            MANIFEST.replace("namespace: kube-system", "namespace: NOT VALID"),
            "metadata.namespace",
        ),
        (
            MANIFEST.replace("  - name: kube-apiserver\n", "  - name: BAD NAME\n"),
            "spec.containers[0].name",
        ),
        (
            MANIFEST.replace("    image: registry.k8s.io/kube-apiserver:v1.36.3\n", ""),
            "spec.containers[0].image",
        ),
        (
            MANIFEST.replace("spec:\n", "spec:\n  <<: {serviceAccountName: foo}\n"),
            "spec.<<",
        ),
    ];
    for (manifest, field) in cases {
        f.source("kube-apiserver.yaml", &manifest);
        assert_error(&f.run("apply", &[]), &["kube-apiserver.yaml", field]);
        assert_eq!(f.snapshot(), before, "{field}");
    }
}

#[test]
fn logs_written_to_a_file_or_pipe_carry_no_colour_codes() {
    // As in a pod, whose stderr goes to the runtime's log file: no NO_COLOR set.
    let f = Fixture::new();
    let out = f.command("apply").env_remove("NO_COLOR").arg("-v").output().unwrap();
    assert_success(&out);
    let err = stderr(&out);
    assert!(err.contains("INFO"), "info logs expected with -v:\n{err}");
    assert!(!err.contains('\u{1b}'), "escape codes in a piped log:\n{err:?}");
}

/// `KUBECONFIG=` (set but empty, as a shell profile may leave it) means no kubeconfig, as for
/// kubectl; it was a command-line error (exit 2) before any verb ran.
#[test]
fn an_empty_kubeconfig_variable_is_no_kubeconfig() {
    let f = Fixture::new();
    f.apply();
    let out = f.command("pre-stop").env("KUBECONFIG", "").output().unwrap();
    assert_success(&out);
    assert!(stdout(&out).contains("kube-apiserver: keep"), "{out:?}");
    assert!(f.host("/etc/kubernetes/manifests/kube-apiserver.yaml").exists());
}

/// A file kube-anchor replaces without having written it (an operator's own `pki/ca.crt`) is
/// kept in the state dir, private, before it is replaced, and `remove` puts it back with its
/// mode; a manifest that was there is kept too but not started again.
#[test]
fn a_replaced_file_kube_anchor_did_not_write_is_kept_and_put_back_by_remove() {
    let f = Fixture::new();
    fs::create_dir_all(f.host("/etc/kubernetes/pki")).unwrap();
    fs::create_dir_all(f.host("/etc/kubernetes/manifests")).unwrap();
    fs::write(f.host("/etc/kubernetes/pki/ca.crt"), "THE OPERATOR'S CA\n").unwrap();
    fs::set_permissions(f.host("/etc/kubernetes/pki/ca.crt"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::write(f.manifest_path(), "kubeadm's manifest\n").unwrap();
    let out = f.apply();
    let text = stdout(&out);
    assert!(text.contains("kept       /etc/kubernetes/pki/ca.crt"), "{text}");
    assert_eq!(f.read("/etc/kubernetes/pki/ca.crt"), "CA CERT\n");
    let kept_dir = f.host("/var/lib/kube-anchor/v1/originals/kube-apiserver");
    let kept: Vec<_> = fs::read_dir(&kept_dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(kept.len(), 2, "the CA and the manifest: {kept:?}");
    for k in &kept {
        assert_eq!(fs::metadata(k).unwrap().permissions().mode() & 0o777, 0o600, "{k:?}");
    }
    // A later change of the wanted content keeps the first original, not kube-anchor's own.
    f.source("ca.crt", "CA CERT 2\n");
    f.apply();
    let out = f.run("remove", &[]);
    assert_success(&out);
    let text = stdout(&out);
    assert!(text.contains("restored   /etc/kubernetes/pki/ca.crt"), "{text}");
    assert_eq!(f.read("/etc/kubernetes/pki/ca.crt"), "THE OPERATOR'S CA\n");
    assert_eq!(
        fs::metadata(f.host("/etc/kubernetes/pki/ca.crt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
    assert!(!f.host("/etc/kubernetes/pki/apiserver.key").exists());
    // The manifest is gone (the static pod stops), its original kept and named.
    assert!(!f.manifest_path().exists());
    let kept_manifest = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("kept").map(str::trim))
        .and_then(|l| l.split(':').next())
        .expect("the kept manifest is named");
    assert_eq!(
        fs::read_to_string(f.host(kept_manifest)).unwrap(),
        "kubeadm's manifest\n"
    );
    assert!(!f.host("/var/lib/kube-anchor/v1/kube-apiserver.json").exists());
}

/// The kept original gone from the state dir: the path is removed as before, and said.
#[test]
fn a_lost_original_is_reported_and_nothing_else_is_kept_back() {
    let f = Fixture::new();
    fs::create_dir_all(f.host("/etc/kubernetes/pki")).unwrap();
    fs::write(f.host("/etc/kubernetes/pki/ca.crt"), "THE OPERATOR'S CA\n").unwrap();
    f.apply();
    fs::remove_dir_all(f.host("/var/lib/kube-anchor/v1/originals")).unwrap();
    let out = f.run("remove", &[]);
    assert_success(&out);
    assert!(stdout(&out).contains("gone from the state dir"), "{}", stdout(&out));
    assert!(!f.host("/etc/kubernetes/pki/ca.crt").exists());
}

/// `apply --dry-run` prints what would change as a diff and changes nothing; a private file's
/// content never reaches stdout.
#[test]
fn dry_run_shows_a_diff_and_changes_nothing() {
    let f = Fixture::new();
    f.apply();
    f.source("ca.crt", "CA CERT ROTATED\n");
    f.source("apiserver.key", "NEW PRIVATE KEY\n");
    f.source("kube-apiserver.yaml", MANIFEST.replace("v1.36.3", "v1.36.4"));
    let before = f.snapshot();
    let out = f.run("apply", &["--dry-run"]);
    assert_success(&out);
    let text = stdout(&out);
    assert_eq!(f.snapshot(), before, "a dry run writes nothing");
    assert!(text.contains("3 change(s) would be made"), "{text}");
    assert!(
        text.contains("-CA CERT\n+CA CERT ROTATED"),
        "a certificate is shown: {text}"
    );
    assert!(
        text.contains(
            "-    image: registry.k8s.io/kube-apiserver:v1.36.3\n+    image: registry.k8s.io/kube-apiserver:v1.36.4"
        ),
        "the manifest is shown: {text}"
    );
    assert!(!text.contains("PRIVATE KEY"), "a key never: {text}");
    assert!(
        text.contains("content differs (not shown: mode 0600 -> 0600)"),
        "{text}"
    );
    let out = f.run("apply", &["--dry-run", "--output", "json"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["changes"].as_array().unwrap().len(), 3, "{doc}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PRIVATE KEY"));
    // Nothing to do: said so.
    f.apply();
    let out = f.run("apply", &["--dry-run"]);
    assert!(stdout(&out).contains("no changes"), "{}", stdout(&out));
}

/// `kube-anchor remove | head -1`: the reader goes away after one line. The verb still does
/// all its work and exits as it would have, instead of dying on the closed pipe halfway through
/// (the credentials left behind after the manifest is gone).
#[test]
fn a_closed_stdout_does_not_stop_a_verb_halfway() {
    for verb in ["apply", "remove", "status"] {
        let f = Fixture::new();
        if verb != "apply" {
            f.apply();
        }
        let mut child = f
            .command(verb)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader closes before the first line is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{verb}: {err}");
        assert_eq!(out.status.code(), Some(0), "{verb}: {err}");
        let manifest = f.host("/etc/kubernetes/manifests/kube-apiserver.yaml");
        let key = f.host("/etc/kubernetes/pki/apiserver.key");
        match verb {
            "remove" => assert!(!manifest.exists() && !key.exists(), "remove did all its work"),
            _ => assert!(manifest.exists() && key.exists(), "{verb}: files in place"),
        }
    }
}

/// `apply` and `rollback` judge the version skew policy on the node as `run` does before a
/// turn: a kube-controller-manager newer than the kube-apiserver beside it is refused (exit 1,
/// the versions named, nothing written), written with `--force`; a kube-apiserver rolled back
/// under the newer controller-manager is refused too.
#[test]
fn a_version_against_the_skew_policy_on_the_node_is_refused_unless_forced() {
    let f = Fixture::new();
    f.apply(); // kube-apiserver v1.36.3 (the fixture's image)
    let kcm = f.dir.path().join("kcm");
    fs::create_dir_all(&kcm).unwrap();
    fs::write(
        kcm.join("anchor.yaml"),
        "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata:\n  name: kube-controller-manager\nspec:\n  manifest:\n    source: kcm.yaml\n    path: /etc/kubernetes/manifests/kube-controller-manager.yaml\n",
    )
    .unwrap();
    let manifest = |version: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-controller-manager\n  namespace: kube-system\nspec:\n  hostNetwork: true\n  containers:\n  - name: kube-controller-manager\n    image: registry.k8s.io/kube-controller-manager:{version}\n    command: [kube-controller-manager, --leader-elect=true]\n"
        )
    };
    let apply =
        |config: &std::path::Path, extra: &[&str]| f.command_with("apply", config).args(extra).output().unwrap();
    let path = f.host("/etc/kubernetes/manifests/kube-controller-manager.yaml");
    fs::write(kcm.join("kcm.yaml"), manifest("v1.36.3")).unwrap();
    assert_success(&apply(&kcm.join("anchor.yaml"), &[]));

    // Newer than the node's kube-apiserver: refused, nothing written.
    fs::write(kcm.join("kcm.yaml"), manifest("v1.37.0")).unwrap();
    let before = fs::read(&path).unwrap();
    let out = apply(&kcm.join("anchor.yaml"), &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("kube-controller-manager: nothing written: version skew: kube-controller-manager 1.37 would be newer than kube-apiserver 1.36 (written on this node)")
            && err.contains("--force"),
        "{err}"
    );
    assert_eq!(fs::read(&path).unwrap(), before);
    // --force writes it, and says so.
    let out = apply(&kcm.join("anchor.yaml"), &["--force"]);
    assert_success(&out);
    assert!(
        stdout(&out).contains("--force: writing although version skew"),
        "{}",
        stdout(&out)
    );
    assert!(fs::read_to_string(&path).unwrap().contains("v1.37.0"));

    // kube-apiserver to 1.37 is allowed; back to 1.36 under the 1.37 controller-manager is not.
    f.source("kube-apiserver.yaml", MANIFEST.replace("v1.36.3", "v1.37.1"));
    f.apply();
    f.source("kube-apiserver.yaml", MANIFEST);
    let out = f.run("apply", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("kube-apiserver 1.36 would be older than kube-controller-manager 1.37"),
        "{err}"
    );
    assert!(
        f.read("/etc/kubernetes/manifests/kube-apiserver.yaml")
            .contains("v1.37.1")
    );
}
