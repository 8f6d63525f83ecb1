//! An observer of the node's container runtime over the CRI (containerd, CRI-O, or any runtime
//! the kubelet talks to over a unix socket): what runs of a static pod, with no API server
//! (`ListPodSandbox`, `ListContainers`, `ContainerStatus`), and a new version's images, pulled
//! before its restart (`ImageStatus`, `PullImage`). kube-anchor never creates, stops or removes a
//! container or a sandbox through the runtime. Every call is bounded, and a socket that is
//! missing, refuses, hangs or answers garbage is reported as [`RuntimeView::Unavailable`] — no
//! evidence, never "not running".

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerFilter, ContainerStatusRequest, ImageSpec, ImageStatusRequest, ListContainersRequest,
    ListPodSandboxRequest, PodSandboxFilter, PodSandboxState, PullImageRequest,
};
use kube_anchor_core::runtime::{
    CONFIG_SOURCE_ANNOTATION, ContainerState, LocalContainer, LocalPod, POD_NAME_LABEL, POD_NAMESPACE_LABEL,
    RuntimeView,
};
use kube_anchor_core::staticpod::CONTENT_HASH_ANNOTATION;
use tonic::transport::{Channel, Endpoint, Uri};

/// Where the usual runtimes listen (containerd, CRI-O), tried in order when none is configured.
pub const USUAL_SOCKETS: [&str; 4] = [
    "/run/containerd/containerd.sock",
    "/run/crio/crio.sock",
    "/var/run/containerd/containerd.sock",
    "/var/run/crio/crio.sock",
];

/// One look at the runtime may take this long in all (every call within it is bounded too).
pub const OBSERVE_TIMEOUT: Duration = Duration::from_secs(3);
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one image pull may take.
pub const PULL_TIMEOUT: Duration = Duration::from_secs(600);

/// Which static pod to look for: the kubelet names its pod `<name>-<node>` in `namespace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticPodRef {
    pub name: String,
    pub namespace: String,
    /// Lowercased as the kubelet does; without it any `<name>-…` static pod carrying a
    /// kube-anchor hash matches.
    pub node: Option<String>,
}

impl StaticPodRef {
    fn matches(&self, pod_name: &str, annotations: &HashMap<String, String>) -> bool {
        if annotations.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str) != Some("file") {
            return false;
        }
        match &self.node {
            Some(node) => pod_name == format!("{}-{}", self.name, node.to_lowercase()),
            None => {
                pod_name.starts_with(&format!("{}-", self.name)) && annotations.contains_key(CONTENT_HASH_ANNOTATION)
            }
        }
    }
}

/// The runtime's socket, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeEndpoint {
    /// `none`: the runtime is not asked.
    Disabled,
    /// The first of [`USUAL_SOCKETS`] that exists under the host root.
    Usual,
    /// A socket path (`unix://` optional) on the host.
    Socket(PathBuf),
}

impl RuntimeEndpoint {
    /// `none`, `""` or absent (the usual paths), `[unix://]/path`.
    pub fn parse(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim) {
            None | Some("") => Ok(Self::Usual),
            Some("none") => Ok(Self::Disabled),
            Some(v) => {
                let path = v.strip_prefix("unix://").unwrap_or(v);
                if !path.starts_with('/') {
                    return Err(format!(
                        "runtime endpoint {v:?}: expected none, an absolute socket path or unix:///path"
                    ));
                }
                Ok(Self::Socket(PathBuf::from(path)))
            }
        }
    }
}

/// Reads the runtime at a socket found under `host_root`.
#[derive(Debug, Clone)]
pub struct RuntimeObserver {
    host_root: PathBuf,
    endpoint: RuntimeEndpoint,
}

impl RuntimeObserver {
    /// `None` when the endpoint is [`RuntimeEndpoint::Disabled`].
    pub fn new(host_root: &Path, endpoint: RuntimeEndpoint) -> Option<Self> {
        (endpoint != RuntimeEndpoint::Disabled).then(|| Self {
            host_root: host_root.to_owned(),
            endpoint,
        })
    }

    /// The socket on the host (as the node names it) and where this process reaches it.
    fn socket(&self) -> Result<(PathBuf, PathBuf), String> {
        let under_root = |p: &Path| self.host_root.join(p.strip_prefix("/").unwrap_or(p));
        match &self.endpoint {
            RuntimeEndpoint::Socket(path) => Ok((path.clone(), under_root(path))),
            RuntimeEndpoint::Usual => USUAL_SOCKETS
                .iter()
                .map(Path::new)
                .find(|p| under_root(p).exists())
                .map(|p| (p.to_owned(), under_root(p)))
                .ok_or_else(|| {
                    format!(
                        "no runtime socket at {} (set --runtime-endpoint)",
                        USUAL_SOCKETS.join(", ")
                    )
                }),
            RuntimeEndpoint::Disabled => Err("disabled".into()),
        }
    }

