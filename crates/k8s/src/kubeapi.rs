//! The Kubernetes API and the component's health endpoint, as the daemon modes use them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Config};
use tokio::sync::watch;

use kube_anchor_core::trial::MirrorPod;
use kube_anchor_host::hostfs::{Follow, MAX_INPUT_BYTES, read_regular};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("kubeconfig {}: {source}", .path.display())]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("in-cluster config: {0}")]
    InCluster(#[from] kube::config::InClusterError),
    #[error("API client: {0}")]
    Client(#[from] kube::Error),
}

/// How long one API request may take before the API counts as unreachable.
pub const API_TIMEOUT: Duration = Duration::from_secs(10);
/// A reconnecting watch that yields nothing for this long is started over.
const RECONNECT_STALL: Duration = Duration::from_secs(15);

/// A client from `--kubeconfig`, else the in-cluster service account, else none (no API: files
/// are still kept in sync, only the checks that need the API wait). `api_servers` are tried in
/// turn after the config's own address ([`crate::failover`]).
pub async fn client(
    kubeconfig: Option<&Path>,
    api_servers: &[http::Uri],
    agent: &str,
) -> Result<Option<Client>, ApiError> {
    let mut config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|source| ApiError::Kubeconfig {
                path: path.into(),
                source,
            })?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|source| ApiError::Kubeconfig {
                    path: path.into(),
                    source,
                })?
        }
        None if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => Config::incluster()?,
        None => return Ok(None),
    };
    config.connect_timeout = Some(Duration::from_secs(5));
    // Names the verb in the API server's audit log and request metrics, so an operator can see
    // what each part of kube-anchor costs the API.
    if let Ok(agent) = http::HeaderValue::from_str(agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    Ok(Some(crate::failover::client(config, api_servers)?))
}

/// `kube-anchor/<version> (<verb>[ <component>]; node <node>)`, e.g.
/// `kube-anchor/0.1.0 (run kube-scheduler; node cp-1)`: which part, for what, on which node.
pub fn user_agent(verb: &str, node: Option<&str>) -> String {
    let version = env!("CARGO_PKG_VERSION");
    match node {
        Some(node) => format!("kube-anchor/{version} ({verb}; node {node})"),
        None => format!("kube-anchor/{version} ({verb})"),
    }
}

/// Watches one pod by name (the mirror pod) and publishes what the API shows: `None` while the
/// API cannot be reached, `Some(Absent)` when it answers that there is no such pod,
/// `Some(Refused)` when it answers 401 or 403.
pub fn watch_mirror_pod(
    client: Client,
    namespace: &str,
    name: &str,
) -> (watch::Receiver<Option<MirrorPod>>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let name = name.to_owned();
    let task = tokio::spawn(async move {
        let mut stream = watcher(pods.clone(), config.clone()).default_backoff().boxed();
        let mut listing: Option<MirrorPod> = None;
        loop {
            // While the API is unreachable a reconnect can hang on a half-started server; start
            // over if nothing arrives. A healthy watch may be idle for long: no limit then.
            let answering = tx.borrow().as_ref().is_some_and(MirrorPod::is_word);
            let next = if !answering {
                match tokio::time::timeout(RECONNECT_STALL, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        tracing::debug!(pod = %name, "mirror pod watch stalled while reconnecting; starting over");
                        stream = watcher(pods.clone(), config.clone()).default_backoff().boxed();
                        continue;
                    }
                }
            } else {
                stream.next().await
            };
            let Some(event) = next else { break };
            match event {
                Ok(watcher::Event::Init) => listing = Some(MirrorPod::Absent),
                Ok(watcher::Event::InitApply(pod)) => listing = Some(MirrorPod::from_pod(&pod)),
                Ok(watcher::Event::InitDone) => {
                    let _ = tx.send(listing.take());
                }
                Ok(watcher::Event::Apply(pod)) => {
                    let _ = tx.send(Some(MirrorPod::from_pod(&pod)));
                }
                Ok(watcher::Event::Delete(_)) => {
                    let _ = tx.send(Some(MirrorPod::Absent));
                }
                Err(e) => match refusal(&e) {
                    // The API answered: its refusal is what it shows, not an outage.
                    Some(why) => {
                        tracing::warn!(pod = %name, error = %e, "the API refuses the anchor's mirror pod watch");
                        let _ = tx.send(Some(MirrorPod::Refused(why)));
                    }
                    None => {
                        tracing::debug!(pod = %name, error = %e, "mirror pod watch interrupted; API unreachable for now");
                        let _ = tx.send(None);
                    }
                },
            }
        }
    });
    (rx, task)
}

