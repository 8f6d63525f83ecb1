//! A checkpointed self-hosted component on a self-hosted control plane: the pod-checkpointer
//! chart's values and a second kube-scheduler run by a DaemonSet on the host network and
//! annotated for checkpointing, with what the nodes show of both (checkpoint files, processes).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use k8s_openapi::api::apps::v1::DaemonSet;
use kube::api::Api;

use super::selfhosted::{SelfHosted, files_under};

/// The component's name (its DaemonSet's, Secret's and ConfigMap's, and its scheduler name).
pub const COMPONENT: &str = "selfhosted-scheduler";
/// The port it serves on, at the node's address.
pub const PORT: u16 = 10261;
/// The container env var that carries the template's version (a checkpoint keeps a pod's
/// containers, not its annotations).
pub const VERSION_ENV: &str = "TEMPLATE_VERSION";

/// The pod-checkpointer chart's values: the kubelet on the node's own address, every node's API
/// server, windows short enough for a test.
pub fn checkpointer_values(cluster: &SelfHosted) -> String {
    let servers: Vec<String> = cluster.nodes.iter().map(|n| format!("https://{}:6443", n.ip)).collect();
    format!(
        "checkpointer:\n  kubeletURL: https://$(HOST_IP):10250\n  apiServers: [{}]\n  \
         readyWindow: 5s\n  stableWindow: 20s\n  handoffTimeout: 30s\n  retireGrace: 20s\n  \
         interval: 2s\n  port: 0\n  logFormat: plain\n",
        servers.join(", ")
    )
}

/// The self-hosted component: a kube-scheduler of its own name (so it schedules nothing of the
/// others'), no leader election, serving on the node's address at [`PORT`]; `version` in its
/// container's [`VERSION_ENV`] (a new one rolls the DaemonSet).
pub fn component_objects(cluster: &SelfHosted, version: u32) -> String {
    let kubeconfig = fs::read_to_string(cluster.dir.join("pki/scheduler.conf"))
        .unwrap()
        // The example's kubeconfig is a template the anchors render; this one talks to the
        // first node's API server (the component needs no API to hold its port).
        .replace("${NODE_IP}", &cluster.nodes[0].ip);
    let indented: String = kubeconfig.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: {COMPONENT}-kubeconfig, namespace: kube-system}}
stringData:
  scheduler.conf: |
{indented}---
apiVersion: v1
kind: ConfigMap
metadata: {{name: {COMPONENT}-config, namespace: kube-system}}
data:
  config.yaml: |
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    clientConnection: {{kubeconfig: /etc/{COMPONENT}/kubeconfig/scheduler.conf}}
    leaderElection: {{leaderElect: false}}
    profiles: [{{schedulerName: {COMPONENT}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: {COMPONENT}, namespace: kube-system}}
spec:
  selector: {{matchLabels: {{app: {COMPONENT}}}}}
  template:
    metadata:
      labels: {{app: {COMPONENT}}}
      annotations: {{checkpointer.alpha.coreos.com/checkpoint: "true"}}
    spec:
      hostNetwork: true
      # Not root: its checkpointed Secret is then given to another user, which the
      # checkpointer (CHOWN alone, enforced by the process runtime) must manage.
      securityContext: {{runAsUser: 65534, runAsGroup: 65534}}
      nodeSelector: {{node-role.kubernetes.io/control-plane: ""}}
      tolerations: [{{operator: Exists}}]
      terminationGracePeriodSeconds: 5
      containers:
        - name: scheduler
          image: registry.k8s.io/kube-scheduler:v1.36.3
          command:
            - kube-scheduler
            - --config=/etc/{COMPONENT}/config/config.yaml
            - --bind-address=$(HOST_IP)
            - --secure-port={PORT}
          env:
            - {{name: HOST_IP, valueFrom: {{fieldRef: {{fieldPath: status.hostIP}}}}}}
            - {{name: {VERSION_ENV}, value: "{version}"}}
          readinessProbe:
            httpGet: {{path: /healthz, port: {PORT}, scheme: HTTPS}}
            periodSeconds: 2
          volumeMounts:
            - {{name: kubeconfig, mountPath: /etc/{COMPONENT}/kubeconfig, readOnly: true}}
            - {{name: config, mountPath: /etc/{COMPONENT}/config, readOnly: true}}
      volumes:
        - {{name: kubeconfig, secret: {{secretName: {COMPONENT}-kubeconfig}}}}
        - {{name: config, configMap: {{name: {COMPONENT}-config}}}}
"#
    )
}

