//! The Helm charts, checked with the real helm (tools/bin/helm) and, where the API is needed,
//! the real control plane.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_yaml_ng::Value;
use support::control_plane;
use support::daemon::{ConfigVolume, Daemon, refs, wait_until};
use support::fixture::BIN;
use support::helm::*;
use support::kubectl::kubectl;
use support::nodes::NodeHandle;
use support::poll::eventually;
use support::processes::{repo_root, tool};

const ANCHOR_CHARTS: &[&str] = &["kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd"];
const WAIT: Duration = Duration::from_secs(90);

fn example(name: &str) -> String {
    repo_root()
        .join("examples/values")
        .join(format!("{name}.yaml"))
        .display()
        .to_string()
}

fn render(chart_name: &str, extra: &[&str]) -> Vec<Value> {
    template("rel", chart_name, extra)
}

/// Only what a chart needs to render beside its defaults, taken from its example values: the
/// credentials, per-node credentials and etcd member list, as `--set-json` arguments.
fn required(name: &str) -> Vec<String> {
    let values: Value = serde_yaml_ng::from_str(&fs::read_to_string(example(name)).unwrap()).unwrap();
    let mut args = Vec::new();
    for key in ["credentials", "perNode", "component.initialCluster"] {
        let value = key.split('.').fold(&values, |v, k| &v[k]);
        if !value.is_null() {
            args.push("--set-json".to_owned());
            args.push(format!("{key}={}", serde_json::to_string(value).unwrap()));
        }
    }
    args
}

/// stdout and stderr of a helm run that must fail.
fn refused(out: &std::process::Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "accepted:\n{text}");
    text
}

const NO_MEMBER_LIST: &str = "component.initialCluster is required while membership.enabled is false";

/// The defaults name no credentials, so they are refused (by helm template and helm install:
/// helm lint runs a template's `fail` as a message only, "funcMap fail"), naming every missing
/// one; the examples lint strictly.
#[test]
fn every_chart_lints_strictly_with_default_and_example_values() {
    let defaults: Value =
        serde_yaml_ng::from_str(&fs::read_to_string(repo_root().join("charts/kube-apiserver/values.yaml")).unwrap())
            .unwrap();
    assert_eq!(defaults["files"].as_sequence().unwrap().len(), 11);
    for name in ANCHOR_CHARTS {
        let dir = chart(name);
        let err = refused(&helm(&["template", "rel", &dir]));
        let defaults: Value = serde_yaml_ng::from_str(
            &fs::read_to_string(repo_root().join("charts").join(name).join("values.yaml")).unwrap(),
        )
        .unwrap();
        let files: Vec<&str> = defaults["files"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap())
            .collect();
        assert!(
            err.contains(&format!("- no content for {}: ", files.join(", "))),
            "{name}: {err}"
        );
        ok(&helm(&["lint", "--strict", &dir]));
        ok(&helm(&["lint", "--strict", &dir, "-f", &example(name)]));
    }
    ok(&helm(&["lint", "--strict", &chart("pod-checkpointer")]));
}

/// A key of `credentials` or of `perNode.<node>.credentials` that names no credential (a typo
/// would leave the file it meant empty) is refused by name, with the valid names; every
/// credential must have its content, shared or on every node of perNode; all problems at once.
#[test]
fn credentials_are_checked_by_name() {
    let dir = chart("kube-apiserver");
    let apiserver = example("kube-apiserver");
    let names = "ca.crt, apiserver.crt, apiserver.key, apiserver-kubelet-client.crt, \
                 apiserver-kubelet-client.key, etcd-ca.crt, apiserver-etcd-client.crt, \
                 apiserver-etcd-client.key, sa.pub, sa.key, encryption-config.yaml";
    let err = refused(&helm(&[
        "template",
        "rel",
        &dir,
        "-f",
        &apiserver,
        "--set",
        "credentials.apiserver\\.crtt=x",
        "--set",
        "perNode.cp-1.credentials.sa\\.pubb=y",
    ]));
    assert!(
        err.contains(&format!(
            "- credentials.apiserver.crtt, perNode.cp-1.credentials.sa.pubb: no such credential; the names are {names} ("
        )),
        "{err}"
    );

    let work = tempfile::tempdir().unwrap();
    let values = |name: &str, text: &str| {
        let file = work.path().join(name);
        fs::write(&file, text).unwrap();
        file.display().to_string()
    };
    // Per node: in every node's credentials, or shared.
    let mut etcd: Value = serde_yaml_ng::from_str(&fs::read_to_string(example("etcd")).unwrap()).unwrap();
    for (node, key) in [("cp-2", "peer.key"), ("cp-3", "peer.key"), ("cp-3", "server.crt")] {
        etcd["perNode"][node]["credentials"]
            .as_mapping_mut()
            .unwrap()
            .remove(key)
            .unwrap();
    }
    let file = values("etcd.yaml", &serde_yaml_ng::to_string(&etcd).unwrap());
    let err = refused(&helm(&["template", "rel", &chart("etcd"), "-f", &file]));
    assert!(
        err.contains("- no content for server.crt (nodes cp-3), peer.key (nodes cp-2, cp-3): ")
            && err.contains("--set-file 'perNode.cp-3.credentials.server\\.crt=<file>'"),
        "{err}"
    );
    // Shared content serves every node.
    let shared = values("shared.yaml", "credentials: {server.crt: s, peer.key: p}");
    render("etcd", &["-f", &file, "-f", &shared]);

    // Membership's client credentials and the health endpoint's CA are credentials too (and
    // required); the Secret carries each.
    let membership = values(
        "membership.yaml",
        "membership: {enabled: true, endpoints: [\"https://10.0.0.11:2379\"]}\nanchor: {healthCAFile: health-ca.crt}",
    );
    let err = refused(&helm(&[
        "template",
        "rel",
        &chart("etcd"),
        "-f",
        &example("etcd"),
        "-f",
        &membership,
    ]));
    assert!(
        err.contains("- no content for anchor-client.crt, anchor-client.key, health-ca.crt: "),
        "{err}"
    );
    let given = values(
        "given.yaml",
        "credentials: {anchor-client.crt: c, anchor-client.key: k, health-ca.crt: h}",
    );
    let docs = render("etcd", &["-f", &example("etcd"), "-f", &membership, "-f", &given]);
    let secret = &of_kind(&docs, "Secret")[0]["data"];
    for key in ["anchor-client.crt", "anchor-client.key", "health-ca.crt", "etcd-ca.crt"] {
        assert!(secret[key].is_string(), "{key}: {secret:?}");
    }
    // The anchor sees the data dir (whether it holds a member; a decommission saves and empties
    // it): mounted under /host like the other host dirs, and only with membership.
    let data_dir_mounted = |docs: &[Value]| {
        let spec = &of_kind(docs, "DaemonSet")[0]["spec"]["template"]["spec"];
        let volume = spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["hostPath"]["path"] == "/var/lib/etcd");
        volume.map(|v| {
            spec["containers"][0]["volumeMounts"]
                .as_sequence()
                .unwrap()
                .iter()
                .find(|m| m["name"] == v["name"])
                .map(|m| m["mountPath"].as_str().unwrap_or_default().to_owned())
        })
    };
    assert_eq!(data_dir_mounted(&docs), Some(Some("/host/var/lib/etcd".into())));
    assert_eq!(data_dir_mounted(&render("etcd", &["-f", &example("etcd")])), None);
}

/// Every value has a place in the schema: a misspelt key is refused, not ignored.
#[test]
fn values_outside_the_schema_are_refused() {
    for name in ANCHOR_CHARTS {
        for (set, needle) in [
            ("nodeSelectr.a=b", "additional properties 'nodeSelectr' not allowed"),
            ("component.extraArg.v=2", "additional properties 'extraArg' not allowed"),
            ("component.probes.liveness.timeout=3", "timeout"),
            ("prometheusRule.alertLabels.severity=page", "alertLabels"),
        ] {
            let err = refused(&helm(&[
                "template",
                "rel",
                &chart(name),
                "-f",
                &example(name),
                "--set",
                set,
            ]));
            assert!(
                err.contains(needle) && err.contains("values don't meet the specifications of the schema"),
                "{name} {set}: {err}"
            );
        }
    }
    for set in ["checkpointr.port=1", "component.namespace=x"] {
        let err = refused(&helm(&["template", "rel", &chart("pod-checkpointer"), "--set", set]));
        assert!(err.contains("additional properties"), "{set}: {err}");
    }
}

