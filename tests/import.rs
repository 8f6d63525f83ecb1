//! `kube-anchor import` on nodes made by the real kubeadm of the pinned release (tools/bin/kubeadm,
//! its `init phase` certs, kubeconfig, control-plane and etcd steps run with `--rootfs` into a
//! temporary directory), rendered by the real helm with the project's charts: the static pods
//! run kubeadm's command lines, the Secrets hold kubeadm's files byte for byte, and `kube-anchor
//! apply` of the rendered inputs onto the kubeadm node rewrites none of its files.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output};

use kube_anchor_core::render::{Variables, render};
use serde_yaml_ng::Value;
use support::fixture::BIN;
use support::helm::*;
use support::kubeadm::{KubeadmNode, kubeadm_node, kubeadm_node_with, run_ok};
use support::kubectl::kubectl_ok;

const COMPONENTS: [&str; 4] = ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"];

fn import(args: &[&str]) -> Output {
    Command::new(BIN).arg("import").args(args).output().unwrap()
}

fn container(pod: &Value) -> &Value {
    &pod["spec"]["containers"][0]
}

fn command(pod: &Value) -> Vec<String> {
    serde_yaml_ng::from_value(container(pod)["command"].clone()).unwrap()
}

/// The host paths kubeadm's pod names that are files under /etc/kubernetes on the node: its
/// absolute flag values and its file hostPath volumes (found here from the manifest itself).
fn named_files(node: &KubeadmNode, pod: &Value) -> BTreeSet<String> {
    let mut paths: BTreeSet<String> = command(pod)
        .iter()
        .filter_map(|a| a.split_once('=').map(|(_, v)| v.to_owned()))
        .collect();
    for v in pod["spec"]["volumes"].as_sequence().unwrap() {
        paths.insert(v["hostPath"]["path"].as_str().unwrap().to_owned());
    }
    paths
        .into_iter()
        .filter(|p| p.starts_with("/etc/kubernetes/") && node.root.join(&p[1..]).is_file())
        .collect()
}

/// One chart rendered with the import's values, as one node's anchor pod sees it.
struct NodeInputs {
    config: BTreeMap<String, Vec<u8>>,
    secrets: BTreeMap<String, Vec<u8>>,
}

fn rendered(values: &Path, chart_name: &str, node: &str) -> NodeInputs {
    let docs = template("imported", chart_name, &["-f", values.to_str().unwrap()]);
    let config = configmap_files(of_kind(&docs, "ConfigMap")[0]);
    // The shared Secret and this node's own (the chart's per-node DaemonSet projects both).
    let secrets: Vec<&Value> = of_kind(&docs, "Secret")
        .into_iter()
        .filter(|s| {
            s["metadata"]["labels"]["kube-anchor.io/node"]
                .as_str()
                .is_none_or(|n| n == node)
        })
        .collect();
    // Credentials never reach the ConfigMap.
    let cm_text = serde_yaml_ng::to_string(of_kind(&docs, "ConfigMap")[0]).unwrap();
    assert!(!cm_text.contains("PRIVATE KEY"), "{chart_name}: a key in the ConfigMap");
    NodeInputs {
        config,
        secrets: secret_files(secrets),
    }
}

