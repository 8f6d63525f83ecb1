//! The Kubernetes version skew policy (kubernetes.io/releases/version-skew-policy), judged on a
//! node before a new version of a control-plane component takes its turn: kube-apiserver
//! instances within one minor of each other; kube-controller-manager and kube-scheduler never
//! newer than the kube-apiserver they talk to (on a kubeadm-style node, the local one) and at
//! most one minor older. What the node runs is read from the other anchors' manifests (written,
//! and last-known-good: a version on trial may yet be rolled back, so a component waits for the
//! one before it to be promoted, not merely written).
//!
//! Versions come from the manifests' image tags (`registry.k8s.io/kube-apiserver:v1.36.3`); a
//! manifest without a recognisable tag is not judged.

use crate::credentials::programs;

/// A Kubernetes control-plane component the policy speaks of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    ApiServer,
    ControllerManager,
    Scheduler,
}

impl Kind {
    fn from_program(program: &str) -> Option<Kind> {
        match program {
            "kube-apiserver" => Some(Kind::ApiServer),
            "kube-controller-manager" => Some(Kind::ControllerManager),
            "kube-scheduler" => Some(Kind::Scheduler),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::ApiServer => "kube-apiserver",
            Kind::ControllerManager => "kube-controller-manager",
            Kind::Scheduler => "kube-scheduler",
        }
    }
}

/// A Kubernetes minor release (`1.36`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Minor {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for Minor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Minor {
    /// How many minors apart (across a major, not comparable: `None`).
    fn apart(self, other: Minor) -> Option<u32> {
        (self.major == other.major).then(|| self.minor.abs_diff(other.minor))
    }
}

/// The component a static pod manifest runs and its minor, from the image tag of its first
/// container that runs one (`v1.36.3`, `v1.36.0-rc.1`, a digest after it allowed).
pub fn release(manifest: &[u8]) -> Option<(Kind, Minor)> {
    let kind = programs(manifest).iter().find_map(|p| Kind::from_program(p))?;
    let pod: serde_yaml_ng::Value = serde_yaml_ng::from_slice(manifest).ok()?;
    let containers = pod.get("spec")?.get("containers")?.as_sequence()?;
    containers.iter().find_map(|c| {
        let image = c.get("image")?.as_str()?;
        let name = image.split('@').next()?;
        let (repo, tag) = name.rsplit_once(':')?;
        let program = repo.rsplit('/').next()?;
        if Kind::from_program(program) != Some(kind) {
            let command = c.get("command").and_then(|c| c.as_sequence());
            let first = command.and_then(|c| c.first()).and_then(|w| w.as_str()).unwrap_or("");
            if Kind::from_program(first.rsplit('/').next().unwrap_or(first)) != Some(kind) {
                return None;
            }
        }
        let mut parts = tag.strip_prefix('v')?.split(['.', '-', '+']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((kind, Minor { major, minor }))
    })
}

/// Another component on this node: what its anchor wrote and what passed its trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beside {
    pub kind: Kind,
    pub written: Option<Minor>,
    pub last_known_good: Option<Minor>,
}

/// What the gate judges: the version about to take its turn, what this component runs on the
/// node now, and the other components beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkewFacts {
    pub to: Option<(Kind, Minor)>,
    /// This component's version on the node (written, and last-known-good).
    pub from: Vec<Minor>,
    pub beside: Vec<Beside>,
}

const POLICY: &str = "kubernetes.io/releases/version-skew-policy";