/// The etcd chart's defaults rendered `--initial-cluster=${NODE_NAME}=https://${NODE_IP}:2380`:
/// a fresh install on three nodes made three one-member clusters. Without membership the member
/// list is required, and must be the same on every node (no variable).
#[test]
fn etcd_needs_one_member_list_for_every_node() {
    let dir = chart("etcd");
    let err = refused(&helm(&["template", "rel", &dir]));
    assert!(
        err.contains(NO_MEMBER_LIST) && err.contains("name=https://ip:2380") && err.contains("membership.enabled=true"),
        "{err}"
    );
    let work = tempfile::tempdir().unwrap();
    let values = |name: &str, text: &str| {
        let file = work.path().join(name);
        fs::write(&file, text).unwrap();
        file.display().to_string()
    };
    let example = example("etcd");
    for (text, from) in [
        (
            "component: {initialCluster: \"${NODE_NAME}=https://${NODE_IP}:2380\"}",
            "component.initialCluster \"${NODE_NAME}=https://${NODE_IP}:2380\" names a variable",
        ),
        (
            "component: {initialCluster: \"cp-1=https://10.0.0.11:2380,cp-2=https://${NODE_IP}:2380\"}",
            "component.initialCluster \"cp-1=https://10.0.0.11:2380,cp-2=https://${NODE_IP}:2380\" names a variable",
        ),
        (
            "component: {extraArgs: {initial-cluster: \"${NODE_NAME}=https://10.0.0.11:2380\"}}",
            "component.extraArgs.initial-cluster \"${NODE_NAME}=https://10.0.0.11:2380\" names a variable",
        ),
        // Membership lets the anchors record each node's list, but not one that names every node.
        (
            "component: {initialCluster: \"${NODE_NAME}=https://${NODE_IP}:2380\"}\nmembership: {enabled: true, endpoints: [\"https://10.0.0.11:2379\"]}\ncredentials: {anchor-client.crt: c, anchor-client.key: k}",
            "names a variable",
        ),
    ] {
        let file = values("variable.yaml", text);
        let err = refused(&helm(&["template", "rel", &dir, "-f", &example, "-f", &file]));
        assert!(
            err.contains(from) && err.contains("the same on every node"),
            "{text}: {err}"
        );
    }
    let err = refused(&helm(&[
        "template",
        "rel",
        &dir,
        "-f",
        &example,
        "--set",
        "component.initialClusterState=maybe",
    ]));
    assert!(err.contains("initialClusterState"), "{err}");

    // The example's list, as it stands, on every node's manifest.
    let docs = render("etcd", &["-f", &example]);
    let pod = of_kind(&docs, "ConfigMap")[0]["data"]["pod.yaml"].as_str().unwrap();
    assert!(
        pod.contains(
            "- --initial-cluster=cp-1=https://10.0.0.11:2380,cp-2=https://10.0.0.12:2380,cp-3=https://10.0.0.13:2380\n"
        ),
        "{pod}"
    );
    // With membership the anchors record the list: none needed, and a list left out of the
    // command line (omitArgs) is not asked for.
    let membership = values(
        "membership.yaml",
        "component: {initialCluster: \"\"}\nmembership: {enabled: true, endpoints: [\"https://10.0.0.11:2379\"]}\ncredentials: {anchor-client.crt: c, anchor-client.key: k}",
    );
    render("etcd", &["-f", &example, "-f", &membership]);
    let omitted = values(
        "omitted.yaml",
        "component: {initialCluster: \"\", omitArgs: [initial-cluster]}",
    );
    let docs = render("etcd", &["-f", &example, "-f", &omitted]);
    let pod = of_kind(&docs, "ConfigMap")[0]["data"]["pod.yaml"].as_str().unwrap();
    assert!(!pod.contains("--initial-cluster="), "{pod}");
}

#[test]
fn the_checkpointer_daemonset_checkpoints_itself_with_narrow_mounts() {
    let docs = render("pod-checkpointer", &[]);
    let ds = of_kind(&docs, "DaemonSet")[0];
    let template = &ds["spec"]["template"];
    assert_eq!(
        template["metadata"]["annotations"]["checkpointer.alpha.coreos.com/checkpoint"],
        "true"
    );
    let spec = &template["spec"];
    assert_eq!(spec["containers"][0]["args"][0], "checkpointer");
    assert_eq!(spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"], true);
    let container = &spec["containers"][0];
    // Probes over a socket in the pod's own emptyDir (its static copy shares the host network);
    // the preStop hook retires what the checkpointer manages on a decommission.
    assert_eq!(container["readinessProbe"]["exec"]["command"][2], "readyz");
    assert_eq!(container["livenessProbe"]["exec"]["command"][2], "healthz");
    assert_eq!(container["lifecycle"]["preStop"]["exec"]["command"][2], "pre-stop");
    assert_eq!(spec["volumes"][0]["name"], "run");
    assert!(spec["volumes"][0]["emptyDir"].is_mapping());
    let paths: Vec<&str> = spec["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|v| v["hostPath"]["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        [
            "/etc/kubernetes/inactive-manifests",
            "/etc/kubernetes/manifests",
            "/etc/kubernetes/checkpoint-secrets",
            "/etc/kubernetes/checkpoint-configmaps",
            "/var/lib/kube-anchor",
            "/run/containerd"
        ]
    );
    // The runtime socket's directory is the one mount it only reads.
    let runtime = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "runtime")
        .expect("the runtime socket's directory is mounted");
    assert_eq!(runtime["mountPath"], "/host/run/containerd");
    assert_eq!(runtime["readOnly"], true);
    let out = helm(&[
        "template",
        "rel",
        &chart("pod-checkpointer"),
        "--set",
        "checkpointer.stableWindow=soon",
    ]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("stableWindow"));
}