/// A watch that failed because the API refused the anchor (401 or 403): the status and the
/// API's message. Any other failure (no connection, a timeout, 5xx) is `None`.
fn refusal(error: &watcher::Error) -> Option<String> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status,
        watcher::Error::WatchError(status) => status,
        _ => return None,
    };
    matches!(status.code, 401 | 403).then(|| format!("{} {}: {}", status.code, status.reason, status.message))
}

/// Publishes a Warning or Normal Event about this anchor's own pod.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
    pod: ObjectReference,
}

impl EventSink {
    pub fn new(client: Client, pod_namespace: &str, pod_name: &str) -> Self {
        let reporter = Reporter {
            controller: "kube-anchor".into(),
            instance: Some(pod_name.into()),
        };
        let pod = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(pod_namespace.into()),
            name: Some(pod_name.into()),
            ..Default::default()
        };
        Self {
            recorder: Recorder::new(client, reporter),
            pod,
        }
    }

    /// True when the API took it.
    pub async fn publish(&self, warning: bool, reason: &str, action: &str, note: String) -> bool {
        let event = Event {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        match tokio::time::timeout(API_TIMEOUT, self.recorder.publish(&event, &self.pod)).await {
            Ok(Ok(())) => return true,
            Ok(Err(e)) => tracing::warn!(reason, error = %e, "could not publish an Event"),
            Err(_) => tracing::warn!(reason, "could not publish an Event: API timeout"),
        }
        false
    }
}

/// A request of the daemon's own loop, bounded by [`API_TIMEOUT`]: an API server that accepts
/// requests but cannot answer them (its etcd is gone) holds a request for a minute, and the
/// loop that judges the version on trial must not wait that long.
pub async fn bounded<T>(request: impl std::future::Future<Output = Result<T, kube::Error>>) -> Result<T, String> {
    match tokio::time::timeout(API_TIMEOUT, request).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {}", humantime::format_duration(API_TIMEOUT))),
    }
}

/// What a timed-out request says: how long it really waited (a budget already spent is 0 s).
fn no_answer(started: std::time::Instant, timeout: Duration) -> String {
    let waited = Duration::from_millis(started.elapsed().as_millis() as u64);
    if timeout.is_zero() {
        "not asked: the hook's time was used up".into()
    } else {
        format!("no answer within {}", humantime::format_duration(waited))
    }
}

/// The Node's pause annotation (`kube_anchor_core::pause::NODE_ANNOTATION`): its value, or
/// `None` when the Node has none (or is gone).
pub async fn node_pause(client: &Client, node: &str) -> Result<Option<String>, String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let meta = bounded(nodes.get_metadata_opt(node)).await?;
    Ok(meta.and_then(|m| {
        m.metadata
            .annotations
            .and_then(|mut a| a.remove(kube_anchor_core::pause::NODE_ANNOTATION))
    }))
}

/// [`lookup`] of a namespaced object.
pub async fn lookup_in<K>(
    client: &Client,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> kube_anchor_core::decommission::Lookup<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    lookup(&Api::namespaced(client.clone(), namespace), name, timeout).await
}

/// [`lookup`] of a cluster-scoped object (a Node).
pub async fn lookup_cluster_scoped<K>(
    client: &Client,
    name: &str,
    timeout: Duration,
) -> kube_anchor_core::decommission::Lookup<K>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    lookup(&Api::all(client.clone()), name, timeout).await
}