    /// What the runtime shows of `pod`, within [`OBSERVE_TIMEOUT`].
    pub async fn observe(&self, pod: &StaticPodRef) -> RuntimeView {
        let (named, path) = match self.socket() {
            Ok(s) => s,
            Err(reason) => return RuntimeView::Unavailable { reason },
        };
        match tokio::time::timeout(OBSERVE_TIMEOUT, observe_at(&path, pod)).await {
            Ok(Ok(view)) => view,
            Ok(Err(e)) => RuntimeView::Unavailable {
                reason: format!("unix://{}: {e}", named.display()),
            },
            Err(_) => RuntimeView::Unavailable {
                reason: format!("unix://{}: no answer within {OBSERVE_TIMEOUT:?}", named.display()),
            },
        }
    }
}

impl RuntimeObserver {
    /// Every ready sandbox on the node by pod UID, and whether it runs (`runtime::runs`): the
    /// checkpointer's check that a pod the kubelet or the API calls Ready really runs here.
    pub async fn running_pods(&self) -> Result<BTreeMap<String, bool>, String> {
        let (named, path) = self.socket()?;
        match tokio::time::timeout(OBSERVE_TIMEOUT, running_pods_at(&path)).await {
            Ok(Ok(pods)) => Ok(pods),
            Ok(Err(e)) => Err(format!("unix://{}: {e}", named.display())),
            Err(_) => Err(format!(
                "unix://{}: no answer within {OBSERVE_TIMEOUT:?}",
                named.display()
            )),
        }
    }
}

impl RuntimeObserver {
    /// Whether the runtime holds `image` (`ImageStatus`); `Err` when it cannot be asked.
    pub async fn image_present(&self, image: &str) -> Result<bool, String> {
        let (named, path) = self.socket()?;
        let ask = async {
            let mut client = ImageServiceClient::new(channel_with(&path, CALL_TIMEOUT));
            let answer = client
                .image_status(ImageStatusRequest {
                    image: Some(image_spec(image)),
                    verbose: false,
                })
                .await
                .map_err(describe)?
                .into_inner();
            Ok::<_, String>(answer.image.is_some())
        };
        match tokio::time::timeout(OBSERVE_TIMEOUT, ask).await {
            Ok(answer) => answer.map_err(|e| format!("unix://{}: {e}", named.display())),
            Err(_) => Err(format!(
                "unix://{}: no answer within {OBSERVE_TIMEOUT:?}",
                named.display()
            )),
        }
    }

    /// Pulls `image` through the runtime (`PullImage`, within [`PULL_TIMEOUT`]), with the
    /// runtime's own registry configuration and no credentials of the anchor's.
    pub async fn pull_image(&self, image: &str) -> Result<(), String> {
        let (_, path) = self.socket()?;
        let pull = async {
            let mut client = ImageServiceClient::new(channel_with(&path, PULL_TIMEOUT));
            client
                .pull_image(PullImageRequest {
                    image: Some(image_spec(image)),
                    auth: None,
                    sandbox_config: None,
                })
                .await
                .map_err(describe)?;
            Ok::<_, String>(())
        };
        match tokio::time::timeout(PULL_TIMEOUT, pull).await {
            Ok(pulled) => pulled,
            Err(_) => Err(format!("no answer within {PULL_TIMEOUT:?}")),
        }
    }
}

fn image_spec(image: &str) -> ImageSpec {
    ImageSpec {
        image: image.to_owned(),
        ..Default::default()
    }
}

