//! The local OCI registry of the containerd nodes (distribution, `tools/bin/registry`, on a
//! loopback port; plain HTTP, as containerd allows for a loopback host) and the images they pull
//! from it by digest: kube-anchor's release image (`tools/image.sh`, from this build's binary),
//! the test components (`tools/component-image.sh`) and the pause image of every pod sandbox.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::poll::Poll;
use super::processes::{Process, free_port, repo_root, tool};

pub struct Registry {
    /// `127.0.0.1:<port>`, the host part of every image reference it serves.
    pub addr: String,
    dir: PathBuf,
    _process: Process,
}

impl Registry {
    /// Starts a registry storing its blobs under `dir`; returns once it answers.
    pub fn start(dir: &Path) -> Self {
        let addr = format!("127.0.0.1:{}", free_port());
        fs::create_dir_all(dir).unwrap();
        let config = dir.join("registry.yaml");
        fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage: {{filesystem: {{rootdirectory: {}}}}}\nhttp: {{addr: \"{addr}\"}}\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(tool("registry"));
        cmd.arg("serve").arg(&config);
        let process = Process::start("registry", cmd, dir);
        let url = format!("http://{addr}/v2/");
        Poll::new(Duration::from_secs(30), format!("the registry at {addr}"))
            .every(Duration::from_millis(100))
            .until(|| {
                Command::new("curl")
                    .args(["-fsS", "-o", "/dev/null", &url])
                    .status()
                    .is_ok_and(|s| s.success())
            });
        Self {
            addr,
            dir: dir.to_owned(),
            _process: process,
        }
    }

    /// Pushes the image tagged `tag` in the OCI layout `layout` as `<repository>:<tag>`, its
    /// digest kept (skopeo), and returns the reference by digest: `<addr>/<repository>@sha256:…`.
    pub fn push(&self, layout: &Path, tag: &str, repository: &str) -> String {
        let target = format!("docker://{}/{repository}:{tag}", self.addr);
        run(Command::new("skopeo").args([
            "copy",
            "--quiet",
            "--preserve-digests",
            "--dest-tls-verify=false",
            &format!("oci:{}:{tag}", layout.display()),
            &target,
        ]));
        format!("{}/{repository}@{}", self.addr, layout_digest(layout))
    }

    /// Builds the image of a test component (`tools/component-image.sh`) whose entrypoint is
    /// `binary` named `name`, pushes it and returns its reference by digest.
    pub fn push_component(&self, name: &str, binary: &Path) -> String {
        let layout = self.dir.join("layouts").join(name);
        run(Command::new(repo_root().join("tools/component-image.sh"))
            .arg(name)
            .arg(binary)
            .arg(&layout));
        self.push(&layout, "latest", name)
    }

    /// Builds kube-anchor's release image from this build's binary (`tools/image.sh`), pushes it
    /// and returns its reference by digest.
    pub fn push_kube_anchor(&self) -> String {
        let out = self.dir.join("layouts/kube-anchor");
        run(Command::new(repo_root().join("tools/image.sh"))
            .arg("--binary")
            .arg(env!("CARGO_BIN_EXE_kube-anchor"))
            .arg("--out")
            .arg(&out)
            .args(["--tag", "test"]));
        self.push(&out.join("layout"), "test", "kube-anchor")
    }
}

/// The manifest digest of the single image of an OCI layout.
fn layout_digest(layout: &Path) -> String {
    let index: serde_json::Value = serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"][0]["digest"].as_str().unwrap().to_owned()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
