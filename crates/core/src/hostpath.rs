//! Paths on the node, as the kubelet sees them (`/etc/kubernetes/...`), before `--host-root` is
//! applied. Pure: the lexical rules live here; symlinks are checked by the host crate's `hostfs`.

use std::fmt;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HostPathError {
    #[error("{path:?}: a host path must be absolute")]
    NotAbsolute { path: String },
    #[error("{path:?}: a host path may not contain '..'")]
    ParentComponent { path: String },
    #[error("{path:?}: a host path must name a file below /")]
    Root { path: String },
    #[error("{path}: outside the allowed roots ({roots})")]
    OutsideAllowedRoots { path: HostPath, roots: String },
    #[error("{path}: inside kube-anchor's state dir {state_dir}; a config may not write there")]
    InStateDir { path: HostPath, state_dir: HostPath },
    #[error("state dir {state_dir}: {problem}")]
    StateDir { state_dir: HostPath, problem: String },
}

/// An absolute, normalized host path with no `..` components.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostPath(PathBuf);

impl HostPath {
    pub fn parse(raw: &str) -> Result<Self, HostPathError> {
        let path = Path::new(raw);
        if !path.is_absolute() {
            return Err(HostPathError::NotAbsolute { path: raw.into() });
        }
        let mut normal = PathBuf::from("/");
        for component in path.components() {
            match component {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(part) => normal.push(part),
                Component::ParentDir => {
                    return Err(HostPathError::ParentComponent { path: raw.into() });
                }
                Component::Prefix(_) => {
                    return Err(HostPathError::NotAbsolute { path: raw.into() });
                }
            }
        }
        Ok(Self(normal))
    }

    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// The path below `/`, for joining onto a host root.
    pub fn relative(&self) -> &Path {
        self.0.strip_prefix("/").expect("host paths are absolute")
    }

    pub fn parent(&self) -> Option<HostPath> {
        self.0.parent().map(|p| HostPath(p.to_path_buf()))
    }

    pub fn file_name(&self) -> Option<&str> {
        self.0.file_name().and_then(|n| n.to_str())
    }

    pub fn join(&self, relative: &str) -> Result<HostPath, HostPathError> {
        HostPath::parse(&self.0.join(relative).to_string_lossy())
    }

    /// True when `self` is `root` or lies below it (component-wise, so `/etc/kube` is not
    /// below `/etc/kubernetes`).
    pub fn starts_with(&self, root: &HostPath) -> bool {
        self.0.starts_with(&root.0)
    }

    /// A path that may be written: absolute, below one of `roots`, and not a root itself.
    pub(crate) fn parse_allowed(raw: &str, roots: &AllowedRoots) -> Result<Self, HostPathError> {
        let path = Self::parse(raw)?;
        if path.0 == Path::new("/") {
            return Err(HostPathError::Root { path: raw.into() });
        }
        roots.check(&path)?;
        Ok(path)
    }
}

impl TryFrom<String> for HostPath {
    type Error = HostPathError;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        Self::parse(&raw)
    }
}

impl From<HostPath> for String {
    fn from(p: HostPath) -> String {
        p.0.to_string_lossy().into_owned()
    }
}

impl fmt::Display for HostPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.display().fmt(f)
    }
}

/// The directories kube-anchor may write below (default `/etc/kubernetes` and the state dir).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowedRoots {
    roots: Vec<HostPath>,
    /// kube-anchor's own state dir: written by kube-anchor, never by a config's paths.
    state_dir: Option<HostPath>,
}

impl AllowedRoots {
    pub fn new(roots: impl IntoIterator<Item = HostPath>) -> Self {
        let mut roots: Vec<_> = roots.into_iter().collect();
        roots.sort();
        roots.dedup();
        Self { roots, state_dir: None }
    }

    /// `roots` plus the state dir, which config paths may not reach. A state dir of `/`, or one
    /// at or above an allowed root, would let a config overwrite the state (or the state dir
    /// allow every path): refused.
    pub fn with_state_dir(
        state_dir: HostPath,
        roots: impl IntoIterator<Item = HostPath>,
    ) -> Result<Self, HostPathError> {
        let problem = |problem: String| HostPathError::StateDir {
            state_dir: state_dir.clone(),
            problem,
        };
        if state_dir.as_path() == Path::new("/") {
            return Err(problem("must not be / (it would allow every path on the node)".into()));
        }
        let roots: Vec<HostPath> = roots.into_iter().collect();
        if let Some(root) = roots.iter().find(|r| r.starts_with(&state_dir)) {
            return Err(problem(format!(
                "contains the allowed root {root}; choose a state dir outside every allowed root's tree"
            )));
        }
        let mut allowed = Self::new(roots.into_iter().chain([state_dir.clone()]));
        allowed.state_dir = Some(state_dir);
        Ok(allowed)
    }

    pub fn iter(&self) -> impl Iterator<Item = &HostPath> {
        self.roots.iter()
    }

    /// The allowed root `path` lies strictly below, if any.
    pub fn root_of(&self, path: &HostPath) -> Option<&HostPath> {
        self.roots.iter().find(|root| path.starts_with(root) && *root != path)
    }

    /// May a config name `path`: below an allowed root and outside the state dir.
    pub fn check(&self, path: &HostPath) -> Result<(), HostPathError> {
        if let Some(state_dir) = self.state_dir.as_ref().filter(|s| path.starts_with(s)) {
            return Err(HostPathError::InStateDir {
                path: path.clone(),
                state_dir: state_dir.clone(),
            });
        }
        match self.root_of(path) {
            Some(_) => Ok(()),
            None => Err(HostPathError::OutsideAllowedRoots {
                path: path.clone(),
                roots: self.to_string(),
            }),
        }
    }
}