/// The pods bound to `node`, kept by a reflector: the store, and the stream that fills it (to be
/// polled; each item says whether the watch is working).
pub fn pods_on_node(
    client: &Client,
    node: &str,
) -> (
    kube::runtime::reflector::Store<Pod>,
    impl futures::Stream<Item = Result<watcher::Event<Pod>, watcher::Error>> + Send + 'static,
) {
    let (store, writer) = kube::runtime::reflector::store::<Pod>();
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node}"));
    let stream = kube::runtime::reflector(
        writer,
        watcher(Api::<Pod>::all(client.clone()), config).default_backoff(),
    );
    (store, stream)
}

/// Every Lease in `namespace` (the rollout Leases are among them).
pub async fn list_leases(
    client: &Client,
    namespace: &str,
) -> Result<Vec<k8s_openapi::api::coordination::v1::Lease>, kube::Error> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), namespace);
    Ok(leases.list(&kube::api::ListParams::default()).await?.items)
}

/// GET one object, as evidence: only the API server's own answer that this very object does
/// not exist — a `Status` with reason `NotFound` whose details, when given, name this object —
/// is `NotFound`. Every other failure, a 404 with another body (a proxy, an unserved path) or a
/// timeout included, is `Unavailable` (never evidence of anything).
pub async fn lookup<K>(api: &Api<K>, name: &str, timeout: Duration) -> kube_anchor_core::decommission::Lookup<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube_anchor_core::decommission::Lookup;
    let started = std::time::Instant::now();
    match tokio::time::timeout(timeout, api.get(name)).await {
        Ok(Ok(object)) => Lookup::Found(object),
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => match not_found_of::<K>(&status, name) {
            Ok(()) => Lookup::NotFound,
            Err(why) => Lookup::Unavailable(why),
        },
        Ok(Err(e)) => Lookup::Unavailable(e.to_string()),
        Err(_) => Lookup::Unavailable(no_answer(started, timeout)),
    }
}

/// Whether a 404 `status` is the API server saying that object `name` of kind `K` does not
/// exist.
fn not_found_of<K: kube::Resource<DynamicType = ()>>(status: &kube::core::Status, name: &str) -> Result<(), String> {
    let plural = K::plural(&());
    if status.reason != "NotFound" {
        return Err(format!(
            "HTTP 404 without a NotFound Status for {plural}/{name} (reason {:?}, {:?}): not the API's answer",
            status.reason, status.message
        ));
    }
    if let Some(details) = &status.details {
        let name_ok = details.name.is_empty() || details.name == name;
        let kind_ok =
            details.kind.is_empty() || details.kind == plural.as_ref() || details.kind == K::kind(&()).as_ref();
        if !(name_ok && kind_ok) {
            return Err(format!(
                "HTTP 404 NotFound for {}/{}, not {plural}/{name}",
                details.kind, details.name
            ));
        }
    }
    Ok(())
}

/// LIST objects by label selector in every namespace, as evidence: `Found` with the items, or
/// `Unavailable` (a list never proves anything by failing).
pub(crate) async fn list_all<K>(
    api: &Api<K>,
    label_selector: &str,
    timeout: Duration,
) -> kube_anchor_core::decommission::Lookup<Vec<K>>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube_anchor_core::decommission::Lookup;
    let params = kube::api::ListParams::default().labels(label_selector);
    let started = std::time::Instant::now();
    match tokio::time::timeout(timeout, api.list(&params)).await {
        Ok(Ok(list)) => Lookup::Found(list.items),
        Ok(Err(e)) => Lookup::Unavailable(e.to_string()),
        Err(_) => Lookup::Unavailable(no_answer(started, timeout)),
    }
}

