//! The step the kubelet runs before it starts (`kube-anchor kubelet-pre-start`, the systemd
//! drop-in [`DROP_IN`]'s `ExecStartPre`): a version of etcd or kube-apiserver left on trial when
//! the kubelet stopped (a reboot, a kubelet restart) goes back to last-known-good before the
//! kubelet reads its manifests, where nothing could replace it later.
//!
//! Why before: a kubelet that has not reached an API server since it started deletes no pod
//! (`deletePod`: "skipping delete because sources aren't ready yet", `pkg/kubelet/kubelet.go`),
//! and a new static pod of the same name waits for the old one to stop. A bad etcd or
//! kube-apiserver on trial keeps the API away, so a manifest rewritten once the kubelet runs
//! (by an anchor, or by `rollback`) never takes effect: the node stays down. The same manifest
//! written before the kubelet reads its directory is simply what it starts.
//!
//! Pure: what to do with one component, from its ledger and what the adapter saw.

use crate::ledger::Ledger;

/// Where `kube-anchor kubelet-pre-start --install` writes the kubelet's drop-in.
pub const DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/05-kube-anchor-pre-start.conf";

/// Where the step's binary is kept, below the state dir (the anchors keep it current).
pub const BINARY_IN_STATE_DIR: &str = "bin/kube-anchor";

/// The drop-in: the step runs before every start of the kubelet, with the anchors' state dir and
/// allowed roots. The leading `-` makes systemd start the kubelet whatever the step's outcome (a
/// node never waits on kube-anchor).
pub fn drop_in(binary: &str, state_dir: &str, allowed_roots: &[String], kubelet_kubeconfig: &str) -> String {
    format!(
        "# Written by `kube-anchor kubelet-pre-start --install`. Before the kubelet starts (a boot,\n\
         # `systemctl restart kubelet`), a version of etcd or kube-apiserver left on trial goes\n\
         # back to last-known-good: a kubelet that reaches no API server replaces no static pod.\n\
         # The leading \"-\": the kubelet starts whatever the step's outcome.\n\
         [Service]\n\
         ExecStartPre=-{binary} kubelet-pre-start --state-dir {state_dir} --allowed-root {} --kubelet-kubeconfig {kubelet_kubeconfig}\n",
        allowed_roots.join(",")
    )
}

/// Whether a bad version of what `manifest` runs keeps the API away: etcd or kube-apiserver.
/// A bad controller-manager or scheduler leaves the API up; its anchor judges it once the
/// kubelet has reached the API, when the kubelet replaces static pods again.
pub fn keeps_the_api_away(manifest: &[u8]) -> bool {
    crate::credentials::programs(manifest)
        .iter()
        .any(|p| p == "etcd" || p == "kube-apiserver")
}

/// The (major, minor) of the etcd a manifest runs, from its container image's tag
/// (`registry.k8s.io/etcd:3.6.8-0`, `quay.io/coreos/etcd:v3.5.21`); `None` when no container runs
/// etcd or its tag names no version.
pub fn etcd_minor(manifest: &[u8]) -> Option<(u32, u32)> {
    let pod: serde_yaml_ng::Value = serde_yaml_ng::from_slice(manifest).ok()?;
    let containers = pod.get("spec")?.get("containers")?.as_sequence()?;
    containers.iter().find_map(|c| {
        let image = c.get("image")?.as_str()?;
        let image = image.split('@').next()?;
        let (name, tag) = image.rsplit_once(':').filter(|(_, tag)| !tag.contains('/'))?;
        if name.rsplit('/').next() != Some("etcd") {
            return None;
        }
        let mut parts = tag.trim_start_matches('v').split(['.', '-']);
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    })
}

/// A version the step found on trial, before the API is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnTrial {
    pub component: String,
    pub version: String,
    pub last_known_good: String,
    /// The boots that put this version back already ([`Interrupted::boots`]).
    pub boots_before: u32,
}

/// What the step does with one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No version on trial here.
    NoTrial,
    /// A version on trial, left as it is, and why.
    Keep { version: String, why: String },
    /// Back to `to` before the kubelet starts, saying `reason`: `version` recorded as bad when
    /// `mark_bad`, else as interrupted ([`Ledger::interrupted`], with `boots`), for its anchor
    /// to try again.
    Revert {
        version: String,
        to: String,
        reason: String,
        mark_bad: bool,
        boots: u32,
    },
}

/// The version written here and not judged yet ([`Ledger::is_unjudged`]): what the step looks
/// at, and the only case in which it reads more than the ledger.
pub fn version_on_trial(ledger: &Ledger) -> Option<&str> {
    ledger.content_hash.as_deref().filter(|v| ledger.is_unjudged(v))
}

