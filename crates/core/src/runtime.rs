//! What the node's container runtime shows about a static pod: the local truth that needs no API
//! server. The adapter (`kube_anchor_k8s::cri`) reads it over the CRI; this module holds the
//! data and what it says about a version, purely.

use serde::Serialize;

/// The kubelet's own labels on every sandbox and container it makes (kubelet `kuberuntime`
/// `labels.go`): how a static pod is found without asking the API.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// The kubelet copies a pod's annotations onto its sandbox, so a sandbox carries the content hash
/// kube-anchor wrote into the manifest; and it marks where the pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";

/// One look at the runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state")]
pub enum RuntimeView {
    /// The socket is missing, refused, hung or answered something unreadable: no evidence either
    /// way (never "not running").
    Unavailable { reason: String },
    /// The runtime answered and holds no sandbox of this static pod.
    NoSandbox,
    /// The newest sandbox of this static pod (the kubelet makes one per version and keeps the
    /// stopped ones for a while).
    Pod(LocalPod),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalPod {
    pub sandbox_id: String,
    /// kube-anchor's content hash, from the sandbox's annotations.
    pub content_hash: Option<String>,
    /// SANDBOX_READY (its network and namespaces are up; false once stopped).
    pub ready: bool,
    /// Unix seconds.
    pub created_at: i64,
    /// The newest attempt of each container of the sandbox, by name.
    pub containers: Vec<LocalContainer>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalContainer {
    pub name: String,
    /// 0 for the first start of a container in its sandbox; the kubelet counts restarts with it.
    pub attempt: u32,
    pub state: ContainerState,
    /// Unix seconds, when known.
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub exit_code: Option<i32>,
    /// The runtime's reason for an exit (`Error`, `StartError`, `OOMKilled`, ...).
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl LocalPod {
    /// Restarts of its containers within this sandbox.
    pub fn restarts(&self) -> u32 {
        self.containers.iter().map(|c| c.attempt).sum()
    }

    /// Every container's newest attempt runs.
    pub fn all_running(&self) -> bool {
        !self.containers.is_empty() && self.containers.iter().all(|c| c.state == ContainerState::Running)
    }

    /// Since when every container has run (the latest start), when all run.
    pub fn running_since(&self) -> Option<i64> {
        if !self.all_running() {
            return None;
        }
        self.containers.iter().map(|c| c.started_at).max().flatten()
    }
}

impl LocalContainer {
    /// `kube-apiserver exited 1 (Error), attempt 3`.
    pub fn describe(&self) -> String {
        let state = match self.state {
            ContainerState::Created => "created, not started".to_owned(),
            ContainerState::Running => "running".to_owned(),
            ContainerState::Unknown => "in an unknown state".to_owned(),
            ContainerState::Exited => {
                let code = self.exit_code.map(|c| format!(" {c}")).unwrap_or_default();
                let reason = self.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
                format!("exited{code}{reason}")
            }
        };
        format!("container {} {state}, attempt {}", self.name, self.attempt)
    }
}

/// Whether a pod's containers (the newest attempt of each) show it running: one at least runs.
/// Init containers have exited by then, and the runtime does not say which containers are init
/// containers, so "every container runs" would never hold for such a pod; Ready is the kubelet's
/// and the API's to say, this only confirms that something of the pod runs now.
pub fn runs(states: &[ContainerState]) -> bool {
    states.contains(&ContainerState::Running)
}

/// What the runtime says about the version `hash`, before health and the API are weighed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Local {
    /// Every container of the version's sandbox runs.
    Running,
    /// Evidence that it does not run (yet): another version's sandbox, none, a container not
    /// running.
    NotRunning(String),
    /// More restarts within the trial than the threshold.
    CrashLooping(String),
    /// The previous version's sandbox still runs: the kubelet is stopping it (a grace period)
    /// before it starts this one. Not this version's doing, so no evidence either way.
    PreviousStopping(String),
    /// The runtime could not be asked.
    Unknown(String),
}

/// `restarts` are this trial's restarts of the version's containers (see `Trial::restarts_in_trial`).
pub fn judge(view: &RuntimeView, hash: &str, restarts: u32, crash_loop_threshold: u32) -> Local {
    let pod = match view {
        RuntimeView::Unavailable { reason } => return Local::Unknown(format!("container runtime: {reason}")),
        RuntimeView::NoSandbox => return Local::NotRunning("the runtime has no sandbox of the static pod".into()),
        RuntimeView::Pod(pod) => pod,
    };
    if pod.content_hash.as_deref() != Some(hash) {
        let other = pod.content_hash.as_deref().unwrap_or("no kube-anchor hash");
        if pod.ready && runs(&pod.containers.iter().map(|c| c.state).collect::<Vec<_>>()) {
            return Local::PreviousStopping(format!(
                "the runtime still runs {other} (the kubelet stops it before {hash} starts)"
            ));
        }
        return Local::NotRunning(format!("the runtime runs {other}, not {hash} yet"));
    }
    if restarts > crash_loop_threshold {
        let last = pod
            .containers
            .iter()
            .max_by_key(|c| c.attempt)
            .map(|c| format!(": {}", c.describe()))
            .unwrap_or_default();
        return Local::CrashLooping(format!(
            "containers restarted {restarts} times (threshold {crash_loop_threshold}){last}"
        ));
    }
    if !pod.ready {
        return Local::NotRunning("its sandbox is not ready".into());
    }
    if pod.containers.is_empty() {
        return Local::NotRunning("its sandbox has no container yet (image pull or create failing?)".into());
    }
    match pod.containers.iter().find(|c| c.state != ContainerState::Running) {
        Some(c) => Local::NotRunning(c.describe()),
        None => Local::Running,
    }
}

/// What the runtime's view of a `--depends-on` component at `hash` (the version its ledger
/// names on this node) says against judging a dependent now: why it is down, or `None`. A
/// version being replaced is down too: the kubelet stops the old one before it starts the new
/// one. A runtime that cannot be asked says nothing.
pub fn dependency_down(component: &str, view: &RuntimeView, hash: &str) -> Option<String> {
    match judge(view, hash, 0, u32::MAX) {
        Local::NotRunning(what) | Local::CrashLooping(what) => {
            Some(format!("{component} does not run on this node ({what})"))
        }
        Local::PreviousStopping(what) => Some(format!("{component} is being replaced on this node ({what})")),
        Local::Running | Local::Unknown(_) => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_dependency_is_down_while_it_does_not_run_or_is_being_replaced() {
        use ContainerState::*;
        let running = pod("sha256:new", true, vec![container("etcd", 0, Running)]);
        assert_eq!(dependency_down("etcd", &running, "sha256:new"), None);
        let replaced = pod("sha256:old", true, vec![container("etcd", 0, Running)]);
        let why = dependency_down("etcd", &replaced, "sha256:new").expect("down while replaced");
        assert!(why.starts_with("etcd is being replaced on this node"), "{why}");
        let exited = pod("sha256:new", true, vec![container("etcd", 1, Exited)]);
        let why = dependency_down("etcd", &exited, "sha256:new").expect("down while exited");
        assert!(why.starts_with("etcd does not run on this node"), "{why}");
        assert!(dependency_down("etcd", &RuntimeView::NoSandbox, "sha256:new").is_some());
        let unknown = RuntimeView::Unavailable {
            reason: "no socket".into(),
        };
        assert_eq!(dependency_down("etcd", &unknown, "sha256:new"), None);
    }

    pub(crate) fn container(name: &str, attempt: u32, state: ContainerState) -> LocalContainer {
        LocalContainer {
            name: name.into(),
            attempt,
            state,
            started_at: Some(100),
            finished_at: None,
            exit_code: (state == ContainerState::Exited).then_some(1),
            reason: (state == ContainerState::Exited).then(|| "Error".into()),
        }
    }

    pub(crate) fn pod(hash: &str, ready: bool, containers: Vec<LocalContainer>) -> RuntimeView {
        RuntimeView::Pod(LocalPod {
            sandbox_id: "sb".into(),
            content_hash: Some(hash.into()),
            ready,
            created_at: 90,
            containers,
        })
    }

    #[test]
    fn judgement_table() {
        use ContainerState::*;
        const H: &str = "sha256:new";
        type Case = (RuntimeView, u32, fn(&Local) -> bool);
        let cases: Vec<Case> = vec![
            (
                RuntimeView::Unavailable {
                    reason: "no socket".into(),
                },
                0,
                |l| matches!(l, Local::Unknown(r) if r.contains("no socket")),
            ),
            (RuntimeView::NoSandbox, 0, |l| matches!(l, Local::NotRunning(_))),
            (
                pod("sha256:old", true, vec![container("c", 0, Running)]),
                0,
                |l| matches!(l, Local::PreviousStopping(r) if r.contains("sha256:old")),
            ),
            (
                pod("sha256:old", false, vec![container("c", 0, Exited)]),
                0,
                |l| matches!(l, Local::NotRunning(r) if r.contains("sha256:old")),
            ),
            (
                pod("sha256:old", true, vec![container("c", 2, Exited)]),
                0,
                |l| matches!(l, Local::NotRunning(r) if r.contains("sha256:old")),
            ),
            (pod(H, true, vec![container("c", 0, Running)]), 0, |l| {
                *l == Local::Running
            }),
            (pod(H, true, vec![container("c", 3, Running)]), 3, |l| {
                *l == Local::Running
            }),
            (
                pod(H, true, vec![container("c", 4, Exited)]),
                4,
                |l| matches!(l, Local::CrashLooping(r) if r.contains("exited 1 (Error), attempt 4")),
            ),
            (
                pod(H, true, vec![container("c", 1, Exited)]),
                1,
                |l| matches!(l, Local::NotRunning(r) if r.contains("exited 1")),
            ),
            (
                pod(H, true, vec![container("c", 0, Created)]),
                0,
                |l| matches!(l, Local::NotRunning(r) if r.contains("not started")),
            ),
            (
                pod(H, true, vec![]),
                0,
                |l| matches!(l, Local::NotRunning(r) if r.contains("no container")),
            ),
            (
                pod(H, false, vec![container("c", 0, Running)]),
                0,
                |l| matches!(l, Local::NotRunning(r) if r.contains("sandbox")),
            ),
            (
                pod(H, true, vec![container("a", 0, Running), container("b", 0, Exited)]),
                0,
                |l| matches!(l, Local::NotRunning(r) if r.contains("container b")),
            ),
        ];
        for (i, (view, restarts, check)) in cases.iter().enumerate() {
            let got = judge(view, H, *restarts, 3);
            assert!(check(&got), "case {i}: {view:?} -> {got:?}");
        }
    }

    #[test]
    fn a_pod_runs_when_a_container_runs() {
        use ContainerState::*;
        for (states, want) in [
            (vec![], false),
            (vec![Exited], false),
            (vec![Created], false),
            (vec![Exited, Running], true),
            (vec![Running], true),
            (vec![Unknown, Exited], false),
        ] {
            assert_eq!(runs(&states), want, "{states:?}");
        }
    }

    #[test]
    fn running_since_is_the_latest_start_of_all_running() {
        use ContainerState::*;
        let RuntimeView::Pod(mut p) = pod("h", true, vec![container("a", 0, Running), container("b", 0, Running)])
        else {
            unreachable!()
        };
        p.containers[1].started_at = Some(150);
        assert_eq!(p.running_since(), Some(150));
        p.containers[0].state = Exited;
        assert_eq!(p.running_since(), None);
        assert_eq!(p.restarts(), 0);
    }
}
