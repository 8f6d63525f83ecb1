//! The real component processes of the tests: the binaries of `tools/build.sh`, and processes
//! started from them. Every process is started with `PR_SET_PDEATHSIG` from a thread that lives
//! as long as the test binary, so nothing outlives it, even when a test panics; its output goes
//! to `<name>.log` in the directory it is given ([`test_dir`] for the control plane's).

#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

pub const TOOLS: &[&str] = &[
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "helm",
];

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Path of a tool built by `tools/build.sh`; panics with the fix when it is missing.
pub fn tool(name: &str) -> PathBuf {
    let path = repo_root().join("tools/bin").join(name);
    if !path.exists() {
        panic!(
            "{} is missing: run tools/build.sh first (it builds the real Kubernetes components from Go modules)",
            path.display()
        );
    }
    path
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Children are forked from this one long-lived thread: PR_SET_PDEATHSIG fires when the forking
/// *thread* exits, and test threads exit early.
fn spawn(mut cmd: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("cluster-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    unsafe {
                        cmd.pre_exec(|| {
                            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                                return Err(std::io::Error::last_os_error());
                            }
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .unwrap();
        Mutex::new(tx)
    });
    cmd.stdin(Stdio::null());
    let (tx, rx) = mpsc::channel();
    sender.lock().unwrap().send((cmd, tx)).unwrap();
    rx.recv().unwrap()
}

pub struct Process {
    pub name: String,
    pub log: PathBuf,
    child: Child,
}

impl Process {
    pub fn start(name: &str, mut cmd: Command, log_dir: &Path) -> Self {
        let log = log_dir.join(format!("{name}.log"));
        let out = fs::OpenOptions::new().create(true).append(true).open(&log).unwrap();
        cmd.stdout(out.try_clone().unwrap()).stderr(out);
        let child = spawn(cmd).unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Self {
            name: name.into(),
            log,
            child,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How the process ended (`exit status: 1`, `signal: 9 (SIGKILL)`), or `None` while it runs.
    pub fn exit_status(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(|status| status.to_string())
    }

    pub fn stop(mut self) {
        self.kill();
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last `lines` lines of a log file (none when it cannot be read).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub fn rss_kib(pid: &str) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// This test binary's directory for logs and state (`$TMPDIR/kube-anchor-test-<pid>`); those of
/// test binaries no longer running are removed first, so a failed run's logs stay until then.
pub fn test_dir() -> PathBuf {
    let base = std::env::temp_dir();
    remove_dead_cluster_dirs(&base);
    let dir = base.join(format!("kube-anchor-test-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes cluster dirs of test binaries that are no longer running.
fn remove_dead_cluster_dirs(base: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("kube-anchor-test-")
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if unsafe { libc::kill(pid, 0) } != 0 {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