/// Whether the manifest on trial runs a newer etcd minor than last-known-good's ([`etcd_minor`]
/// of each; unknown on either side is not newer).
pub fn etcd_minor_up(trial_manifest: Option<&[u8]>, good_manifest: Option<&[u8]>) -> bool {
    matches!(
        (trial_manifest.and_then(etcd_minor), good_manifest.and_then(etcd_minor)),
        (Some(trial), Some(good)) if trial > good
    )
}

/// What the step read of a component's versions besides its ledger (from the last-known-good
/// files; asked only where there is a version on trial).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Versions {
    /// [`keeps_the_api_away`] of the last-known-good manifest.
    pub keeps_the_api_away: bool,
    /// Its files can be written back (the snapshot, or the same version's history snapshot).
    pub last_known_good_usable: bool,
    /// The version on trial runs a newer etcd minor than last-known-good ([`etcd_minor`] of
    /// both manifests): going back could put etcd below a cluster version the new minor raised,
    /// which etcd refuses (it cannot be downgraded across a minor version).
    pub etcd_minor_up: bool,
}

/// The first look, from the ledger alone: `Err` is the decision already made; `Ok` is a version
/// on trial that goes back unless an API server answers the kubelet ([`decide`]).
pub fn on_trial(ledger: &Ledger, versions: Versions) -> Result<OnTrial, Decision> {
    let Versions {
        keeps_the_api_away,
        last_known_good_usable,
        etcd_minor_up,
    } = versions;
    let component = &ledger.component;
    let Some(version) = version_on_trial(ledger).map(str::to_owned) else {
        return Err(Decision::NoTrial);
    };
    let keep = |why: String| {
        Err(Decision::Keep {
            version: version.clone(),
            why,
        })
    };
    if let Some(d) = &ledger.decommissioned {
        return keep(format!("{component} left this node ({}): nothing is written", d.reason));
    }
    if let Some(p) = &ledger.paused {
        return keep(format!(
            "{component} is paused on this node since {} ({}): the operator's hold",
            p.at, p.reason
        ));
    }
    let Some(last_known_good) = ledger.last_known_good.clone() else {
        return keep(format!(
            "no version of {component} has passed a trial here: nothing to go back to"
        ));
    };
    if !last_known_good_usable {
        return keep(format!(
            "the files of last-known-good {last_known_good} are unusable here (snapshot and history): nothing to go back to"
        ));
    }
    if etcd_minor_up {
        return keep(format!(
            "it runs a newer etcd minor than last-known-good {last_known_good}, whose cluster version may be raised already: etcd cannot go back below it"
        ));
    }
    if !keeps_the_api_away {
        return keep(format!(
            "a bad {component} leaves the API up: its anchor judges it once the kubelet reaches an API server"
        ));
    }
    let boots_before = ledger.interrupted_version(&version).map_or(0, |i| i.boots);
    Ok(OnTrial {
        component: component.clone(),
        version,
        last_known_good,
        boots_before,
    })
}

