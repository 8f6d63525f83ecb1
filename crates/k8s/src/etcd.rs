//! The etcd v3 cluster API through etcd's JSON gateway (`POST /v3/cluster/member/*`,
//! `/v3/maintenance/status`) over HTTPS with client certificates, and the raft status etcd
//! publishes at `/debug/vars` (a learner's progress, seen by the leader).
//!
//! Why the gateway and not a gRPC client crate (`etcd-client`): the gateway is part of every
//! etcd server, its JSON is the protobuf JSON mapping of etcd's own `rpc.proto` (field names as
//! in the proto: `ID`, `peerURLs`, `isLearner`; uint64 as strings; false and empty fields left
//! out), and the HTTPS client is the one kube already brings (hyper, rustls). A gRPC client
//! would add tonic, prost and a protoc build step for six calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use kube::{Client, Config};
use serde::Deserialize;

use kube_anchor_core::membership::{Member, MemberList};

#[derive(Debug, thiserror::Error)]
pub enum EtcdError {
    #[error("etcd client credentials: {}: {source}", .path.display())]
    Credentials { path: PathBuf, source: std::io::Error },
    #[error("etcd endpoint {endpoint}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("etcd endpoint {endpoint}: {call}: {reason}")]
    Call {
        endpoint: String,
        call: &'static str,
        reason: String,
    },
    /// The endpoint would not serve this client: its TLS handshake failed (a certificate
    /// either side does not trust, expired or of another CA) or etcd answered 401/403.
    #[error("etcd endpoint {endpoint}: {call}: refused this client: {reason}")]
    Refused {
        endpoint: String,
        call: &'static str,
        reason: String,
    },
    #[error("no etcd endpoint answered: {errors}")]
    NoEndpoint {
        errors: String,
        /// One of the endpoints refused this client ([`EtcdError::Refused`]).
        refused: bool,
    },
}

impl EtcdError {
    /// A member answered and would not serve this client: a cluster runs and does not accept
    /// these credentials (as opposed to nobody answering).
    pub fn refused_this_client(&self) -> bool {
        matches!(
            self,
            EtcdError::Refused { .. } | EtcdError::NoEndpoint { refused: true, .. }
        )
    }
}

/// Whether `e` is a refusal of this client: an HTTP 401 or 403 (the gateway's Unauthenticated
/// and PermissionDenied), or a TLS error anywhere in its chain (a handshake the server or this
/// client gave up: rustls reports both, wrapped in `std::io::Error` by the connection).
fn refuses_client(e: &kube::Error) -> bool {
    if let kube::Error::Api(status) = e {
        return status.code == 401 || status.code == 403;
    }
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let tls = err.downcast_ref::<rustls::Error>().is_some()
            || err
                .downcast_ref::<std::io::Error>()
                .and_then(std::io::Error::get_ref)
                .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some());
        if tls {
            return true;
        }
        next = err.source();
    }
    false
}

/// PEM bytes of the client credentials (read once from the mounted Secret).
#[derive(Clone)]
pub struct Credentials {
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials { .. }")
    }
}

impl Credentials {
    pub fn read(ca: &Path, cert: &Path, key: &Path) -> Result<Self, EtcdError> {
        let read = |p: &Path| {
            kube_anchor_host::hostfs::read_regular(
                p,
                kube_anchor_host::hostfs::MAX_INPUT_BYTES,
                kube_anchor_host::hostfs::Follow::Yes,
            )
            .map_err(|source| EtcdError::Credentials { path: p.into(), source })
        };
        Ok(Self {
            ca: read(ca)?,
            cert: read(cert)?,
            key: read(key)?,
        })
    }
}

/// A client of one endpoint.
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    client: Client,
    timeout: Duration,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointStatus {
    pub member_id: u64,
    pub cluster_id: u64,
    /// The key-value store's revision this member has applied.
    pub revision: i64,
    /// The etcd server's version.
    pub version: String,
    /// The database file's size, and the part of it in use (the rest is free pages a defrag
    /// gives back).
    pub db_size: u64,
    pub db_size_in_use: u64,
    pub leader: u64,
    pub is_learner: bool,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub errors: Vec<String>,
}

impl EndpointStatus {
    /// The member follows a leader and reports no error but raised alarms. etcd's `Status`
    /// lists "etcdserver: no leader" and every alarm of the cluster (`memberID:… alarm:NOSPACE`,
    /// server/etcdserver/api/v3rpc/maintenance.go): an alarm is the cluster's state, raised on
    /// every member alike, and a member with one still votes.
    pub fn healthy(&self) -> bool {
        self.leader != 0 && self.errors.iter().all(|e| e.contains("alarm:"))
    }
}