async fn running_pods_at(path: &Path) -> Result<BTreeMap<String, bool>, String> {
    let mut client = RuntimeServiceClient::new(channel(path)?);
    let ready = PodSandboxFilter {
        state: Some(k8s_cri::v1::PodSandboxStateValue {
            state: PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    let sandboxes = sandboxes(&mut client, ready).await?;
    let containers = newest_containers(&mut client, ContainerFilter::default()).await?;
    Ok(sandboxes
        .into_iter()
        .filter_map(|s| {
            let uid = s.metadata.map(|m| m.uid)?;
            let states: Vec<ContainerState> = containers
                .iter()
                .filter(|((sandbox, _), _)| *sandbox == s.id)
                .map(|(_, (_, _, state))| *state)
                .collect();
            Some((uid, kube_anchor_core::runtime::runs(&states)))
        })
        .collect())
}

type Client = RuntimeServiceClient<Channel>;

async fn sandboxes(client: &mut Client, filter: PodSandboxFilter) -> Result<Vec<k8s_cri::v1::PodSandbox>, String> {
    Ok(client
        .list_pod_sandbox(ListPodSandboxRequest { filter: Some(filter) })
        .await
        .map_err(describe)?
        .into_inner()
        .items)
}

/// The newest attempt of each container of each sandbox: (sandbox, name) → (attempt, id, state).
/// The kubelet keeps the last dead attempt beside a new one.
async fn newest_containers(
    client: &mut Client,
    filter: ContainerFilter,
) -> Result<BTreeMap<(String, String), (u32, String, ContainerState)>, String> {
    let containers = client
        .list_containers(ListContainersRequest { filter: Some(filter) })
        .await
        .map_err(describe)?
        .into_inner()
        .containers;
    let mut newest: BTreeMap<(String, String), (u32, String, ContainerState)> = BTreeMap::new();
    for c in containers {
        let Some(meta) = c.metadata else { continue };
        let state = container_state(c.state);
        let entry = newest
            .entry((c.pod_sandbox_id, meta.name))
            .or_insert((meta.attempt, c.id.clone(), state));
        if meta.attempt >= entry.0 {
            *entry = (meta.attempt, c.id, state);
        }
    }
    Ok(newest)
}

fn channel(path: &Path) -> Result<Channel, String> {
    Ok(channel_with(path, CALL_TIMEOUT))
}

/// A channel to the socket at `path` whose every call may take `timeout`.
fn channel_with(path: &Path, timeout: Duration) -> Channel {
    let path = path.to_owned();
    // The URI is a placeholder: the connector dials the unix socket.
    let endpoint = Endpoint::from_static("http://[::1]:1")
        .connect_timeout(CALL_TIMEOUT)
        .timeout(timeout);
    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
    }))
}

/// A tonic status or transport error as one line (the message of an unreadable answer included).
fn describe(status: tonic::Status) -> String {
    let source = std::error::Error::source(&status)
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    format!("{:?}: {}{source}", status.code(), status.message())
}

async fn observe_at(path: &Path, pod: &StaticPodRef) -> Result<RuntimeView, String> {
    let mut client = RuntimeServiceClient::new(channel(path)?);
    let mut labels = HashMap::from([(POD_NAMESPACE_LABEL.to_owned(), pod.namespace.clone())]);
    if let Some(node) = &pod.node {
        labels.insert(POD_NAME_LABEL.into(), format!("{}-{}", pod.name, node.to_lowercase()));
    }
    let filter = PodSandboxFilter {
        label_selector: labels,
        ..Default::default()
    };
    let sandboxes = sandboxes(&mut client, filter).await?;
    let newest = sandboxes
        .into_iter()
        .filter(|s| {
            let name = s.labels.get(POD_NAME_LABEL).map(String::as_str).unwrap_or_default();
            pod.matches(name, &s.annotations)
        })
        .max_by_key(|s| s.created_at);
    let Some(sandbox) = newest else {
        return Ok(RuntimeView::NoSandbox);
    };
    let filter = ContainerFilter {
        pod_sandbox_id: sandbox.id.clone(),
        ..Default::default()
    };
    let newest = newest_containers(&mut client, filter).await?;
    let mut local = Vec::with_capacity(newest.len());
    for ((_, name), (attempt, id, _)) in newest {
        let status = client
            .container_status(ContainerStatusRequest {
                container_id: id,
                verbose: false,
            })
            .await
            .map_err(describe)?
            .into_inner()
            .status
            .ok_or_else(|| format!("container {name}: a status without a status"))?;
        let exited = status.state == k8s_cri::v1::ContainerState::ContainerExited as i32;
        local.push(LocalContainer {
            name,
            attempt,
            state: container_state(status.state),
            started_at: seconds(status.started_at),
            finished_at: seconds(status.finished_at),
            exit_code: exited.then_some(status.exit_code),
            reason: Some(status.reason).filter(|r| !r.is_empty()),
        });
    }
    Ok(RuntimeView::Pod(LocalPod {
        content_hash: sandbox.annotations.get(CONTENT_HASH_ANNOTATION).cloned(),
        ready: sandbox.state == PodSandboxState::SandboxReady as i32,
        created_at: seconds(sandbox.created_at).unwrap_or_default(),
        sandbox_id: sandbox.id,
        containers: local,
    }))
}