/// The decision for a version on trial, given whether an API server answered the kubelet's own
/// kubeconfig just now and whether an anchor of the component runs on the node (it holds its
/// presence lock; a kubelet restart leaves its pod running).
///
/// An API server that answers lets the kubelet replace static pods as usual: the anchor judges
/// the version as it would have. None answering, the version goes back now or never, recorded as
/// interrupted: a reboot or a kubelet restart is no verdict. Its anchor tries it again once the
/// kubelet is seen replacing static pods (`machine`: last-known-good runs converged, its mirror
/// pod made through an API server), so a good version rolls on and a bad one fails where the
/// kubelet replaces it. A version put back by a second reboot in its trial is recorded as bad, so
/// a version that keeps taking its node down stops there (kubelet restarts are not counted).
pub fn decide(trial: OnTrial, api_answers_the_kubelet: Result<(), String>, anchor_runs: bool) -> Decision {
    let OnTrial {
        component,
        version,
        last_known_good,
        boots_before,
    } = trial;
    let why = match api_answers_the_kubelet {
        Ok(()) => {
            return Decision::Keep {
                version,
                why: "an API server answers the kubelet: it replaces static pods, and the anchor judges the version"
                    .into(),
            };
        }
        Err(why) => why,
    };
    let context = format!(
        "on trial when the kubelet started with no API server answering it ({why}); a kubelet that reaches no API \
         server replaces no static pod, so last-known-good {last_known_good} was put back before it started"
    );
    // A reboot is counted (a version may take its node down); a kubelet restart is not (no
    // static pod makes the kubelet restart: an operator or an automation did).
    let boots = boots_before + u32::from(!anchor_runs);
    let (reason, mark_bad) = if boots >= 2 {
        (
            format!(
                "{context}, the second reboot in this version's trial; not judged: `kube-anchor retry --component {component}` tries it again"
            ),
            true,
        )
    } else if anchor_runs {
        (
            format!(
                "{context} (a kubelet restart); its anchor, still running, tries it again once the kubelet runs {last_known_good} through an API server"
            ),
            false,
        )
    } else {
        (
            format!("{context} (a reboot); its anchor tries it again once it runs"),
            false,
        )
    };
    Decision::Revert {
        version,
        to: last_known_good,
        reason,
        mark_bad,
        boots,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{BadVersion, Decommissioned, Paused};

    fn ledger(on: Option<&str>, good: Option<&str>) -> Ledger {
        let mut l = Ledger::new("kube-apiserver");
        l.content_hash = on.map(Into::into);
        l.last_known_good = good.map(Into::into);
        l
    }

    fn versions(keeps_the_api_away: bool, last_known_good_usable: bool) -> Versions {
        Versions {
            keeps_the_api_away,
            last_known_good_usable,
            etcd_minor_up: false,
        }
    }

    fn kept(d: Result<OnTrial, Decision>) -> String {
        match d {
            Err(Decision::Keep { why, .. }) => why,
            other => panic!("expected Keep, got {other:?}"),
        }
    }

    #[test]
    fn only_an_unjudged_version_with_somewhere_to_go_back_to_is_on_trial() {
        assert_eq!(
            on_trial(&ledger(None, None), versions(true, true)),
            Err(Decision::NoTrial)
        );
        assert_eq!(
            on_trial(&ledger(Some("B"), Some("B")), versions(true, true)),
            Err(Decision::NoTrial)
        );
        let mut bad = ledger(Some("B"), Some("A"));
        bad.mark_bad(BadVersion {
            hash: "B".into(),
            at: "2026-12-07T00:00:00Z".into(),
            reason: "crash loop".into(),
        });
        assert_eq!(on_trial(&bad, versions(true, true)), Err(Decision::NoTrial));
        assert!(kept(on_trial(&ledger(Some("B"), None), versions(true, true))).contains("nothing to go back to"));
        assert!(kept(on_trial(&ledger(Some("B"), Some("A")), versions(true, false))).contains("unusable"));
        assert!(kept(on_trial(&ledger(Some("B"), Some("A")), versions(false, true))).contains("leaves the API up"));
        let mut paused = ledger(Some("B"), Some("A"));
        paused.paused = Some(Paused {
            at: "2026-12-07T00:00:00Z".into(),
            reason: "restoring etcd".into(),
        });
        assert!(kept(on_trial(&paused, versions(true, true))).contains("restoring etcd"));
        let mut gone = ledger(Some("B"), Some("A"));
        gone.decommissioned = Some(Decommissioned {
            at: "2026-12-07T00:00:00Z".into(),
            reason: "node deselected".into(),
            by_pod: None,
        });
        assert!(kept(on_trial(&gone, versions(true, true))).contains("left this node"));
        let up = Versions {
            etcd_minor_up: true,
            ..versions(true, true)
        };
        assert!(kept(on_trial(&ledger(Some("B"), Some("A")), up)).contains("newer etcd minor"));
        assert_eq!(
            on_trial(&ledger(Some("B"), Some("A")), versions(true, true)),
            Ok(OnTrial {
                component: "kube-apiserver".into(),
                version: "B".into(),
                last_known_good: "A".into(),
                boots_before: 0,
            })
        );
    }

    #[test]
    fn a_version_on_trial_goes_back_only_when_no_api_server_answers_the_kubelet() {
        let trial = on_trial(&ledger(Some("B"), Some("A")), versions(true, true)).unwrap();
        assert_eq!(trial.boots_before, 0);
        for anchor_runs in [false, true] {
            assert!(
                matches!(decide(trial.clone(), Ok(()), anchor_runs), Decision::Keep { version, .. } if version == "B")
            );
        }
        let revert =
            |trial: &OnTrial, anchor_runs| match decide(trial.clone(), Err("connection refused".into()), anchor_runs) {
                Decision::Revert {
                    version,
                    to,
                    reason,
                    mark_bad,
                    boots,
                } => {
                    assert_eq!((version.as_str(), to.as_str()), ("B", "A"));
                    assert!(reason.contains("connection refused"), "{reason}");
                    (reason, mark_bad, boots)
                }
                other => panic!("expected Revert, got {other:?}"),
            };
        // A reboot: tried again by its anchor.
        let (reason, mark_bad, boots) = revert(&trial, false);
        assert!(!mark_bad && reason.contains("tries it again once it runs"), "{reason}");
        assert_eq!(boots, 1);
        // A kubelet restart is no verdict either, and not counted: the running anchor tries it
        // again once the kubelet replaces static pods.
        let (reason, mark_bad, boots) = revert(&trial, true);
        assert!(
            !mark_bad && reason.contains("its anchor, still running, tries it again"),
            "{reason}"
        );
        assert_eq!(boots, 0);
        // Put back by a reboot before: a kubelet restart keeps the count, a second reboot is bad.
        let mut again = ledger(Some("B"), Some("A"));
        again.interrupted = Some(crate::ledger::Interrupted {
            hash: "B".into(),
            at: "2026-12-07T00:00:00Z".into(),
            reason: "the first time".into(),
            boots: 1,
        });
        let trial = on_trial(&again, versions(true, true)).unwrap();
        assert_eq!(trial.boots_before, 1);
        let (_, mark_bad, boots) = revert(&trial, true);
        assert!(!mark_bad);
        assert_eq!(boots, 1);
        let (reason, mark_bad, _) = revert(&trial, false);
        assert!(
            mark_bad
                && reason.contains("the second reboot")
                && reason.contains("kube-anchor retry --component kube-apiserver"),
            "{reason}"
        );
        // Kubelet restarts alone never make it bad.
        again.interrupted.as_mut().unwrap().boots = 0;
        let trial = on_trial(&again, versions(true, true)).unwrap();
        assert!(!revert(&trial, true).1);
        // Another version's interruption does not count.
        again.interrupted.as_mut().unwrap().hash = "C".into();
        again.interrupted.as_mut().unwrap().boots = 1;
        assert_eq!(on_trial(&again, versions(true, true)).unwrap().boots_before, 0);
        // A record from before the count was a reboot's.
        let old: crate::ledger::Interrupted =
            serde_json::from_str(r#"{"hash": "B", "at": "2026-12-07T00:00:00Z", "reason": "r"}"#).unwrap();
        assert_eq!(old.boots, 1);
    }

    #[test]
    fn etcd_and_kube_apiserver_keep_the_api_away_by_command_or_by_image() {
        let by_command = b"spec:\n  containers:\n  - name: etcd\n    image: example/x:1\n    command: [/usr/local/bin/etcd, --name=cp-1]\n";
        let by_image = b"spec:\n  containers:\n  - name: a\n    image: registry.k8s.io/kube-apiserver:v1.36.3\n    args: [--v=2]\n";
        let scheduler = b"spec:\n  containers:\n  - name: s\n    image: registry.k8s.io/kube-scheduler:v1.36.3\n    command: [kube-scheduler]\n";
        assert!(keeps_the_api_away(by_command));
        assert!(keeps_the_api_away(by_image));
        assert!(!keeps_the_api_away(scheduler));
        assert!(!keeps_the_api_away(b"not: [a pod"));
    }

    #[test]
    fn the_etcd_minor_is_read_from_the_image_tag() {
        let pod = |image: &str| format!("spec:\n  containers:\n  - name: etcd\n    image: {image}\n");
        assert_eq!(etcd_minor(pod("registry.k8s.io/etcd:3.6.8-0").as_bytes()), Some((3, 6)));
        assert_eq!(etcd_minor(pod("quay.io/coreos/etcd:v3.5.21").as_bytes()), Some((3, 5)));
        assert_eq!(
            etcd_minor(pod("localhost:5000/etcd:3.5.1@sha256:ab").as_bytes()),
            Some((3, 5))
        );
        assert_eq!(etcd_minor(pod("localhost:5000/etcd").as_bytes()), None);
        assert_eq!(
            etcd_minor(pod("registry.k8s.io/kube-apiserver:v1.36.3").as_bytes()),
            None
        );
        assert_eq!(etcd_minor(pod("example/etcd:latest").as_bytes()), None);
        let (new, old) = (
            pod("registry.k8s.io/etcd:3.6.8-0"),
            pod("registry.k8s.io/etcd:3.5.21-0"),
        );
        assert!(etcd_minor_up(Some(new.as_bytes()), Some(old.as_bytes())));
        assert!(!etcd_minor_up(Some(old.as_bytes()), Some(new.as_bytes())));
        assert!(!etcd_minor_up(Some(new.as_bytes()), None));
    }

    #[test]
    fn the_drop_in_runs_the_step_before_the_kubelet_whatever_its_outcome() {
        let text = drop_in(
            "/var/lib/kube-anchor/bin/kube-anchor",
            "/var/lib/kube-anchor",
            &["/etc/kubernetes".into(), "/srv/pki".into()],
            "/etc/kubernetes/kubelet.conf",
        );
        let line = text.lines().find(|l| l.starts_with("ExecStartPre=")).unwrap();
        assert_eq!(
            line,
            "ExecStartPre=-/var/lib/kube-anchor/bin/kube-anchor kubelet-pre-start --state-dir /var/lib/kube-anchor \
             --allowed-root /etc/kubernetes,/srv/pki --kubelet-kubeconfig /etc/kubernetes/kubelet.conf"
        );
        assert!(text.contains("[Service]\n"));
    }
}