/// A member's raft status as it publishes it (see [`Endpoint::raft_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStatus {
    pub id: u64,
    pub lead: u64,
    pub commit: u64,
    /// Member ID → the last index its log matches the leader's; known to the leader only.
    pub matched: BTreeMap<u64, u64>,
}

#[derive(Deserialize)]
struct DebugVars {
    #[serde(rename = "raft.status", default)]
    raft_status: Option<RawRaftStatus>,
}

#[derive(Deserialize)]
struct RawRaftStatus {
    id: String,
    lead: String,
    commit: u64,
    #[serde(default)]
    progress: BTreeMap<String, RawProgress>,
}

#[derive(Deserialize)]
struct RawProgress {
    #[serde(rename = "match")]
    matched: u64,
}

#[derive(Deserialize)]
struct RawMember {
    #[serde(rename = "ID", default)]
    id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(rename = "peerURLs", default)]
    peer_urls: Vec<String>,
    #[serde(rename = "clientURLs", default)]
    client_urls: Vec<String>,
    #[serde(rename = "isLearner", default)]
    is_learner: bool,
}

#[derive(Deserialize)]
struct RawMemberList {
    #[serde(default)]
    members: Vec<RawMember>,
}

#[derive(Deserialize)]
struct MemberAdd {
    member: RawMember,
    #[serde(default)]
    members: Vec<RawMember>,
}

/// One line of the gateway's snapshot stream.
#[derive(Deserialize)]
struct SnapshotMessage {
    #[serde(default)]
    result: Option<SnapshotChunk>,
    #[serde(default)]
    error: Option<StreamError>,
}

#[derive(Deserialize)]
struct SnapshotChunk {
    #[serde(default)]
    blob: String,
}