#[test]
fn rendered_daemonsets_are_what_an_anchor_needs() {
    for name in ANCHOR_CHARTS {
        for values in [required(name), vec!["-f".to_string(), example(name)]] {
            let extra: Vec<&str> = values.iter().map(String::as_str).collect();
            let docs = render(name, &extra);
            let daemonsets = of_kind(&docs, "DaemonSet");
            assert!(!daemonsets.is_empty(), "{name}");
            for ds in daemonsets {
                let spec = &ds["spec"]["template"]["spec"];
                let c = &spec["containers"][0];
                let context = format!("{name} {values:?}");
                assert_eq!(
                    ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], 1,
                    "{context}"
                );
                assert_eq!(
                    ds["spec"]["updateStrategy"]["rollingUpdate"]["maxSurge"], 0,
                    "{context}"
                );
                assert_eq!(spec["priorityClassName"], "system-node-critical", "{context}");
                assert!(
                    spec["tolerations"]
                        .as_sequence()
                        .unwrap()
                        .iter()
                        .any(|t| t["key"] == "node-role.kubernetes.io/control-plane"),
                    "{context}"
                );
                assert_eq!(c["lifecycle"]["preStop"]["exec"]["command"][1], "pre-stop", "{context}");
                // Probes over the pod's own socket: no host port two anchors could fight over.
                assert_eq!(c["readinessProbe"]["exec"]["command"][1], "probe", "{context}");
                assert_eq!(c["readinessProbe"]["exec"]["command"][2], "readyz", "{context}");
                assert_eq!(c["livenessProbe"]["exec"]["command"][2], "healthz", "{context}");
                assert!(c["readinessProbe"]["httpGet"].is_null(), "{context}");
                assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true, "{context}");
                assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL", "{context}");
                assert!(c["resources"]["limits"]["memory"].is_string(), "{context}");
                let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap();
                let timeout = c["env"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .find(|e| e["name"] == "KUBE_ANCHOR_PRESTOP_TIMEOUT")
                    .unwrap()["value"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                assert!(
                    humantime::parse_duration(&timeout).unwrap() < Duration::from_secs(grace as u64),
                    "{context}: the hook must end before the grace period"
                );
                for env in ["NODE_NAME", "POD_NAME", "POD_NAMESPACE", "NODE_IP"] {
                    assert!(
                        c["env"]
                            .as_sequence()
                            .unwrap()
                            .iter()
                            .any(|e| e["name"] == env && e["valueFrom"]["fieldRef"].is_mapping()),
                        "{context}: {env}"
                    );
                }
                // The pod applies only the inputs its own template was rendered with.
                let expect = ds["spec"]["template"]["metadata"]["annotations"]["kube-anchor.io/expect-inputs"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{context}: no expect-inputs annotation"));
                assert!(
                    expect.starts_with("/etc/kube-anchor/config/.inputs-config=")
                        && expect.contains(",/etc/kube-anchor/secrets/.inputs-secret="),
                    "{context}: {expect}"
                );
                assert!(
                    c["env"]
                        .as_sequence()
                        .unwrap()
                        .iter()
                        .any(|e| e["name"] == "KUBE_ANCHOR_EXPECT_INPUTS"
                            && e["valueFrom"]["fieldRef"]["fieldPath"]
                                == "metadata.annotations['kube-anchor.io/expect-inputs']"),
                    "{context}"
                );
                // Narrow host mounts: only below the allowed roots and the state dir.
                for v in spec["volumes"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .filter(|v| v["hostPath"].is_mapping())
                {
                    let path = v["hostPath"]["path"].as_str().unwrap();
                    if v["name"] == "runtime" {
                        // The container runtime's socket directory, read-only, where the
                        // anchor's --runtime-endpoint names it.
                        assert_eq!(path, "/run/containerd", "{context}");
                        let mount = c["volumeMounts"]
                            .as_sequence()
                            .unwrap()
                            .iter()
                            .find(|m| m["name"] == "runtime")
                            .unwrap_or_else(|| panic!("{context}: the runtime volume is not mounted"));
                        assert_eq!(mount["mountPath"], "/host/run/containerd", "{context}");
                        assert_eq!(mount["readOnly"], true, "{context}");
                        assert!(
                            c["env"]
                                .as_sequence()
                                .unwrap()
                                .iter()
                                .any(|e| e["name"] == "KUBE_ANCHOR_RUNTIME_ENDPOINT"
                                    && e["value"] == "/run/containerd/containerd.sock"),
                            "{context}"
                        );
                        continue;
                    }
                    assert!(
                        path.starts_with("/etc/kubernetes") || path == "/var/lib/kube-anchor",
                        "{context}: hostPath {path}"
                    );
                }
            }
        }
    }
}

#[test]
fn credentials_live_only_in_secrets() {
    for name in ANCHOR_CHARTS {
        let docs = render(name, &["-f", &example(name)]);
        for cm in of_kind(&docs, "ConfigMap") {
            let text = serde_yaml_ng::to_string(&cm["data"]).unwrap();
            assert!(
                !text.contains("PLACEHOLDER") && !text.contains("PRIVATE KEY") && !text.contains("client-key-data"),
                "{name}: a credential in a ConfigMap:\n{text}"
            );
        }
        let secret_keys: Vec<String> = of_kind(&docs, "Secret")
            .iter()
            .flat_map(|s| {
                s["data"]
                    .as_mapping()
                    .map(|m| m.keys().map(|k| k.as_str().unwrap().to_owned()).collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .collect();
        let values: Value = serde_yaml_ng::from_str(&fs::read_to_string(example(name)).unwrap()).unwrap();
        for key in values["credentials"].as_mapping().unwrap().keys() {
            assert!(
                secret_keys.contains(&key.as_str().unwrap().to_owned()),
                "{name}: {key:?} missing from the Secrets"
            );
        }
    }
}

#[test]
fn per_node_credentials_reach_only_their_node() {
    let docs = render("etcd", &["-f", &example("etcd")]);
    let daemonsets = of_kind(&docs, "DaemonSet");
    assert_eq!(daemonsets.len(), 3);
    for ds in daemonsets {
        let spec = &ds["spec"]["template"]["spec"];
        let node = spec["nodeSelector"]["kubernetes.io/hostname"].as_str().unwrap();
        let sources = spec["volumes"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "credentials")
            .unwrap()["projected"]["sources"]
            .as_sequence()
            .unwrap()
            .clone();
        let names: Vec<&str> = sources.iter().map(|s| s["secret"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["rel-anchor", &format!("rel-anchor-{node}")], "{node}");
    }
    for secret in of_kind(&docs, "Secret")
        .into_iter()
        .filter(|s| s["metadata"]["labels"]["kube-anchor.io/node"].is_string())
    {
        let node = secret["metadata"]["labels"]["kube-anchor.io/node"].as_str().unwrap();
        for (k, v) in secret["data"].as_mapping().unwrap() {
            if k.as_str().unwrap().starts_with('.') {
                continue; // the input revision marker
            }
            let decoded = String::from_utf8(base64_decode(v.as_str().unwrap())).unwrap();
            assert!(decoded.contains(&format!("example {node} ")), "{node} got {decoded}");
        }
    }
}

#[test]
fn any_input_change_changes_the_pod_template() {
    let checksum = |extra: &[&str]| {
        let docs = render("kube-scheduler", extra);
        let ds = of_kind(&docs, "DaemonSet")[0].clone();
        serde_yaml_ng::to_string(&ds["spec"]["template"]["metadata"]["annotations"]).unwrap()
    };
    let base = checksum(&["--set", "credentials.scheduler\\.conf=a"]);
    assert_eq!(checksum(&["--set", "credentials.scheduler\\.conf=a"]), base);
    assert_ne!(
        checksum(&["--set", "credentials.scheduler\\.conf=b"]),
        base,
        "a rotated credential rolls the pods"
    );
    assert_ne!(
        checksum(&[
            "--set",
            "credentials.scheduler\\.conf=a",
            "--set",
            "component.version=v1.36.4"
        ]),
        base,
        "a manifest change rolls the pods"
    );
}

/// `component.droppedServingNames` reaches the anchor's config (`spec.droppedServingNames`),
/// which the anchor accepts; without it the config has no such key.
#[test]
fn dropped_serving_names_reach_the_anchor_config() {
    let values = example("kube-apiserver");
    let config_of = |extra: &[&str]| {
        let mut args = vec!["-f", values.as_str()];
        args.extend(extra);
        let docs = render("kube-apiserver", &args);
        of_kind(&docs, "ConfigMap")[0]["data"]["anchor.yaml"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let roots =
        kube_anchor_core::hostpath::AllowedRoots::new([
            kube_anchor_core::hostpath::HostPath::parse("/etc/kubernetes").unwrap()
        ]);
    let parse = |config: &str| {
        kube_anchor_core::config::parse(Path::new("/etc/kube-anchor/config/anchor.yaml"), config, &roots)
            .unwrap_or_else(|e| panic!("{e}\n{config}"))
    };
    let plain = config_of(&[]);
    assert!(!plain.contains("droppedServingNames"), "{plain}");
    assert!(parse(&plain).dropped_serving_names.is_empty());
    let config = config_of(&["--set", "component.droppedServingNames={old-api.example,10.0.0.99}"]);
    assert_eq!(
        parse(&config).dropped_serving_names,
        vec!["old-api.example".to_owned(), "10.0.0.99".to_owned()]
    );
}

#[test]
fn etcd_membership_renders_an_etcd_member_section_the_anchor_accepts() {
    let set = [
        "--set",
        "membership.enabled=true",
        "--set",
        "membership.endpoints={https://10.0.0.11:2379,https://10.0.0.12:2379}",
        "--set",
        "credentials.anchor-client\\.crt=CLIENT CERT",
        "--set",
        "credentials.anchor-client\\.key=CLIENT KEY",
    ];
    let values = example("etcd");
    let mut args = vec!["-f", values.as_str()];
    args.extend(set);
    let docs = render("etcd", &args);
    let config = of_kind(&docs, "ConfigMap")[0]["data"]["anchor.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let roots =
        kube_anchor_core::hostpath::AllowedRoots::new([
            kube_anchor_core::hostpath::HostPath::parse("/etc/kubernetes").unwrap()
        ]);
    let anchor = kube_anchor_core::config::parse(Path::new("/etc/kube-anchor/config/anchor.yaml"), &config, &roots)
        .unwrap_or_else(|e| panic!("{e}\n{config}"));
    let member = anchor.etcd_member.expect("spec.etcdMember");
    assert_eq!(member.endpoints.len(), 2);
    assert_eq!(
        member.client_key,
        Path::new("/etc/kube-anchor/config/../secrets/anchor-client.key")
    );
    // The example's initial cluster is "new": its nodes may bootstrap.
    assert!(
        member
            .initial_cluster
            .as_deref()
            .unwrap()
            .contains("cp-1=https://10.0.0.11:2380")
    );
    let pod = of_kind(&docs, "ConfigMap")[0]["data"]["pod.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(pod.contains("--initial-cluster=${ETCD_INITIAL_CLUSTER}"), "{pod}");
    assert!(
        pod.contains("--initial-cluster-state=${ETCD_INITIAL_CLUSTER_STATE}"),
        "{pod}"
    );
    // Scheduled snapshots are on by default (every 6 h, 7 kept); `every: ""` takes none.
    assert_eq!(
        member.snapshot_schedule,
        Some(kube_anchor_core::etcd_snapshot::Schedule {
            every: std::time::Duration::from_secs(6 * 3600),
            keep: 7
        })
    );
    // Defrag too (OpenShift's thresholds); `every: ""` never.
    assert_eq!(
        member.defrag,
        Some(kube_anchor_core::etcd_defrag::DefragPolicy {
            every: std::time::Duration::from_secs(600),
            min_bytes: 100 << 20,
            min_free_percent: 45
        })
    );
    let mut off = args.clone();
    off.extend([
        "--set",
        "membership.snapshots.schedule.every=",
        "--set",
        "membership.defrag.every=",
    ]);
    let docs_off = render("etcd", &off);
    let config_off = of_kind(&docs_off, "ConfigMap")[0]["data"]["anchor.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    let anchor_off =
        kube_anchor_core::config::parse(Path::new("/etc/kube-anchor/config/anchor.yaml"), &config_off, &roots)
            .unwrap_or_else(|e| panic!("{e}\n{config_off}"));
    let member_off = anchor_off.etcd_member.unwrap();
    assert_eq!(member_off.snapshot_schedule, None, "{config_off}");
    assert_eq!(member_off.defrag, None, "{config_off}");
    let mut bad = args.clone();
    bad.extend(["--set", "membership.snapshots.schedule.every=daily"]);
    let err = refused(&helm(&[&["template", "rel", &chart("etcd")][..], &bad[..]].concat()));
    assert!(err.contains("every"), "{err}");
    // The client key goes to the shared Secret, never to the ConfigMap.
    let secret = &of_kind(&docs, "Secret")[0]["data"];
    assert!(secret["anchor-client.key"].is_string(), "{secret:?}");
    assert!(!config.contains("CLIENT KEY"));
    // Without membership the manifest keeps the chart's initial cluster.
    let plain = render("etcd", &["-f", &example("etcd")]);
    let pod = of_kind(&plain, "ConfigMap")[0]["data"]["pod.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(pod.contains("--initial-cluster=cp-1="), "{pod}");
    // Enabled without endpoints is refused by the schema.
    let out = helm(&[
        "template",
        "rel",
        &chart("etcd"),
        "--set",
        "membership.enabled=true",
        "--set",
        "membership.endpoints=null",
    ]);
    assert!(!out.status.success());
}

#[test]
fn wrong_values_fail_with_a_clear_message() {
    let dir = chart("kube-scheduler");
    for (set, needle) in [
        ("anchor.cleanup=sometimes", "cleanup"),
        ("anchor.port=70000", "port"),
        ("anchor.trialPeriod=five minutes", "trialPeriod"),
        ("files[0].mode=rw", "mode"),
        ("component.version=latest", "version"),
        ("credentials.x=null", "credentials"),
        ("anchor.apiServers={https://10.0.0.1:6443/api}", "apiServers"),
    ] {
        let out = helm(&["template", "rel", &dir, "--set", set]);
        assert!(!out.status.success(), "{set} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.contains("values don't meet the specifications of the schema"),
            "{set}: {err}"
        );
    }
}

/// `apiServers` reaches the daemon as one comma-separated variable, and only when set.
#[test]
fn api_servers_reach_the_anchor_and_the_checkpointer_only_when_set() {
    let api_servers_env = |docs: &[Value]| -> Vec<Option<String>> {
        of_kind(docs, "DaemonSet")
            .iter()
            .map(|ds| {
                ds["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_sequence()
                    .unwrap()
                    .iter()
                    .find(|e| e["name"] == "KUBE_ANCHOR_API_SERVERS")
                    .map(|e| e["value"].as_str().unwrap().to_owned())
            })
            .collect()
    };
    let list = "{https://10.0.0.1:6443,https://10.0.0.2:6443}";
    let want = Some("https://10.0.0.1:6443,https://10.0.0.2:6443".to_owned());
    for (chart_name, key) in [("kube-apiserver", "anchor"), ("pod-checkpointer", "checkpointer")] {
        let required = if chart_name == "pod-checkpointer" {
            vec![]
        } else {
            required(chart_name)
        };
        let required: Vec<&str> = required.iter().map(String::as_str).collect();
        assert!(
            api_servers_env(&render(chart_name, &required))
                .iter()
                .all(Option::is_none),
            "{chart_name}: set by default"
        );
        let set = format!("{key}.apiServers={list}");
        let envs = api_servers_env(&render(chart_name, &[&required[..], &["--set", &set]].concat()));
        assert!(
            !envs.is_empty() && envs.iter().all(|e| *e == want),
            "{chart_name}: {envs:?}"
        );
    }
}

/// A flag of extraArgs that the chart also fixes takes the fixed flag's place (one flag, the
/// value's value), and omitArgs leaves a fixed flag out: values can state any command line.
#[test]
fn extra_args_replace_fixed_flags_in_place_and_omit_args_drop_them() {
    for name in ANCHOR_CHARTS {
        let required = required(name);
        let required: Vec<&str> = required.iter().map(String::as_str).collect();
        let command = |extra: &[&str]| -> Vec<String> {
            let docs = render(name, &[&required[..], extra].concat());
            let pod: Value =
                serde_yaml_ng::from_str(of_kind(&docs, "ConfigMap")[0]["data"]["pod.yaml"].as_str().unwrap()).unwrap();
            serde_yaml_ng::from_value(pod["spec"]["containers"][0]["command"].clone()).unwrap()
        };
        let fixed = command(&[]);
        // The second flag of every chart is a fixed one; the last is too.
        let second = fixed[2].trim_start_matches("--").split('=').next().unwrap().to_owned();
        let last = fixed
            .last()
            .unwrap()
            .trim_start_matches("--")
            .split('=')
            .next()
            .unwrap()
            .to_owned();
        let changed = command(&[
            "--set-string",
            &format!("component.extraArgs.{second}=changed"),
            "--set",
            &format!("component.omitArgs={{{last}}}"),
            "--set-string",
            "component.extraArgs.zz-extra=1",
        ]);
        let mut want = fixed.clone();
        want[2] = format!("--{second}=changed");
        want.pop();
        want.push("--zz-extra=1".into());
        assert_eq!(changed, want, "{name}");
    }
}

/// The static pod a chart renders (pod.yaml of its ConfigMap), variables left in.
fn static_pod(chart_name: &str, extra: &[&str]) -> Value {
    let docs = render(chart_name, extra);
    let text = of_kind(&docs, "ConfigMap")[0]["data"]["pod.yaml"]
        .as_str()
        .unwrap()
        .to_owned();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// The timing fields of a probe, by name.
fn timing(probe: &Value) -> BTreeMap<String, i64> {
    probe
        .as_mapping()
        .unwrap_or_else(|| panic!("no probe: {probe:?}"))
        .iter()
        .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_i64()?)))
        .collect()
}

/// Every component is probed as kubeadm probes it (cmd/kubeadm/app/util/staticpod of the pinned
/// release: LivenessProbe, ReadinessProbe and StartupProbe, the last with kubeadm's 4-minute
/// control-plane timeout), and the anchor accepts the manifest.
#[test]
fn component_probes_are_kubeadms() {
    let want =
        |fields: &[(&str, i64)]| -> BTreeMap<String, i64> { fields.iter().map(|(k, v)| (k.to_string(), *v)).collect() };
    let startup = want(&[
        ("initialDelaySeconds", 10),
        ("periodSeconds", 10),
        ("timeoutSeconds", 15),
        ("failureThreshold", 24),
    ]);
    let liveness = want(&[
        ("initialDelaySeconds", 10),
        ("periodSeconds", 10),
        ("timeoutSeconds", 15),
        ("failureThreshold", 8),
    ]);
    let readiness = want(&[("periodSeconds", 1), ("timeoutSeconds", 15), ("failureThreshold", 3)]);
    for name in ANCHOR_CHARTS {
        let pod = static_pod(name, &["-f", &example(name)]);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(timing(&c["startupProbe"]), startup, "{name}");
        assert_eq!(timing(&c["livenessProbe"]), liveness, "{name}");
        // Started once it answers what keeps it alive.
        assert_eq!(c["startupProbe"]["httpGet"], c["livenessProbe"]["httpGet"], "{name}");
        assert!(c["livenessProbe"]["httpGet"]["path"].is_string(), "{name}");
        if *name == "kube-controller-manager" {
            // kubeadm's has none either.
            assert!(c["readinessProbe"].is_null(), "{name}");
        } else {
            assert_eq!(timing(&c["readinessProbe"]), readiness, "{name}");
            assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz", "{name}");
        }
        // What the anchor writes: it accepts a startupProbe.
        let text = serde_yaml_ng::to_string(&pod).unwrap();
        let vars = kube_anchor_core::render::Variables::new(["NODE_NAME", "NODE_IP"], |n| {
            Some(if n == "NODE_NAME" {
                "cp-1".into()
            } else {
                "10.0.0.11".into()
            })
        });
        let rendered = kube_anchor_core::render::render(Path::new("pod.yaml"), text.as_bytes(), &vars).unwrap();
        kube_anchor_core::staticpod::parse(Path::new("pod.yaml"), &rendered).unwrap_or_else(|e| panic!("{name}: {e}"));
    }

    // The timing is set field by field over the defaults; a 0 stays 0; the endpoint stays.
    let pod = static_pod(
        "kube-scheduler",
        &[
            "-f",
            &example("kube-scheduler"),
            "--set",
            "component.probes.liveness.failureThreshold=3",
            "--set",
            "component.probes.startup.initialDelaySeconds=0",
            "--set",
            "component.probes.readiness.successThreshold=2",
        ],
    );
    let c = &pod["spec"]["containers"][0];
    let mut changed = liveness.clone();
    changed.insert("failureThreshold".into(), 3);
    assert_eq!(timing(&c["livenessProbe"]), changed);
    let mut changed = startup.clone();
    changed.insert("initialDelaySeconds".into(), 0);
    assert_eq!(timing(&c["startupProbe"]), changed);
    let mut changed = readiness.clone();
    changed.insert("successThreshold".into(), 2);
    assert_eq!(timing(&c["readinessProbe"]), changed);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");

    // Only the timing: no endpoint, no other kind, no success threshold but 1 where Kubernetes
    // allows none, no readiness where the chart has no readiness probe.
    for (chart_name, set, needle) in [
        ("kube-scheduler", "component.probes.liveness.httpGet.path=/x", "httpGet"),
        ("kube-scheduler", "component.probes.exec.periodSeconds=1", "exec"),
        (
            "kube-scheduler",
            "component.probes.liveness.successThreshold=2",
            "successThreshold",
        ),
        (
            "kube-scheduler",
            "component.probes.startup.periodSeconds=0",
            "periodSeconds",
        ),
        (
            "kube-controller-manager",
            "component.probes.readiness.periodSeconds=2",
            "component.probes.readiness: kube-controller-manager has no readiness probe",
        ),
    ] {
        let err = refused(&helm(&[
            "template",
            "rel",
            &chart(chart_name),
            "-f",
            &example(chart_name),
            "--set",
            set,
        ]));
        assert!(err.contains(needle), "{set}: {err}");
    }
}

/// component.extraVolumes, kubeadm's HostPathMount shape (name, hostPath, mountPath, readOnly,
/// pathType): a hostPath volume and a mount on the component container each, after the chart's
/// own; a name or mountPath used twice is refused.
#[test]
fn extra_volumes_are_host_path_mounts_of_the_component() {
    let work = tempfile::tempdir().unwrap();
    let values = |name: &str, text: &str| {
        let file = work.path().join(name);
        fs::write(&file, text).unwrap();
        file.display().to_string()
    };
    let extra = values(
        "extra.yaml",
        "component:\n  extraVolumes:\n    - {name: audit, hostPath: /var/log/kubernetes/audit, mountPath: /var/log/audit}\n    - {name: ca-certs, hostPath: /etc/ssl/certs, mountPath: /etc/ssl/certs, readOnly: true, pathType: Directory}\n",
    );
    for name in ANCHOR_CHARTS {
        let plain = static_pod(name, &["-f", &example(name)]);
        let pod = static_pod(name, &["-f", &example(name), "-f", &extra]);
        let own_volumes = plain["spec"]["volumes"].as_sequence().unwrap().clone();
        let own_mounts = plain["spec"]["containers"][0]["volumeMounts"]
            .as_sequence()
            .unwrap()
            .clone();
        let volumes = pod["spec"]["volumes"].as_sequence().unwrap();
        let mounts = pod["spec"]["containers"][0]["volumeMounts"].as_sequence().unwrap();
        assert_eq!(
            volumes[..own_volumes.len()],
            own_volumes[..],
            "{name}: the chart's own first"
        );
        assert_eq!(mounts[..own_mounts.len()], own_mounts[..], "{name}");
        let added: Vec<String> = volumes[own_volumes.len()..]
            .iter()
            .chain(&mounts[own_mounts.len()..])
            .map(|v| serde_json::to_string(v).unwrap())
            .collect();
        assert_eq!(
            added,
            [
                r#"{"name":"audit","hostPath":{"path":"/var/log/kubernetes/audit","type":"DirectoryOrCreate"}}"#,
                r#"{"name":"ca-certs","hostPath":{"path":"/etc/ssl/certs","type":"Directory"}}"#,
                r#"{"name":"audit","mountPath":"/var/log/audit"}"#,
                r#"{"name":"ca-certs","mountPath":"/etc/ssl/certs","readOnly":true}"#,
            ],
            "{name}"
        );
        let text = serde_yaml_ng::to_string(&pod)
            .unwrap()
            .replace("${NODE_IP}", "10.0.0.11")
            .replace("${NODE_NAME}", "cp-1");
        kube_anchor_core::staticpod::parse(Path::new("pod.yaml"), &text).unwrap_or_else(|e| panic!("{name}: {e}"));

        let own_name = own_volumes[0]["name"].as_str().unwrap();
        let own_path = own_mounts[0]["mountPath"].as_str().unwrap();
        for (text, needle) in [
            (
                format!("component: {{extraVolumes: [{{name: {own_name}, hostPath: /a, mountPath: /a}}]}}"),
                format!("component.extraVolumes[0]: the volume name {own_name} is taken by the chart's volume {own_name}"),
            ),
            (
                format!("component: {{extraVolumes: [{{name: a, hostPath: /a, mountPath: \"{own_path}/\"}}]}}"),
                format!("component.extraVolumes[0]: the mountPath {own_path} is taken by the chart's volume {own_name}"),
            ),
            (
                "component: {extraVolumes: [{name: a, hostPath: /a, mountPath: /a}, {name: a, hostPath: /b, mountPath: /b}]}".to_owned(),
                "component.extraVolumes[1]: the volume name a is taken by component.extraVolumes[0]".to_owned(),
            ),
            (
                "component: {extraVolumes: [{name: a, hostPath: /a, mountPath: /a}, {name: b, hostPath: /b, mountPath: /a}]}".to_owned(),
                "component.extraVolumes[1]: the mountPath /a is taken by component.extraVolumes[0]".to_owned(),
            ),
            (
                "component: {extraVolumes: [{name: a, hostPath: /a, mountPath: /a, pathType: Dir}]}".to_owned(),
                "pathType".to_owned(),
            ),
            (
                "component: {extraVolumes: [{name: a, hostPath: /a, mountPath: /a, ro: true}]}".to_owned(),
                "additional properties 'ro' not allowed".to_owned(),
            ),
            (
                "component: {extraVolumes: [{name: a, hostPath: a, mountPath: /a}]}".to_owned(),
                "hostPath".to_owned(),
            ),
            (
                "component: {extraVolumes: [{name: A_1, hostPath: /a, mountPath: /a}]}".to_owned(),
                "name".to_owned(),
            ),
        ] {
            let file = values("bad.yaml", &text);
            let err = refused(&helm(&["template", "rel", &chart(name), "-f", &example(name), "-f", &file]));
            assert!(err.contains(&needle), "{name}: {text}: {err}");
        }
    }
}

/// The usual chart values: pull secrets, pod labels and annotations (never the chart's own),
/// nameOverride (names only: the labels the anchors find each other by stay), and the images
/// pinned by digest.
#[test]
fn pull_secrets_pod_metadata_names_and_digests() {
    let digest = format!("sha256:{}", "ab".repeat(32));
    let conventions = [
        "--set",
        "imagePullSecrets[0].name=regcred",
        "--set",
        "podLabels.team=control-plane",
        "--set",
        "podAnnotations.example\\.com/note=kept",
        "--set",
        "nameOverride=keeper",
    ];
    for name in ANCHOR_CHARTS {
        let component = *name;
        let set_digest = format!("component.digest={digest}");
        let docs = render(
            name,
            &[&["-f", &example(name), "--set", &set_digest], &conventions[..]].concat(),
        );
        for doc in &docs {
            let meta = &doc["metadata"];
            let what = format!(
                "{name}: {} {}",
                doc["kind"].as_str().unwrap(),
                meta["name"].as_str().unwrap()
            );
            assert!(meta["name"].as_str().unwrap().starts_with("rel-keeper"), "{what}");
            assert_eq!(meta["labels"]["app.kubernetes.io/name"], "kube-anchor", "{what}");
            assert_eq!(meta["labels"]["app.kubernetes.io/component"], component, "{what}");
            assert_eq!(meta["labels"]["app.kubernetes.io/instance"], "rel", "{what}");
        }
        for ds in of_kind(&docs, "DaemonSet") {
            let template = &ds["spec"]["template"];
            let spec = &template["spec"];
            assert_eq!(spec["imagePullSecrets"][0]["name"], "regcred", "{name}");
            assert_eq!(spec["serviceAccountName"], "rel-keeper", "{name}");
            let labels = &template["metadata"]["labels"];
            assert_eq!(labels["team"], "control-plane", "{name}");
            assert_eq!(labels["app.kubernetes.io/name"], "kube-anchor", "{name}");
            assert_eq!(labels["app.kubernetes.io/component"], component, "{name}");
            for (k, v) in ds["spec"]["selector"]["matchLabels"].as_mapping().unwrap() {
                assert_eq!(&labels[k.as_str().unwrap()], v, "{name}: the selector selects the pods");
            }
            let annotations = &template["metadata"]["annotations"];
            assert_eq!(annotations["example.com/note"], "kept", "{name}");
            assert!(annotations["kube-anchor.io/expect-inputs"].is_string(), "{name}");
        }
        let pod = static_pod(name, &["-f", &example(name), "--set", &set_digest]);
        assert_eq!(
            pod["spec"]["containers"][0]["image"],
            format!("registry.k8s.io/{name}@{digest}").as_str(),
            "{name}"
        );
        // Without a digest, the version's tag.
        let pod = static_pod(name, &["-f", &example(name)]);
        assert!(
            !pod["spec"]["containers"][0]["image"].as_str().unwrap().contains('@'),
            "{name}"
        );

        for (set, needle) in [
            (
                "podLabels.app\\.kubernetes\\.io/name=other",
                "podLabels: app.kubernetes.io/name: the chart sets these itself",
            ),
            (
                "podLabels.app\\.kubernetes\\.io/component=other",
                "podLabels: app.kubernetes.io/component: the chart sets",
            ),
            (
                "podLabels.kube-anchor\\.io/daemonset=other",
                "podLabels: kube-anchor.io/daemonset: the chart sets",
            ),
            (
                "podAnnotations.kube-anchor\\.io/expect-inputs=x",
                "podAnnotations: kube-anchor.io/expect-inputs: the chart sets",
            ),
            ("component.digest=latest", "digest"),
            ("imagePullSecrets[0].nam=regcred", "nam"),
        ] {
            let err = refused(&helm(&[
                "template",
                "rel",
                &chart(name),
                "-f",
                &example(name),
                "--set",
                set,
            ]));
            assert!(err.contains(needle), "{name} {set}: {err}");
        }
    }

    // The pod-checkpointer chart: the same, and its image by digest as documented.
    let checkpointer = chart("pod-checkpointer");
    let docs = render(
        "pod-checkpointer",
        &[&["--set", &format!("image.digest={digest}")], &conventions[..]].concat(),
    );
    let ds = of_kind(&docs, "DaemonSet")[0];
    assert_eq!(ds["metadata"]["name"], "rel-keeper");
    let template = &ds["spec"]["template"];
    assert_eq!(
        template["spec"]["containers"][0]["image"],
        format!("kube-anchor/kube-anchor@{digest}").as_str()
    );
    assert_eq!(template["spec"]["imagePullSecrets"][0]["name"], "regcred");
    assert_eq!(template["metadata"]["labels"]["team"], "control-plane");
    assert_eq!(
        template["metadata"]["labels"]["app.kubernetes.io/component"],
        "pod-checkpointer"
    );
    assert_eq!(template["metadata"]["annotations"]["example.com/note"], "kept");
    assert_eq!(
        template["metadata"]["annotations"]["checkpointer.alpha.coreos.com/checkpoint"],
        "true"
    );
    for set in [
        "podLabels.app\\.kubernetes\\.io/instance=other",
        "podAnnotations.checkpointer\\.alpha\\.coreos\\.com/checkpoint-of=x",
        "image.digest=latest",
    ] {
        refused(&helm(&["template", "rel", &checkpointer, "--set", set]));
    }
}

/// What `helm uninstall` keeps (resource-policy keep), the NOTES say how to delete, object by
/// object.
#[test]
fn the_notes_name_every_object_kept_on_uninstall() {
    for name in ANCHOR_CHARTS.iter().chain(&["pod-checkpointer"]) {
        let mut args = vec!["install", "rel", "--dry-run=client", "-n", "ns"];
        let dir = chart(name);
        args.push(&dir);
        let example = example(name);
        if *name != "pod-checkpointer" {
            args.extend(["-f", example.as_str()]);
        } else {
            args.extend(["--set", "checkpointNamespaces={ns,other}"]);
        }
        let out = ok(&helm(&args));
        let (manifest, notes) = out.split_once("\nNOTES:\n").unwrap();
        let manifest = manifest.split_once("\nMANIFEST:\n").unwrap().1;
        let kept: Vec<Value> = documents(manifest)
            .into_iter()
            .filter(|d| d["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep")
            .collect();
        assert!(kept.len() >= 5, "{name}: {kept:?}");
        for object in kept {
            let kind = object["kind"].as_str().unwrap().to_lowercase();
            let object_name = object["metadata"]["name"].as_str().unwrap();
            let namespace = object["metadata"]["namespace"].as_str();
            let named = notes.lines().any(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                words.first() == Some(&"kubectl")
                    && words.contains(&"delete")
                    && words.iter().any(|w| w.split(',').any(|k| k == kind))
                    && words.last() == Some(&object_name)
                    && namespace.is_none_or(|ns| l.contains(&format!(" -n {ns} ")))
            });
            assert!(
                named,
                "{name}: no delete of {kind} {object_name} in {namespace:?}:\n{notes}"
            );
        }
    }
}

#[test]
fn charts_share_one_values_schema() {
    let common = fs::read_to_string(repo_root().join("charts/common/values.schema.json")).unwrap();
    for name in ANCHOR_CHARTS {
        let copy = fs::read_to_string(repo_root().join("charts").join(name).join("values.schema.json")).unwrap();
        assert_eq!(
            copy, common,
            "charts/{name}/values.schema.json: run charts/sync-schema.sh"
        );
    }
}

#[test]
fn plain_manifests_match_a_fresh_render() {
    let out = Command::new(repo_root().join("manifests/generate.sh"))
        .arg("--check")
        .env("HELM", tool("helm"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The alerts each component chart renders with `prometheusRule.enabled`: the real promtool checks
/// the rules and runs their unit tests (tests/alerts/rules.test.yaml, with the chart's component
/// put in: every alert fires when it should, not before, and not for another component's
/// series). The defaults render no PrometheusRule.
#[test]
fn alerts_pass_promtool_check_and_unit_tests() {
    let tests = fs::read_to_string(repo_root().join("tests/alerts/rules.test.yaml")).unwrap();
    for name in ANCHOR_CHARTS {
        let values = example(name);
        assert!(
            render(name, &["-f", &values])
                .iter()
                .all(|d| d["kind"] != "PrometheusRule"),
            "{name}: a PrometheusRule by default"
        );
        let docs = render(name, &["-f", &values, "--set", "prometheusRule.enabled=true"]);
        let rule = docs
            .iter()
            .find(|d| d["kind"] == "PrometheusRule")
            .unwrap_or_else(|| panic!("{name}: no PrometheusRule"));
        let component = docs
            .iter()
            .find(|d| d["kind"] == "DaemonSet")
            .and_then(|d| d["metadata"]["labels"]["app.kubernetes.io/component"].as_str())
            .unwrap()
            .to_owned();
        let work = tempfile::tempdir().unwrap();
        let rules = work.path().join("rules.yaml");
        fs::write(&rules, serde_yaml_ng::to_string(&rule["spec"]).unwrap()).unwrap();
        let unit_tests = work.path().join("rules.test.yaml");
        fs::write(&unit_tests, tests.replace("COMPONENT", &component)).unwrap();
        for args in [["check", "rules"], ["test", "rules"]] {
            let file = if args[0] == "check" { &rules } else { &unit_tests };
            let out = Command::new(tool("promtool"))
                .args(args)
                .arg(file)
                .current_dir(work.path())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{name}: promtool {} {}:\n{}{}",
                args.join(" "),
                file.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rendered_output_passes_a_server_side_dry_run() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("dryrun").await;
    let work = tempfile::tempdir().unwrap();
    // The alerts' PrometheusRule is judged by prometheus-operator's own CRD schema.
    let crd = tool("prometheusrules-crd.yaml");
    ok(&kubectl(
        &cp.admin_kubeconfig,
        &["apply", "--server-side", "-f", crd.to_str().unwrap()],
    ));
    ok(&kubectl(
        &cp.admin_kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/prometheusrules.monitoring.coreos.com",
        ],
    ));
    for name in ANCHOR_CHARTS {
        let dir = chart(name);
        let rendered = ok(&helm(&[
            "template",
            "rel",
            &dir,
            "--namespace",
            &ns,
            "-f",
            &example(name),
            "--set",
            "prometheusRule.enabled=true",
        ]));
        assert!(rendered.contains("kind: PrometheusRule"), "{name}");
        let file = work.path().join(format!("{name}.yaml"));
        fs::write(&file, rendered).unwrap();
        let out = kubectl(
            &cp.admin_kubeconfig,
            &["apply", "--dry-run=server", "-f", file.to_str().unwrap()],
        );
        ok(&out);
    }
    let rendered = ok(&helm(&[
        "template",
        "rel",
        &chart("pod-checkpointer"),
        "--namespace",
        &ns,
        "--set",
        &format!("checkpointNamespaces[0]={ns}"),
    ]));
    let file = work.path().join("pod-checkpointer.yaml");
    fs::write(&file, rendered).unwrap();
    ok(&kubectl(
        &cp.admin_kubeconfig,
        &["apply", "--dry-run=server", "-f", file.to_str().unwrap()],
    ));
}

/// `helm install` of the etcd chart with its defaults, against the real API server: refused
/// before anything is created (no release record, no object of the release).
#[tokio::test(flavor = "multi_thread")]
async fn installing_etcd_with_its_defaults_creates_nothing() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("etcddefaults").await;
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    let release = format!("etcd-{ns}");
    let err = refused(&helm(&[
        "install",
        &release,
        &chart("etcd"),
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]));
    assert!(err.contains(NO_MEMBER_LIST), "{err}");
    // Every status by default (a failed or pending release too).
    let listed = ok(&helm(&["list", "-q", "-n", &ns, "--kubeconfig", &kubeconfig]));
    assert!(listed.trim().is_empty(), "a release was recorded: {listed}");
    let admin = cp.admin().await;
    let of_release = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    let mut left: Vec<String> = Vec::new();
    macro_rules! names {
        ($kind:ty) => {
            Api::<$kind>::namespaced(admin.clone(), &ns)
                .list(&of_release)
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect::<Vec<_>>()
        };
    }
    left.extend(names!(DaemonSet));
    left.extend(names!(ConfigMap));
    left.extend(names!(ServiceAccount));
    left.extend(names!(Role));
    left.extend(names!(RoleBinding));
    left.extend(
        Api::<Secret>::namespaced(admin.clone(), &ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .filter(|n| n.starts_with("sh.helm.release") || n.starts_with(&release)),
    );
    let full = format!("{release}-anchor");
    if Api::<ClusterRole>::all(admin.clone())
        .get_opt(&full)
        .await
        .unwrap()
        .is_some()
    {
        left.push(format!("ClusterRole {full}"));
    }
    if Api::<ClusterRoleBinding>::all(admin.clone())
        .get_opt(&full)
        .await
        .unwrap()
        .is_some()
    {
        left.push(format!("ClusterRoleBinding {full}"));
    }
    assert!(left.is_empty(), "created by a refused install: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_checkpointer_reads_secrets_only_where_parents_may_live() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("ckptrbac").await;
    let other = cp.namespace("ckptother").await;
    let work = tempfile::tempdir().unwrap();
    let rendered = ok(&helm(&[
        "template",
        "ckpt",
        &chart("pod-checkpointer"),
        "--namespace",
        &ns,
        "--set",
        &format!("checkpointNamespaces[0]={ns}"),
        "--set",
        &format!("fullnameOverride=ckpt-{ns}"),
    ]));
    let file = work.path().join("rbac.yaml");
    fs::write(&file, rendered).unwrap();
    ok(&kubectl(
        &cp.admin_kubeconfig,
        &["apply", "-f", file.to_str().unwrap(), "-n", &ns],
    ));
    let who = format!("--as=system:serviceaccount:{ns}:ckpt-{ns}");
    for (verb, resource, namespace, allowed) in [
        ("get", "secrets", &ns, true),
        ("get", "configmaps", &ns, true),
        ("list", "secrets", &ns, false),
        ("get", "secrets", &other, false),
        ("watch", "pods", &other, true),
        ("get", "nodes/proxy", &ns, true),
        // pre-stop: other checkpointer DaemonSets, and the anchors that depend on it.
        ("list", "daemonsets.apps", &other, true),
        ("list", "deployments.apps", &ns, false),
        ("delete", "pods", &ns, false),
        ("create", "pods", &ns, false),
    ] {
        let out = kubectl(
            &cp.admin_kubeconfig,
            &["auth", "can-i", verb, resource, "-n", namespace, &who],
        );
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(answer == "yes", allowed, "{verb} {resource} in {namespace}: {answer}");
    }
}

/// What the kubelet would give the anchor container: the ConfigMap and Secret as volumes.
async fn project_volumes(
    client: &kube::Client,
    ns: &str,
    name: &str,
    work: &Path,
    volumes: &mut Option<(ConfigVolume, ConfigVolume)>,
) -> PathBuf {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let secret = Api::<Secret>::namespaced(client.clone(), ns).get(name).await.unwrap();
    let config: Vec<(String, Vec<u8>)> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    let secrets: Vec<(String, Vec<u8>)> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    match volumes {
        Some((c, s)) => {
            c.update(&refs(&config));
            s.update(&refs(&secrets));
        }
        None => {
            *volumes = Some((
                ConfigVolume::new(&work.join("config"), &refs(&config)),
                ConfigVolume::new(&work.join("secrets"), &refs(&secrets)),
            ));
        }
    }
    work.join("config/anchor.yaml")
}

/// The anchor container's KUBE_ANCHOR_* environment from the DaemonSet, minus what only makes
/// sense inside the pod (paths of its volumes, host mounts and socket, its listen address).
async fn container_env(client: &kube::Client, ns: &str, ds: &str) -> Vec<(String, String)> {
    let ds = Api::<DaemonSet>::namespaced(client.clone(), ns).get(ds).await.unwrap();
    let env = ds.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap_or_default();
    env.into_iter()
        .filter_map(|e| Some((e.name, e.value?)))
        .filter(|(k, _)| {
            k.starts_with("KUBE_ANCHOR_")
                && !matches!(
                    k.as_str(),
                    "KUBE_ANCHOR_CONFIG" | "KUBE_ANCHOR_HOST_ROOT" | "KUBE_ANCHOR_LISTEN" | "KUBE_ANCHOR_HEALTH_SOCKET"
                )
        })
        .collect()
}

async fn running_pod(client: &kube::Client, ns: &str, node: &NodeHandle, not: Option<&str>) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let node = node.name.clone();
    let not = not.map(str::to_owned);
    eventually(WAIT, "an anchor pod Running on the node", || {
        let (pods, node, not) = (pods.clone(), node.clone(), not.clone());
        async move {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=kube-anchor"))
                .await
                .ok()?;
            list.items.into_iter().find_map(|p| {
                let name = p.metadata.name.clone()?;
                let ok = p.status.as_ref()?.phase.as_deref() == Some("Running")
                    && p.spec.as_ref()?.node_name.as_deref() == Some(node.as_str())
                    && p.metadata.deletion_timestamp.is_none()
                    && not.as_deref() != Some(&name);
                ok.then_some(name)
            })
        }
    })
    .await
}

/// Keeps a terminating pod in the API while the test plays the kubelet running its preStop hook.
async fn hold(client: &kube::Client, ns: &str, pod: &str, on: bool) {
    let finalizers = if on {
        serde_json::json!(["kube-anchor.io/test-hold"])
    } else {
        serde_json::Value::Null
    };
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

fn pre_stop(
    config: &Path,
    node: &NodeHandle,
    ns: &str,
    pod: &str,
    kubeconfig: &Path,
    env: &[(String, String)],
) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["pre-stop", "--output", "json", "--config"])
        .arg(config)
        .arg("--host-root")
        .arg(node.host_root())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("POD_NAME", pod)
        .env("POD_NAMESPACE", ns)
        .env("NODE_NAME", &node.name)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn install_upgrade_and_uninstall_a_component_chart() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp
        .add_node("charts-node", &[("kube-anchor.io/charts-test", "enabled")])
        .await;
    let ns = cp.namespace("charts").await;
    let admin = cp.admin().await;
    let work = tempfile::tempdir().unwrap();
    let values = work.path().join("values.yaml");
    fs::write(
        &values,
        format!(
            "nodeSelector: {{kube-anchor.io/charts-test: enabled, node-role.kubernetes.io/control-plane: null}}\nanchor: {{healthURL: \"\"}}\ncomponent: {{namespace: {ns}}}\ncredentials: {{scheduler.conf: \"kubeconfig v1\"}}\n"
        ),
    )
    .unwrap();
    let dir = chart("kube-scheduler");
    let kubeconfig = cp.admin_kubeconfig.display().to_string();
    ok(&helm(&[
        "install",
        "sched",
        &dir,
        "-n",
        &ns,
        "-f",
        values.to_str().unwrap(),
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]));

    // The chart's own ServiceAccount, with exactly the chart's RBAC; its token bound to a pod on
    // the node, as a projected token is (the chart's policy lets no other write the rollout Lease).
    let sa_kubeconfig = cp.kubeconfig_bound_on(&ns, "sched-anchor", &node.name).await;
    for (verb, resource, allowed) in [
        ("list", "pods", true),
        ("watch", "pods", true),
        ("get", "nodes", true),
        ("get", "daemonsets.apps", true),
        // pre-stop: the other anchors of the component.
        ("list", "daemonsets.apps", true),
        ("create", "events.events.k8s.io", true),
        // Its node's AnchorStatus (which one: the chart's ValidatingAdmissionPolicy).
        ("patch", "anchorstatuses.kube-anchor.io", true),
        ("delete", "anchorstatuses.kube-anchor.io", false),
        ("get", "secrets", false),
        ("list", "configmaps", false),
        ("delete", "pods", false),
        ("create", "pods", false),
        ("update", "daemonsets.apps", false),
        ("patch", "nodes", false),
    ] {
        let out = kubectl(
            &cp.admin_kubeconfig,
            &[
                "auth",
                "can-i",
                verb,
                resource,
                "-n",
                &ns,
                &format!("--as=system:serviceaccount:{ns}:sched-anchor"),
            ],
        );
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(answer == "yes", allowed, "{verb} {resource}: {answer}");
    }
    // The rollout Leases, kube-anchor-control-plane and kube-anchor-<component>, in the release's
    // namespace only (a Role).
    for (verb, resource, namespace, allowed) in [
        (
            "update",
            "leases.coordination.k8s.io/kube-anchor-control-plane",
            ns.as_str(),
            true,
        ),
        (
            "get",
            "leases.coordination.k8s.io/kube-anchor-control-plane",
            "kube-system",
            false,
        ),
        (
            "get",
            "leases.coordination.k8s.io/kube-anchor-kube-scheduler",
            ns.as_str(),
            true,
        ),
        (
            "update",
            "leases.coordination.k8s.io/kube-anchor-kube-scheduler",
            &ns,
            true,
        ),
        ("create", "leases.coordination.k8s.io", &ns, true),
        ("get", "leases.coordination.k8s.io/kube-anchor-etcd", &ns, false),
        ("update", "leases.coordination.k8s.io/other", &ns, false),
        (
            "delete",
            "leases.coordination.k8s.io/kube-anchor-kube-scheduler",
            &ns,
            false,
        ),
        ("list", "leases.coordination.k8s.io", &ns, false),
        ("create", "leases.coordination.k8s.io", "kube-system", false),
        (
            "get",
            "leases.coordination.k8s.io/kube-anchor-kube-scheduler",
            "default",
            false,
        ),
    ] {
        let out = kubectl(
            &cp.admin_kubeconfig,
            &[
                "auth",
                "can-i",
                verb,
                resource,
                "-n",
                namespace,
                &format!("--as=system:serviceaccount:{ns}:sched-anchor"),
            ],
        );
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(answer == "yes", allowed, "{verb} {resource} in {namespace}: {answer}");
    }

    // The DaemonSet pod runs; its anchor (run here as a process against the node's directories,
    // the node's runtime being a fake) writes the static pod, and the mirror pod appears.
    let pod = running_pod(&admin, &ns, &node, None).await;
    let mut volumes = None;
    let config = project_volumes(&admin, &ns, "sched-anchor", work.path(), &mut volumes).await;
    let env = container_env(&admin, &ns, "sched-anchor").await;
    let start = |pod: &str, log: &str| {
        let args: Vec<String> = [
            "--kubeconfig",
            sa_kubeconfig.to_str().unwrap(),
            "--pod-name",
            pod,
            "--pod-namespace",
            &ns,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Daemon::start_with_env(
            &config,
            &node.host_root(),
            &node.name,
            &args,
            &env,
            &work.path().join(log),
        )
    };
    let mut d = start(&pod, "anchor-1.log");
    wait_until(WAIT, "the first anchor ready", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 200)
    });
    let manifest = node.host_root().join("etc/kubernetes/manifests/kube-scheduler.yaml");
    assert_eq!(
        fs::read_to_string(node.host_root().join("etc/kubernetes/scheduler.conf")).unwrap(),
        "kubeconfig v1"
    );

    // helm upgrade with a changed value rolls the pods; the static pod is never removed.
    let gone = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (gone, manifest) = (gone.clone(), manifest.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        (
            std::thread::spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if !manifest.exists() {
                        gone.store(true, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }),
            stop,
        )
    };
    hold(&admin, &ns, &pod, true).await;
    ok(&helm(&[
        "upgrade",
        "sched",
        &dir,
        "-n",
        &ns,
        "-f",
        values.to_str().unwrap(),
        "--set",
        "component.extraArgs.v=2",
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]));
    let new_pod = running_pod(&admin, &ns, &node, Some(&pod)).await;
    let decision = pre_stop(&config, &node, &ns, &pod, &sa_kubeconfig, &env);
    assert_eq!(decision["decision"], "keep", "{decision}");
    d.signal(libc::SIGTERM);
    assert_eq!(d.child.wait().unwrap().code(), Some(0));
    hold(&admin, &ns, &pod, false).await;
    project_volumes(&admin, &ns, "sched-anchor", work.path(), &mut volumes).await;
    d = start(&new_pod, "anchor-2.log");
    wait_until(WAIT, "the new version on the node", &d, || {
        fs::read_to_string(&manifest).is_ok_and(|m| m.contains("--v=2"))
    });
    wait_until(WAIT, "the new anchor ready", &d, || {
        d.get("/readyz").is_some_and(|(c, _)| c == 200)
    });
    watcher.1.store(true, Ordering::Relaxed);
    watcher.0.join().unwrap();
    assert!(
        !gone.load(Ordering::Relaxed),
        "the static pod manifest went missing during the upgrade"
    );

    // helm uninstall: the hook sees the DaemonSet go and, once the Node consents, leaves the
    // node clean.
    hold(&admin, &ns, &new_pod, true).await;
    let out = ok(&helm(&[
        "uninstall",
        "sched",
        "-n",
        &ns,
        "--kubeconfig",
        &kubeconfig,
        "--wait=false",
    ]));
    assert!(
        out.contains("kept due to the resource policy") || out.contains("resource policy"),
        "{out}"
    );
    // The kubelet runs the hook once garbage collection deletes the pod.
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    eventually(WAIT, "the anchor pod terminating", || {
        let pods = pods.clone();
        let new_pod = new_pod.clone();
        async move { pods.get(&new_pod).await.ok()?.metadata.deletion_timestamp.map(|_| ()) }
    })
    .await;
    // The chart keeps the scheduler's last copy (`anchor.quorumGuard: last-copy`) until the
    // Node consents, as its NOTES say.
    let decision = pre_stop(&config, &node, &ns, &new_pod, &sa_kubeconfig, &env);
    assert_eq!(decision["decision"], "held", "{decision}");
    assert!(manifest.exists());
    let consent = serde_json::json!({"metadata": {"annotations": {"kube-anchor.io/decommission": "true"}}});
    Api::<k8s_openapi::api::core::v1::Node>::all(admin.clone())
        .patch(
            &node.name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&consent),
        )
        .await
        .unwrap();
    let decision = pre_stop(&config, &node, &ns, &new_pod, &sa_kubeconfig, &env);
    assert_eq!(decision["decision"], "remove", "{decision}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !manifest.exists(),
        "the running anchor must not put the manifest back after the decision"
    );
    d.signal(libc::SIGTERM);
    let _ = d.child.wait();
    hold(&admin, &ns, &new_pod, false).await;
    let mut left: BTreeMap<String, u64> = BTreeMap::new();
    for entry in walk(&node.host_root().join("etc/kubernetes")) {
        left.insert(entry.display().to_string(), 0);
    }
    assert!(left.is_empty(), "files left on the node: {left:?}");
    let state: Vec<String> = walk(&node.host_root().join("var/lib/kube-anchor"))
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        state.iter().all(|p| !p.ends_with(".lkg.json")),
        "the last-known-good snapshot (with keys) must go too: {state:?}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Each component chart's client checks and dependencies reach the daemon in the shapes its own
/// parsers accept (`--client-checks`, `--depends-on`), `${NODE_IP}` left for the kubelet to
/// expand; and a check the schema does not know is refused by helm.
#[test]
fn client_checks_and_dependency_health_urls_reach_the_anchor_in_shapes_it_parses() {
    let env_of = |docs: &[Value], name: &str| -> Option<String> {
        of_kind(docs, "DaemonSet")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .map(|e| e["value"].as_str().unwrap().to_owned())
    };
    let expect = [
        ("etcd", vec!["kube-apiserver (/readyz/etcd)"], None),
        (
            "kube-apiserver",
            vec![
                "the anchor's service account",
                "a client certificate of the cluster CA (apiserver-kubelet-client.crt)",
            ],
            Some(("etcd", "http://127.0.0.1:2381/health")),
        ),
        (
            "kube-controller-manager",
            vec!["kube-controller-manager"],
            Some(("kube-apiserver", "https://127.0.0.1:6443/readyz")),
        ),
        (
            "kube-scheduler",
            vec!["kube-scheduler"],
            Some(("kube-apiserver", "https://127.0.0.1:6443/readyz")),
        ),
    ];
    for (chart_name, clients, dependency) in expect {
        let required = required(chart_name);
        let args: Vec<&str> = required.iter().map(String::as_str).collect();
        let docs = render(chart_name, &args);
        let checks: kube_anchor_k8s::client_check::ClientChecks = env_of(&docs, "KUBE_ANCHOR_CLIENT_CHECKS")
            .unwrap_or_else(|| panic!("{chart_name}: no client checks"))
            .parse()
            .unwrap_or_else(|e| panic!("{chart_name}: {e}"));
        let names: Vec<&str> = checks.0.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, clients, "{chart_name}");
        let depends_on = env_of(&docs, "KUBE_ANCHOR_DEPENDS_ON");
        let parsed: Vec<kube_anchor_core::decommission::Dependency> = depends_on
            .iter()
            .flat_map(|v| v.split(','))
            .map(|d| d.parse().unwrap())
            .collect();
        let want: Vec<_> = dependency
            .map(|(component, url)| kube_anchor_core::decommission::Dependency {
                component: component.into(),
                health_url: Some(url.into()),
            })
            .into_iter()
            .collect();
        assert_eq!(parsed, want, "{chart_name}");
    }
    // A kube-apiserver bound to the node's address only: the checks follow it.
    let required = required("kube-apiserver");
    let mut args: Vec<&str> = required.iter().map(String::as_str).collect();
    let moved = r#"anchor.clientChecks=[{"name":"the anchor's service account","url":"https://${NODE_IP}:6443/api","anchorCredentials":true}]"#;
    args.extend(["--set-json", moved]);
    let docs = render("kube-apiserver", &args);
    let value = env_of(&docs, "KUBE_ANCHOR_CLIENT_CHECKS").unwrap();
    assert!(value.contains("https://$(NODE_IP):6443/api"), "{value}");
    let mut args: Vec<&str> = required.iter().map(String::as_str).collect();
    let unknown = r#"anchor.clientChecks=[{"name":"x","url":"https://127.0.0.1:6443/api","token":"t"}]"#;
    args.extend(["--set-json", unknown]);
    let chart = chart("kube-apiserver");
    let mut full = vec!["template", "rel", chart.as_str()];
    full.extend(args);
    let err = refused(&helm(&full));
    assert!(err.contains("token"), "{err}");
}