/// The bearer token of a client config (kubeconfig token or the in-cluster token file).
pub async fn bearer_token(kubeconfig: Option<&Path>) -> Option<String> {
    match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).ok()?;
            kc.auth_infos.into_iter().find_map(|a| a.auth_info?.token).map(|t| {
                use secrecy::ExposeSecret as _;
                t.expose_secret().to_owned()
            })
        }
        None => read_regular(
            Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token"),
            MAX_INPUT_BYTES,
            Follow::Yes,
        )
        .ok()
        .map(|t| String::from_utf8_lossy(&t).trim().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    //! A real kube-apiserver always answers a GET of a missing object with a `NotFound` Status
    //! naming it; it cannot be made to answer 404 with another body. A proxy in front of it, or
    //! a path it does not serve, can: this tiny local HTTP server plays that part.
    use super::*;
    use k8s_openapi::api::apps::v1::DaemonSet;
    use kube_anchor_core::decommission::Lookup;

    /// A client of a server answering every request with HTTP `code` and `body`.
    async fn serve(code: u16, body: &'static str) -> Client {
        let (url, _) = crate::test_http::serve(code, body).await;
        Client::try_from(Config::new(url)).unwrap()
    }

    async fn lookup_daemonset(code: u16, body: &'static str) -> Lookup<DaemonSet> {
        let api: Api<DaemonSet> = Api::namespaced(serve(code, body).await, "kube-system");
        lookup(&api, "kube-apiserver-anchor", Duration::from_secs(5)).await
    }

    #[tokio::test]
    async fn only_the_apis_not_found_status_for_this_object_is_not_found() {
        let status = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"daemonsets.apps \"kube-apiserver-anchor\" not found","reason":"NotFound","details":{"name":"kube-apiserver-anchor","group":"apps","kind":"daemonsets"},"code":404}"#;
        assert_eq!(lookup_daemonset(404, status).await, Lookup::NotFound);

        // A proxy's page, an empty body, a JSON object that is not a NotFound Status, a Status
        // about another object: 404, but not evidence that this DaemonSet is gone.
        let not_evidence = [
            "<html><body>404 page not found</body></html>",
            "404 page not found",
            "",
            r#"{"error":"no route"}"#,
            r#"{"kind":"Status","status":"Failure","reason":"NotFound","details":{"name":"other","kind":"daemonsets"},"code":404}"#,
            r#"{"kind":"Status","status":"Failure","reason":"NotFound","details":{"name":"kube-apiserver-anchor","kind":"configmaps"},"code":404}"#,
        ];
        for body in not_evidence {
            let answer = lookup_daemonset(404, body).await;
            assert!(matches!(answer, Lookup::Unavailable(_)), "{body:?}: {answer:?}");
        }
        assert!(matches!(
            lookup_daemonset(503, "unavailable").await,
            Lookup::Unavailable(_)
        ));
    }
}

/// The control plane's rollout Lease ([`kube_anchor_core::rollout::LEASE`] in the anchors'
/// namespace) as one component's anchor on one node uses it: see [`kube_anchor_core::rollout`].
/// The holder is the node's name, so a replaced anchor pod on the same node keeps its node's
/// turn. The component's own Lease (`kube-anchor-<component>`) is read too and given back, never
/// taken.
#[derive(Clone)]
pub struct RolloutLease {
    api: Api<k8s_openapi::api::coordination::v1::Lease>,
    nodes: Api<k8s_openapi::api::core::v1::Node>,
    component: String,
    node: String,
    duration: Duration,
}

/// Annotations of the control plane's Lease: the components whose turn the holder holds
/// (comma-separated), and by component the input revision a node rolled back and that node.
const TURN_COMPONENTS: &str = "kube-anchor.io/turn-components";
const FAILED_REVISION_OF: &str = "kube-anchor.io/failed-revision.";
const FAILED_ON_OF: &str = "kube-anchor.io/failed-on.";
/// The same on a component's own Lease, for that component.
const FAILED_REVISION: &str = "kube-anchor.io/failed-revision";
const FAILED_ON: &str = "kube-anchor.io/failed-on";

/// How often a write that lost a race (another anchor of the same node renewed meanwhile) is
/// read and decided again.
const LEASE_WRITE_ATTEMPTS: usize = 3;