fn container_state(state: i32) -> ContainerState {
    use k8s_cri::v1::ContainerState as Cri;
    match Cri::try_from(state) {
        Ok(Cri::ContainerCreated) => ContainerState::Created,
        Ok(Cri::ContainerRunning) => ContainerState::Running,
        Ok(Cri::ContainerExited) => ContainerState::Exited,
        _ => ContainerState::Unknown,
    }
}

/// CRI times are nanoseconds since the epoch; 0 is "not set".
fn seconds(nanos: i64) -> Option<i64> {
    (nanos > 0).then_some(nanos / 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(RuntimeEndpoint::parse(None), Ok(RuntimeEndpoint::Usual));
        assert_eq!(RuntimeEndpoint::parse(Some(" ")), Ok(RuntimeEndpoint::Usual));
        assert_eq!(RuntimeEndpoint::parse(Some("none")), Ok(RuntimeEndpoint::Disabled));
        assert_eq!(
            RuntimeEndpoint::parse(Some("unix:///run/crio/crio.sock")),
            Ok(RuntimeEndpoint::Socket("/run/crio/crio.sock".into()))
        );
        assert!(RuntimeEndpoint::parse(Some("tcp://1.2.3.4:1")).is_err());
        assert!(RuntimeObserver::new(Path::new("/"), RuntimeEndpoint::Disabled).is_none());
    }

    #[test]
    fn a_static_pod_is_matched_by_the_kubelets_name_and_source() {
        let file = HashMap::from([
            (CONFIG_SOURCE_ANNOTATION.to_owned(), "file".to_owned()),
            (CONTENT_HASH_ANNOTATION.to_owned(), "sha256:x".to_owned()),
        ]);
        let api = HashMap::from([(CONFIG_SOURCE_ANNOTATION.to_owned(), "api".to_owned())]);
        let on = |node: Option<&str>| StaticPodRef {
            name: "etcd".into(),
            namespace: "kube-system".into(),
            node: node.map(Into::into),
        };
        assert!(on(Some("CP-1")).matches("etcd-cp-1", &file));
        assert!(!on(Some("cp-1")).matches("etcd-cp-2", &file));
        assert!(!on(Some("cp-1")).matches("etcd-cp-1", &api), "an API pod of that name");
        assert!(on(None).matches("etcd-cp-1", &file));
        assert!(!on(None).matches("etcdx-cp-1", &file));
    }

    /// A real runtime cannot be made to hang or answer garbage, so these stand-ins do: a socket
    /// file nobody listens on, a listener that accepts and never answers, one that answers with
    /// bytes that are not HTTP/2. Each is no evidence, reported, within the bound.
    #[tokio::test]
    async fn an_unusable_socket_is_no_evidence_within_the_bound() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let sock = |name: &str| dir.path().join(name);
        drop(std::os::unix::net::UnixListener::bind(sock("dead.sock")).unwrap());
        let hung = tokio::net::UnixListener::bind(sock("hung.sock")).unwrap();
        let garbage = tokio::net::UnixListener::bind(sock("garbage.sock")).unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = hung.accept().await {
                held.push(conn);
            }
        });
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = garbage.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nnot: grpc\r\n\r\ngarbage").await;
                    while conn.read(&mut buf).await.is_ok_and(|n| n > 0) {}
                });
            }
        });
        let pod = StaticPodRef {
            name: "kube-apiserver".into(),
            namespace: "kube-system".into(),
            node: Some("n1".into()),
        };
        for (name, want) in [
            ("missing.sock", "No such file"),
            ("dead.sock", "refused"),
            ("hung.sock", "Timeout"),
            ("garbage.sock", "protocol"),
        ] {
            let observer = RuntimeObserver::new(Path::new("/"), RuntimeEndpoint::Socket(sock(name))).unwrap();
            let started = std::time::Instant::now();
            let view = observer.observe(&pod).await;
            let waited = started.elapsed();
            match &view {
                RuntimeView::Unavailable { reason } => {
                    assert!(reason.contains(name) && reason.contains(want), "{name}: {reason}")
                }
                other => panic!("{name}: {other:?}"),
            }
            assert!(waited <= OBSERVE_TIMEOUT + Duration::from_secs(1), "{name}: {waited:?}");
        }
        let usual = RuntimeObserver::new(dir.path(), RuntimeEndpoint::Usual).unwrap();
        assert!(matches!(
            usual.observe(&pod).await,
            RuntimeView::Unavailable { reason } if reason.contains("--runtime-endpoint")
        ));
    }
}
