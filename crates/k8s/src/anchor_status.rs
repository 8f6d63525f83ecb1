//! The `AnchorStatus` objects (`kube_anchor_core::node_status`): an anchor watches its own and
//! writes it when it differs from what the node shows; `kube-anchor fleet` lists them all.

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use kube_anchor_core::node_status::{self, NodeStatus};

/// The field manager of the anchors' server-side apply.
const FIELD_MANAGER: &str = "kube-anchor";

pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(node_status::GROUP, node_status::VERSION, node_status::KIND),
        node_status::PLURAL,
    )
}

fn api(client: Client) -> Api<DynamicObject> {
    Api::all_with(client, &resource())
}

/// What the API holds of one object: `None` while it cannot be asked (unreachable, no CRD, not
/// allowed), `Some(None)` when it answers there is none (or its status does not parse),
/// `Some(Some(status))` otherwise.
pub type Seen = Option<Option<NodeStatus>>;

/// What the watch last said, and how many times it has spoken: the anchor writes an object it
/// already wrote again only once the API has said something since (an echo that differs, a
/// deletion), never because a watch is silent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LastHeard {
    pub generation: u64,
    pub seen: Seen,
}

fn status_of(object: &DynamicObject) -> Option<NodeStatus> {
    serde_json::from_value(object.data.get("status")?.clone()).ok()
}

/// How long the watch waits after the API said the resource does not exist or is not allowed
/// (no CRD installed, RBAC of an older chart): asked again only this rarely, not at the
/// watcher's back-off pace.
const ABSENT_RETRY: std::time::Duration = std::time::Duration::from_secs(600);

/// The API's own answer that this resource cannot be had here (404 or 403), as opposed to an
/// unreachable API, which the watcher's back-off handles.
fn unserved(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => matches!(status.code, 403 | 404),
        watcher::Error::WatchError(status) => matches!(status.code, 403 | 404),
        _ => false,
    }
}

/// Watches the object `name`: a deleted or edited object shows at once, so the anchor writes it
/// again with no periodic request.
pub fn watch(client: Client, name: &str) -> (watch::Receiver<LastHeard>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(LastHeard::default());
    let say = move |seen: Seen| {
        tx.send_modify(|o| {
            o.generation += 1;
            o.seen = seen;
        })
    };
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let name = name.to_owned();
    let objects = api(client);
    let task = tokio::spawn(async move {
        let mut warned = false;
        loop {
            let mut stream = watcher(objects.clone(), config.clone()).default_backoff().boxed();
            let mut listing: Seen = None;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => listing = Some(None),
                    Ok(watcher::Event::InitApply(object)) => listing = Some(status_of(&object)),
                    Ok(watcher::Event::InitDone) => {
                        say(listing.take());
                    }
                    Ok(watcher::Event::Apply(object)) => {
                        say(Some(status_of(&object)));
                    }
                    Ok(watcher::Event::Delete(_)) => {
                        say(Some(None));
                    }
                    Err(e) if unserved(&e) => {
                        if !warned {
                            tracing::warn!(object = %name, error = %e, "cannot watch this node's AnchorStatus (is the CRD anchorstatuses.kube-anchor.io installed, and the chart's RBAC current?); not published, asking again every 10 minutes");
                            warned = true;
                        }
                        say(None);
                        break;
                    }
                    Err(e) => {
                        tracing::debug!(object = %name, error = %e, "AnchorStatus watch interrupted");
                        say(None);
                    }
                }
            }
            tokio::time::sleep(ABSENT_RETRY).await;
        }
    });
    (rx, task)
}

/// Writes `status` as the object of its node and component (server-side apply: the anchor owns
/// every field it sets), bounded like every request of the daemon's loop.
pub async fn publish(client: Client, status: &NodeStatus) -> Result<(), String> {
    let name = node_status::object_name(&status.node, &status.component);
    let object = serde_json::json!({
        "apiVersion": format!("{}/{}", node_status::GROUP, node_status::VERSION),
        "kind": node_status::KIND,
        "metadata": {
            "name": name,
            "labels": {
                "kube-anchor.io/node": status.node,
                "kube-anchor.io/component": status.component,
            },
        },
        "status": status,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    crate::kubeapi::bounded(api(client).patch(&name, &params, &Patch::Apply(&object)))
        .await
        .map(|_| ())
}

/// Every published status (those `selector` picks), by node then component.
pub async fn list(client: Client, selector: Option<&str>) -> Result<Vec<NodeStatus>, kube::Error> {
    let mut params = ListParams::default();
    if let Some(selector) = selector {
        params = params.labels(selector);
    }
    let objects = api(client).list(&params).await?;
    let mut statuses: Vec<NodeStatus> = objects.items.iter().filter_map(status_of).collect();
    statuses.sort_by(|a, b| (&a.node, &a.component).cmp(&(&b.node, &b.component)));
    Ok(statuses)
}
