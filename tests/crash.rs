//! Crash safety and fault injection for the file writer, through the real binary.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::fixture::*;

const BIG: &str = "/etc/kubernetes/pki/big.bin";
const BIG_SIZE: usize = 4 * 1024 * 1024;

fn big_fixture() -> Fixture {
    let mut f = Fixture::new();
    f.files.push(("big.bin".into(), BIG.into(), "0600".into()));
    f.write_config();
    f
}

fn pattern(seed: u64) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..BIG_SIZE).map(|_| rng.u8(..)).collect()
}

fn temp_leftovers(f: &Fixture) -> Vec<String> {
    let mut out = Vec::new();
    for dir in [
        "/etc/kubernetes/pki",
        "/etc/kubernetes/manifests",
        "/var/lib/kube-anchor/v1",
    ] {
        for e in fs::read_dir(f.host(dir)).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            if name.ends_with(".kube-anchor.tmp") {
                out.push(format!("{dir}/{name}"));
            }
        }
    }
    out
}

/// SIGKILL at random moments while a multi-megabyte file is applied again and again: after
/// every kill the destination holds exactly the old or the new content, the manifest matches
/// one of the two versions, and no stray non-dot file appears.
#[test]
fn sigkill_during_apply_leaves_old_or_new_never_torn() {
    let f = big_fixture();
    let versions = [pattern(1), pattern(2)];
    let manifests: Vec<String> = versions
        .iter()
        .map(|v| {
            f.source("big.bin", v);
            f.apply();
            f.read("/etc/kubernetes/manifests/kube-apiserver.yaml")
        })
        .collect();
    assert_ne!(manifests[0], manifests[1]);

    // How long one apply of a changed big file takes here, to aim the kills inside it.
    let mut durations = Vec::new();
    for i in 0..5 {
        f.source("big.bin", &versions[i % 2]);
        let start = Instant::now();
        f.apply();
        durations.push(start.elapsed());
    }
    durations.sort();
    let window = durations[2].mul_f64(1.3).max(Duration::from_millis(2));

    let trials = 200;
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let (mut killed, mut saw_old, mut saw_new) = (0, 0, 0);
    let mut current = 1; // what the node holds now
    for trial in 0..trials {
        let next = 1 - current;
        f.source("big.bin", &versions[next]);
        let mut child = f
            .command("apply")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(window.mul_f64(rng.f64()));
        let _ = child.kill();
        let status = child.wait().unwrap();
        if status.signal() == Some(libc::SIGKILL) {
            killed += 1;
        }

        let big = fs::read(f.host(BIG)).unwrap();
        let holds = versions
            .iter()
            .position(|v| *v == big)
            .unwrap_or_else(|| panic!("trial {trial}: torn content ({} bytes)", big.len()));
        let manifest = f.read("/etc/kubernetes/manifests/kube-apiserver.yaml");
        assert!(manifests.contains(&manifest), "trial {trial}: torn manifest");
        if holds == next {
            saw_new += 1;
        } else {
            saw_old += 1;
        }
        current = holds;
        assert_eq!(
            visible_files(&f.host("/etc/kubernetes/manifests")),
            ["kube-apiserver.yaml"],
            "trial {trial}"
        );
        assert_eq!(
            visible_files(&f.host("/etc/kubernetes/pki")),
            ["apiserver.key", "big.bin", "ca.crt"],
            "trial {trial}"
        );
    }
    eprintln!(
        "{trials} trials: {killed} killed mid-run, {saw_old} left the old content, {saw_new} the new (window {window:?})"
    );
    assert!(
        killed >= trials / 5,
        "too few kills landed inside an apply ({killed}/{trials}): the test would prove nothing"
    );
    assert!(
        saw_old > 0 && saw_new > 0,
        "kills must land both before and after the rename"
    );

    // The next run cleans up our leftovers and converges.
    f.apply();
    assert_eq!(temp_leftovers(&f), Vec::<String>::new());
    assert_success(&f.run("status", &[]));
}

