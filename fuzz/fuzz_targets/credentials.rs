//! The credential checks on arbitrary bytes: the input is cut into a certificate, its key and a
//! kubeconfig (at the first two NUL bytes); `credentials::check` never panics, whatever PEM,
//! DER, base64 or YAML it is given, nor does `credentials::renewed_on_node` with those parts as
//! what the node holds in place of each other.
#![no_main]

use kube_anchor_core::credentials::{Context, File, Held, check, renewed_on_node};
use kube_anchor_core::hostpath::HostPath;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == 0);
    let (cert, key, kubeconfig) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let paths = [
        HostPath::parse("/etc/kubernetes/pki/apiserver.crt").unwrap(),
        HostPath::parse("/etc/kubernetes/pki/apiserver.key").unwrap(),
        HostPath::parse("/etc/kubernetes/scheduler.conf").unwrap(),
        HostPath::parse("/etc/kubernetes/manifests/kube-apiserver.yaml").unwrap(),
    ];
    let files = [
        File { path: &paths[0], content: cert, changes: true },
        File { path: &paths[1], content: key, changes: true },
        File { path: &paths[2], content: kubeconfig, changes: true },
    ];
    let manifest = File {
        path: &paths[3],
        content: b"command: [--advertise-address=10.0.0.1, --tls-cert-file=/etc/kubernetes/pki/apiserver.crt]",
        changes: true,
    };
    let on_node = |_: &HostPath| Some(cert.to_vec());
    let _ = check(
        &files,
        &manifest,
        &Context { now: 1_800_000_000, node_ip: Some("10.0.0.1".parse().unwrap()), on_node: &on_node },
    );
    let held = [
        Held { path: &paths[0], wanted: cert, on_node: Some(key) },
        Held { path: &paths[1], wanted: key, on_node: Some(cert) },
        Held { path: &paths[2], wanted: kubeconfig, on_node: Some(cert) },
    ];
    let _ = renewed_on_node(&held, 1_800_000_000);
});
