//! Scheduled etcd snapshots, carried out: observe (the member list, each voter's health, the
//! newest snapshot on the node), decide ([`kube_anchor_core::etcd_snapshot`]), take (etcd's
//! Snapshot RPC from this node's own member, written to a temp file, its integrity hash checked,
//! renamed into place), record and prune. Snapshots live in
//! `<state-dir>/v1/<component>-scheduled-snapshots/`, each `<UTC time>.db` with its record
//! `<UTC time>.db.json` beside it; both 0600 in a 0700 directory.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use kube_anchor_core::config::EtcdMember;
use kube_anchor_core::etcd_snapshot::{self, Decision, Schedule, SnapshotRecord};
use kube_anchor_host::etcd_data::{self, SnapshotSink};
use kube_anchor_k8s::etcd::{Cluster, Endpoint};

use crate::engine::{Engine, Inputs};
use crate::etcd_member::{ETCD_TIMEOUT, MemberError};

/// How long one snapshot transfer may take: etcd streams its database at disk speed, and 8 GiB
/// (its largest quota) at 50 MB/s takes under 3 minutes.
const TRANSFER_BUDGET: Duration = Duration::from_secs(1800);

#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    #[error(transparent)]
    Member(#[from] MemberError),
    #[error(transparent)]
    Etcd(#[from] kube_anchor_k8s::etcd::EtcdError),
    #[error(transparent)]
    DataDir(#[from] etcd_data::DataDirError),
    #[error("{endpoint}: this member is not healthy ({why}): no snapshot taken from it")]
    Unhealthy { endpoint: String, why: String },
}

/// Where this node's scheduled snapshots are (on this machine, below `--host-root`).
pub(crate) fn snapshot_dir(engine: &Engine, component: &str) -> Result<PathBuf, MemberError> {
    crate::etcd_member::state_subdir(engine, &format!("{component}-scheduled-snapshots"))
}

/// What a snapshot is taken with, owned (the transfer runs on its own task).
#[derive(Clone)]
pub(crate) struct Taker {
    pub dir: PathBuf,
    pub member_name: String,
    client_url: String,
    credentials: kube_anchor_k8s::etcd::Credentials,
    max_bytes: u64,
    pub schedule: Schedule,
}

impl Taker {
    /// `None` when the config schedules no snapshots.
    pub(crate) fn of(engine: &Engine, inputs: &Inputs, member: &EtcdMember) -> Result<Option<Self>, MemberError> {
        let Some(schedule) = member.snapshot_schedule else {
            return Ok(None);
        };
        Ok(Some(Self {
            dir: snapshot_dir(engine, &inputs.anchor.name)?,
            member_name: crate::etcd_member::me(inputs, member)?.name,
            client_url: crate::etcd_member::own_client_url(inputs, member)?,
            credentials: crate::etcd_member::credentials(member)?,
            max_bytes: member.snapshot_max_bytes,
            schedule,
        }))
    }
}

/// Whether this node takes a snapshot now: the healthy voters as this node sees them, and
/// the newest snapshot on the node.
pub(crate) async fn look(member: &EtcdMember, taker: &Taker) -> Result<Decision, SnapshotError> {
    let cluster = Cluster::new(&member.endpoints, &taker.credentials, ETCD_TIMEOUT)?;
    let members = cluster.member_list().await?;
    let healthy = crate::etcd_member::healthy_members(&members, &taker.credentials).await;
    let newest_here = etcd_data::list_snapshots(&taker.dir)?
        .iter()
        .rev()
        .find_map(|name| etcd_snapshot::taken_at(name));
    Ok(etcd_snapshot::decide(&etcd_snapshot::Facts {
        now: crate::engine::unix_now() as u64,
        every: taker.schedule.every,
        me: taker.member_name.clone(),
        healthy_voters: members
            .iter()
            .filter(|m| !m.is_learner && healthy.contains(&m.id))
            .map(|m| m.name.clone())
            .collect(),
        newest_here,
    }))
}

/// A snapshot written and verified.
#[derive(Debug, Clone)]
pub(crate) struct Taken {
    pub path: PathBuf,
    pub record: SnapshotRecord,
    pub taken_at: u64,
    /// Older snapshots removed to keep the count.
    pub pruned: Vec<String>,
}

/// Takes the snapshot of `slot` from this node's member, then removes the oldest beyond the
/// count. `None`: the slot ended before the transfer began (it is the next taker's). A failure
/// at any step leaves the snapshots already there as they were.
pub(crate) async fn take(taker: &Taker, slot: u64) -> Result<Option<Taken>, SnapshotError> {
    let endpoint = Endpoint::new(&taker.client_url, &taker.credentials, ETCD_TIMEOUT)?;
    let status = endpoint.status().await?;
    if !status.healthy() {
        return Err(SnapshotError::Unhealthy {
            endpoint: taker.client_url.clone(),
            why: if status.leader == 0 {
                "it knows no leader".into()
            } else {
                status.errors.join("; ")
            },
        });
    }
    let taken_at = crate::engine::unix_now() as u64;
    if etcd_snapshot::slot(taken_at, taker.schedule.every) != slot {
        return Ok(None);
    }
    let name = etcd_snapshot::file_name(taken_at);
    let mut sink = SnapshotSink::create(&taker.dir, &name, taker.max_bytes)?;
    endpoint
        .snapshot(TRANSFER_BUDGET, &mut |chunk| sink.write(chunk))
        .await?;
    let dir = taker.dir.clone();
    let (path, verified) = tokio::task::spawn_blocking(move || sink.finish())
        .await
        .expect("the snapshot check does not panic")?;
    let record = SnapshotRecord {
        taken_at: humantime::format_rfc3339_seconds(SystemTime::UNIX_EPOCH + Duration::from_secs(taken_at)).to_string(),
        member: taker.member_name.clone(),
        member_id: status.member_id.to_string(),
        cluster_id: status.cluster_id.to_string(),
        revision: status.revision,
        etcd_version: status.version.clone(),
        bytes: verified.bytes,
        sha256: verified.sha256,
    };
    let json = serde_json::to_vec_pretty(&record).expect("a record serializes");
    etcd_data::write_record(&dir.join(format!("{name}.json")), &json)?;
    let names = etcd_data::list_snapshots(&dir)?;
    let pruned = kube_anchor_core::membership::snapshots_to_prune(&names, taker.schedule.keep);
    etcd_data::remove_snapshots(&dir, &pruned)?;
    Ok(Some(Taken {
        path,
        record,
        taken_at,
        pruned,
    }))
}

/// A scheduled snapshot on the node, as `status` shows it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OnNode {
    pub file: String,
    /// Its record, when it has one that reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<SnapshotRecord>,
    /// `verified`, or why it cannot be restored from.
    pub integrity: String,
}

/// What `integrity` says of a snapshot read whole whose hash checks out, and of one whose size
/// alone was compared with its record.
const VERIFIED: &str = "verified";
const NOT_READ: &str = "size as recorded (not read: status --verify-snapshots reads it)";

impl OnNode {
    pub(crate) fn good(&self) -> bool {
        self.integrity == VERIFIED
    }

    /// Found wrong (a hash or a size that does not check out).
    pub(crate) fn bad(&self) -> bool {
        !self.good() && self.integrity != NOT_READ
    }
}

/// The scheduled snapshots in `dir`, newest first. Each is read whole to check etcd's
/// integrity hash (and compared with its record) until one checks out; the older ones only with
/// `read_all` (a node keeps several databases of up to gigabytes each), else their sizes are
/// compared with their records' (a cut-off file shows).
pub(crate) fn on_node(dir: &std::path::Path, read_all: bool) -> Result<Vec<OnNode>, etcd_data::DataDirError> {
    let mut found: Vec<OnNode> = Vec::new();
    for name in etcd_data::list_snapshots(dir)?.into_iter().rev() {
        let path = dir.join(&name);
        let record = std::fs::read(dir.join(format!("{name}.json")))
            .ok()
            .and_then(|bytes| serde_json::from_slice::<SnapshotRecord>(&bytes).ok());
        let integrity = if read_all || !found.iter().any(OnNode::good) {
            match etcd_data::verify_snapshot(&path) {
                Ok(v) => match &record {
                    Some(r) if r.sha256 != v.sha256 => {
                        format!(
                            "differs from its record (sha256 {} recorded, {} now)",
                            r.sha256, v.sha256
                        )
                    }
                    _ => VERIFIED.to_owned(),
                },
                Err(e) => e.source.to_string(),
            }
        } else {
            let bytes = std::fs::metadata(&path).map(|m| m.len());
            match (bytes, &record) {
                (Err(e), _) => e.to_string(),
                (Ok(n), Some(r)) if n != r.bytes => format!("{n} bytes, {} recorded: cut off or replaced", r.bytes),
                (Ok(n), _) if !etcd_snapshot::has_integrity_hash(n) => {
                    format!("{n} bytes: not a database with etcd's integrity hash after it")
                }
                (Ok(_), _) => NOT_READ.to_owned(),
            }
        };
        found.push(OnNode {
            file: path.display().to_string(),
            record,
            integrity,
        });
    }
    Ok(found)
}

/// The newest scheduled snapshot in `dir` as `AnchorStatus` shows it (`<taken at> revision
/// <n>`), from its record (written only once the file verified).
pub(crate) fn newest_summary(dir: &std::path::Path) -> Option<String> {
    let name = etcd_data::list_snapshots(dir).ok()?.pop()?;
    let bytes = std::fs::read(dir.join(format!("{name}.json"))).ok()?;
    let record: SnapshotRecord = serde_json::from_slice(&bytes).ok()?;
    Some(summary(&record))
}

pub(crate) fn summary(record: &SnapshotRecord) -> String {
    format!("{} revision {}", record.taken_at, record.revision)
}
