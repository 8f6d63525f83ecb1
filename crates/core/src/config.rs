//! The `Anchor` config file: what to write where. Pure; `engine::load_config` reads the file.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::hostpath::{AllowedRoots, HostPath};
use crate::render::is_variable_name;

pub(crate) const API_VERSION: &str = "kube-anchor.io/v1alpha1";
pub(crate) const KIND: &str = "Anchor";
/// Mode of the manifest when the config gives none (what kubeadm writes).
pub(crate) const DEFAULT_MANIFEST_MODE: FileMode = FileMode(0o600);

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", .path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{}: {reason}", .path.display())]
    Yaml { path: PathBuf, reason: String },
    #[error("{}: {field}: {problem}", .path.display())]
    Invalid {
        path: PathBuf,
        field: String,
        problem: String,
    },
}

/// A file mode, written in the config as a quoted octal string such as `"0600"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileMode(pub u32);

impl FileMode {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let digits = raw.strip_prefix("0o").unwrap_or(raw);
        if digits.is_empty() || digits.len() > 4 || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            return Err(format!("{raw:?} is not an octal mode like \"0600\""));
        }
        let mode = u32::from_str_radix(digits, 8).expect("checked octal digits");
        if mode & !0o777 != 0 {
            return Err(format!("{raw:?}: setuid, setgid and sticky bits are not allowed"));
        }
        if mode & 0o002 != 0 {
            return Err(format!("{raw:?}: world-writable files are not allowed"));
        }
        Ok(Self(mode))
    }

    /// True when neither group nor others may read it.
    pub fn is_private(self) -> bool {
        self.0 & 0o077 == 0
    }
}

