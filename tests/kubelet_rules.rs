//! The static-pod checks of `staticpod::parse` against the real decision: the kubelet validates
//! a manifest with `validation.ValidatePodCreate` after naming it `<name>-<node>` and setting
//! `spec.nodeName` (`applyDefaults`); the test control plane's kube-apiserver (same pinned
//! release) runs the same function on create, so a server-side dry run of the pod as the kubelet
//! would make it gives the kubelet's verdict. (YAML merge keys are a decoding question, not a
//! validation one: `staticpod` refuses them and its unit tests cover that.)

mod support;

use std::path::Path;

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube_anchor_core::staticpod;
use support::control_plane;

/// The kubelet appends `-<node name>`; a one-character node name leaves the most room, which is
/// the room `staticpod::parse` keeps free.
const NODE: &str = "n";

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
    let ns = cp.namespace("kubelet-rules").await;
    let pods = Api::<DynamicObject>::namespaced_with(
        cp.admin().await,
        &ns,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    // The ServiceAccount admission plugin wants the namespace's default account (no
    // controller-manager runs here to create it); mirror pods skip that plugin.
    let account: k8s_openapi::api::core::v1::ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    Api::namespaced(cp.admin().await, &ns)
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let mut disagreements = Vec::new();
    for (case, text) in cases() {
        let ours = staticpod::parse(Path::new("m.yaml"), &text);
        // The pod as the kubelet names it, in this test's namespace.
        let mut pod: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
        pod["metadata"]["name"] = format!("{name}-{NODE}").into();
        pod["metadata"]["namespace"] = ns.clone().into();
        // applyDefaults binds the pod to its node.
        pod["spec"]["nodeName"] = NODE.into();
        let object: DynamicObject = serde_json::from_value(pod).unwrap();
        let theirs = match pods.create(&dry_run, &object).await {
            Ok(_) => Ok(()),
            // 422 Invalid is the validation's verdict; anything else answers another question.
            Err(kube::Error::Api(e)) if e.code == 422 => Err(e.message),
            Err(e) => panic!("{case}: not a validation verdict: {e}"),
        };
        let verdict = |r: Result<(), String>| r.map_or_else(|e| format!("refuses ({e})"), |()| "accepts".into());
        eprintln!(
            "{case}: kube-anchor {}; kube-apiserver {}",
            verdict(ours.as_ref().map(|_| ()).map_err(ToString::to_string)),
            verdict(theirs.clone()),
        );
        if ours.is_ok() != theirs.is_ok() {
            disagreements.push(case);
        }
    }
    assert!(disagreements.is_empty(), "verdicts differ for {disagreements:?}");
}
