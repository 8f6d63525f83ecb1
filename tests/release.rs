//! What a release ships: the version with its commit, shell completions and man pages from the
//! clap definitions, and a container image (tools/image.sh, no container engine) that really
//! contains a working binary and is the same, digest for digest, when built twice.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use support::fixture::BIN;
use support::processes::repo_root;

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Checks a `--version` line: the crate version and a commit of this repository that HEAD
/// contains (HEAD itself, unless a commit landed after the binary was built).
fn assert_version_line(line: &str) {
    let prefix = format!("kube-anchor {} (commit ", env!("CARGO_PKG_VERSION"));
    let commit = line
        .strip_prefix(&prefix)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line:?} is not \"{prefix}<commit>)\""));
    assert!(
        commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "{line:?}: not a commit"
    );
    let ancestor = Command::new("git")
        .args(["merge-base", "--is-ancestor", commit, "HEAD"])
        .current_dir(repo_root())
        .status()
        .unwrap();
    assert!(
        ancestor.success(),
        "{line:?}: {commit} is not in this checkout's history"
    );
}

#[test]
fn version_names_the_crate_version_and_the_commit() {
    assert_version_line(&stdout(&run(Command::new(BIN).arg("--version"))));
}

#[test]
fn completions_and_man_pages_come_from_the_cli_definition() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&run(Command::new(BIN).args(["completion", shell])));
        for verb in ["apply", "pre-stop", "checkpointer", "probe"] {
            assert!(script.contains(verb), "{shell} completion lacks {verb}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    run(Command::new(BIN).args(["man", "--out-dir"]).arg(dir.path()));
    let main = fs::read_to_string(dir.path().join("kube-anchor.1")).unwrap();
    assert!(main.starts_with(".ie") || main.contains(".TH KUBE-ANCHOR"), "{main}");
    let run_page = fs::read_to_string(dir.path().join("kube-anchor-run.1")).unwrap();
    assert!(run_page.contains("expect\\-inputs"), "the run page documents its flags");
    assert!(
        !dir.path().join("kube-anchor-man.1").exists(),
        "hidden verbs get no page"
    );
}

/// `tools/image.sh` with this build's binary into `out`; returns the digest it printed.
fn build_image(out: &Path) -> String {
    for tool in ["umoci", "skopeo"] {
        assert!(
            Command::new(tool)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success()),
            "the image test needs {tool} (apt-get install umoci skopeo; .ci/run installs them)"
        );
    }
    let out = run(Command::new(repo_root().join("tools/image.sh"))
        .arg("--binary")
        .arg(BIN)
        .arg("--out")
        .arg(out)
        .arg("--tag")
        .arg("test"));
    stdout(&out)
}

#[test]
fn the_image_is_reproducible_and_runs_its_binary_in_its_own_root() {
    let work = tempfile::tempdir().unwrap();
    let first = build_image(&work.path().join("one"));
    let second = build_image(&work.path().join("two"));
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
    assert_eq!(first, second, "two builds of the same commit give the same digest");
    assert_eq!(
        fs::read_to_string(work.path().join("one/kube-anchor-test.digest"))
            .unwrap()
            .trim(),
        first
    );

    // Unpack the archive (what a user would load) and run the entrypoint inside its root.
    let layout = work.path().join("unpacked");
    run(Command::new("skopeo")
        .arg("copy")
        .arg("--quiet")
        .arg(format!(
            "oci-archive:{}:test",
            work.path().join("one/kube-anchor-test.oci.tar").display()
        ))
        .arg(format!("oci:{}:test", layout.display())));
    let bundle = work.path().join("bundle");
    run(Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:test", layout.display()))
        .arg(&bundle));
    let rootfs = bundle.join("rootfs");
    let config: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(bundle.join("config.json")).unwrap()).unwrap();
    assert_eq!(config["process"]["args"][0], "/usr/local/bin/kube-anchor");
    assert_eq!(config["process"]["user"]["uid"], 65532, "non-root by default");
    let chroot = |args: &[&str]| {
        // Absolute: the environment is cleared, PATH included.
        let mut cmd = Command::new("/usr/sbin/chroot");
        cmd.arg(&rootfs)
            .arg("/usr/local/bin/kube-anchor")
            .args(args)
            .env_clear()
            .env("NODE_NAME", "cp-1")
            .env("NODE_IP", "10.0.0.10");
        cmd
    };
    assert_version_line(&stdout(&run(&mut chroot(&["--version"]))));
    // Shipped without its debug info (released beside it), symbols kept for backtraces.
    let shipped = rootfs.join("usr/local/bin/kube-anchor");
    let sections = stdout(&run(Command::new("readelf")
        .arg("--section-headers")
        .arg("--wide")
        .arg(&shipped)));
    assert!(!sections.contains(".debug_line"), "{sections}");
    assert!(
        sections.contains(".gnu_debuglink") && sections.contains(".symtab"),
        "{sections}"
    );
    assert!(fs::metadata(&shipped).unwrap().len() < fs::metadata(BIN).unwrap().len());

    // Nothing but the binary, its libraries, CA certificates and the user database.
    let example = rootfs.join("tmp/example");
    fs::create_dir_all(example.join("pki")).unwrap();
    let source = repo_root().join("examples/kube-apiserver");
    for name in ["anchor.yaml", "kube-apiserver.yaml"] {
        fs::copy(source.join(name), example.join(name)).unwrap();
    }
    for entry in fs::read_dir(source.join("pki")).unwrap() {
        let entry = entry.unwrap();
        fs::copy(entry.path(), example.join("pki").join(entry.file_name())).unwrap();
    }
    fs::create_dir_all(rootfs.join("tmp/node")).unwrap();
    let applied = stdout(&run(&mut chroot(&[
        "apply",
        "--config",
        "/tmp/example/anchor.yaml",
        "--host-root",
        "/tmp/node",
    ])));
    assert!(applied.contains("kube-apiserver: applied"), "{applied}");
    let manifest = fs::read_to_string(rootfs.join("tmp/node/etc/kubernetes/manifests/kube-apiserver.yaml")).unwrap();
    assert!(manifest.contains("--advertise-address=10.0.0.10"), "{manifest}");
    let top: Vec<String> = fs::read_dir(&rootfs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for dir in &top {
        assert!(
            ["etc", "lib", "lib64", "tmp", "usr"].contains(&dir.as_str()),
            "unexpected /{dir} in the image"
        );
    }
}