impl fmt::Display for FileMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl<'de> Deserialize<'de> for FileMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = FileMode;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quoted octal mode such as \"0600\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<FileMode, E> {
                FileMode::parse(v).map_err(E::custom)
            }
            // YAML reads an unquoted 0600 as the decimal number 600: refuse instead of guessing.
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<FileMode, E> {
                Err(E::custom(format!(
                    "mode {v} must be a quoted octal string such as \"0600\""
                )))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<FileMode, E> {
                Err(E::custom(format!(
                    "mode {v} must be a quoted octal string such as \"0600\""
                )))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl serde::Serialize for FileMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Numeric `uid:gid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let bad = || format!("owner {raw:?} is not a numeric \"uid:gid\" such as \"0:0\"");
        let (uid, gid) = raw.split_once(':').ok_or_else(bad)?;
        let owner = Self {
            uid: uid.parse().map_err(|_| bad())?,
            gid: gid.parse().map_err(|_| bad())?,
        };
        // chown(2) reads (uid_t)-1 as "leave unchanged": such an owner could never take effect.
        if owner.uid == u32::MAX || owner.gid == u32::MAX {
            return Err(format!("owner {raw:?}: {} is not a usable uid or gid", u32::MAX));
        }
        Ok(owner)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.uid, self.gid)
    }
}

impl<'de> Deserialize<'de> for Owner {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Owner::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl serde::Serialize for Owner {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Certificates, keys, kubeconfigs, config files: written before the manifest.
    Credential,
    /// The static pod manifest: written last, removed first.
    Manifest,
}

/// One file to write, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSpec {
    pub source: PathBuf,
    pub path: HostPath,
    pub mode: FileMode,
    pub owner: Option<Owner>,
    pub template: bool,
    pub restart_on_change: bool,
    pub role: Role,
}

/// A validated config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub name: String,
    pub variables: Vec<String>,
    /// Credentials in config order, then the manifest last.
    pub files: Vec<FileSpec>,
    /// This node's etcd member, when the anchor manages etcd membership.
    pub etcd_member: Option<EtcdMember>,
    /// Names a new serving certificate may drop from the one on the node
    /// (`credentials::check`): a rename made on purpose, its clients moved first.
    pub dropped_serving_names: Vec<String>,
}

/// Variables the anchor sets itself from the membership record (`spec.etcdMember`).
pub const ETCD_INITIAL_CLUSTER: &str = "ETCD_INITIAL_CLUSTER";
pub const ETCD_INITIAL_CLUSTER_STATE: &str = "ETCD_INITIAL_CLUSTER_STATE";

/// `spec.etcdMember`: how this node's etcd member joins and leaves the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdMember {
    /// Client URLs (https) of the existing cluster's members.
    pub endpoints: Vec<String>,
    /// This member's name and peer URL, rendered with `spec.variables`.
    pub name: String,
    pub peer_url: String,
    /// This member's own client URL (rendered): its status tells when it has caught up.
    pub client_url: String,
    /// Client CA, certificate and key the anchor uses (sources, like `spec.files[].source`).
    pub client_ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// etcd's data dir on the host (holds `member/` once etcd has run).
    pub data_dir: HostPath,
    /// Snapshots of the data dir kept under the state dir on leave, and the size bound of one.
    pub snapshots_keep: usize,
    pub snapshot_max_bytes: u64,
    /// Scheduled snapshots (`snapshots.schedule`), bounded by `snapshot_max_bytes` too; `None`:
    /// none taken.
    pub snapshot_schedule: Option<crate::etcd_snapshot::Schedule>,
    /// Rolling defragmentation (`defrag`); `None`: the anchor never defragments.
    pub defrag: Option<crate::etcd_defrag::DefragPolicy>,
    /// This node may start a new cluster: it is named in `initial_cluster` (state `new`).
    pub initial_cluster: Option<String>,
    /// How long a learner may take to catch up before a Warning Event says how far behind it is.
    pub learner_catch_up_timeout: std::time::Duration,
    /// A member that leads hands leadership to a caught-up voter before its restart or leave.
    pub hand_off_leadership: bool,
}

/// A learner usually catches up in seconds; a large database over a slow link in minutes.
pub const DEFAULT_LEARNER_CATCH_UP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

impl Anchor {
    pub fn manifest(&self) -> &FileSpec {
        self.files.last().expect("the manifest is always last")
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawConfig {
    api_version: String,
    kind: String,
    metadata: RawMetadata,
    spec: RawSpec,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetadata {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSpec {
    #[serde(default)]
    variables: Vec<String>,
    #[serde(default)]
    files: Vec<RawFile>,
    manifest: RawManifest,
    #[serde(default)]
    etcd_member: Option<RawEtcdMember>,
    #[serde(default)]
    dropped_serving_names: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawEtcdMember {
    endpoints: Vec<String>,
    name: String,
    #[serde(rename = "peerURL")]
    peer_url: String,
    #[serde(rename = "clientURL")]
    client_url: String,
    #[serde(rename = "clientCA")]
    client_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    data_dir: String,
    #[serde(default)]
    snapshots: RawSnapshots,
    /// Set only on the nodes of a new cluster's initial member list.
    #[serde(default)]
    initial_cluster: Option<String>,
    /// A duration ("10m", "90s").
    #[serde(default)]
    learner_catch_up_timeout: Option<String>,
    #[serde(default = "yes")]
    hand_off_leadership: bool,
    #[serde(default)]
    defrag: Option<RawDefrag>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDefrag {
    every: String,
    min_bytes: u64,
    min_free_percent: u8,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSnapshots {
    #[serde(default = "default_keep")]
    keep: usize,
    #[serde(default = "default_max_bytes")]
    max_bytes: u64,
    #[serde(default)]
    schedule: Option<RawSchedule>,
}

impl Default for RawSnapshots {
    fn default() -> Self {
        Self {
            keep: default_keep(),
            max_bytes: default_max_bytes(),
            schedule: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSchedule {
    every: String,
    keep: usize,
}

fn default_keep() -> usize {
    3
}

/// etcd's default backend quota is 2 GiB, its maximum 8 GiB.
fn default_max_bytes() -> u64 {
    8 << 30
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFile {
    source: PathBuf,
    path: String,
    mode: FileMode,
    #[serde(default)]
    owner: Option<Owner>,
    #[serde(default)]
    template: bool,
    #[serde(default = "yes")]
    restart_on_change: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawManifest {
    source: PathBuf,
    path: String,
    #[serde(default)]
    mode: Option<FileMode>,
    #[serde(default)]
    owner: Option<Owner>,
}

fn yes() -> bool {
    true
}

/// A DNS-1123 label: the component name also names the ledger file.
pub fn is_component_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

pub fn parse(path: &Path, text: &str, roots: &AllowedRoots) -> Result<Anchor, ConfigError> {
    if let Err(offset) = crate::yaml::check_flow_depth(text) {
        return Err(ConfigError::Yaml {
            path: path.into(),
            reason: crate::yaml::YamlError::TooDeep { offset }.to_string(),
        });
    }
    let raw: RawConfig = serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Yaml {
        path: path.into(),
        reason: crate::yaml::in_words(&e.to_string()),
    })?;
    let invalid = |field: &str, problem: String| ConfigError::Invalid {
        path: path.into(),
        field: field.into(),
        problem,
    };
    if raw.api_version != API_VERSION {
        return Err(invalid(
            "apiVersion",
            format!("expected {API_VERSION:?}, found {:?}", raw.api_version),
        ));
    }
    if raw.kind != KIND {
        return Err(invalid("kind", format!("expected {KIND:?}, found {:?}", raw.kind)));
    }
    if !is_component_name(&raw.metadata.name) {
        return Err(invalid(
            "metadata.name",
            format!("{:?} is not a lowercase DNS label (a-z, 0-9, '-')", raw.metadata.name),
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, name) in raw.spec.variables.iter().enumerate() {
        if !is_variable_name(name) {
            return Err(invalid(
                &format!("spec.variables[{i}]"),
                format!("{name:?} is not a variable name"),
            ));
        }
        if !seen.insert(name) {
            return Err(invalid(
                &format!("spec.variables[{i}]"),
                format!("{name:?} is listed twice"),
            ));
        }
    }
    let base = path.parent().unwrap_or(Path::new("."));
    let source = |s: &Path| {
        if s.is_absolute() { s.to_path_buf() } else { base.join(s) }
    };
    let host_path =
        |field: &str, raw: &str| HostPath::parse_allowed(raw, roots).map_err(|e| invalid(field, e.to_string()));

    let mut files = Vec::with_capacity(raw.spec.files.len() + 1);
    for (i, f) in raw.spec.files.iter().enumerate() {
        files.push(FileSpec {
            source: source(&f.source),
            path: host_path(&format!("spec.files[{i}].path"), &f.path)?,
            mode: f.mode,
            owner: f.owner,
            template: f.template,
            restart_on_change: f.restart_on_change,
            role: Role::Credential,
        });
    }
    let m = &raw.spec.manifest;
    files.push(FileSpec {
        source: source(&m.source),
        path: host_path("spec.manifest.path", &m.path)?,
        mode: m.mode.unwrap_or(DEFAULT_MANIFEST_MODE),
        owner: m.owner,
        template: true,
        restart_on_change: true,
        role: Role::Manifest,
    });
    let mut paths = BTreeSet::new();
    for (i, f) in files.iter().enumerate() {
        if !paths.insert(&f.path) {
            let field = if f.role == Role::Manifest {
                "spec.manifest.path".into()
            } else {
                format!("spec.files[{i}].path")
            };
            return Err(invalid(
                &field,
                format!("{} is written by an earlier entry too", f.path),
            ));
        }
    }
    let mut variables = raw.spec.variables;
    let etcd_member = match raw.spec.etcd_member {
        None => None,
        Some(e) => {
            let member = etcd_member(e, &source, &invalid)?;
            for name in [ETCD_INITIAL_CLUSTER, ETCD_INITIAL_CLUSTER_STATE] {
                if !variables.iter().any(|v| v == name) {
                    variables.push(name.into());
                }
            }
            Some(member)
        }
    };
    Ok(Anchor {
        name: raw.metadata.name,
        variables,
        files,
        etcd_member,
        dropped_serving_names: raw.spec.dropped_serving_names,
    })
}

fn etcd_member(
    e: RawEtcdMember,
    source: &dyn Fn(&Path) -> PathBuf,
    invalid: &dyn Fn(&str, String) -> ConfigError,
) -> Result<EtcdMember, ConfigError> {
    const F: &str = "spec.etcdMember";
    if e.endpoints.is_empty() {
        return Err(invalid(
            &format!("{F}.endpoints"),
            "at least one client URL is needed".into(),
        ));
    }
    for (i, url) in e.endpoints.iter().enumerate() {
        if !is_https_url(url) {
            return Err(invalid(
                &format!("{F}.endpoints[{i}]"),
                format!("{url:?} is not an https://host:port URL"),
            ));
        }
    }
    if e.name.trim().is_empty() {
        return Err(invalid(&format!("{F}.name"), "must not be empty".into()));
    }
    for (field, url) in [("peerURL", &e.peer_url), ("clientURL", &e.client_url)] {
        // ${NODE_IP} and the like are rendered later; the scheme is checked now.
        if !url.starts_with("https://") {
            return Err(invalid(
                &format!("{F}.{field}"),
                format!("{url:?} is not an https:// URL"),
            ));
        }
    }
    let data_dir = HostPath::parse(&e.data_dir).map_err(|err| invalid(&format!("{F}.dataDir"), err.to_string()))?;
    if data_dir.as_path().components().count() < 3 {
        return Err(invalid(
            &format!("{F}.dataDir"),
            format!("{data_dir} is too close to / to be removed on a decommission"),
        ));
    }
    if e.snapshots.keep == 0 || e.snapshots.keep > 100 {
        return Err(invalid(
            &format!("{F}.snapshots.keep"),
            "must be between 1 and 100".into(),
        ));
    }
    if e.snapshots.max_bytes == 0 {
        return Err(invalid(&format!("{F}.snapshots.maxBytes"), "must be above 0".into()));
    }
    if let Some(ic) = &e.initial_cluster {
        let ok = !ic.is_empty()
            && ic.split(',').all(|part| {
                part.split_once('=')
                    .is_some_and(|(name, url)| !name.is_empty() && url.starts_with("https://"))
            });
        if !ok {
            return Err(invalid(
                &format!("{F}.initialCluster"),
                format!("{ic:?} is not name=https://host:port,..."),
            ));
        }
    }
    let snapshot_schedule = match &e.snapshots.schedule {
        None => None,
        Some(schedule) => {
            let field = format!("{F}.snapshots.schedule");
            let every = period(&schedule.every, "6h").map_err(|why| invalid(&format!("{field}.every"), why))?;
            if schedule.keep == 0 || schedule.keep > 1000 {
                return Err(invalid(&format!("{field}.keep"), "must be between 1 and 1000".into()));
            }
            Some(crate::etcd_snapshot::Schedule {
                every,
                keep: schedule.keep,
            })
        }
    };
    let defrag = match &e.defrag {
        None => None,
        Some(d) => {
            let every = period(&d.every, "10m").map_err(|why| invalid(&format!("{F}.defrag.every"), why))?;
            if d.min_free_percent == 0 || d.min_free_percent > 100 {
                return Err(invalid(
                    &format!("{F}.defrag.minFreePercent"),
                    "must be between 1 and 100".into(),
                ));
            }
            Some(crate::etcd_defrag::DefragPolicy {
                every,
                min_bytes: d.min_bytes,
                min_free_percent: d.min_free_percent,
            })
        }
    };
    let learner_catch_up_timeout = match &e.learner_catch_up_timeout {
        None => DEFAULT_LEARNER_CATCH_UP_TIMEOUT,
        Some(text) => match humantime::parse_duration(text) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                return Err(invalid(&format!("{F}.learnerCatchUpTimeout"), "must be above 0".into()));
            }
            Err(err) => {
                return Err(invalid(
                    &format!("{F}.learnerCatchUpTimeout"),
                    format!("{text:?} is not a duration like \"10m\" or \"90s\": {err}"),
                ));
            }
        },
    };
    Ok(EtcdMember {
        endpoints: e.endpoints,
        name: e.name,
        peer_url: e.peer_url,
        client_url: e.client_url,
        client_ca: source(&e.client_ca),
        client_cert: source(&e.client_cert),
        client_key: source(&e.client_key),
        data_dir,
        snapshots_keep: e.snapshots.keep,
        snapshot_max_bytes: e.snapshots.max_bytes,
        snapshot_schedule,
        defrag,
        learner_catch_up_timeout,
        hand_off_leadership: e.hand_off_leadership,
        initial_cluster: e.initial_cluster,
    })
}

/// A period of at least a second (`every:` of the snapshots' schedule and of the defrag).
fn period(text: &str, example: &str) -> Result<std::time::Duration, String> {
    match humantime::parse_duration(text) {
        Ok(d) if d >= std::time::Duration::from_secs(1) => Ok(d),
        Ok(_) => Err("must be at least 1s".into()),
        Err(err) => Err(format!("{text:?} is not a duration like \"{example}\": {err}")),
    }
}

fn is_https_url(url: &str) -> bool {
    url.strip_prefix("https://")
        .is_some_and(|rest| !rest.is_empty() && !rest.contains(char::is_whitespace))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: kube-anchor.io/v1alpha1
kind: Anchor
metadata:
  name: kube-apiserver
spec:
  variables: [NODE_NAME, NODE_IP]
  files:
    - source: pki/apiserver.pem
      path: /etc/kubernetes/apiserver/pki/apiserver.pem
      mode: "0644"
    - source: /abs/key.pem
      path: /etc/kubernetes/apiserver/pki/apiserver-key.pem
      mode: "0600"
      owner: "0:0"
      template: true
      restartOnChange: false
  manifest:
    source: kube-apiserver.yaml
    path: /etc/kubernetes/manifests/kube-apiserver.yaml
"#;

    fn roots() -> AllowedRoots {
        AllowedRoots::new([HostPath::parse("/etc/kubernetes").unwrap()])
    }

    fn p(text: &str) -> Result<Anchor, ConfigError> {
        parse(Path::new("/cfg/anchor.yaml"), text, &roots())
    }

    fn problem(text: &str) -> String {
        p(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_the_documented_example() {
        let a = p(GOOD).unwrap();
        assert_eq!(a.name, "kube-apiserver");
        assert_eq!(a.files.len(), 3);
        assert_eq!(a.files[0].source, Path::new("/cfg/pki/apiserver.pem"));
        assert_eq!(a.files[0].mode, FileMode(0o644));
        assert!(a.files[0].restart_on_change && !a.files[0].template);
        assert_eq!(a.files[1].source, Path::new("/abs/key.pem"));
        assert_eq!(a.files[1].owner, Some(Owner { uid: 0, gid: 0 }));
        assert!(!a.files[1].restart_on_change && a.files[1].template);
        let m = a.manifest();
        assert_eq!(
            (m.role, m.mode, m.template),
            (Role::Manifest, DEFAULT_MANIFEST_MODE, true)
        );
    }

    #[test]
    fn modes() {
        assert_eq!(FileMode::parse("0600"), Ok(FileMode(0o600)));
        assert_eq!(FileMode::parse("644"), Ok(FileMode(0o644)));
        assert_eq!(FileMode::parse("0o640"), Ok(FileMode(0o640)));
        for bad in ["", "0800", "rw-r--r--", "04755", "0666", "12345"] {
            assert!(FileMode::parse(bad).is_err(), "{bad}");
        }
        // A number YAML reads as decimal is refused; a leading zero keeps it a string here.
        assert!(problem(&GOOD.replace("\"0644\"", "644")).contains("must be a quoted octal string"));
        assert_eq!(
            p(&GOOD.replace("\"0644\"", "0644")).unwrap().files[0].mode,
            FileMode(0o644)
        );
        assert!(problem(&GOOD.replace("\"0644\"", "\"u+rw\"")).contains("not an octal mode"));
        assert_eq!(FileMode(0o600).to_string(), "0600");
    }

    #[test]
    fn errors_name_the_file_and_field() {
        let e = problem(&GOOD.replace("/etc/kubernetes/manifests/", "/etc/../"));
        assert!(e.starts_with("/cfg/anchor.yaml: spec.manifest.path:"), "{e}");
        let e = problem(&GOOD.replace(
            "/etc/kubernetes/apiserver/pki/apiserver.pem",
            "/root/.ssh/authorized_keys",
        ));
        assert!(
            e.starts_with("/cfg/anchor.yaml: spec.files[0].path: /root/.ssh/authorized_keys: outside"),
            "{e}"
        );
        let e = problem(&GOOD.replace("kind: Anchor", "kind: Pod"));
        assert!(e.contains("kind: expected \"Anchor\""), "{e}");
        let e = problem(&GOOD.replace("name: kube-apiserver", "name: ../evil"));
        assert!(e.contains("metadata.name"), "{e}");
        let e = problem(&GOOD.replace("NODE_IP]", "NODE-IP]"));
        assert!(e.contains("spec.variables[1]"), "{e}");
        let e = problem(&GOOD.replace("restartOnChange", "restartOnChagne"));
        assert!(e.contains("restartOnChagne"), "{e}");
        let e = problem(&GOOD.replace("owner: \"0:0\"", "owner: root"));
        assert!(
            e.contains("spec.files[1]: owner \"root\" is not a numeric \"uid:gid\""),
            "{e}"
        );
        let e = problem(&GOOD.replace("owner: \"0:0\"", "owner: \"4294967295:0\""));
        assert!(e.contains("4294967295 is not a usable uid or gid"), "{e}");
        let e = problem(&GOOD.replace("  name: kube-apiserver\n", "  name: kube-apiserver\n  labels: {a: b}\n"));
        assert!(e.contains("labels"), "{e}");
        let e = problem(&GOOD.replace("\"0644\"", "-1"));
        assert!(e.contains("mode -1 must be a quoted octal string"), "{e}");
        let e = problem(&format!("{GOOD}x: {}", "{".repeat(5000)));
        assert!(e.contains("nests deeper than 1000"), "{e}");
    }

    #[test]
    fn duplicate_destinations_are_refused() {
        let dup = GOOD.replace(
            "/etc/kubernetes/apiserver/pki/apiserver-key.pem",
            "/etc/kubernetes/apiserver/pki/apiserver.pem",
        );
        assert!(problem(&dup).contains("spec.files[1].path"));
    }

    const ETCD_MEMBER: &str = r#"  etcdMember:
    endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
    name: ${NODE_NAME}
    peerURL: https://${NODE_IP}:2380
    clientURL: https://${NODE_IP}:2379
    clientCA: pki/etcd-ca.crt
    clientCert: pki/anchor.crt
    clientKey: /abs/anchor.key
    dataDir: /var/lib/etcd
"#;

    #[test]
    fn etcd_member_section() {
        let a = p(&format!("{GOOD}{ETCD_MEMBER}")).unwrap();
        let e = a.etcd_member.as_ref().unwrap();
        assert_eq!(e.endpoints.len(), 2);
        assert_eq!(e.client_ca, Path::new("/cfg/pki/etcd-ca.crt"));
        assert_eq!(e.client_key, Path::new("/abs/anchor.key"));
        assert_eq!((e.snapshots_keep, e.snapshot_max_bytes), (3, 8 << 30));
        assert_eq!(e.snapshot_schedule, None);
        assert_eq!(e.initial_cluster, None);
        // The anchor provides the initial-cluster pair to the manifest.
        assert!(a.variables.iter().any(|v| v == ETCD_INITIAL_CLUSTER));
        assert!(a.variables.iter().any(|v| v == ETCD_INITIAL_CLUSTER_STATE));
        assert!(p(GOOD).unwrap().etcd_member.is_none());
        let bad = |from: &str, to: &str| problem(&format!("{GOOD}{}", ETCD_MEMBER.replace(from, to)));
        let e = bad("https://10.0.0.2:2379", "http://10.0.0.2:2379");
        assert!(e.contains("spec.etcdMember.endpoints[1]"), "{e}");
        let e = bad(
            "endpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]",
            "endpoints: []",
        );
        assert!(e.contains("spec.etcdMember.endpoints: at least one"), "{e}");
        let e = bad("peerURL: https", "peerURL: http");
        assert!(e.contains("spec.etcdMember.peerURL"), "{e}");
        let e = bad("dataDir: /var/lib/etcd", "dataDir: /var");
        assert!(e.contains("spec.etcdMember.dataDir"), "{e}");
        let e = bad("dataDir: /var/lib/etcd", "dataDir: /var/lib/../etcd");
        assert!(e.contains("spec.etcdMember.dataDir"), "{e}");
        let e = bad(
            "dataDir: /var/lib/etcd\n",
            "dataDir: /var/lib/etcd\n    snapshots: {keep: 0}\n",
        );
        assert!(e.contains("spec.etcdMember.snapshots.keep"), "{e}");
        let e = bad(
            "dataDir: /var/lib/etcd\n",
            "dataDir: /var/lib/etcd\n    initialCluster: a=http://x\n",
        );
        assert!(e.contains("spec.etcdMember.initialCluster"), "{e}");
        let e = bad(
            "dataDir: /var/lib/etcd\n",
            "dataDir: /var/lib/etcd\n    bootstrap: true\n",
        );
        assert!(e.contains("bootstrap"), "{e}");
        for (schedule, field, problem) in [
            ("{every: 0s, keep: 7}", "schedule.every", "at least 1s"),
            ("{every: daily, keep: 7}", "schedule.every", "is not a duration"),
            ("{every: 6h, keep: 0}", "schedule.keep", "between 1 and 1000"),
        ] {
            let e = bad(
                "dataDir: /var/lib/etcd\n",
                &format!("dataDir: /var/lib/etcd\n    snapshots: {{schedule: {schedule}}}\n"),
            );
            assert!(
                e.contains(&format!("spec.etcdMember.snapshots.{field}")) && e.contains(problem),
                "{e}"
            );
        }
        for (defrag, field, problem) in [
            (
                "{every: 10m, minBytes: 1, minFreePercent: 0}",
                "defrag.minFreePercent",
                "between 1 and 100",
            ),
            (
                "{every: often, minBytes: 1, minFreePercent: 45}",
                "defrag.every",
                "is not a duration",
            ),
        ] {
            let e = bad(
                "dataDir: /var/lib/etcd\n",
                &format!("dataDir: /var/lib/etcd\n    defrag: {defrag}\n"),
            );
            assert!(
                e.contains(&format!("spec.etcdMember.{field}")) && e.contains(problem),
                "{e}"
            );
        }
        for (timeout, problem) in [("0s", "must be above 0"), ("soon", "is not a duration")] {
            let e = bad(
                "dataDir: /var/lib/etcd\n",
                &format!("dataDir: /var/lib/etcd\n    learnerCatchUpTimeout: {timeout}\n"),
            );
            assert!(
                e.contains("spec.etcdMember.learnerCatchUpTimeout") && e.contains(problem),
                "{e}"
            );
        }
        assert_eq!(
            p(&format!("{GOOD}{ETCD_MEMBER}"))
                .unwrap()
                .etcd_member
                .unwrap()
                .learner_catch_up_timeout,
            DEFAULT_LEARNER_CATCH_UP_TIMEOUT
        );
        let ok = p(&format!(
            "{GOOD}{}",
            ETCD_MEMBER.replace(
                "dataDir: /var/lib/etcd\n",
                "dataDir: /var/lib/etcd\n    initialCluster: a=https://10.0.0.1:2380,b=https://10.0.0.2:2380\n    snapshots: {keep: 5, maxBytes: 1048576, schedule: {every: 6h, keep: 7}}\n    defrag: {every: 10m, minBytes: 104857600, minFreePercent: 45}\n    learnerCatchUpTimeout: 90s\n    handOffLeadership: false\n"
            )
        ))
        .unwrap();
        let e = ok.etcd_member.unwrap();
        assert_eq!((e.snapshots_keep, e.snapshot_max_bytes), (5, 1 << 20));
        assert_eq!(
            e.snapshot_schedule,
            Some(crate::etcd_snapshot::Schedule {
                every: std::time::Duration::from_secs(6 * 3600),
                keep: 7
            })
        );
        assert_eq!(
            e.defrag,
            Some(crate::etcd_defrag::DefragPolicy {
                every: std::time::Duration::from_secs(600),
                min_bytes: 100 << 20,
                min_free_percent: 45
            })
        );
        assert!(e.initial_cluster.is_some());
        assert_eq!(e.learner_catch_up_timeout, std::time::Duration::from_secs(90));
        assert!(!e.hand_off_leadership);
    }

    #[test]
    fn component_names() {
        assert!(is_component_name("etcd") && is_component_name("kube-apiserver"));
        for bad in ["", "A", "a/b", "-a", "a-", "a.b", &"a".repeat(64)] {
            assert!(!is_component_name(bad), "{bad}");
        }
    }
}