/// A write that fails part-way (the kernel's file size limit, EFBIG): the error names the file,
/// the exit code is 1, every host file stays as it was and no temp file is left.
#[test]
fn a_failing_write_keeps_the_old_files() {
    let f = big_fixture();
    f.source("big.bin", pattern(1));
    f.apply();
    let before = f.snapshot_files();
    f.source("ca.crt", "NEW CA\n"); // staged first, must not land either
    f.source("big.bin", pattern(2));
    let mut cmd = f.command("apply");
    unsafe {
        cmd.pre_exec(|| {
            // Ignored signals stay ignored across exec: writes past the limit fail with EFBIG.
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: 1024 * 1024,
                rlim_max: 1024 * 1024,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    assert_error(&out, &["/etc/kubernetes/pki/big.bin", "cannot write", "too large"]);
    assert_eq!(f.snapshot_files(), before);
}

/// A real full disk: the node is a 2 MiB tmpfs in a private mount namespace.
#[test]
fn a_full_disk_keeps_the_old_files() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test mounts a tmpfs and needs root (CI runs as root)");
    }
    let f = big_fixture();
    f.source("big.bin", vec![b'a'; 64 * 1024]);
    let node = f.node();
    let check = f.dir.path().join("after");
    fs::create_dir_all(&check).unwrap();
    let script = r#"set -eu
mount -t tmpfs -o size=2m tmpfs "$NODE"
"$BIN" apply --config "$CONFIG" --host-root "$NODE" >/dev/null 2>&1
cp -a "$NODE/." "$CHECK/before"
head -c 3000000 /dev/zero | tr '\0' b > "$SOURCE"
set +e
"$BIN" apply --config "$CONFIG" --host-root "$NODE" 2>"$CHECK/stderr"
echo $? > "$CHECK/code"
cp -a "$NODE/." "$CHECK/after"
"#;
    let status = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("NODE", &node)
        .env("BIN", BIN)
        .env("CONFIG", f.config())
        .env("CHECK", &check)
        .env("SOURCE", f.config_dir().join("big.bin"))
        .env("NODE_NAME", "cp-1")
        .env("NODE_IP", "10.0.0.10")
        .status()
        .expect("unshare(1) from util-linux");
    assert!(status.success(), "the namespace script failed: {status:?}");
    let code = fs::read_to_string(check.join("code")).unwrap();
    let stderr = fs::read_to_string(check.join("stderr")).unwrap();
    assert_eq!(code.trim(), "1", "{stderr}");
    assert!(
        stderr.contains("/etc/kubernetes/pki/big.bin") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    let strip = |m: std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32, u64, i64, i64)>| {
        // cp -a keeps content, mode and mtime; inodes differ between the two copies.
        m.into_iter()
            .map(|(p, (c, mode, _, s, ns))| (p, (c, mode, s, ns)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(snapshot_files(&check.join("after"))),
        strip(snapshot_files(&check.join("before")))
    );
}

/// Permission denied on the node: the error names the file and nothing changes.
#[test]
fn permission_denied_is_reported_and_changes_nothing() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test drops to an unprivileged user and needs root (CI runs as root)");
    }
    let f = Fixture::new();
    f.apply();
    f.source("ca.crt", "NEW CA\n");
    // The unprivileged user may read the inputs and use the state dir, nothing else.
    for dir in [f.dir.path().to_path_buf(), f.config_dir()] {
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    }
    for entry in fs::read_dir(f.config_dir()).unwrap() {
        fs::set_permissions(entry.unwrap().path(), fs::Permissions::from_mode(0o644)).unwrap();
    }
    let state = f.host("/var/lib/kube-anchor/v1");
    for p in [
        state.clone(),
        state.join("kube-apiserver.json"),
        state.join("kube-apiserver.lock"),
    ] {
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    }
    let before = f.snapshot_files();
    let mut cmd = f.command("apply");
    cmd.uid(65534).gid(65534);
    let out = cmd.output().unwrap();
    assert_error(&out, &["/etc/kubernetes/pki/", "Permission denied"]);
    assert_eq!(f.snapshot_files(), before);
}

/// The state dir on a full filesystem of its own (a tiny tmpfs) while the node's files have room:
/// the apply of a changed key fails before any rename (its intent cannot be recorded), the node
/// is exactly as it was, and once there is room again apply and `remove` leave nothing behind.
#[test]
fn a_full_state_dir_changes_nothing_and_remove_still_takes_everything() {
    if unsafe { libc::geteuid() } != 0 {
        panic!("this test mounts a tmpfs and needs root (CI runs as root)");
    }
    let f = Fixture::new();
    let node = f.node();
    let check = f.dir.path().join("after");
    fs::create_dir_all(&check).unwrap();
    let script = r#"set -eu
mkdir -p "$NODE/var/lib/kube-anchor"
mount -t tmpfs -o size=64k tmpfs "$NODE/var/lib/kube-anchor"
"$BIN" apply --config "$CONFIG" --host-root "$NODE" >/dev/null 2>&1
cp -a "$NODE/." "$CHECK/before"
dd if=/dev/zero of="$NODE/var/lib/kube-anchor/fill" bs=4096 >/dev/null 2>&1 || true
printf 'ROTATED KEY\n' > "$KEY"
set +e
"$BIN" apply --config "$CONFIG" --host-root "$NODE" 2>"$CHECK/stderr"
echo $? > "$CHECK/code"
rm "$NODE/var/lib/kube-anchor/fill"
cp -a "$NODE/." "$CHECK/after"
"$BIN" apply --config "$CONFIG" --host-root "$NODE" >"$CHECK/apply.out" 2>&1
echo $? >> "$CHECK/code"
"$BIN" remove --config "$CONFIG" --host-root "$NODE" >"$CHECK/remove.out" 2>&1
echo $? >> "$CHECK/code"
cp -a "$NODE/." "$CHECK/removed"
"#;
    let status = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("NODE", &node)
        .env("BIN", BIN)
        .env("CONFIG", f.config())
        .env("CHECK", &check)
        .env("KEY", f.config_dir().join("apiserver.key"))
        .env("NODE_NAME", "cp-1")
        .env("NODE_IP", "10.0.0.10")
        .status()
        .expect("unshare(1) from util-linux");
    assert!(status.success(), "the namespace script failed: {status:?}");
    let code = fs::read_to_string(check.join("code")).unwrap();
    let stderr = fs::read_to_string(check.join("stderr")).unwrap();
    let codes: Vec<&str> = code.lines().collect();
    assert_eq!(codes[0], "1", "{stderr}");
    assert!(
        stderr.contains("/var/lib/kube-anchor/v1/kube-apiserver.json") && stderr.contains("No space left on device"),
        "{stderr}"
    );
    let strip = |m: std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32, u64, i64, i64)>| {
        m.into_iter()
            .map(|(p, (c, mode, _, s, ns))| (p, (c, mode, s, ns)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        strip(snapshot_files(&check.join("after"))),
        strip(snapshot_files(&check.join("before"))),
        "exit 1 promises the node as it was"
    );
    let remove_out = fs::read_to_string(check.join("remove.out")).unwrap();
    assert_eq!(
        codes[1..],
        ["0", "0"],
        "{}",
        fs::read_to_string(check.join("apply.out")).unwrap()
    );
    for dir in ["etc/kubernetes/pki", "etc/kubernetes/manifests"] {
        assert_eq!(
            visible_files(&check.join("removed").join(dir)),
            Vec::<String>::new(),
            "{remove_out}"
        );
    }
}

/// SIGKILL at random moments of an apply of 100 changed files, then `remove` straight away
/// (no repairing apply in between): whatever the kill left, everything kube-anchor wrote goes.
#[test]
fn remove_after_a_killed_apply_takes_everything() {
    let mut f = Fixture::new();
    for i in 0..97 {
        f.files
            .push((format!("f{i}"), format!("/etc/kubernetes/pki/f{i}"), "0600".into()));
    }
    f.write_config();
    let version = |v: u8| {
        for i in 0..97 {
            f.source(&format!("f{i}"), format!("file {i} version {v}\n"));
        }
    };
    version(0);
    let mut durations = Vec::new();
    for v in 1..6u8 {
        version(v);
        let start = Instant::now();
        f.apply();
        durations.push(start.elapsed());
    }
    durations.sort();
    let window = durations[2].mul_f64(1.3);
    let mut rng = fastrand::Rng::with_seed(0xdead);
    let trials = 20;
    let mut killed = 0;
    for trial in 0..trials {
        version(0);
        f.apply();
        version(1);
        let mut child = f
            .command("apply")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(window.mul_f64(rng.f64()));
        let _ = child.kill();
        if child.wait().unwrap().signal() == Some(libc::SIGKILL) {
            killed += 1;
        }
        let out = f.run("remove", &[]);
        assert_success(&out);
        for dir in ["/etc/kubernetes/pki", "/etc/kubernetes/manifests"] {
            assert_eq!(
                visible_files(&f.host(dir)),
                Vec::<String>::new(),
                "trial {trial}: {}",
                stdout(&out)
            );
        }
    }
    eprintln!("{trials} trials, {killed} killed mid-apply (window {window:?})");
    assert!(
        killed >= trials / 5,
        "too few kills landed inside an apply: {killed}/{trials}"
    );
}