#[test]
fn charts_follow_the_crate_version_and_can_pin_the_image_by_digest() {
    use support::helm::*;
    let version = env!("CARGO_PKG_VERSION");
    for entry in fs::read_dir(repo_root().join("charts")).unwrap() {
        let chart = entry.unwrap().path().join("Chart.yaml");
        let Ok(text) = fs::read_to_string(&chart) else { continue };
        let meta: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(meta["version"].as_str(), Some(version), "{}", chart.display());
        if meta["type"] != "library" {
            assert_eq!(meta["appVersion"].as_str(), Some(version), "{}", chart.display());
        }
    }
    let image = |extra: &[&str]| {
        let docs = template(
            "rel",
            "kube-scheduler",
            &[&["--set", "credentials.scheduler\\.conf=kubeconfig"], extra].concat(),
        );
        of_kind(&docs, "DaemonSet")[0]["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(image(&[]), format!("kube-anchor/kube-anchor:{version}"));
    let digest = format!("sha256:{}", "ab".repeat(32));
    assert_eq!(
        image(&["--set", &format!("image.digest={digest}")]),
        format!("kube-anchor/kube-anchor@{digest}")
    );
    let dir = chart("kube-scheduler");
    let bad = helm(&["template", "rel", &dir, "--set", "image.digest=latest"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("digest"), "{bad:?}");
}

#[test]
fn the_release_script_packages_charts_completions_and_man_pages() {
    let out = tempfile::tempdir().unwrap();
    let listing = stdout(&run(Command::new(repo_root().join("tools/release.sh"))
        .arg("--binary")
        .arg(BIN)
        .arg("--no-image")
        .arg("--out")
        .arg(out.path())
        .env("HELM", support::processes::tool("helm"))));
    let version = env!("CARGO_PKG_VERSION");
    for file in [
        format!("./charts/kube-apiserver-{version}.tgz"),
        format!("./charts/etcd-{version}.tgz"),
        format!("./charts/pod-checkpointer-{version}.tgz"),
        "./charts/index.yaml".into(),
        "./completions/kube-anchor.bash".into(),
        "./man/kube-anchor-run.1".into(),
        "./kube-anchor.debug".into(),
    ] {
        assert!(listing.lines().any(|l| l == file), "{file} missing from:\n{listing}");
    }
    assert!(
        !listing.contains("kube-anchor-lib-"),
        "the library chart is not released alone"
    );
    let debug = stdout(&run(Command::new("readelf")
        .arg("--section-headers")
        .arg("--wide")
        .arg(out.path().join("kube-anchor.debug"))));
    assert!(debug.contains(".debug_line"), "the debug info is released: {debug}");
    let index = fs::read_to_string(out.path().join("charts/index.yaml")).unwrap();
    assert!(index.contains(&format!("appVersion: {version}")), "{index}");
}

/// On a terminal a one-shot verb prints one summary (stdout) and no info log repeating it;
/// `-v` or JSON logs add the info line (kubectl's convention).
#[test]
fn one_shot_verbs_print_a_summary_and_log_info_only_when_asked() {
    let f = support::fixture::Fixture::new();
    let quiet = f.run("apply", &[]);
    assert!(quiet.status.success());
    assert!(stdout(&quiet).starts_with("kube-apiserver: applied"), "{quiet:?}");
    assert_eq!(
        String::from_utf8_lossy(&quiet.stderr),
        "",
        "no log line repeats the summary"
    );
    let verbose = f.run("apply", &["-v"]);
    let err = String::from_utf8_lossy(&verbose.stderr);
    assert!(err.contains("INFO") && err.contains("applied"), "{err}");
    let json = f.run("apply", &["--log-format", "json"]);
    let line: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&json.stderr).lines().next().unwrap()).unwrap();
    assert_eq!(line["level"], "INFO");
}
