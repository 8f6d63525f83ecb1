//! The static-pod checks of `staticpod::parse_for_node` against the real decision, as a
//! differential test: the kubelet validates a manifest with `validation.ValidatePodCreate` after
//! naming it `<name>-<node>` and setting `spec.nodeName` (`applyDefaults`), and the API server
//! must then accept its mirror pod. The test control plane's kube-apiserver (same pinned release)
//! runs the same validation on create, so a server-side dry run of the mirror pod, sent by the
//! node itself (NodeRestriction applies), is Kubernetes' verdict. Every case is judged by both;
//! any disagreement fails the test with its smallest form.
//!
//! The cases: hand-written ones below, every disagreement ever found
//! (`kubelet_rules/regressions.json`), and changes to a realistic manifest drawn from
//! `kubelet_rules/catalog.rs`, each alone and then a seeded draw of one to three at once.
//! `KUBE_ANCHOR_RULES_CASES` (default 2000) and
//! `KUBE_ANCHOR_RULES_SEED` set how many and which; `tools/kubelet-rules.sh` runs long.
//! (YAML merge keys are a decoding question, not a validation one: `staticpod` refuses them and
//! its unit tests cover that.)

#[path = "kubelet_rules/catalog.rs"]
mod catalog;
mod support;

use std::path::Path;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube_anchor_core::staticpod;
use serde_json::Value;
use support::control_plane;

/// A realistic node name: the kubelet appends `-<node name>`, so a name's room depends on it.
const NODE: &str = "control-plane-1.example.internal";