impl RolloutLease {
    pub fn new(client: Client, namespace: &str, component: &str, node: &str, duration: Duration) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            nodes: Api::all(client),
            component: component.into(),
            node: node.into(),
            duration,
        }
    }

    pub fn name(&self) -> &str {
        kube_anchor_core::rollout::LEASE
    }

    /// The control plane's Lease and the component's own, as they are.
    async fn read(
        &self,
    ) -> Result<
        (
            Option<k8s_openapi::api::coordination::v1::Lease>,
            Option<k8s_openapi::api::coordination::v1::Lease>,
        ),
        kube::Error,
    > {
        let shared = self.api.get_opt(self.name()).await?;
        let own = self
            .api
            .get_opt(&kube_anchor_core::rollout::component_lease(&self.component))
            .await?;
        Ok((shared, own))
    }

    /// Asks for this node's turn to replace its version by one of input `revision`; takes (or
    /// renews) the Lease when it is free. A write that loses a race is decided again on what won.
    pub async fn ask(&self, revision: Option<&str>) -> Result<kube_anchor_core::rollout::LeaseAnswer, kube::Error> {
        use kube_anchor_core::rollout::{LeaseAnswer, decide, take};
        for _ in 0..LEASE_WRITE_ATTEMPTS {
            let (shared, own) = self.read().await?;
            let now = std::time::SystemTime::now();
            let current = shared_view(shared.as_ref()).unwrap_or_default();
            let views = self.views(Some(current.clone()), own.as_ref());
            let mut gone = Vec::new();
            let turn = loop {
                let turn = decide(&views, &self.node, &self.component, revision, &gone);
                if let LeaseAnswer::Held { by, renewed, .. } = &turn
                    && self.holder_gone(by, *renewed, now).await?
                {
                    tracing::info!(lease = self.name(), holder = %by, "the rollout Lease's holder has no Node any more: taking the turn");
                    gone.push(by.clone());
                    continue;
                }
                break turn;
            };
            if turn != LeaseAnswer::Take {
                return Ok(turn);
            }
            let after = take(&current, &self.node, &self.component, now);
            match self.write(shared, &after, now).await {
                Ok(()) => return Ok(LeaseAnswer::Take),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(LeaseAnswer::Held {
            by: "another node (the Lease changed at each attempt)".into(),
            rolling_out: Vec::new(),
            renewed: None,
        })
    }

    /// The Lease's word on writing this component of input `revision` for the first time on
    /// this node ([`kube_anchor_core::rollout::first_write`]); takes nothing.
    pub async fn first_write(
        &self,
        revision: Option<&str>,
    ) -> Result<kube_anchor_core::rollout::FirstWrite, kube::Error> {
        use kube_anchor_core::rollout::{FirstWrite, first_write};
        let (shared, own) = self.read().await?;
        let now = std::time::SystemTime::now();
        let views = self.views(shared_view(shared.as_ref()), own.as_ref());
        let mut gone = Vec::new();
        loop {
            let word = first_write(&views, &self.node, &self.component, revision, &gone);
            if let FirstWrite::OnTrialElsewhere { by, renewed } = &word
                && self.holder_gone(by, *renewed, now).await?
            {
                gone.push(by.clone());
                continue;
            }
            return Ok(word);
        }
    }

    /// The Leases as the decisions read them: the control plane's, then the component's own.
    fn views(
        &self,
        shared: Option<kube_anchor_core::rollout::LeaseView>,
        own: Option<&k8s_openapi::api::coordination::v1::Lease>,
    ) -> Vec<kube_anchor_core::rollout::LeaseView> {
        shared
            .into_iter()
            .chain(own.map(|l| own_view(l, &self.component)))
            .collect()
    }

    /// Whether the holder `by`, last renewed at `renewed`, has no Node any more. Only a silent
    /// holder (or one that never renewed) is looked up: a renewing one has a Node.
    async fn holder_gone(
        &self,
        by: &str,
        renewed: Option<std::time::SystemTime>,
        now: std::time::SystemTime,
    ) -> Result<bool, kube::Error> {
        if renewed.is_some_and(|r| kube_anchor_core::rollout::silent_for(r, now).is_none()) {
            return Ok(false);
        }
        Ok(self.nodes.get_opt(by).await?.is_none())
    }

    /// The node holding a rollout turn, of any component (the control plane's Lease) or of
    /// this one (its own), if one is held.
    pub async fn holder(&self) -> Result<Option<String>, kube::Error> {
        let (shared, own) = self.read().await?;
        let views = self.views(shared_view(shared.as_ref()), own.as_ref());
        Ok(views.iter().find_map(|v| v.holder().map(str::to_owned)))
    }

    /// Whether this node holds the turn for this component (a restarted anchor picks it up, or
    /// gives it back).
    pub async fn held_here(&self) -> Result<bool, kube::Error> {
        let (shared, own) = self.read().await?;
        let shared = shared_view(shared.as_ref()).is_some_and(|l| l.held_by(&self.node, &self.component));
        let own = own.is_some_and(|l| own_view(&l, &self.component).holder() == Some(self.node.as_str()));
        Ok(shared || own)
    }

    /// Gives the turn back for this component when this node holds it, and records how it
    /// `end`ed: an input revision rolled back here (no other node tries it), or one that runs
    /// here (a failure recorded for it is cleared).
    pub async fn release(&self, end: kube_anchor_core::rollout::TurnEnd<'_>) -> Result<(), kube::Error> {
        use kube_anchor_core::rollout::give_back;
        let own_name = kube_anchor_core::rollout::component_lease(&self.component);
        for attempt in 1..=LEASE_WRITE_ATTEMPTS {
            let (shared, own) = self.read().await?;
            let mut result = Ok(());
            if let Some(after) = give_back(
                &shared_view(shared.as_ref()).unwrap_or_default(),
                &self.node,
                &self.component,
                end,
            ) {
                result = self.write(shared, &after, std::time::SystemTime::now()).await;
            }
            // A turn an earlier anchor took on the component's own Lease.
            if result.is_ok()
                && let Some(mut own) = own
                && let Some(spec) = own.spec.as_mut()
                && spec.holder_identity.as_deref() == Some(self.node.as_str())
            {
                spec.holder_identity = None;
                spec.renew_time = None;
                result = self.api.replace(&own_name, &Default::default(), &own).await.map(drop);
            }
            match result {
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < LEASE_WRITE_ATTEMPTS => continue,
                other => return other,
            }
        }
        Ok(())
    }

    /// Writes `view` over `current` (created when there is none); a conflict is the API's 409.
    async fn write(
        &self,
        current: Option<k8s_openapi::api::coordination::v1::Lease>,
        view: &kube_anchor_core::rollout::LeaseView,
        now: std::time::SystemTime,
    ) -> Result<(), kube::Error> {
        use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
        let stamp = |t: std::time::SystemTime| k8s_openapi::jiff::Timestamp::try_from(t).ok().map(MicroTime);
        let exists = current.is_some();
        let mut lease = current.unwrap_or_else(|| Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(self.name().to_owned()),
                ..Default::default()
            },
            ..Default::default()
        });
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity != view.holder {
            spec.acquire_time = view.holder.as_ref().and_then(|_| stamp(now));
        }
        spec.holder_identity = view.holder.clone();
        spec.renew_time = view.renewed.and_then(stamp);
        if view.holder.is_some() {
            spec.lease_duration_seconds = Some(self.duration.as_secs().clamp(1, i32::MAX as u64) as i32);
        }
        let annotations = lease.metadata.annotations.get_or_insert_with(Default::default);
        annotations
            .retain(|k, _| k != TURN_COMPONENTS && !k.starts_with(FAILED_REVISION_OF) && !k.starts_with(FAILED_ON_OF));
        if !view.components.is_empty() {
            let components: Vec<&str> = view.components.iter().map(String::as_str).collect();
            annotations.insert(TURN_COMPONENTS.into(), components.join(","));
        }
        for (component, failed) in &view.failed {
            annotations.insert(format!("{FAILED_REVISION_OF}{component}"), failed.revision.clone());
            annotations.insert(format!("{FAILED_ON_OF}{component}"), failed.node.clone());
        }
        if exists {
            self.api
                .replace(self.name(), &Default::default(), &lease)
                .await
                .map(drop)
        } else {
            self.api.create(&Default::default(), &lease).await.map(drop)
        }
    }
}