/// Whether the version may take its turn; `Err` says why it waits.
pub fn judge(f: &SkewFacts) -> Result<(), String> {
    let Some((kind, to)) = f.to else { return Ok(()) };
    let others = |wanted: &[Kind]| -> Vec<(Kind, Minor, &'static str)> {
        f.beside
            .iter()
            .filter(|b| wanted.contains(&b.kind))
            .flat_map(|b| {
                [(b.written, "written"), (b.last_known_good, "last-known-good")]
                    .into_iter()
                    .filter_map(move |(m, what)| m.map(|m| (b.kind, m, what)))
            })
            .collect()
    };
    match kind {
        Kind::ApiServer => {
            if let Some(from) = f.from.iter().find(|m| m.apart(to).is_none_or(|d| d > 1)) {
                return Err(format!(
                    "version skew: kube-apiserver {to} is more than one minor from {from}, which this node runs: kube-apiserver instances must stay within one minor of each other, so it moves one minor at a time ({POLICY})"
                ));
            }
            for (other, at, what) in others(&[Kind::ControllerManager, Kind::Scheduler]) {
                if at > to {
                    return Err(format!(
                        "version skew: kube-apiserver {to} would be older than {} {at} ({what} on this node), which must never be newer than the kube-apiserver it talks to: roll {} back first ({POLICY})",
                        other.name(),
                        other.name()
                    ));
                }
                if at.apart(to).is_none_or(|d| d > 1) {
                    return Err(format!(
                        "version skew: kube-apiserver {to} would be more than one minor newer than {} {at} ({what} on this node): upgrade it to within one minor first ({POLICY})",
                        other.name()
                    ));
                }
            }
        }
        Kind::ControllerManager | Kind::Scheduler => {
            for (_, api, what) in others(&[Kind::ApiServer]) {
                if to > api {
                    return Err(format!(
                        "version skew: {} {to} would be newer than kube-apiserver {api} ({what} on this node): kube-apiserver goes first, and is promoted, before {} follows ({POLICY})",
                        kind.name(),
                        kind.name()
                    ));
                }
                if api.apart(to).is_none_or(|d| d > 1) {
                    return Err(format!(
                        "version skew: {} {to} would be more than one minor older than kube-apiserver {api} ({what} on this node) ({POLICY})",
                        kind.name()
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(minor: u32) -> Minor {
        Minor { major: 1, minor }
    }

    fn manifest(image: &str, command: &str) -> String {
        format!("spec:\n  containers:\n  - name: c\n    image: {image}\n    command: [{command}, --v=2]\n")
    }

    #[test]
    fn the_release_comes_from_the_image_tag_of_the_container_that_runs_the_component() {
        let cases = [
            (
                "registry.k8s.io/kube-apiserver:v1.36.3",
                "kube-apiserver",
                Some((Kind::ApiServer, m(36))),
            ),
            (
                "registry.k8s.io/kube-controller-manager:v1.37.0-rc.1@sha256:abcd",
                "kube-controller-manager",
                Some((Kind::ControllerManager, m(37))),
            ),
            (
                "mirror.local:5000/k8s/kube-scheduler:v1.35.9",
                "kube-scheduler",
                Some((Kind::Scheduler, m(35))),
            ),
            // An image of another name running the component: its tag is still the release.
            (
                "example.com/hyperkube:v1.36.1",
                "kube-apiserver",
                Some((Kind::ApiServer, m(36))),
            ),
            // No tag, a tag that is no version, or no Kubernetes component: not judged.
            ("registry.k8s.io/kube-apiserver", "kube-apiserver", None),
            ("registry.k8s.io/kube-apiserver:latest", "kube-apiserver", None),
            ("registry.k8s.io/etcd:3.6.8-0", "etcd", None),
        ];
        for (image, command, want) in cases {
            assert_eq!(release(manifest(image, command).as_bytes()), want, "{image}");
        }
    }

    fn beside(kind: Kind, written: u32, lkg: u32) -> Beside {
        Beside {
            kind,
            written: Some(m(written)),
            last_known_good: Some(m(lkg)),
        }
    }

    /// What takes its turn, this component's versions on the node, the others, refused with.
    type Case = (Kind, u32, Vec<u32>, Vec<Beside>, Option<&'static str>);

    #[test]
    fn the_policy_on_one_node() {
        use Kind::*;
        let cases: Vec<Case> = vec![
            // The documented order: kube-apiserver first, one minor.
            (
                ApiServer,
                37,
                vec![36, 36],
                vec![beside(ControllerManager, 36, 36), beside(Scheduler, 36, 36)],
                None,
            ),
            (
                ControllerManager,
                37,
                vec![36, 36],
                vec![beside(ApiServer, 37, 37)],
                None,
            ),
            (Scheduler, 37, vec![36, 36], vec![beside(ApiServer, 37, 37)], None),
            // The controllers first: refused.
            (
                ControllerManager,
                37,
                vec![36, 36],
                vec![beside(ApiServer, 36, 36)],
                Some("kube-controller-manager 1.37 would be newer than kube-apiserver 1.36 (written on this node)"),
            ),
            // kube-apiserver written but still on trial: the controller waits for its promotion.
            (
                Scheduler,
                37,
                vec![36, 36],
                vec![beside(ApiServer, 37, 36)],
                Some("kube-scheduler 1.37 would be newer than kube-apiserver 1.36 (last-known-good on this node)"),
            ),
            // Two minors at once.
            (
                ApiServer,
                38,
                vec![36, 36],
                vec![],
                Some("kube-apiserver 1.38 is more than one minor from 1.36"),
            ),
            (
                ApiServer,
                38,
                vec![37, 36],
                vec![],
                Some("kube-apiserver 1.38 is more than one minor from 1.36"),
            ),
            // kube-apiserver rolled back under a newer controller-manager.
            (
                ApiServer,
                36,
                vec![37, 37],
                vec![beside(ControllerManager, 37, 37)],
                Some("kube-apiserver 1.36 would be older than kube-controller-manager 1.37 (written on this node)"),
            ),
            // Both rolled back, the controller first: allowed.
            (
                ApiServer,
                36,
                vec![37, 37],
                vec![beside(ControllerManager, 36, 36)],
                None,
            ),
            // kube-apiserver two minors ahead of a controller left behind.
            (
                ApiServer,
                38,
                vec![37, 37],
                vec![beside(Scheduler, 36, 36)],
                Some("kube-apiserver 1.38 would be more than one minor newer than kube-scheduler 1.36"),
            ),
            // A controller more than one minor older than its kube-apiserver.
            (
                ControllerManager,
                35,
                vec![37, 37],
                vec![beside(ApiServer, 37, 37)],
                Some("kube-controller-manager 1.35 would be more than one minor older than kube-apiserver 1.37"),
            ),
            // Nothing beside it (a node of its own) and patch releases: allowed.
            (ControllerManager, 36, vec![36, 36], vec![], None),
        ];
        for (kind, to, from, beside, want) in cases {
            let facts = SkewFacts {
                to: Some((kind, m(to))),
                from: from.into_iter().map(m).collect(),
                beside,
            };
            let got = judge(&facts);
            match want {
                None => assert_eq!(got, Ok(()), "{facts:?}"),
                Some(text) => {
                    let why = got.expect_err(text);
                    assert!(why.contains(text), "{why}");
                    assert!(why.contains(POLICY), "{why}");
                }
            }
        }
        // A version with no recognisable release is not judged.
        assert_eq!(judge(&SkewFacts::default()), Ok(()));
    }
}