fn cases() -> Vec<(&'static str, String)> {
    let base = "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler}\nspec:\n  automountServiceAccountToken: false\n  containers: [{name: c, image: i}]\n";
    let with = |from: &str, to: &str| base.replace(from, to);
    let longest = "a".repeat(253 - 1 - NODE.len());
    vec![
        ("valid", base.to_owned()),
        ("dotted name", with("kube-scheduler", "kube-scheduler.v2")),
        ("longest name", with("kube-scheduler", &longest)),
        ("name one too long", with("kube-scheduler", &format!("{longest}a"))),
        ("300-character name", with("kube-scheduler", &"a".repeat(300))),
        ("bad name", with("kube-scheduler", "Kube_Scheduler!!")),
        (
            "bad container name",
            with("{name: c, image: i}", "{name: BAD NAME, image: i}"),
        ),
        ("container without image", with("{name: c, image: i}", "{name: c}")),
        (
            "container with empty image",
            with("{name: c, image: i}", "{name: c, image: ''}"),
        ),
        ("container without name", with("{name: c, image: i}", "{image: i}")),
        (
            "duplicate containers",
            with("{name: c, image: i}", "{name: c, image: i}, {name: c, image: j}"),
        ),
        (
            "init container named like a container",
            format!("{base}  initContainers: [{{name: c, image: i}}]\n"),
        ),
        (
            "init container",
            format!("{base}  initContainers: [{{name: init, image: i}}]\n"),
        ),
        (
            "duplicate volumes",
            format!("{base}  volumes: [{{name: v, emptyDir: {{}}}}, {{name: v, emptyDir: {{}}}}]\n"),
        ),
        (
            "bad volume name",
            format!("{base}  volumes: [{{name: V_1, emptyDir: {{}}}}]\n"),
        ),
        (
            "scheduling gates",
            format!("{base}  schedulingGates: [{{name: wait}}]\n"),
        ),
        (
            "ephemeral container",
            format!("{base}  ephemeralContainers: [{{name: debug, image: i}}]\n"),
        ),
        (
            "mount of a missing volume",
            with(
                "{name: c, image: i}",
                "{name: c, image: i, volumeMounts: [{name: nope, mountPath: /x}]}",
            ),
        ),
        (
            "mount of a volume",
            format!(
                "{}  volumes: [{{name: v, hostPath: {{path: /x}}}}]\n",
                with(
                    "{name: c, image: i}",
                    "{name: c, image: i, volumeMounts: [{name: v, mountPath: /x}]}"
                )
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn static_pod_checks_agree_with_the_pinned_validation() {
    let cp = control_plane::shared().await;
    let node = cp.add_node(NODE, &[]).await;
    let judge = Kubernetes::new(cp, &node).await;
    let mut report = Report::default();

    for (case, text) in cases() {
        let doc: Value = serde_yaml_ng::from_str(&text).unwrap();
        let verdicts = judge.both(&doc).await;
        report.count(&verdicts);
        if let Some(line) = verdicts.disagreement() {
            report.disagreements.push(format!("{case}: {line}"));
        }
    }

    let regressions: Vec<Vec<(String, Value)>> =
        serde_json::from_str(include_str!("kubelet_rules/regressions.json")).expect("regressions.json");
    for changes in &regressions {
        let verdicts = judge.both(&apply(changes)).await;
        report.count(&verdicts);
        if let Some(line) = verdicts.disagreement() {
            report
                .disagreements
                .push(format!("regression {}: {line}", show(changes)));
        }
    }

    // Every change of the catalog alone.
    let catalog = catalog::changes();
    for (pointer, values) in &catalog {
        for value in values {
            let changes = vec![((*pointer).to_owned(), value.clone())];
            let verdicts = judge.both(&apply(&changes)).await;
            report.count(&verdicts);
            if let Some(line) = verdicts.disagreement() {
                report.disagreements.push(format!("single {}: {line}", show(&changes)));
            }
        }
    }

    let cases: usize = std::env::var("KUBE_ANCHOR_RULES_CASES").map_or(2000, |v| v.parse().expect("a number of cases"));
    let seed: u64 = std::env::var("KUBE_ANCHOR_RULES_SEED").map_or(34, |v| v.parse().expect("a seed"));
    let mut rng = fastrand::Rng::with_seed(seed);
    let generated: Vec<Vec<(String, Value)>> = (0..cases)
        .map(|_| {
            let n = rng.usize(1..=3);
            let mut picked: Vec<(String, Value)> = Vec::new();
            for _ in 0..n {
                let (pointer, values) = &catalog[rng.usize(..catalog.len())];
                picked.retain(|(p, _)| p != pointer);
                picked.push(((*pointer).to_owned(), values[rng.usize(..values.len())].clone()));
            }
            picked
        })
        .collect();
    let judged: Vec<(Vec<(String, Value)>, Verdicts)> = futures::stream::iter(generated)
        .map(|changes| async {
            let verdicts = judge.both(&apply(&changes)).await;
            (changes, verdicts)
        })
        .buffered(8)
        .collect()
        .await;
    let mut found: Vec<Vec<(String, Value)>> = Vec::new();
    for (changes, verdicts) in judged {
        report.count(&verdicts);
        if verdicts.disagreement().is_some() {
            let smallest = judge.shrink(changes).await;
            if !found.contains(&smallest) {
                found.push(smallest);
            }
        }
    }
    for changes in &found {
        let verdicts = judge.both(&apply(changes)).await;
        report.disagreements.push(format!(
            "generated {}: {}",
            show(changes),
            verdicts.disagreement().unwrap_or_default()
        ));
    }
    eprintln!(
        "seed {seed}: {} cases; both accept {}, both refuse {}, only Kubernetes refuses {}, only kube-anchor refuses {}",
        report.cases,
        report.both_accept,
        report.both_refuse,
        report.only_kubernetes_refuses,
        report.only_anchor_refuses
    );
    if !found.is_empty() {
        // The smallest forms, ready to be kept in regressions.json.
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubelet-rules-found.json");
        std::fs::write(&path, serde_json::to_string_pretty(&found).unwrap()).unwrap();
        eprintln!("the smallest disagreements found are in {}", path.display());
    }
    assert!(
        report.disagreements.is_empty(),
        "{} disagreements:\n{}",
        report.disagreements.len(),
        report.disagreements.join("\n")
    );
}

fn apply(changes: &[(String, Value)]) -> Value {
    let mut doc = catalog::base();
    for (pointer, value) in changes {
        catalog::set(&mut doc, pointer, value);
    }
    doc
}

fn show(changes: &[(String, Value)]) -> String {
    changes
        .iter()
        .map(|(p, v)| format!("{p} = {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Default)]
struct Report {
    cases: usize,
    both_accept: usize,
    both_refuse: usize,
    only_kubernetes_refuses: usize,
    only_anchor_refuses: usize,
    disagreements: Vec<String>,
}

impl Report {
    fn count(&mut self, v: &Verdicts) {
        self.cases += 1;
        match (&v.anchor, &v.kubernetes) {
            (Ok(()), Ok(())) => self.both_accept += 1,
            (Err(_), Err(_)) => self.both_refuse += 1,
            (Ok(()), Err(_)) => self.only_kubernetes_refuses += 1,
            (Err(_), Ok(())) => self.only_anchor_refuses += 1,
        }
    }
}

struct Verdicts {
    anchor: Result<(), String>,
    kubernetes: Result<(), String>,
}

impl Verdicts {
    fn disagreement(&self) -> Option<String> {
        match (&self.anchor, &self.kubernetes) {
            (Ok(()), Err(e)) => Some(format!("kube-anchor writes it, Kubernetes refuses it: {e}")),
            (Err(e), Ok(())) => Some(format!("Kubernetes accepts it, kube-anchor refuses it: {e}")),
            _ => None,
        }
    }
}

/// The real API server's verdict on the mirror pod the kubelet would make of a manifest.
struct Kubernetes {
    client: kube::Client,
    node_uid: String,
}

impl Kubernetes {
    async fn new(cp: &control_plane::ControlPlane, node: &support::nodes::NodeHandle) -> Self {
        let admin = cp.admin().await;
        let node_uid = Api::<k8s_openapi::api::core::v1::Node>::all(admin)
            .get(NODE)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap();
        let client = support::pki::client_from_kubeconfig(&node.root.join("kubelet.kubeconfig")).await;
        Self { client, node_uid }
    }

    async fn both(&self, doc: &Value) -> Verdicts {
        let text = serde_yaml_ng::to_string(doc).unwrap();
        let anchor = staticpod::parse_for_node(Path::new("kube-apiserver.yaml"), &text, Some(NODE))
            .map(|_| ())
            .map_err(|e| e.to_string());
        Verdicts {
            anchor,
            kubernetes: self.judge(doc).await,
        }
    }

    async fn judge(&self, doc: &Value) -> Result<(), String> {
        let mut pod = doc.clone();
        let Some(name) = pod["metadata"]["name"].as_str().map(str::to_owned) else {
            return Err("the kubelet names no pod without a name".into());
        };
        let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default").to_owned();
        // What the kubelet's applyDefaults and mirror client add (pkg/kubelet/config/common.go,
        // pkg/kubelet/pod/mirror_client.go).
        pod["metadata"]["name"] = format!("{name}-{NODE}").into();
        pod["metadata"]["namespace"] = namespace.clone().into();
        pod["spec"]["nodeName"] = NODE.into();
        let annotations = &mut pod["metadata"]["annotations"];
        if !annotations.is_object() {
            *annotations = serde_json::json!({});
        }
        for (key, value) in [
            ("kubernetes.io/config.source", "file"),
            ("kubernetes.io/config.hash", "0123456789abcdef0123456789abcdef"),
            ("kubernetes.io/config.seen", "2026-01-01T00:00:00.123456789Z"),
            ("kubernetes.io/config.mirror", "0123456789abcdef0123456789abcdef"),
            // What kube-anchor adds to the manifest it writes.
            (
                "kube-anchor.io/content-hash",
                "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ),
        ] {
            annotations[key] = value.into();
        }
        pod["metadata"]["ownerReferences"] = serde_json::json!([{
            "apiVersion": "v1", "kind": "Node", "name": NODE, "uid": self.node_uid, "controller": true
        }]);
        let tolerations = &mut pod["spec"]["tolerations"];
        if !tolerations.is_array() {
            *tolerations = serde_json::json!([]);
        }
        tolerations
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"operator": "Exists", "effect": "NoExecute"}));
        let object: DynamicObject = match serde_json::from_value(pod) {
            Ok(o) => o,
            Err(e) => return Err(format!("not an object: {e}")),
        };
        let pods = Api::<DynamicObject>::namespaced_with(
            self.client.clone(),
            &namespace,
            &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
        );
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        match pods.create(&dry_run, &object).await {
            Ok(_) => Ok(()),
            // 422 Invalid is validation's verdict, 400 the decoder's, 403 admission's
            // (NodeRestriction refuses a mirror pod that references API objects).
            Err(kube::Error::Api(e)) if [400, 403, 422].contains(&e.code) => Err(format!("{} {}", e.code, e.message)),
            Err(e) => panic!("not a verdict on the pod: {e}"),
        }
    }

    /// The smallest subset of `changes` on which the judges still disagree.
    async fn shrink(&self, mut changes: Vec<(String, Value)>) -> Vec<(String, Value)> {
        let mut i = 0;
        while i < changes.len() && changes.len() > 1 {
            let mut fewer = changes.clone();
            fewer.remove(i);
            if self.both(&apply(&fewer)).await.disagreement().is_some() {
                changes = fewer;
            } else {
                i += 1;
            }
        }
        changes.sort_by(|a, b| a.0.cmp(&b.0));
        changes
    }
}
