//! `kube-anchor run` against hostile inputs: a FIFO where a source should be is a counted,
//! reported sync error, never a wedged loop; it stops a new version, not the repair of the one
//! the node runs.

mod support;

use std::fs;
use std::time::Duration;

use support::daemon::*;

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler, namespace: kube-system}\nspec:\n  containers: [{name: s, image: 'registry.k8s.io/kube-scheduler:v1.36.3'}]\n";
const MANIFEST: &str = "etc/kubernetes/manifests/kube-scheduler.yaml";
const WAIT: Duration = Duration::from_secs(10);

#[test]
fn a_fifo_source_is_a_counted_sync_error_not_a_hang_and_repair_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node");
    fs::create_dir_all(&node).unwrap();
    let config = anchor_config(
        "kube-scheduler",
        &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
        "/etc/kubernetes/manifests/kube-scheduler.yaml",
    );
    let volume = ConfigVolume::new(
        &dir.path().join("config"),
        &[
            ("anchor.yaml", config.as_bytes()),
            ("pod.yaml", POD.as_bytes()),
            ("scheduler.conf", b"kubeconfig"),
        ],
    );
    let d = Daemon::start(
        &volume.config(),
        &node,
        "cp-1",
        &["--resync-period".into(), "1s".into()],
        &dir.path().join("daemon.log"),
    );
    let manifest = node.join(MANIFEST);
    wait_until(WAIT, "the first apply", &d, || manifest.exists());
    let written = fs::read(&manifest).unwrap();

    // The source becomes a FIFO nobody writes to, and the manifest is deleted on the host.
    let source = fs::canonicalize(volume.dir.join("scheduler.conf")).unwrap();
    fs::remove_file(&source).unwrap();
    let c = std::ffi::CString::new(source.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    fs::remove_file(&manifest).unwrap();
    wait_until(
        WAIT,
        "the deleted manifest to be restored while the source is stuck",
        &d,
        || fs::read(&manifest).is_ok_and(|m| m == written),
    );
    assert!(d.metric("kube_anchor_sync_errors_total") >= 1.0);
    assert!(
        d.log_text().contains("is a FIFO, not a regular file"),
        "{}",
        d.log_text()
    );
    assert_eq!(d.get("/healthz").unwrap().0, 200, "the loop is alive");
    wait_until(WAIT, "readiness to name the stuck input", &d, || {
        d.get("/readyz")
            .is_some_and(|(code, body)| code == 503 && body.contains("scheduler.conf") && body.contains("FIFO"))
    });
    let errors = d.metric("kube_anchor_sync_errors_total");
    wait_until(WAIT, "every resync to fail again, not to hang", &d, || {
        d.metric("kube_anchor_sync_errors_total") > errors
    });

    // A regular file again: the sync error clears.
    fs::remove_file(&source).unwrap();
    fs::write(&source, "kubeconfig").unwrap();
    wait_until(WAIT, "readiness to stop naming the input", &d, || {
        d.get("/readyz").is_some_and(|(_, body)| !body.contains("FIFO"))
    });
    assert_eq!(fs::read(&manifest).unwrap(), written);
}