#[derive(Deserialize)]
struct StreamError {
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct Header {
    #[serde(default)]
    member_id: Option<String>,
    #[serde(default)]
    cluster_id: Option<String>,
    #[serde(default)]
    revision: Option<String>,
}

#[derive(Deserialize)]
struct RawStatus {
    header: Header,
    #[serde(default)]
    version: String,
    #[serde(rename = "dbSize", default)]
    db_size: Option<String>,
    #[serde(rename = "dbSizeInUse", default)]
    db_size_in_use: Option<String>,
    #[serde(default)]
    leader: Option<String>,
    #[serde(rename = "isLearner", default)]
    is_learner: bool,
    #[serde(rename = "raftIndex", default)]
    raft_index: Option<String>,
    #[serde(rename = "raftAppliedIndex", default)]
    raft_applied_index: Option<String>,
    #[serde(default)]
    errors: Vec<String>,
}

fn id(raw: &Option<String>) -> Result<u64, String> {
    match raw {
        None => Ok(0),
        Some(s) => s.parse().map_err(|_| format!("{s:?} is not a uint64")),
    }
}

fn member(raw: RawMember) -> Result<Member, String> {
    Ok(Member {
        id: id(&raw.id)?,
        name: raw.name,
        peer_urls: raw.peer_urls,
        client_urls: raw.client_urls,
        is_learner: raw.is_learner,
    })
}

fn members(raw: Vec<RawMember>) -> Result<Vec<Member>, String> {
    raw.into_iter().map(member).collect()
}

impl Endpoint {
    pub fn new(url: &str, credentials: &Credentials, timeout: Duration) -> Result<Self, EtcdError> {
        let bad = |reason: String| EtcdError::Endpoint {
            endpoint: url.into(),
            reason,
        };
        let uri: http::Uri = url.trim_end_matches('/').parse().map_err(|e| bad(format!("{e}")))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("not an https:// URL".into()));
        }
        let mut config = Config::new(uri);
        config.root_cert = Some(crate::direct::pem_certificates(&credentials.ca));
        config.connect_timeout = Some(Duration::from_secs(2));
        config.read_timeout = Some(timeout);
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        config.auth_info = kube::config::AuthInfo {
            client_certificate_data: Some(b64(&credentials.cert)),
            client_key_data: Some(b64(&credentials.key).into()),
            ..Default::default()
        };
        let client = Client::try_from(config).map_err(|e| bad(format!("{e}")))?;
        Ok(Self {
            url: url.into(),
            client,
            timeout,
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        call: &'static str,
        path: &str,
        body: serde_json::Value,
    ) -> Result<T, EtcdError> {
        let request = http::Request::post(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).expect("JSON"))
            .expect("a valid request");
        self.send(call, request).await
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        call: &'static str,
        request: http::Request<Vec<u8>>,
    ) -> Result<T, EtcdError> {
        let failed = |reason: String| EtcdError::Call {
            endpoint: self.url.clone(),
            call,
            reason,
        };
        let text = match tokio::time::timeout(self.timeout, self.client.request_text(request)).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) if refuses_client(&e) => {
                return Err(EtcdError::Refused {
                    endpoint: self.url.clone(),
                    call,
                    reason: kube_anchor_core::errors::error_chain(&e),
                });
            }
            // The gateway's error body is `{"code": <gRPC code>, "message": "etcdserver: ..."}`.
            Ok(Err(kube::Error::Api(status))) => return Err(failed(status.message.chars().take(512).collect())),
            Ok(Err(e)) => return Err(failed(kube_anchor_core::errors::error_chain(&e))),
            Err(_) => {
                return Err(failed(format!(
                    "no answer within {}",
                    humantime::format_duration(self.timeout)
                )));
            }
        };
        serde_json::from_str(&text).map_err(|e| failed(format!("unexpected answer: {e}")))
    }

    pub async fn member_list(&self) -> Result<Vec<Member>, EtcdError> {
        // Linearizable: a list served from a stale follower could miss a member just added.
        let list: RawMemberList = self
            .call(
                "member list",
                "/v3/cluster/member/list",
                serde_json::json!({"linearizable": true}),
            )
            .await?;
        members(list.members).map_err(|reason| EtcdError::Call {
            endpoint: self.url.clone(),
            call: "member list",
            reason,
        })
    }

    /// Adds a learner; returns it and the member list after the add.
    pub async fn add_learner(&self, peer_url: &str) -> Result<(Member, Vec<Member>), EtcdError> {
        let added: MemberAdd = self
            .call(
                "member add",
                "/v3/cluster/member/add",
                serde_json::json!({"peerURLs": [peer_url], "isLearner": true}),
            )
            .await?;
        let bad = |reason| EtcdError::Call {
            endpoint: self.url.clone(),
            call: "member add",
            reason,
        };
        Ok((member(added.member).map_err(bad)?, members(added.members).map_err(bad)?))
    }

    pub async fn promote(&self, id: u64) -> Result<(), EtcdError> {
        self.member_call("member promote", "/v3/cluster/member/promote", id)
            .await
    }

    pub async fn remove(&self, id: u64) -> Result<(), EtcdError> {
        self.member_call("member remove", "/v3/cluster/member/remove", id).await
    }

    /// A call on one member by ID whose answer carries nothing we use.
    async fn member_call(&self, call: &'static str, path: &str, id: u64) -> Result<(), EtcdError> {
        let _: serde_json::Value = self.call(call, path, serde_json::json!({"ID": id.to_string()})).await?;
        Ok(())
    }

    /// etcd's `MoveLeader`: asks this endpoint, which must be the leader, to hand leadership to
    /// voter `target`. etcd answers once the transfer is done or failed (within its election
    /// timeout).
    pub async fn move_leader(&self, target: u64) -> Result<(), EtcdError> {
        let _: serde_json::Value = self
            .call(
                "move leader",
                "/v3/maintenance/transfer-leadership",
                serde_json::json!({"targetID": target.to_string()}),
            )
            .await?;
        Ok(())
    }

    /// This member's raft status, which etcd publishes among its expvars (`raft.status` at
    /// `/debug/vars` on its client URLs): the commit index and, on the leader only, how far
    /// each other member's log matches the leader's. No RPC of the v3 API gives a learner's
    /// progress; the leader's own record of it holds even while the learner does not answer.
    pub async fn raft_status(&self) -> Result<RaftStatus, EtcdError> {
        let request = http::Request::get("/debug/vars")
            .body(Vec::new())
            .expect("a valid request");
        let vars: DebugVars = self.send("raft status", request).await?;
        let bad = |reason: String| EtcdError::Call {
            endpoint: self.url.clone(),
            call: "raft status",
            reason,
        };
        let raw = vars
            .raft_status
            .ok_or_else(|| bad("no raft.status among /debug/vars (raft not started)".into()))?;
        let hex = |s: &str| u64::from_str_radix(s, 16).map_err(|_| bad(format!("{s:?} is not a hex member ID")));
        Ok(RaftStatus {
            id: hex(&raw.id)?,
            lead: hex(&raw.lead)?,
            commit: raw.commit,
            matched: raw
                .progress
                .iter()
                .map(|(id, p)| Ok((hex(id)?, p.matched)))
                .collect::<Result<_, EtcdError>>()?,
        })
    }

    /// etcd's `Snapshot`: the member's database streamed, then the sha256 of what was sent
    /// (see [`kube_anchor_core::etcd_snapshot::INTEGRITY_HASH_LEN`]), each chunk handed to
    /// `sink` as it arrives. The gateway writes one JSON object a line, `{"result": {"blob":
    /// <base64>, ...}}` or `{"error": {...}}`. Returns the bytes received. `within` bounds the
    /// whole transfer (this endpoint's timeout bounds each read).
    pub async fn snapshot(
        &self,
        within: Duration,
        sink: &mut (dyn FnMut(&[u8]) -> std::io::Result<()> + Send),
    ) -> Result<u64, EtcdError> {
        use futures::{AsyncBufReadExt as _, StreamExt as _};
        const CALL: &str = "snapshot";
        let failed = |reason: String| EtcdError::Call {
            endpoint: self.url.clone(),
            call: CALL,
            reason,
        };
        let request = http::Request::post("/v3/maintenance/snapshot")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(b"{}".to_vec())
            .expect("a valid request");
        let transfer = async {
            let stream = match self.client.request_stream(request).await {
                Ok(stream) => stream,
                Err(e) if refuses_client(&e) => {
                    return Err(EtcdError::Refused {
                        endpoint: self.url.clone(),
                        call: CALL,
                        reason: kube_anchor_core::errors::error_chain(&e),
                    });
                }
                Err(e) => return Err(failed(kube_anchor_core::errors::error_chain(&e))),
            };
            let stream = std::pin::pin!(stream);
            let mut lines = stream.lines();
            let mut received = 0u64;
            while let Some(line) = lines.next().await {
                let line = line.map_err(|e| failed(format!("reading the stream: {e}")))?;
                if line.trim().is_empty() {
                    continue;
                }
                let message: SnapshotMessage =
                    serde_json::from_str(&line).map_err(|e| failed(format!("unexpected answer: {e}")))?;
                if let Some(error) = message.error {
                    return Err(failed(error.message.chars().take(512).collect()));
                }
                let Some(result) = message.result else {
                    continue;
                };
                let blob = base64::engine::general_purpose::STANDARD
                    .decode(result.blob.as_bytes())
                    .map_err(|e| failed(format!("a chunk is not base64: {e}")))?;
                sink(&blob).map_err(|e| failed(format!("writing the snapshot: {e}")))?;
                received += blob.len() as u64;
            }
            Ok(received)
        };
        match tokio::time::timeout(within, transfer).await {
            Ok(result) => result,
            Err(_) => Err(failed(format!(
                "not done within {}",
                humantime::format_duration(within)
            ))),
        }
    }

    /// etcd's `Defragment` of this member: it stops serving while it rewrites its database.
    pub async fn defragment(&self, within: Duration) -> Result<(), EtcdError> {
        let request = http::Request::post("/v3/maintenance/defragment")
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(b"{}".to_vec())
            .expect("a valid request");
        let call = self.send::<serde_json::Value>("defragment", request);
        match tokio::time::timeout(within, call).await {
            Ok(result) => result.map(drop),
            Err(_) => Err(EtcdError::Call {
                endpoint: self.url.clone(),
                call: "defragment",
                reason: format!("not done within {}", humantime::format_duration(within)),
            }),
        }
    }

    pub async fn status(&self) -> Result<EndpointStatus, EtcdError> {
        let raw: RawStatus = self
            .call("status", "/v3/maintenance/status", serde_json::json!({}))
            .await?;
        let parse = |v: &Option<String>| {
            id(v).map_err(|reason| EtcdError::Call {
                endpoint: self.url.clone(),
                call: "status",
                reason,
            })
        };
        Ok(EndpointStatus {
            member_id: parse(&raw.header.member_id)?,
            cluster_id: parse(&raw.header.cluster_id)?,
            revision: parse(&raw.header.revision)? as i64,
            version: raw.version,
            db_size: parse(&raw.db_size)?,
            db_size_in_use: parse(&raw.db_size_in_use)?,
            leader: parse(&raw.leader)?,
            is_learner: raw.is_learner,
            raft_index: parse(&raw.raft_index)?,
            raft_applied_index: parse(&raw.raft_applied_index)?,
            errors: raw.errors,
        })
    }
}