/// The control plane's Lease as the decision reads it.
pub fn shared_view(
    lease: Option<&k8s_openapi::api::coordination::v1::Lease>,
) -> Option<kube_anchor_core::rollout::LeaseView> {
    use kube_anchor_core::rollout::{Failed, LeaseView};
    let lease = lease?;
    let spec = lease.spec.clone().unwrap_or_default();
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    let failed = annotations
        .iter()
        .filter_map(|(k, revision)| {
            let component = k.strip_prefix(FAILED_REVISION_OF)?;
            let node = annotations.get(&format!("{FAILED_ON_OF}{component}"))?;
            Some((
                component.to_owned(),
                Failed {
                    revision: revision.clone(),
                    node: node.clone(),
                },
            ))
        })
        .collect();
    Some(LeaseView {
        holder: spec.holder_identity,
        renewed: spec.renew_time.map(|t| std::time::SystemTime::from(t.0)),
        components: annotations
            .get(TURN_COMPONENTS)
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        failed,
    })
}

/// A component's own Lease (`kube-anchor-<component>`) as the decision reads it.
pub fn own_view(
    lease: &k8s_openapi::api::coordination::v1::Lease,
    component: &str,
) -> kube_anchor_core::rollout::LeaseView {
    use kube_anchor_core::rollout::{Failed, LeaseView};
    let spec = lease.spec.clone().unwrap_or_default();
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    let held = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
    LeaseView {
        holder: spec.holder_identity,
        renewed: spec.renew_time.map(|t| std::time::SystemTime::from(t.0)),
        components: held.then(|| component.to_owned()).into_iter().collect(),
        failed: match (annotations.get(FAILED_REVISION), annotations.get(FAILED_ON)) {
            (Some(revision), Some(node)) => [(
                component.to_owned(),
                Failed {
                    revision: revision.clone(),
                    node: node.clone(),
                },
            )]
            .into(),
            _ => Default::default(),
        },
    }
}