/// The anchor's config: (source name, host path, mode) of each file.
fn anchor_files(inputs: &NodeInputs) -> Vec<(String, String, String)> {
    let anchor: Value = serde_yaml_ng::from_slice(&inputs.config["anchor.yaml"]).unwrap();
    anchor["spec"]["files"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["source"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("../secrets/")
                    .to_owned(),
                f["path"].as_str().unwrap().to_owned(),
                f["mode"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The static pod the anchor would write on `node`: pod.yaml rendered with its variables.
fn rendered_pod(inputs: &NodeInputs, node: &KubeadmNode) -> Value {
    let vars = Variables::new(["NODE_NAME", "NODE_IP"], |n| {
        Some(if n == "NODE_NAME" {
            node.name.clone()
        } else {
            node.ip.clone()
        })
    });
    let text = render(Path::new("pod.yaml"), &inputs.config["pod.yaml"], &vars).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// A pod's hostPath mounts: (host path, mount path), sorted. (The charts' own mounts may be
/// read-only where kubeadm's are not, e.g. etcd's certificates.)
fn host_mounts(pod: &Value) -> Vec<(String, String)> {
    host_mounts_rw(pod).into_iter().map(|(h, m, _)| (h, m)).collect()
}

/// [`host_mounts`] with each mount's read-only flag.
fn host_mounts_rw(pod: &Value) -> Vec<(String, String, bool)> {
    let volumes = pod["spec"]["volumes"].as_sequence().cloned().unwrap_or_default();
    let mounts = container(pod)["volumeMounts"]
        .as_sequence()
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<(String, String, bool)> = mounts
        .iter()
        .filter_map(|m| {
            let volume = volumes.iter().find(|v| v["name"] == m["name"])?;
            Some((
                volume["hostPath"]["path"].as_str()?.to_owned(),
                m["mountPath"].as_str()?.to_owned(),
                m["readOnly"].as_bool().unwrap_or(false),
            ))
        })
        .collect();
    out.sort();
    out
}

/// For every chart and node: the rendered static pod runs kubeadm's image and flags, and the
/// Secrets hold every file kubeadm's pod names, byte for byte, at the same path and mode.
fn assert_charts_reproduce(nodes: &[&KubeadmNode], out: &Path, etcd_flags_may_differ: &[&str]) {
    for component in COMPONENTS {
        let values = out.join(format!("{component}.yaml"));
        let mode = fs::metadata(&values).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", values.display());
        for node in nodes {
            let inputs = rendered(&values, component, &node.name);
            let kubeadm = node.manifest(component);
            let pod = rendered_pod(&inputs, node);
            assert_eq!(container(&pod)["image"], container(&kubeadm)["image"], "{component}");
            // Sorted, not a set: a flag given twice would show.
            let flags = |p: &Value| -> Vec<String> {
                let mut f: Vec<String> = command(p)
                    .into_iter()
                    .skip(1)
                    .filter(|f| !etcd_flags_may_differ.iter().any(|d| f.starts_with(&format!("--{d}="))))
                    .collect();
                f.sort();
                f
            };
            assert_eq!(command(&pod)[0], command(&kubeadm)[0], "{component}: the binary");
            // Every directory kubeadm's pod sees from the host, the chart's sees at the same
            // place (the chart's own mounts, or the ones import carried); the chart may mount
            // more of its own (the apiserver's encryption config dir).
            let charts = host_mounts(&pod);
            for mount in host_mounts(&kubeadm) {
                assert!(
                    charts.contains(&mount),
                    "{component} on {}: {mount:?} not in {charts:?}",
                    node.name
                );
            }
            assert_eq!(flags(&pod), flags(&kubeadm), "{component} on {}: flags", node.name);

            let files = anchor_files(&inputs);
            let paths: BTreeSet<String> = files.iter().map(|(_, p, _)| p.clone()).collect();
            assert_eq!(paths, named_files(node, &kubeadm), "{component}: the files carried");
            for (name, path, mode) in &files {
                let host = node.root.join(&path[1..]);
                assert_eq!(
                    inputs
                        .secrets
                        .get(name)
                        .unwrap_or_else(|| panic!("{component}: no secret {name}")),
                    &node.file(path),
                    "{component} on {}: {path}",
                    node.name
                );
                let host_mode = fs::metadata(&host).unwrap().permissions().mode() & 0o777;
                assert_eq!(u32::from_str_radix(mode, 8).unwrap(), host_mode, "{path}");
            }
        }
    }
}

/// Lays out the rendered inputs as an anchor pod's volumes and runs `kube-anchor apply` onto
/// `root`; returns the JSON report.
fn apply(inputs: &NodeInputs, work: &Path, root: &Path, node: &KubeadmNode) -> serde_json::Value {
    let config = work.join("config");
    let secrets = work.join("secrets");
    for (dir, files) in [(&config, &inputs.config), (&secrets, &inputs.secrets)] {
        fs::create_dir_all(dir).unwrap();
        for (name, content) in files {
            fs::write(dir.join(name), content).unwrap();
        }
    }
    let out = Command::new(BIN)
        .args(["apply", "--output", "json", "--config"])
        .arg(config.join("anchor.yaml"))
        .arg("--host-root")
        .arg(root)
        .env("NODE_NAME", &node.name)
        .env("NODE_IP", &node.ip)
        .output()
        .unwrap();
    serde_json::from_str(&run_ok(out, "kube-anchor apply")).unwrap()
}

fn copy_tree(from: &Path, to: &Path) {
    run_ok(
        Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap(),
        "cp -a",
    );
}

#[test]
fn a_kubeadm_node_imports_into_values_that_render_its_own_static_pods_and_files() {
    let tmp = tempfile::tempdir().unwrap();
    let node = kubeadm_node(&tmp.path().join("cp-1"), "cp-1", "10.11.0.1", None);
    let out = tmp.path().join("values");
    let report = run_ok(
        import(&[
            "--host-root",
            node.root.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
            "--output",
            "json",
        ]),
        "import",
    );
    assert!(
        !report.contains("PRIVATE KEY") && !report.contains("BEGIN"),
        "secrets on stdout"
    );
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(
        report["nodes"],
        serde_json::json!([{"name": "cp-1", "ip": "10.11.0.1"}])
    );
    assert_eq!(fs::metadata(&out).unwrap().permissions().mode() & 0o777, 0o700);
    // One node: every file is shared.
    for c in report["components"].as_array().unwrap() {
        assert!(
            c["files"].as_array().unwrap().iter().all(|f| f["shared"] == true),
            "{c}"
        );
    }

    assert_charts_reproduce(&[&node], &out, &[]);

    // `kube-anchor apply` of the rendered inputs onto (a copy of) the kubeadm node: every
    // credential file is adopted as it is; only the manifests are written.
    let copy = tmp.path().join("apply-root");
    copy_tree(&node.root, &copy);
    for component in COMPONENTS {
        let inputs = rendered(&out.join(format!("{component}.yaml")), component, "cp-1");
        let before: BTreeMap<String, (u64, i64, i64)> = anchor_files(&inputs)
            .iter()
            .map(|(_, p, _)| {
                let m = fs::metadata(copy.join(&p[1..])).unwrap();
                (p.clone(), (m.ino(), m.mtime(), m.mtime_nsec()))
            })
            .collect();
        let report = apply(&inputs, &tmp.path().join(format!("work-{component}")), &copy, &node);
        let manifest = format!("/etc/kubernetes/manifests/{component}.yaml");
        for f in report["files"].as_array().unwrap() {
            let path = f["path"].as_str().unwrap();
            if path == manifest {
                assert_eq!(f["action"], "written", "{component}: {f}");
            } else {
                assert_eq!(
                    f["action"], "adopted",
                    "{component}: {path} was not adopted as it is: {f}"
                );
            }
        }
        assert_eq!(report["files"].as_array().unwrap().len(), before.len() + 1, "{report}");
        for (path, seen) in before {
            let m = fs::metadata(copy.join(&path[1..])).unwrap();
            assert_eq!((m.ino(), m.mtime(), m.mtime_nsec()), seen, "{path} was rewritten");
            assert_eq!(fs::read(copy.join(&path[1..])).unwrap(), node.file(&path));
        }
        // The manifest written runs kubeadm's flags and carries the content-hash annotation.
        let written: Value = serde_yaml_ng::from_str(&fs::read_to_string(copy.join(&manifest[1..])).unwrap()).unwrap();
        let want: BTreeSet<String> = command(&node.manifest(component)).into_iter().collect();
        assert_eq!(
            command(&written).into_iter().collect::<BTreeSet<_>>(),
            want,
            "{component}"
        );
        assert!(
            written["metadata"]["annotations"]
                .as_mapping()
                .unwrap()
                .keys()
                .any(|k| k.as_str().unwrap().starts_with("kube-anchor.io/")),
            "{component}: no kube-anchor annotation: {written:?}"
        );
        // The same inputs again (an anchor's next sync, or its replacement pod): nothing is
        // written, so the static pod restarted once, at the takeover.
        let again = apply(&inputs, &tmp.path().join(format!("work-{component}")), &copy, &node);
        assert_eq!(again["changed"], false, "{again}");
        assert!(
            again["files"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["action"] == "unchanged"),
            "{again}"
        );
    }
}

#[test]
fn three_kubeadm_nodes_share_what_is_identical_and_keep_the_rest_per_node() {
    let tmp = tempfile::tempdir().unwrap();
    let first = kubeadm_node(&tmp.path().join("cp-1"), "cp-1", "10.11.0.1", None);
    let second = kubeadm_node(&tmp.path().join("cp-2"), "cp-2", "10.11.0.2", Some(&first));
    let third = kubeadm_node(&tmp.path().join("cp-3"), "cp-3", "10.11.0.3", Some(&first));
    let nodes = [&first, &second, &third];
    let out = tmp.path().join("values");
    let mut args: Vec<String> = nodes
        .iter()
        .flat_map(|n| ["--node".to_owned(), format!("{}={}", n.name, n.root.display())])
        .collect();
    args.extend([
        "--output-dir".into(),
        out.display().to_string(),
        "--output".into(),
        "json".into(),
    ]);
    let report: serde_json::Value = serde_json::from_str(&run_ok(
        import(&args.iter().map(String::as_str).collect::<Vec<_>>()),
        "import",
    ))
    .unwrap();

    // The cluster's keys are shared, each node's own certificates and kubeconfigs are not.
    let shared = |component: &str, path: &str| -> bool {
        let c = report["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["component"] == component)
            .unwrap();
        let f = c["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap();
        f["shared"].as_bool().unwrap()
    };
    assert!(shared("kube-apiserver", "/etc/kubernetes/pki/ca.crt"));
    assert!(shared("kube-apiserver", "/etc/kubernetes/pki/sa.key"));
    assert!(shared("etcd", "/etc/kubernetes/pki/etcd/ca.crt"));
    assert!(!shared("kube-apiserver", "/etc/kubernetes/pki/apiserver.key"));
    assert!(!shared("etcd", "/etc/kubernetes/pki/etcd/peer.crt"));
    assert!(!shared("kube-scheduler", "/etc/kubernetes/scheduler.conf"));

    // Each node's rendering holds its own files and runs kubeadm's flags with its own address;
    // etcd's bootstrap-only member list is the whole cluster's (kubeadm's first node lists
    // itself alone).
    assert_charts_reproduce(&nodes, &out, &["initial-cluster", "initial-cluster-state"]);
    let etcd = rendered(&out.join("etcd.yaml"), "etcd", "cp-2");
    let pod = rendered_pod(&etcd, &second);
    assert!(
        command(&pod).contains(
            &"--initial-cluster=cp-1=https://10.11.0.1:2380,cp-2=https://10.11.0.2:2380,cp-3=https://10.11.0.3:2380"
                .to_owned()
        )
    );
}

/// Asserts import failed, naming `needle`, and wrote nothing.
fn assert_refused(out: Output, needle: &str, dir: &Path) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "accepted; stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains(needle), "{needle:?} not in: {err}");
    assert!(!dir.exists(), "{} was created", dir.display());
}

#[test]
fn bad_kubeadm_nodes_are_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let node = kubeadm_node(&tmp.path().join("cp-1"), "cp-1", "10.11.0.1", None);
    let try_import = |root: &Path| {
        let out = tmp.path().join("values");
        (
            import(&[
                "--node",
                &format!("cp-1={}", root.display()),
                "--output-dir",
                out.to_str().unwrap(),
            ]),
            out,
        )
    };

    // A file the apiserver's flags name is gone.
    let root = tmp.path().join("missing-file");
    copy_tree(&node.root, &root);
    fs::remove_file(root.join("etc/kubernetes/pki/front-proxy-client.key")).unwrap();
    let (out, dir) = try_import(&root);
    assert_refused(
        out,
        "/etc/kubernetes/manifests/kube-apiserver.yaml: --proxy-client-key-file names /etc/kubernetes/pki/front-proxy-client.key, which is not on node cp-1",
        &dir,
    );

    // Something else in the manifest directory.
    let root = tmp.path().join("foreign-manifest");
    copy_tree(&node.root, &root);
    fs::write(
        root.join("etc/kubernetes/manifests/web.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: default}\nspec:\n  containers: [{name: web, image: nginx}]\n",
    )
    .unwrap();
    let (out, dir) = try_import(&root);
    assert_refused(
        out,
        "/etc/kubernetes/manifests/web.yaml: not a kubeadm control-plane pod",
        &dir,
    );

    // A component missing.
    let root = tmp.path().join("no-scheduler");
    copy_tree(&node.root, &root);
    fs::remove_file(root.join("etc/kubernetes/manifests/kube-scheduler.yaml")).unwrap();
    let (out, dir) = try_import(&root);
    assert_refused(out, "node cp-1: no kube-scheduler manifest", &dir);

    // A flag naming a file outside /etc/kubernetes.
    let root = tmp.path().join("outside");
    copy_tree(&node.root, &root);
    let manifest = root.join("etc/kubernetes/manifests/kube-apiserver.yaml");
    let text = fs::read_to_string(&manifest).unwrap().replace(
        "    - --secure-port=6443\n",
        "    - --secure-port=6443\n    - --oidc-ca-file=/etc/ssl/oidc-ca.pem\n",
    );
    fs::write(&manifest, text).unwrap();
    fs::create_dir_all(root.join("etc/ssl")).unwrap();
    fs::write(root.join("etc/ssl/oidc-ca.pem"), "pem").unwrap();
    let (out, dir) = try_import(&root);
    // No volume of kubeadm's pod (nor the chart's) mounts it: the component could not read it.
    assert_refused(
        out,
        "--oidc-ca-file names /etc/ssl/oidc-ca.pem, which no volume of the imported pod mounts",
        &dir,
    );
}

#[test]
fn the_summary_names_files_never_their_content_and_an_open_output_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let node = kubeadm_node(&tmp.path().join("cp-1"), "cp-1", "10.11.0.1", None);
    let out = tmp.path().join("values");
    let text = run_ok(
        import(&[
            "--host-root",
            node.root.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
        ]),
        "import",
    );
    assert!(
        text.contains("node cp-1: ${NODE_NAME}=cp-1, ${NODE_IP}=10.11.0.1"),
        "{text}"
    );
    assert!(
        text.contains("0600 /etc/kubernetes/pki/apiserver.key (credentials.apiserver.key)"),
        "{text}"
    );
    assert!(text.contains("omitted    --encryption-provider-config"), "{text}");
    assert!(
        text.contains(
            "volume     /etc/ssl/certs at /etc/ssl/certs (DirectoryOrCreate, read-only; component.extraVolumes)"
        ),
        "{text}"
    );
    let key = String::from_utf8(node.file("/etc/kubernetes/pki/apiserver.key")).unwrap();
    let key_line = key.lines().nth(1).unwrap();
    assert!(!text.contains(key_line), "a key on stdout");
    assert!(
        fs::read_to_string(out.join("kube-apiserver.yaml"))
            .unwrap()
            .contains(key_line)
    );

    // Importing again replaces the files in place, leaving no temporary file behind.
    run_ok(
        import(&[
            "--host-root",
            node.root.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
        ]),
        "import again",
    );
    let mut names: Vec<String> = fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "etcd.yaml",
            "kube-apiserver.yaml",
            "kube-controller-manager.yaml",
            "kube-scheduler.yaml"
        ]
    );

    // A directory others can read is no place for keys.
    let open = tmp.path().join("open");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
    let res = import(&[
        "--host-root",
        node.root.to_str().unwrap(),
        "--output-dir",
        open.to_str().unwrap(),
    ]);
    assert!(!res.status.success());
    assert!(
        String::from_utf8_lossy(&res.stderr).contains("open to group or others"),
        "{res:?}"
    );
    assert_eq!(fs::read_dir(&open).unwrap().count(), 0);
}

/// The real kube-apiserver accepts what the imported values render: every chart's objects
/// (Secrets with kubeadm's files, one DaemonSet per node) and each node's static pod as the
/// kubelet would make it and its mirror pod (named `<name>-<node>`, `spec.nodeName` set; the API
/// server runs the kubelet's own `ValidatePodCreate` on create).
#[tokio::test(flavor = "multi_thread")]
async fn the_real_api_server_accepts_what_the_imported_values_render() {
    let cp = support::control_plane::shared().await;
    let ns = cp.namespace("import").await;
    let tmp = tempfile::tempdir().unwrap();
    let first = kubeadm_node(&tmp.path().join("cp-1"), "cp-1", "10.11.0.1", None);
    let second = kubeadm_node(&tmp.path().join("cp-2"), "cp-2", "10.11.0.2", Some(&first));
    let out = tmp.path().join("values");
    run_ok(
        import(&[
            "--node",
            &format!("cp-1={}", first.root.display()),
            "--node",
            &format!("cp-2={}", second.root.display()),
            "--output-dir",
            out.to_str().unwrap(),
        ]),
        "import",
    );
    for component in COMPONENTS {
        let values = out.join(format!("{component}.yaml"));
        let objects = ok(&helm(&[
            "template",
            "imported",
            &chart(component),
            "--namespace",
            &ns,
            "-f",
            values.to_str().unwrap(),
        ]));
        let file = tmp.path().join(format!("{component}.rendered.yaml"));
        fs::write(&file, objects).unwrap();
        let applied = kubectl_ok(
            &cp.admin_kubeconfig,
            &["apply", "--dry-run=server", "-f", file.to_str().unwrap()],
        );
        // One DaemonSet per node: the two nodes' files differ.
        assert!(
            applied.contains("daemonset.apps/imported-anchor-cp-1 created (server dry run)"),
            "{applied}"
        );
        assert!(
            applied.contains("daemonset.apps/imported-anchor-cp-2 created (server dry run)"),
            "{applied}"
        );
        for node in [&first, &second] {
            let mut pod = rendered_pod(&rendered(&values, component, &node.name), node);
            let name = format!("{}-{}", pod["metadata"]["name"].as_str().unwrap(), node.name);
            pod["metadata"]["name"] = name.into();
            pod["spec"]["nodeName"] = node.name.clone().into();
            // As the kubelet's mirror pod: the ServiceAccount admission leaves those alone.
            pod["metadata"]["annotations"]["kubernetes.io/config.mirror"] = "0".into();
            let file = tmp.path().join(format!("{component}-{}.pod.yaml", node.name));
            fs::write(&file, serde_yaml_ng::to_string(&pod).unwrap()).unwrap();
            kubectl_ok(
                &cp.admin_kubeconfig,
                &["create", "--dry-run=server", "-f", file.to_str().unwrap()],
            );
        }
    }
}

/// Credentials travel as YAML strings through the values file and helm: text whose whitespace
/// YAML treats specially (indented first line, trailing blank lines, none at the end, tabs,
/// CRLF, a lone `---`) still reaches the Secret byte for byte.
#[test]
fn awkward_text_reaches_the_secret_byte_for_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let node = kubeadm_node(&tmp.path().join("cp-1"), "cp-1", "10.11.0.1", None);
    let awkward = [
        ("a.yaml", "  indented first line\nsecond\n\n\n"),
        ("b.yaml", "no newline at the end"),
        ("c.yaml", "tabs\tinside\r\nand CRLF\r\n"),
        ("d.yaml", "---\n# a comment\nkey: 'value' # x\n"),
        ("e.yaml", "trailing spaces   \n  \n"),
    ];
    let manifest = node.root.join("etc/kubernetes/manifests/kube-apiserver.yaml");
    let mut text = fs::read_to_string(&manifest).unwrap();
    for (i, (name, content)) in awkward.iter().enumerate() {
        fs::write(node.root.join("etc/kubernetes/pki").join(name), content).unwrap();
        text = text.replace(
            "    - --secure-port=6443\n",
            &format!("    - --secure-port=6443\n    - --x-file-{i}=/etc/kubernetes/pki/{name}\n"),
        );
    }
    fs::write(&manifest, text).unwrap();
    let out = tmp.path().join("values");
    run_ok(
        import(&[
            "--host-root",
            node.root.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
        ]),
        "import",
    );
    let inputs = rendered(&out.join("kube-apiserver.yaml"), "kube-apiserver", "cp-1");
    for (name, content) in awkward {
        assert_eq!(
            String::from_utf8_lossy(&inputs.secrets[name]),
            content,
            "{name} changed on its way through the values and helm"
        );
    }
}

/// kubeadm's audit logging (ClusterConfiguration `apiServer.extraArgs` and `extraVolumes`): the
/// policy file and the log dir are volumes the chart does not mount itself. Import carries both,
/// the chart renders them where kubeadm mounted them, and the takeover writes the manifest only.
#[test]
fn a_kubeadm_node_with_audit_logging_keeps_its_volumes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("cp-1");
    fs::create_dir_all(root.join("etc/kubernetes/audit")).unwrap();
    fs::write(
        root.join("etc/kubernetes/audit/policy.yaml"),
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Metadata}]\n",
    )
    .unwrap();
    fs::set_permissions(
        root.join("etc/kubernetes/audit/policy.yaml"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let node = kubeadm_node_with(
        &root,
        "cp-1",
        "10.11.0.1",
        None,
        "extraArgs: [{name: audit-policy-file, value: /etc/kubernetes/audit/policy.yaml}, \
         {name: audit-log-path, value: /var/log/kubernetes/audit/audit.log}], \
         extraVolumes: [{name: audit, hostPath: /etc/kubernetes/audit, mountPath: /etc/kubernetes/audit, readOnly: true, pathType: DirectoryOrCreate}, \
         {name: audit-log, hostPath: /var/log/kubernetes/audit, mountPath: /var/log/kubernetes/audit, pathType: DirectoryOrCreate}]",
    );
    // The log the running apiserver wrote: the component's data, never a credential.
    fs::create_dir_all(root.join("var/log/kubernetes/audit")).unwrap();
    fs::write(
        root.join("var/log/kubernetes/audit/audit.log"),
        "{\"kind\":\"Event\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("values");
    let summary = run_ok(
        import(&[
            "--host-root",
            node.root.to_str().unwrap(),
            "--output-dir",
            out.to_str().unwrap(),
        ]),
        "import",
    );
    assert!(
        summary.contains("volume     /var/log/kubernetes/audit at /var/log/kubernetes/audit"),
        "{summary}"
    );
    // The kubeadm pod's mounts, the chart's rendered ones, flags and files: all the same.
    assert_charts_reproduce(&[&node], &out, &[]);
    let inputs = rendered(&out.join("kube-apiserver.yaml"), "kube-apiserver", "cp-1");
    assert!(
        anchor_files(&inputs)
            .iter()
            .any(|(_, p, m)| p == "/etc/kubernetes/audit/policy.yaml" && m == "0600")
    );
    assert!(anchor_files(&inputs).iter().all(|(_, p, _)| !p.starts_with("/var/log")));
    // The takeover: the policy adopted as it is, the manifest written with both volumes.
    let copy = tmp.path().join("apply-root");
    copy_tree(&node.root, &copy);
    let report = apply(&inputs, &tmp.path().join("work"), &copy, &node);
    let policy = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/kubernetes/audit/policy.yaml")
        .cloned();
    assert_eq!(policy.unwrap()["action"], "adopted", "{report}");
    let written: Value = serde_yaml_ng::from_str(
        &fs::read_to_string(copy.join("etc/kubernetes/manifests/kube-apiserver.yaml")).unwrap(),
    )
    .unwrap();
    // kube-apiserver's mounts of kubeadm's directories are read-only exactly where kubeadm's are.
    let written = host_mounts_rw(&written);
    for mount in host_mounts_rw(&node.manifest("kube-apiserver")) {
        assert!(written.contains(&mount), "{mount:?} not in {written:?}");
    }
    // Without the log volume the same flag is refused, naming it: its log would go into the
    // container.
    let manifest = root.join("etc/kubernetes/manifests/kube-apiserver.yaml");
    let mut pod: Value = serde_yaml_ng::from_str(&fs::read_to_string(&manifest).unwrap()).unwrap();
    let mounts = pod["spec"]["containers"][0]["volumeMounts"].as_sequence_mut().unwrap();
    mounts.retain(|m| m["name"] != "audit-log");
    fs::write(&manifest, serde_yaml_ng::to_string(&pod).unwrap()).unwrap();
    let refused = import(&[
        "--host-root",
        node.root.to_str().unwrap(),
        "--output-dir",
        tmp.path().join("v2").to_str().unwrap(),
    ]);
    assert_eq!(refused.status.code(), Some(1));
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("--audit-log-path") && err.contains("no volume of the imported pod mounts"),
        "{err}"
    );
    assert!(!tmp.path().join("v2").exists(), "nothing written");
}
