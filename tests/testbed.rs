//! The test control plane itself: a DaemonSet pod runs on a kubemark node, a static pod
//! manifest becomes a mirror pod and goes away with its file, and RBAC is enforced.

mod support;

use std::fs;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, ListParams, ObjectMeta, PostParams};
use support::control_plane;
use support::pki;
use support::poll::eventually;

const WAIT: Duration = Duration::from_secs(90);

fn daemonset(name: &str) -> DaemonSet {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "main", "image": "registry.example/fake:1"}]
                }
            }
        }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn daemonset_pod_runs_and_static_pod_mirrors_come_and_go() {
    let cp = control_plane::shared().await;
    cp.start_controllers();
    let node = cp.add_node("smoke-node", &[("kube-anchor.io/test", "smoke")]).await;
    let ns = cp.namespace("smoke").await;
    let admin = cp.admin().await;

    // A DaemonSet pod is scheduled to the node and "runs" on the fake runtime.
    let daemonsets: Api<DaemonSet> = Api::namespaced(admin.clone(), &ns);
    daemonsets
        .create(&PostParams::default(), &daemonset("ds"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let selector = format!("spec.nodeName={}", node.name);
    let running = eventually(WAIT, "the DaemonSet pod Running on the node", || {
        let pods = pods.clone();
        let selector = selector.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=ds").fields(&selector))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        }
    })
    .await;
    assert_eq!(running.spec.unwrap().node_name.as_deref(), Some(node.name.as_str()));

    // A static pod manifest becomes a mirror pod named <name>-<node> with the manifest's
    // annotations and the mirror annotation.
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: static-web\n  namespace: {ns}\n  annotations:\n    kube-anchor.io/content-hash: sha256:test\nspec:\n  containers:\n  - name: web\n    image: registry.example/web:1\n"
    );
    let file = node.static_pod_dir.join("static-web.yaml");
    fs::write(&file, manifest).unwrap();
    let mirror_name = format!("static-web-{}", node.name);
    let mirror = eventually(WAIT, "the mirror pod", || {
        let pods = pods.clone();
        let name = mirror_name.clone();
        async move { pods.get_opt(&name).await.ok().flatten() }
    })
    .await;
    let annotations = mirror.metadata.annotations.unwrap_or_default();
    assert!(
        annotations.contains_key("kubernetes.io/config.mirror"),
        "{annotations:?}"
    );
    assert_eq!(
        annotations.get("kubernetes.io/config.source").map(String::as_str),
        Some("file")
    );
    assert_eq!(
        annotations.get("kube-anchor.io/content-hash").map(String::as_str),
        Some("sha256:test")
    );

    // Removing the file removes the mirror pod.
    fs::remove_file(&file).unwrap();
    eventually(WAIT, "the mirror pod to disappear", || {
        let pods = pods.clone();
        let name = mirror_name.clone();
        async move { matches!(pods.get_opt(&name).await, Ok(None)).then_some(()) }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rbac_in_manifests_grants_the_pod_listing_kube_anchor_needs_and_nothing_to_others() {
    let cp = control_plane::shared().await;
    let ns = cp.namespace("rbac").await;
    // Applied with the real kubectl.
    let bound = pki::client_from_kubeconfig(&cp.anchor_service_account().await).await;
    let by_node = ListParams::default().fields("spec.nodeName=some-node");
    Api::<Pod>::all(bound.clone())
        .list(&by_node)
        .await
        .expect("the bound ServiceAccount lists pods by node");
    // What it was not granted stays refused.
    let err = Api::<ServiceAccount>::namespaced(bound, &ns)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 403), "{err}");

    let admin = cp.admin().await;
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("not-bound".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ServiceAccount>::namespaced(admin, &ns)
        .create(&PostParams::default(), &sa)
        .await
        .unwrap();
    let (unbound, _) = cp.service_account_client(&ns, "not-bound").await;
    let err = Api::<Pod>::all(unbound).list(&by_node).await.unwrap_err();
    match &err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 403);
            assert!(
                s.message.contains(&format!("system:serviceaccount:{ns}:not-bound"))
                    && s.message.contains("cannot list resource \"pods\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected a 403, got {other}"),
    }
}