/// An API client built when first needed and tried again until it is: a kubeconfig not mounted
/// yet, or an in-cluster config without its service-account files (a static copy), must not
/// stop the work that needs no API. The daemons own one each.
pub struct LazyClient {
    kubeconfig: Option<PathBuf>,
    api_servers: Vec<http::Uri>,
    agent: String,
    /// The least time between two attempts (zero: whenever asked).
    retry_every: Duration,
    next_attempt: std::time::Instant,
    client: Option<Client>,
    last_error: Option<String>,
}

/// What [`LazyClient::connect`] did.
pub enum Connect {
    /// A client was built just now (what hangs on it can be set up).
    Built(Client),
    /// There was one already, or it is not time to try again.
    Unchanged,
    /// No kubeconfig and not in a cluster: there is no API to reach.
    NotConfigured,
    /// It could not be built; `repeated` when the error is the one of the last attempt.
    Failed { error: String, repeated: bool },
}

impl LazyClient {
    pub fn new(kubeconfig: Option<PathBuf>, api_servers: Vec<http::Uri>, agent: String, retry_every: Duration) -> Self {
        Self {
            kubeconfig,
            api_servers,
            agent,
            retry_every,
            next_attempt: std::time::Instant::now(),
            client: None,
            last_error: None,
        }
    }

    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// Whether the last attempt failed (and why).
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    pub async fn connect(&mut self) -> Connect {
        let now = std::time::Instant::now();
        if self.client.is_some() || now < self.next_attempt {
            return Connect::Unchanged;
        }
        self.next_attempt = now + self.retry_every;
        match client(self.kubeconfig.as_deref(), &self.api_servers, &self.agent).await {
            Ok(Some(client)) => {
                self.last_error = None;
                self.client = Some(client.clone());
                Connect::Built(client)
            }
            Ok(None) => Connect::NotConfigured,
            Err(e) => {
                let error = e.to_string();
                let repeated = self.last_error.as_deref() == Some(error.as_str());
                self.last_error = Some(error.clone());
                Connect::Failed { error, repeated }
            }
        }
    }
}
