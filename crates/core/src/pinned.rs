//! Pins an anchor pod to the inputs of its own pod template.
//!
//! The kubelet refreshes the ConfigMap and Secret volumes of every *running* pod within about a
//! minute of an update. Without a pin, `helm upgrade` would reach every node's anchor at once,
//! every static pod would restart together, and neither the DaemonSet's `maxUnavailable: 1` nor
//! the anchor's readiness gate would get a say. So each input object carries a marker key (the
//! hash of its own data, computed by the chart), the pod template names the markers it was
//! rendered with (an annotation, passed in through the downward API), and the anchor applies
//! only inputs whose markers all match: a node's inputs change only when the DaemonSet rollout
//! replaces its anchor pod.
//!
//! The spec is `PATH=HASH[,PATH=HASH…]` (paths as the container sees them). Pure: reading the
//! markers is the caller's closure.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Longest marker file read; a marker is one hash.
pub const MAX_MARKER_BYTES: u64 = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub path: PathBuf,
    pub hash: String,
}

/// The markers this pod's inputs must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedInputs {
    pub markers: Vec<Marker>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--expect-inputs {spec:?}: {problem} (want PATH=HASH[,PATH=HASH…])")]
pub struct SpecError {
    pub spec: String,
    pub problem: String,
}

/// Why the inputs on disk are not this pod's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("{}: holds input revision {found}, this pod's template wants {expected}", .path.display())]
    Differs {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error("{}: cannot read the input revision marker: {reason}", .path.display())]
    Unreadable { path: PathBuf, reason: String },
}

impl FromStr for PinnedInputs {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, SpecError> {
        let err = |problem: String| SpecError {
            spec: spec.to_owned(),
            problem,
        };
        let mut markers = Vec::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (path, hash) = entry
                .rsplit_once('=')
                .ok_or_else(|| err(format!("{entry:?} has no '='")))?;
            let (path, hash) = (path.trim(), hash.trim());
            if !path.starts_with('/') {
                return Err(err(format!("{path:?} is not an absolute path")));
            }
            if hash.is_empty() || !hash.chars().all(|c| c.is_ascii_alphanumeric() || c == ':') {
                return Err(err(format!("{hash:?} is not a hash")));
            }
            if markers.iter().any(|m: &Marker| m.path == Path::new(path)) {
                return Err(err(format!("{path:?} named twice")));
            }
            markers.push(Marker {
                path: path.into(),
                hash: hash.into(),
            });
        }
        if markers.is_empty() {
            return Err(err("no markers".into()));
        }
        Ok(Self { markers })
    }
}

impl fmt::Display for PinnedInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, m) in self.markers.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", m.path.display(), m.hash)?;
        }
        Ok(())
    }
}

impl PinnedInputs {
    /// Ok when every marker holds its hash; `read` returns a marker's content.
    pub fn check(&self, mut read: impl FnMut(&Path) -> Result<String, String>) -> Result<(), Mismatch> {
        for m in &self.markers {
            let found = read(&m.path).map_err(|reason| Mismatch::Unreadable {
                path: m.path.clone(),
                reason,
            })?;
            let found = found.trim();
            if found != m.hash {
                return Err(Mismatch::Differs {
                    path: m.path.clone(),
                    expected: m.hash.clone(),
                    found: found.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The input revision a rollout turn names, failures included: what every node of the
    /// release shares, the ConfigMap (manifest and anchor config, `.inputs-config`) and the
    /// shared Secret (`.inputs-secret`), as one hash, so a change of either is another revision
    /// (a failed certificate rotation does not stand for the next one). A node's own Secret
    /// (`perNode`, `.inputs-node-secret`) is left out: it is another object on every node, and a
    /// failure with one says nothing of another node's. Without a shared Secret marker, the
    /// config marker itself; without a config marker, none.
    pub fn revision(&self) -> Option<String> {
        let marker = |name: &str| {
            self.markers
                .iter()
                .find(|m| m.path.file_name().is_some_and(|n| n == name))
                .map(|m| m.hash.as_str())
        };
        let config = marker(".inputs-config")?;
        Some(match marker(".inputs-secret") {
            None => config.to_owned(),
            Some(secret) => crate::digest::sha256_hex(format!("{config}\n{secret}").as_bytes()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_revision_names_the_config_and_the_shared_secret_not_the_nodes_own() {
        let pinned = |spec: &str| spec.parse::<PinnedInputs>().unwrap().revision();
        let both = pinned("/c/.inputs-config=c1,/s/.inputs-secret=s1").unwrap();
        assert_ne!(both, "c1");
        assert_eq!(
            pinned("/c/.inputs-config=c1,/s/.inputs-secret=s1,/s/.inputs-node-secret=n1").as_ref(),
            Some(&both),
            "a node's own Secret is left out"
        );
        assert_eq!(
            pinned("/c/.inputs-config=c1,/s/.inputs-secret=s1,/s/.inputs-node-secret=n2").as_ref(),
            Some(&both)
        );
        assert_ne!(
            pinned("/c/.inputs-config=c1,/s/.inputs-secret=s2").unwrap(),
            both,
            "a Secret-only change"
        );
        assert_ne!(pinned("/c/.inputs-config=c2,/s/.inputs-secret=s1").unwrap(), both);
        assert_eq!(pinned("/c/.inputs-config=c1").as_deref(), Some("c1"));
        assert_eq!(pinned("/s/.inputs-secret=s1"), None);
    }

    #[test]
    fn parses_and_prints_the_spec() {
        let p: PinnedInputs = "/c/.inputs-config=abc123, /s/.inputs-secret=sha256:99".parse().unwrap();
        assert_eq!(p.markers.len(), 2);
        assert_eq!(p.markers[1].path, Path::new("/s/.inputs-secret"));
        assert_eq!(p.markers[1].hash, "sha256:99");
        assert_eq!(p.to_string(), "/c/.inputs-config=abc123,/s/.inputs-secret=sha256:99");
        assert_eq!(p.to_string().parse::<PinnedInputs>().unwrap(), p);
    }

    #[test]
    fn refuses_bad_specs_naming_the_problem() {
        for (spec, problem) in [
            ("", "no markers"),
            (" , ", "no markers"),
            ("/a", "no '='"),
            ("a=1", "not an absolute path"),
            ("/a=", "not a hash"),
            ("/a=x y", "not a hash"),
            ("/a=1,/a=2", "named twice"),
        ] {
            let e = spec.parse::<PinnedInputs>().unwrap_err();
            assert!(e.to_string().contains(problem), "{spec:?}: {e}");
        }
    }

    #[test]
    fn check_needs_every_marker_to_match() {
        let p: PinnedInputs = "/c=1,/s=2".parse().unwrap();
        let on_disk = |c: &'static str, s: &'static str| {
            move |path: &Path| -> Result<String, String> { Ok(if path == Path::new("/c") { c } else { s }.to_owned()) }
        };
        assert_eq!(p.check(on_disk("1\n", "2")), Ok(()));
        assert!(matches!(
            p.check(on_disk("1", "3")),
            Err(Mismatch::Differs { path, expected, found }) if path == Path::new("/s") && expected == "2" && found == "3"
        ));
        assert!(matches!(p.check(on_disk("0", "2")), Err(Mismatch::Differs { .. })));
        let missing = |_: &Path| -> Result<String, String> { Err("No such file".into()) };
        let e = p.check(missing).unwrap_err();
        assert!(
            e.to_string()
                .contains("/c: cannot read the input revision marker: No such file"),
            "{e}"
        );
    }
}
