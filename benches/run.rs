//! `cargo bench --bench run`: the anchor daemon (`kube-anchor run`, release build) on a temp
//! directory with no API server.
//!
//! Prints p50 and p99 over 100 changes of (a) the latency from an input change (a ConfigMap
//! `..data` swap) to the new content in place on the host (renamed after fsync), and (b) from a
//! host-side deletion to the restored file; then the idle RSS and the CPU used while idling
//! (`IDLE_SECONDS`, default 60).

#[path = "../tests/support/mod.rs"]
mod support;

use std::fs;
use std::time::{Duration, Instant};

use support::daemon::{ConfigVolume, Daemon, anchor_config};

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: kube-scheduler, namespace: kube-system}\nspec: {containers: [{name: s, image: 'i'}]}\n";
const CHANGES: usize = 100;
/// Under `cargo test --all-targets` (no `--bench` argument): a quick smoke run.
const QUICK_CHANGES: usize = 5;

fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99))
}

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

fn main() {
    let quick = !std::env::args().any(|a| a == "--bench");
    let changes = if quick { QUICK_CHANGES } else { CHANGES };
    let work = tempfile::tempdir().unwrap();
    let node = work.path().join("node");
    fs::create_dir_all(&node).unwrap();
    let config = anchor_config(
        "kube-scheduler",
        &[("scheduler.conf", "/etc/kubernetes/scheduler.conf", "0600")],
        "/etc/kubernetes/manifests/kube-scheduler.yaml",
    );
    let files = |kubeconfig: &str| {
        vec![
            ("anchor.yaml", config.clone().into_bytes()),
            ("pod.yaml", POD.as_bytes().to_vec()),
            ("scheduler.conf", kubeconfig.as_bytes().to_vec()),
        ]
    };
    let refs = |f: &Vec<(&'static str, Vec<u8>)>| f.iter().map(|(n, c)| (*n, c.clone())).collect::<Vec<_>>();
    let initial = refs(&files("kubeconfig 0"));
    let initial: Vec<(&str, &[u8])> = initial.iter().map(|(n, c)| (*n, c.as_slice())).collect();
    let mut volume = ConfigVolume::new(&work.path().join("config"), &initial);
    let d = Daemon::start(
        &volume.config(),
        &node,
        "bench-node",
        &[],
        &work.path().join("daemon.log"),
    );
    let kubeconfig = node.join("etc/kubernetes/scheduler.conf");
    wait_for(|| fs::read(&kubeconfig).is_ok_and(|c| c == b"kubeconfig 0"));

    let mut change = Vec::new();
    for i in 1..=changes {
        let want = format!("kubeconfig {i}");
        let f = files(&want);
        let f: Vec<(&str, &[u8])> = f.iter().map(|(n, c)| (*n, c.as_slice())).collect();
        let start = Instant::now();
        volume.update(&f);
        wait_for(|| fs::read(&kubeconfig).is_ok_and(|c| c == want.as_bytes()));
        change.push(start.elapsed());
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
    std::thread::sleep(Duration::from_secs(2));
    let pid = d.child.id();
    let ticks_before = cpu_ticks(pid);
    std::thread::sleep(Duration::from_secs(idle));
    let ticks = cpu_ticks(pid) - ticks_before;
    let hz = 100.0; // USER_HZ on Linux
    let rss = proc_field(pid, "status", "VmRSS:").unwrap_or_default();

    let (c50, c99) = percentiles(change);
    let (r50, r99) = percentiles(repair);
    println!("kube-anchor run, {changes} changes each (no API server)");
    println!(
        "input change -> host file    p50 {:>7.2} ms   p99 {:>7.2} ms",
        c50.as_secs_f64() * 1e3,
        c99.as_secs_f64() * 1e3
    );
    println!(
        "host deletion -> restored    p50 {:>7.2} ms   p99 {:>7.2} ms",
        r50.as_secs_f64() * 1e3,
        r99.as_secs_f64() * 1e3
    );
    println!("idle RSS                     {rss}");
    println!(
        "idle CPU over {idle} s          {:.3} s ({:.4} % of one core)",
        ticks as f64 / hz,
        ticks as f64 / hz / idle as f64 * 100.0
    );
}