/// Several endpoints of one cluster: a call goes to the first that answers.
pub struct Cluster {
    endpoints: Vec<Endpoint>,
}

impl Cluster {
    pub fn new(urls: &[String], credentials: &Credentials, timeout: Duration) -> Result<Self, EtcdError> {
        Ok(Self {
            endpoints: urls
                .iter()
                .map(|u| Endpoint::new(u, credentials, timeout))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Runs `f` against each endpoint in turn until one succeeds; the errors of all otherwise.
    /// With `final_answer`, an error etcd itself returns (`etcdserver: …`) ends the round: for a
    /// promote, "not in sync yet" is the cluster's answer whichever member gives it. Without it,
    /// the next endpoint is asked (a member cut off from the leader answers "no leader"). A
    /// learner's refusal is never final: it speaks for itself, not the cluster (the endpoints a
    /// joining node is given usually list its own member, a learner until promoted).
    async fn first<'a, T, F, Fut>(&'a self, final_answer: bool, f: F) -> Result<T, EtcdError>
    where
        F: Fn(&'a Endpoint) -> Fut,
        Fut: std::future::Future<Output = Result<T, EtcdError>>,
    {
        Self::first_of(&self.endpoints, final_answer, f).await
    }

    /// [`Cluster::first`] over `endpoints`, in their order.
    async fn first_of<'a, T, F, Fut>(
        endpoints: impl IntoIterator<Item = &'a Endpoint>,
        final_answer: bool,
        f: F,
    ) -> Result<T, EtcdError>
    where
        F: Fn(&'a Endpoint) -> Fut,
        Fut: std::future::Future<Output = Result<T, EtcdError>>,
    {
        let mut errors = Vec::new();
        let mut refused = false;
        for e in endpoints {
            match f(e).await {
                Ok(v) => return Ok(v),
                Err(err) if final_answer && is_server_answer(&err) && !is_learner_refusal(&err) => {
                    return Err(err);
                }
                Err(err) => {
                    refused |= err.refused_this_client();
                    errors.push(err.to_string());
                }
            }
        }
        Err(EtcdError::NoEndpoint {
            errors: errors.join("; "),
            refused,
        })
    }

    pub async fn member_list(&self) -> Result<Vec<Member>, EtcdError> {
        self.first(false, |e| e.member_list()).await
    }

    /// The member list as the membership decisions take it: a refusal of this client apart
    /// from no answer.
    pub async fn observe_members(&self) -> MemberList {
        match self.member_list().await {
            Ok(members) => MemberList::Members(members),
            Err(e) if e.refused_this_client() => MemberList::Refused(e.to_string()),
            Err(e) => MemberList::Unreachable(e.to_string()),
        }
    }

    pub async fn add_learner(&self, peer_url: &str) -> Result<(Member, Vec<Member>), EtcdError> {
        // Not retried on another endpoint: an add whose answer was lost may have happened, and
        // the next pass finds the learner by its peer URL.
        match self.endpoints.first() {
            Some(e) if self.endpoints.len() == 1 => e.add_learner(peer_url).await,
            _ => {
                let list_from = self
                    .first(false, |e| async move { e.member_list().await.map(|_| e) })
                    .await?;
                list_from.add_learner(peer_url).await
            }
        }
    }

    pub async fn promote(&self, id: u64) -> Result<(), EtcdError> {
        self.first(true, |e| e.promote(id)).await
    }

    pub async fn remove(&self, id: u64) -> Result<(), EtcdError> {
        self.first(false, |e| e.remove(id)).await
    }

    /// Removes member `id`, asking the endpoints that are not among `own_urls` (the member's
    /// own client URLs) first: a member removed through itself stops once it has applied the
    /// change, often before its answer is out.
    pub async fn remove_through_others(&self, id: u64, own_urls: &[String]) -> Result<(), EtcdError> {
        let own = |e: &Endpoint| {
            own_urls
                .iter()
                .any(|u| u.trim_end_matches('/') == e.url.trim_end_matches('/'))
        };
        let others_first = self
            .endpoints
            .iter()
            .filter(|e| !own(e))
            .chain(self.endpoints.iter().filter(|e| own(e)));
        Self::first_of(others_first, false, |e| e.remove(id)).await
    }
}

/// An error etcd itself returned (the gateway's `{"code", "message"}`), as opposed to no answer.
fn is_server_answer(e: &EtcdError) -> bool {
    matches!(e, EtcdError::Call { reason, .. } if reason.contains("etcdserver:"))
}

/// A learner refusing a call only voters serve (etcd's `ErrGRPCNotSupportedForLearner`).
fn is_learner_refusal(e: &EtcdError) -> bool {
    matches!(e, EtcdError::Call { reason, .. } if reason.contains("etcdserver: rpc not supported for learner"))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Answers of etcd 3.6.8's gateway, as recorded (IDs shortened where it does not matter).
    const LIST: &str = r#"{"header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","raft_term":"2"},"members":[{"ID":"5052732621142732786","peerURLs":["http://127.0.0.1:23802"],"isLearner":true},{"ID":"13668033151171901709","name":"a","peerURLs":["http://127.0.0.1:23801"],"clientURLs":["http://127.0.0.1:23791"]}]}"#;
    const ADD: &str = r#"{"header":{"cluster_id":"1","member_id":"2","raft_term":"2"},"member":{"ID":"5052732621142732786","peerURLs":["http://127.0.0.1:23802"],"isLearner":true},"members":[{"ID":"5052732621142732786","peerURLs":["http://127.0.0.1:23802"],"isLearner":true}]}"#;
    const STATUS: &str = r#"{"header":{"cluster_id":"1","member_id":"13668033151171901709","revision":"1","raft_term":"2"},"version":"3.6.8","dbSize":"20480","leader":"13668033151171901709","raftIndex":"5","raftTerm":"2","raftAppliedIndex":"5","dbSizeInUse":"16384","storageVersion":"3.6.0","dbSizeQuota":"2147483648","downgradeInfo":{}}"#;

    #[test]
    fn a_raised_alarm_leaves_a_member_healthy_and_no_leader_does_not() {
        let status = |leader: u64, errors: &[&str]| EndpointStatus {
            member_id: 1,
            cluster_id: 2,
            revision: 1,
            version: "3.6.8".into(),
            db_size: 20480,
            db_size_in_use: 16384,
            leader,
            is_learner: false,
            raft_index: 5,
            raft_applied_index: 5,
            errors: errors.iter().map(|e| e.to_string()).collect(),
        };
        assert!(status(1, &[]).healthy());
        // etcd 3.6.8's own words (server/etcdserver/api/v3rpc/maintenance.go).
        assert!(status(1, &["memberID:13668033151171901709 alarm:NOSPACE "]).healthy());
        assert!(!status(0, &["etcdserver: no leader"]).healthy());
        assert!(!status(1, &["etcdserver: request timed out"]).healthy());
    }

    #[test]
    fn parses_the_gateway_json() {
        let list: RawMemberList = serde_json::from_str(LIST).unwrap();
        let m = members(list.members).unwrap();
        assert_eq!(m.len(), 2);
        // An unstarted learner: no name, no client URLs; uint64 IDs as strings.
        assert_eq!(
            m[0],
            Member {
                id: 5052732621142732786,
                name: String::new(),
                peer_urls: vec!["http://127.0.0.1:23802".into()],
                client_urls: vec![],
                is_learner: true,
            }
        );
        // A voter: isLearner left out (false).
        assert!(!m[1].is_learner && m[1].name == "a" && m[1].id == 13668033151171901709);
        let add: MemberAdd = serde_json::from_str(ADD).unwrap();
        assert_eq!(member(add.member).unwrap().id, 5052732621142732786);
        let raw: RawStatus = serde_json::from_str(STATUS).unwrap();
        assert_eq!(id(&raw.leader), Ok(13668033151171901709));
        assert_eq!(id(&raw.header.member_id), Ok(13668033151171901709));
        assert!(id(&Some("-1".into())).is_err());
    }

    #[test]
    fn tells_etcd_answers_from_no_answer() {
        let call = |reason: &str| EtcdError::Call {
            endpoint: "https://e".into(),
            call: "member promote",
            reason: reason.into(),
        };
        assert!(is_server_answer(&call(
            "etcdserver: can only promote a learner member which is in sync with leader"
        )));
        assert!(!is_server_answer(&call("no answer within 10s")));
        // A learner asked to promote (its own endpoint listed first) speaks for itself only.
        let learner = call("etcdserver: rpc not supported for learner");
        assert!(is_server_answer(&learner) && is_learner_refusal(&learner));
        assert!(!is_learner_refusal(&call(
            "etcdserver: can only promote a learner member which is in sync with leader"
        )));
    }
}