/// The component's checkpoint files on a node (`<dir>/<name>` for the inactive manifests and the
/// secret and configmap trees, relative to /etc/kubernetes), and whether one is active.
pub fn checkpoint_files(host: &Path) -> (BTreeSet<String>, bool) {
    let kubernetes = host.join("etc/kubernetes");
    let mut files = BTreeSet::new();
    for dir in ["inactive-manifests", "checkpoint-secrets", "checkpoint-configmaps"] {
        for f in files_under(&kubernetes.join(dir)) {
            let rel = f.strip_prefix(&kubernetes).unwrap().display().to_string();
            if rel.contains(COMPONENT) {
                files.insert(rel);
            }
        }
    }
    let active = fs::read_dir(kubernetes.join("manifests"))
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("kube-system-{COMPONENT}"))
            })
        })
        .unwrap_or(false);
    (files, active)
}

/// Whether a checkpoint file (a path under a node's /etc/kubernetes) belongs to the kube-system
/// pod `pod`: `<ns>-<pod>.json` in a manifest directory, or in `<ns>/<pod>/` of a secret or
/// configmap tree.
pub fn checkpoint_of(path: &Path, pod: &str) -> bool {
    let manifest = format!("kube-system-{pod}.json");
    let components: Vec<String> = path
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    components.last().is_some_and(|name| *name == manifest)
        || components.windows(2).any(|w| w[0] == "kube-system" && w[1] == pod)
}

/// Whether the file is one the checkpointer writes (a checkpoint's manifest, active or not, or
/// its secret and configmap trees).
pub fn is_checkpoint_file(path: &Path) -> bool {
    let s = path.to_string_lossy();
    [
        "/inactive-manifests/",
        "/checkpoint-secrets/",
        "/checkpoint-configmaps/",
    ]
    .iter()
    .any(|d| s.contains(d))
        || path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("kube-system-"))
}

/// The [`VERSION_ENV`] of the checkpointed pod `pod` in a node's inactive manifest, if it has one.
pub fn checkpointed_version(host: &Path, pod: &str) -> Option<String> {
    let path = host
        .join("etc/kubernetes/inactive-manifests")
        .join(format!("kube-system-{pod}.json"));
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(path).ok()?).ok()?;
    manifest["spec"]["containers"]
        .as_array()?
        .iter()
        .flat_map(|c| c["env"].as_array().into_iter().flatten())
        .find(|e| e["name"] == VERSION_ENV)
        .and_then(|e| e["value"].as_str().map(str::to_owned))
}

/// Whether the checkpointer's own checkpoint is in the node's static pod directory.
pub fn self_checkpoint_active(host: &Path) -> bool {
    fs::read_dir(host.join("etc/kubernetes/manifests"))
        .map(|d| {
            d.flatten().any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("kube-system-pod-checkpointer-")
            })
        })
        .unwrap_or(false)
}

/// Processes of the component serving on `ip` (its port bound there), from /proc.
pub fn component_processes(ip: &str) -> usize {
    let bind = format!("--bind-address={ip}");
    let port = format!("--secure-port={PORT}");
    fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().chars().all(|c| c.is_ascii_digit()))
        .filter(|e| {
            let cmdline = fs::read(e.path().join("cmdline")).unwrap_or_default();
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            args.contains(&bind) && args.contains(&port)
        })
        .count()
}

/// Why DaemonSet `name` does not have its latest generation on `nodes` nodes, every pod Ready
/// (`None`: it does).
pub async fn daemonset_not_ready(client: &kube::Client, name: &str, nodes: i32) -> Option<String> {
    let api: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let ds = match api.get_opt(name).await {
        Ok(Some(ds)) => ds,
        Ok(None) => return Some(format!("DaemonSet {name} missing")),
        Err(e) => return Some(format!("DaemonSet {name}: {e}")),
    };
    let Some(s) = ds.status else {
        return Some(format!("DaemonSet {name}: no status"));
    };
    (s.observed_generation != ds.metadata.generation
        || s.desired_number_scheduled != nodes
        || s.number_ready != nodes
        || s.updated_number_scheduled != Some(nodes))
    .then(|| {
        format!(
            "DaemonSet {name}: desired {} (expected {nodes}), ready {}, updated {:?}",
            s.desired_number_scheduled, s.number_ready, s.updated_number_scheduled
        )
    })
}
