//! Stamps the git commit into `kube-anchor --version`: `KUBE_ANCHOR_GIT_COMMIT` when set (a
//! build from a source archive), else `git rev-parse` of the checkout, else "unknown".

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=KUBE_ANCHOR_GIT_COMMIT");
    let commit = std::env::var("KUBE_ANCHOR_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".into());
    // Rebuild when HEAD moves: HEAD itself, the branch it points to, and packed refs. Only files
    // that exist: cargo takes a missing one for changed, and would rebuild on every invocation
    // (a commit writes the branch's loose ref, so HEAD moving is still seen).
    let mut watched = vec![
        git(&["rev-parse", "--git-path", "HEAD"]),
        git(&["rev-parse", "--git-path", "packed-refs"]),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rustc-env=KUBE_ANCHOR_GIT_COMMIT={commit}");
}
