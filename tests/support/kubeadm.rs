//! Control-plane nodes made by the real kubeadm of the pinned release (tools/bin/kubeadm): its
//! `init phase` certs, kubeconfig, control-plane and etcd steps, run with `--rootfs`.

#![allow(dead_code)]

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_yaml_ng::Value;

use super::processes::tool;

pub struct KubeadmNode {
    pub name: String,
    pub ip: String,
    /// The directory that plays the node's `/`.
    pub root: PathBuf,
}

impl KubeadmNode {
    pub fn manifest(&self, component: &str) -> Value {
        let path = self.root.join(format!("etc/kubernetes/manifests/{component}.yaml"));
        serde_yaml_ng::from_str(&fs::read_to_string(path).unwrap()).unwrap()
    }

    pub fn file(&self, host_path: &str) -> Vec<u8> {
        fs::read(self.root.join(host_path.trim_start_matches('/'))).unwrap()
    }
}

pub fn run_ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A control-plane node's /etc/kubernetes as `kubeadm init` writes it (below `root`). With
/// `shared_from`, the cluster-wide keys (CAs, service-account key) are copied from that node
/// first, as `kubeadm join --control-plane` does, so kubeadm signs this node's own certificates
/// with them.
///
/// kubeadm refuses a loopback advertise address, and the test bed's nodes that really run live
/// on loopback addresses (127.0.0.0/8 is all a test may contact). For a loopback `ip`, kubeadm
/// is given a documentation address (192.0.2.x, TEST-NET-1, never contacted) with `ip` added to
/// every serving certificate's names, and that address is then replaced by `ip` in the
/// manifests and kubeconfigs kubeadm wrote: the one change to kubeadm's output.
pub fn kubeadm_node(root: &Path, name: &str, ip: &str, shared_from: Option<&KubeadmNode>) -> KubeadmNode {
    kubeadm_node_with(root, name, ip, shared_from, "")
}

/// [`kubeadm_node`] with more of ClusterConfiguration's `apiServer` (flow-mapping entries, e.g.
/// `extraArgs: [...], extraVolumes: [...]`).
pub fn kubeadm_node_with(
    root: &Path,
    name: &str,
    ip: &str,
    shared_from: Option<&KubeadmNode>,
    api_server: &str,
) -> KubeadmNode {
    fs::create_dir_all(root).unwrap();
    if let Some(first) = shared_from {
        for f in [
            "ca.crt",
            "ca.key",
            "sa.key",
            "sa.pub",
            "front-proxy-ca.crt",
            "front-proxy-ca.key",
            "etcd/ca.crt",
            "etcd/ca.key",
        ] {
            let to = root.join("etc/kubernetes/pki").join(f);
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(first.root.join("etc/kubernetes/pki").join(f), &to).unwrap();
        }
    }
    let parsed: Ipv4Addr = ip.parse().unwrap();
    let (advertise, sans) = if parsed.is_loopback() {
        let stand_in = format!("192.0.2.{}", parsed.octets()[3]);
        (stand_in, format!("[{ip}]"))
    } else {
        (ip.to_owned(), "[]".to_owned())
    };
    let sep = if api_server.is_empty() { "" } else { ", " };
    // kubeadm chroots into --rootfs before it reads the config, so the config lives inside the
    // root.
    fs::write(
        root.join("kubeadm.yaml"),
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n\
             localAPIEndpoint: {{advertiseAddress: {advertise}, bindPort: 6443}}\n\
             nodeRegistration: {{name: {name}, criSocket: unix:///run/containerd/containerd.sock}}\n\
             ---\napiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\n\
             kubernetesVersion: v1.36.3\n\
             apiServer: {{certSANs: {sans}{sep}{api_server}}}\n\
             etcd: {{local: {{serverCertSANs: {sans}, peerCertSANs: {sans}}}}}\n\
             networking: {{serviceSubnet: 10.96.0.0/12, podSubnet: 10.244.0.0/16}}\n"
        ),
    )
    .unwrap();
    for phase in [
        &["certs", "all"][..],
        &["kubeconfig", "all"],
        &["control-plane", "all"],
        &["etcd", "local"],
    ] {
        let mut args = vec!["init", "phase"];
        args.extend(phase);
        args.extend(["--config", "/kubeadm.yaml", "--rootfs", root.to_str().unwrap()]);
        run_ok(
            Command::new(tool("kubeadm")).args(&args).output().unwrap(),
            &format!("kubeadm {args:?}"),
        );
    }
    fs::remove_file(root.join("kubeadm.yaml")).unwrap();
    if advertise != ip {
        let kubernetes = root.join("etc/kubernetes");
        let manifests = fs::read_dir(kubernetes.join("manifests")).unwrap();
        let kubeconfigs = fs::read_dir(&kubernetes).unwrap();
        for entry in manifests.chain(kubeconfigs) {
            let path = entry.unwrap().path();
            if path.is_file() {
                let text = fs::read_to_string(&path).unwrap();
                if text.contains(&advertise) {
                    fs::write(&path, text.replace(&advertise, ip)).unwrap();
                }
            }
        }
    }
    KubeadmNode {
        name: name.into(),
        ip: ip.into(),
        root: root.into(),
    }
}
