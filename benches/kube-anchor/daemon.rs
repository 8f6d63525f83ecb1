//! The anchor daemon (`kube-anchor run`, release build) on a temp directory with no API server:
//! p50 and p99 over 100 changes of (a) the latency from an input change (a ConfigMap `..data`
//! swap, timed from the swap itself) to the new content in place on the host (renamed after fsync), and (b) from a host-side
//! deletion to the restored file, each beside the write limit (a temp file written, fsynced and
//! renamed, the directory fsynced, in the same directory); with 16 files and a manifest, one of
//! which changes; then the idle RSS 15 s after the last change, the CPU used while idling
//! (`IDLE_SECONDS`, default 60) and one more change after it; then the idle RSS of a second daemon with its mirror-pod watch
//! open against a stand-in API server (plain HTTP on loopback: an empty pod list, then a watch
//! that stays open), and the requests it made while idling.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::daemon::{ConfigVolume, Daemon, anchor_config, refs};
use crate::{Row, ms, percentiles};

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler, namespace: kube-system}\nspec: {containers: [{name: s, image: 'i'}]}\n";
const CHANGES: usize = 100;
/// When the idle resident set is read, after the last change.
const RSS_AFTER: Duration = Duration::from_secs(15);
/// How many files sit beside the one that changes.
const EXTRA_FILES: usize = 15;
/// Under `cargo test --all-targets` (no `--bench` argument): a quick smoke run.
const QUICK_CHANGES: usize = 5;

fn wait_for(mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "no reaction within 10 s");
        std::thread::sleep(Duration::from_micros(100));
    }
    start.elapsed()
}

fn proc_field(pid: u32, file: &str, key: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/{file}")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_owned())
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, i.e. 11 and 12 after the state field.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The floor under any crash-safe replacement of a file in `dir`: write a temp file, fsync it,
/// rename it over the target, fsync the directory; `n` times.
fn write_limit(dir: &Path, n: usize) -> Vec<Duration> {
    let target = dir.join("write-limit");
    let temp = dir.join(".write-limit.tmp");
    // The first write creates the file: not counted.
    (0..=n)
        .map(|i| {
            let start = Instant::now();
            let mut f = fs::File::create(&temp).unwrap();
            f.write_all(format!("content {i}\n").as_bytes()).unwrap();
            f.sync_all().unwrap();
            fs::rename(&temp, &target).unwrap();
            fs::File::open(dir).unwrap().sync_all().unwrap();
            start.elapsed()
        })
        .skip(1)
        .collect()
}

/// A stand-in API server: every LIST gets an empty list, every watch a stream that stays open.
/// Returns its port and the count of requests served.
fn fake_api() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let count = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let count = count.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut request_line = String::new();
                    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut header = String::new();
                    while reader.read_line(&mut header).is_ok_and(|n| n > 2) {
                        header.clear();
                    }
                    count.fetch_add(1, Ordering::Relaxed);
                    if request_line.contains("watch=true") || request_line.contains("watch=1") {
                        let _ = out.write_all(
                            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                        );
                        let _ = out.flush();
                        // Held open, silent, until the client goes.
                        let mut sink = String::new();
                        let _ = reader.read_line(&mut sink);
                        return;
                    }
                    let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}"#;
                    let _ = write!(
                        out,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                }
            });
        }
    });
    (port, requests)
}

/// This build; with `KUBE_ANCHOR_BENCH_BASELINE=<another kube-anchor binary>`, that one too, in
/// the same run (rows marked "baseline"), so a change is judged against its predecessor on the
/// same machine under the same load.
pub fn measure(quick: bool) -> Vec<Row> {
    let mut rows = measure_binary(quick, Path::new(crate::support::fixture::BIN), "");
    if let Some(baseline) = std::env::var_os("KUBE_ANCHOR_BENCH_BASELINE") {
        rows.extend(measure_binary(quick, Path::new(&baseline), " [baseline]"));
    }
    rows
}