/// The roots a config may name: the state dir is kube-anchor's own, so a message listing where
/// a config may write leaves it out.
impl fmt::Display for AllowedRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self
            .roots
            .iter()
            .filter(|r| Some(*r) != self.state_dir.as_ref())
            .map(ToString::to_string)
            .collect();
        f.write_str(&names.join(", "))
    }
}

/// Every temp file the executor creates ends with this, so leftovers from a crash are
/// recognizable: `.<file name>.<random>.kube-anchor.tmp`, in the target's own directory.
pub const TEMP_SUFFIX: &str = ".kube-anchor.tmp";

/// Whether a directory entry's name is one of the executor's temp files.
pub fn is_our_temp(name: &[u8]) -> bool {
    name.len() > 1 + TEMP_SUFFIX.len() && name.starts_with(b".") && name.ends_with(TEMP_SUFFIX.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names() {
        assert!(is_our_temp(b".a.yaml.XyZ12.kube-anchor.tmp"));
        assert!(!is_our_temp(b"a.yaml.kube-anchor.tmp"));
        assert!(!is_our_temp(b".kube-anchor.tmp"));
        assert!(!is_our_temp(b".a.yaml"));
    }

    fn roots() -> AllowedRoots {
        AllowedRoots::new([
            HostPath::parse("/etc/kubernetes").unwrap(),
            HostPath::parse("/var/lib/kube-anchor").unwrap(),
        ])
    }

    #[test]
    fn normalizes() {
        assert_eq!(
            HostPath::parse("//etc/./kubernetes//a.yaml").unwrap().to_string(),
            "/etc/kubernetes/a.yaml"
        );
        assert_eq!(
            HostPath::parse("/etc/kubernetes/").unwrap().relative(),
            Path::new("etc/kubernetes")
        );
    }

    #[test]
    fn refuses_relative_and_parent_components() {
        assert!(matches!(
            HostPath::parse("etc/kubernetes"),
            Err(HostPathError::NotAbsolute { .. })
        ));
        assert!(matches!(HostPath::parse(""), Err(HostPathError::NotAbsolute { .. })));
        assert!(matches!(
            HostPath::parse("/etc/kubernetes/../shadow"),
            Err(HostPathError::ParentComponent { .. })
        ));
    }

    #[test]
    fn allowed_roots_are_component_wise_and_exclude_the_root_itself() {
        let r = roots();
        for ok in ["/etc/kubernetes/manifests/a.yaml", "/var/lib/kube-anchor/v1/x.json"] {
            assert!(HostPath::parse_allowed(ok, &r).is_ok(), "{ok}");
        }
        for bad in [
            "/etc/kubernetes",
            "/etc/kubernetes-evil/a",
            "/etc/shadow",
            "/",
            "/var/lib",
        ] {
            assert!(HostPath::parse_allowed(bad, &r).is_err(), "{bad}");
        }
        let err = HostPath::parse_allowed("/etc/shadow", &r).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/etc/shadow: outside the allowed roots (/etc/kubernetes, /var/lib/kube-anchor)"
        );
    }

    #[test]
    fn config_paths_may_not_reach_the_state_dir() {
        let state = HostPath::parse("/var/lib/kube-anchor").unwrap();
        let r = AllowedRoots::with_state_dir(state.clone(), [HostPath::parse("/etc/kubernetes").unwrap()]).unwrap();
        for bad in ["/var/lib/kube-anchor/v1/etcd.json", "/var/lib/kube-anchor/v1/etcd.lock"] {
            let err = HostPath::parse_allowed(bad, &r).unwrap_err();
            assert!(matches!(err, HostPathError::InStateDir { .. }), "{bad}: {err}");
        }
        assert!(HostPath::parse_allowed("/etc/kubernetes/a", &r).is_ok());
        // Where a config may write leaves the state dir out: it is refused there.
        assert_eq!(
            HostPath::parse_allowed("/etc/shadow", &r).unwrap_err().to_string(),
            "/etc/shadow: outside the allowed roots (/etc/kubernetes)"
        );
        // kube-anchor itself still writes there.
        assert!(
            r.root_of(&HostPath::parse("/var/lib/kube-anchor/v1/etcd.json").unwrap())
                .is_some()
        );
        // A state dir inside an allowed root is fine; config paths still stay out of it.
        let inner = HostPath::parse("/etc/kubernetes/anchor-state").unwrap();
        let r = AllowedRoots::with_state_dir(inner, [HostPath::parse("/etc/kubernetes").unwrap()]).unwrap();
        assert!(HostPath::parse_allowed("/etc/kubernetes/anchor-state/v1/x.json", &r).is_err());
    }

    #[test]
    fn a_state_dir_of_slash_or_above_an_allowed_root_is_refused() {
        let k = || HostPath::parse("/etc/kubernetes").unwrap();
        for bad in ["/", "/etc", "/etc/kubernetes"] {
            let err = AllowedRoots::with_state_dir(HostPath::parse(bad).unwrap(), [k()]).unwrap_err();
            assert!(matches!(err, HostPathError::StateDir { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn serde_round_trip_validates() {
        let p: HostPath = serde_json::from_str("\"/etc/kubernetes/a\"").unwrap();
        assert_eq!(serde_json::to_string(&p).unwrap(), "\"/etc/kubernetes/a\"");
        assert!(serde_json::from_str::<HostPath>("\"/etc/../a\"").is_err());
    }
}
