//! Running `kube-anchor run` as a process, with its inputs in a directory laid out the way the
//! kubelet lays out a ConfigMap or Secret volume (`..data` symlink swapped atomically).

#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::fixture::BIN;
use super::poll::Poll;

/// A directory shaped like a projected ConfigMap/Secret volume.
pub struct ConfigVolume {
    pub dir: PathBuf,
    generation: u32,
}

impl ConfigVolume {
    pub fn new(dir: &Path, files: &[(&str, &[u8])]) -> Self {
        fs::create_dir_all(dir).unwrap();
        let mut v = Self {
            dir: dir.into(),
            generation: 0,
        };
        v.update(files);
        v
    }

    /// Replaces the whole content at once, as the kubelet does: a new timestamped directory, a
    /// `..data_tmp` symlink to it renamed over `..data`, then the old directory removed.
    pub fn update(&mut self, files: &[(&str, &[u8])]) {
        self.update_swapped_at(files);
    }

    /// [`ConfigVolume::update`], returning when `..data` was swapped: the instant the new
    /// content became visible (before it, the new files were only written; after it, the old
    /// generation is removed, as the kubelet does while its readers react).
    pub fn update_swapped_at(&mut self, files: &[(&str, &[u8])]) -> std::time::Instant {
        self.generation += 1;
        let data = format!("..2026_11_22_00_00_{:02}.{}", self.generation % 60, self.generation);
        let data_dir = self.dir.join(&data);
        fs::create_dir_all(&data_dir).unwrap();
        for (name, content) in files {
            fs::write(data_dir.join(name), content).unwrap();
        }
        let old = fs::read_link(self.dir.join("..data")).ok();
        let tmp = self.dir.join("..data_tmp");
        let _ = fs::remove_file(&tmp);
        symlink(&data, &tmp).unwrap();
        fs::rename(&tmp, self.dir.join("..data")).unwrap();
        let swapped = std::time::Instant::now();
        for (name, _) in files {
            let link = self.dir.join(name);
            if fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), &link).unwrap();
            }
        }
        if let Some(old) = old {
            let _ = fs::remove_dir_all(self.dir.join(old));
        }
        swapped
    }

    pub fn config(&self) -> PathBuf {
        self.dir.join("anchor.yaml")
    }
}

/// One file of a volume's content as [`ConfigVolume`] takes it: a slice's `&(name, content)`
/// or a map's `(&name, &content)`.
pub trait FileRef<'a> {
    fn file_ref(self) -> (&'a str, &'a [u8]);
}

impl<'a, K: AsRef<str>, V: AsRef<[u8]>> FileRef<'a> for &'a (K, V) {
    fn file_ref(self) -> (&'a str, &'a [u8]) {
        (self.0.as_ref(), self.1.as_ref())
    }
}

impl<'a, K: AsRef<str>, V: AsRef<[u8]>> FileRef<'a> for (&'a K, &'a V) {
    fn file_ref(self) -> (&'a str, &'a [u8]) {
        (self.0.as_ref(), self.1.as_ref())
    }
}

/// Owned files (a `Vec` of (name, content) or a map of them) borrowed as [`ConfigVolume::new`]
/// and [`ConfigVolume::update`] take them.
pub fn refs<'a, F: FileRef<'a>>(files: impl IntoIterator<Item = F>) -> Vec<(&'a str, &'a [u8])> {
    files.into_iter().map(FileRef::file_ref).collect()
}

pub fn anchor_config(component: &str, files: &[(&str, &str, &str)], manifest_path: &str) -> String {
    let mut text = format!(
        "apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata:\n  name: {component}\nspec:\n  variables: [NODE_NAME]\n  files:\n"
    );
    for (source, path, mode) in files {
        text.push_str(&format!("  - {{source: {source}, path: {path}, mode: \"{mode}\"}}\n"));
    }
    text.push_str(&format!("  manifest: {{source: pod.yaml, path: {manifest_path}}}\n"));
    text
}

pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `kube-anchor run --config CONFIG --host-root HOST --listen 127.0.0.1:<free>` plus
    /// `extra`, with `NODE_NAME` in its environment as the downward API would set it.
    pub fn start(config: &Path, host_root: &Path, node_name: &str, extra: &[String], log: &Path) -> Self {
        Self::start_with_env(config, host_root, node_name, extra, &[], log)
    }

    /// [`Daemon::start`] with more environment (e.g. what a chart sets on the container).
    pub fn start_with_env(
        config: &Path,
        host_root: &Path,
        node_name: &str,
        extra: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Self {
        Self::start_binary(Path::new(BIN), config, host_root, node_name, extra, env, log)
    }

    /// [`Daemon::start_with_env`] of another build of kube-anchor (the benchmark's baseline).
    pub fn start_binary(
        bin: &Path,
        config: &Path,
        host_root: &Path,
        node_name: &str,
        extra: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = fs::File::create(log).unwrap();
        let child = Command::new(bin)
            .arg("run")
            .arg("--config")
            .arg(config)
            .arg("--host-root")
            .arg(host_root)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .args(extra)
            .env("NO_COLOR", "1")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("NODE_NAME", node_name)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let d = Self {
            child,
            port,
            log: log.into(),
        };
        d.wait_http(Duration::from_secs(20));
        d
    }

    fn wait_http(&self, timeout: Duration) {
        Poll::new(timeout, "kube-anchor run to serve")
            .every(Duration::from_millis(50))
            .context(|| self.log_context())
            .until(|| self.get("/healthz").is_some());
    }

    /// (status code, body) of a GET, or None when nothing answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.port, path)
    }

    pub fn metric(&self, name: &str) -> f64 {
        let (_, body) = self.get("/metrics").expect("metrics");
        body.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in:\n{body}"))
    }

    pub fn child_running(&self) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(self.child.id() as i32, 0) == 0 }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// "daemon log:" and the log, for a failure message.
    pub fn log_context(&self) -> String {
        format!("daemon log:\n{}", self.log_text())
    }

    pub fn signal(&self, signal: i32) {
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

/// Polls `check` every 20 ms until it holds, or panics with `what` and the daemon log.
pub fn wait_until(timeout: Duration, what: &str, daemon: &Daemon, check: impl FnMut() -> bool) {
    Poll::new(timeout, what)
        .every(Duration::from_millis(20))
        .context(|| daemon.log_context())
        .until(check)
}

/// A stand-in for a component's health endpoint: answers every request with the status code
/// `decide` returns at that moment.
pub fn health_server(decide: impl Fn() -> u16 + Send + 'static) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let code = decide();
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
            );
        }
    });
    port
}