fn measure_binary(quick: bool, bin: &Path, label: &str) -> Vec<Row> {
    let changes = if quick { QUICK_CHANGES } else { CHANGES };
    let work = tempfile::tempdir().unwrap();
    let node = work.path().join("node");
    fs::create_dir_all(&node).unwrap();
    // 16 files and a manifest, as a control-plane component has; one of them changes.
    let extra: Vec<(String, String)> = (1..=EXTRA_FILES)
        .map(|i| (format!("extra-{i}"), format!("/etc/kubernetes/pki/extra-{i}")))
        .collect();
    let mut specs = vec![("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")];
    specs.extend(extra.iter().map(|(name, path)| (name.as_str(), path.as_str(), "0600")));
    let config = anchor_config(
        "kube-scheduler",
        &specs,
        "/etc/kubernetes/manifests/kube-scheduler.yaml",
    );
    let files = |kubeconfig: &str| {
        let mut files = vec![
            ("anchor.yaml", config.clone().into_bytes()),
            ("pod.yaml", POD.as_bytes().to_vec()),
            ("scheduler.conf", kubeconfig.as_bytes().to_vec()),
        ];
        files.extend(
            extra
                .iter()
                .map(|(name, _)| (name.as_str(), format!("unchanged {name}").into_bytes())),
        );
        files
    };
    let mut volume = ConfigVolume::new(&work.path().join("config"), &refs(&files("kubeconfig 0")));
    let d = Daemon::start_binary(
        bin,
        &volume.config(),
        &node,
        "bench-node",
        &[],
        &[],
        &work.path().join("daemon.log"),
    );
    let kubeconfig = node.join("etc/kubernetes/scheduler.conf");
    wait_for(|| fs::read(&kubeconfig).is_ok_and(|c| c == b"kubeconfig 0"));

    let mut change = Vec::new();
    for i in 1..=changes {
        let want = format!("kubeconfig {i}");
        let f = files(&want);
        // From the swap of `..data`, the instant the change exists for any reader (writing the
        // new generation's 18 files before it is the kubelet's work, not the daemon's).
        let swapped = volume.update_swapped_at(&refs(&f));
        wait_for(|| fs::read(&kubeconfig).is_ok_and(|c| c == want.as_bytes()));
        change.push(swapped.elapsed());
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut repair = Vec::new();
    for _ in 0..changes {
        let start = Instant::now();
        fs::remove_file(&kubeconfig).unwrap();
        wait_for(|| kubeconfig.exists());
        repair.push(start.elapsed());
        std::thread::sleep(Duration::from_millis(30));
    }
    let idle: u64 = std::env::var("IDLE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 1 } else { 60 });
    // The resident set once the daemon has been left alone for a while (it gives its code back
    // after 10 s quiet), before the next resync maps it again.
    let pid = d.child.id();
    let field = |key: &str| proc_field(pid, "status", key).unwrap_or_default();
    std::thread::sleep(if quick { Duration::from_secs(1) } else { RSS_AFTER });
    let (rss, anon, file, threads) = (field("VmRSS:"), field("RssAnon:"), field("RssFile:"), field("Threads:"));
    let ticks_before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(idle));
    let ticks = cpu_ticks(pid) - ticks_before;

    // One change after the idle time: the daemon's code has left its resident set and is
    // mapped back from the page cache.
    let want = "kubeconfig after idle";
    let f = files(want);
    let swapped = volume.update_swapped_at(&refs(&f));
    wait_for(|| fs::read(&kubeconfig).is_ok_and(|c| c == want.as_bytes()));
    let after_idle = swapped.elapsed();
    drop(d);

    // The same with the mirror-pod watch open.
    let (port, requests) = fake_api();
    let kubeconfig_file = work.path().join("kubeconfig");
    fs::write(
        &kubeconfig_file,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let d = Daemon::start_binary(
        bin,
        &volume.config(),
        &node,
        "bench-node",
        &["--kubeconfig".into(), kubeconfig_file.display().to_string()],
        &[],
        &work.path().join("daemon-api.log"),
    );
    let started = Instant::now();
    while requests.load(Ordering::Relaxed) < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no watch: {}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let before = requests.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs(idle));
    let idle_requests = requests.load(Ordering::Relaxed) - before;
    let pid = d.child.id();
    let field = |key: &str| proc_field(pid, "status", key).unwrap_or_default();
    let (api_rss, api_anon, api_file, api_threads) =
        (field("VmRSS:"), field("RssAnon:"), field("RssFile:"), field("Threads:"));

    let (l50, l99) = percentiles(write_limit(&node.join("etc/kubernetes"), changes));
    let (c50, c99) = percentiles(change);
    let (r50, r99) = percentiles(repair);
    let of_limit = |d: Duration| format!("{:.1}× the limit's p99", d.as_secs_f64() / l99.as_secs_f64());
    let cpu = ticks as f64 / 100.0; // USER_HZ on Linux
    let rows = vec![
        Row::new(
            format!("write limit: write + fsync + rename + dir fsync of one file ({changes} writes)"),
            format!("p50 {}, p99 {}", ms(l50), ms(l99)),
            "",
        ),
        Row::new(
            format!("run: input change -> fsynced host file (1 of 16 files; {changes} changes)"),
            format!("p50 {}, p99 {} ({})", ms(c50), ms(c99), of_limit(c99)),
            "p99 <= 2x the limit",
        ),
        Row::new(
            format!("run: host deletion -> restored ({changes} deletions)"),
            format!("p50 {}, p99 {} ({})", ms(r50), ms(r99), of_limit(r99)),
            "p99 <= 2x the limit",
        ),
        Row::new(
            format!("run: idle RSS {} s after the last change, no API", RSS_AFTER.as_secs()),
            format!("{rss} (anon {anon}, file {file}; {threads} threads)"),
            "< 5 MB",
        ),
        Row::new(
            "run: input change -> host file, first after the idle time",
            ms(after_idle),
            "",
        ),
        Row::new(
            format!("run: idle CPU over {idle} s"),
            format!("{cpu:.3} s ({:.4} % of a core)", cpu / idle as f64 * 100.0),
            "",
        ),
        Row::new(
            "run: idle RSS, mirror-pod watch open",
            format!("{api_rss} (anon {api_anon}, file {api_file}; {api_threads} threads)"),
            "<= 12 MB",
        ),
        Row::new(
            format!("run: requests to a stand-in API while idle ({idle} s)"),
            idle_requests.to_string(),
            "0",
        ),
    ];
    rows.into_iter()
        .map(|r| Row::new(format!("{}{label}", r.what), r.value, r.target))
        .collect()
}
