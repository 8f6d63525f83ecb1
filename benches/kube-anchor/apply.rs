//! The file engine in-process, on a temp directory: medians (and p90) for an `apply` of 100
//! files that changes nothing, and for one that rewrites all 100 (each write: temp file, fsync,
//! rename, directory fsync).

use std::path::Path;
use std::time::{Duration, Instant};

use kube_anchor_core::render::Variables;
use kube_anchor_modes::engine::{Engine, Inputs};

use crate::Row;

const FILES: usize = 100;
const FILE_SIZE: usize = 4096;

fn write_config(dir: &Path, version: u8) {
    let mut config =
        String::from("apiVersion: kube-anchor.io/v1alpha1\nkind: Anchor\nmetadata: {name: bench}\nspec:\n  files:\n");
    for i in 0..FILES - 1 {
        std::fs::write(
            dir.join(format!("f{i}")),
            vec![b'a' + version + (i % 7) as u8; FILE_SIZE],
        )
        .unwrap();
        config.push_str(&format!(
            "  - {{source: f{i}, path: /etc/kubernetes/pki/f{i}, mode: \"0600\"}}\n"
        ));
    }
    std::fs::write(
        dir.join("pod.yaml"),
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: bench, namespace: kube-system}}\nspec: {{containers: [{{name: c, image: 'i:{version}'}}]}}\n"),
    )
    .unwrap();
    config.push_str("  manifest: {source: pod.yaml, path: /etc/kubernetes/manifests/bench.yaml}\n");
    std::fs::write(dir.join("anchor.yaml"), config).unwrap();
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() - 1) as f64 * p).round() as usize]
}

fn row(name: &str, mut samples: Vec<Duration>) -> Row {
    let median = percentile(&mut samples, 0.5);
    let p90 = percentile(&mut samples, 0.9);
    Row::new(
        format!("{name} ({FILES} files, {} runs)", samples.len()),
        format!(
            "median {:.3} ms, p90 {:.3} ms ({:.1} µs/file)",
            median.as_secs_f64() * 1e3,
            p90.as_secs_f64() * 1e3,
            median.as_secs_f64() * 1e6 / FILES as f64
        ),
        "",
    )
}

pub fn measure(quick: bool) -> Vec<Row> {
    let (noop_runs, rewrite_runs) = if quick { (5, 2) } else { (200, 40) };
    let base = tempfile::tempdir().unwrap();
    let node = base.path().join("node");
    std::fs::create_dir_all(&node).unwrap();
    let engine = Engine::new(&node, "/var/lib/kube-anchor", &["/etc/kubernetes".into()]).unwrap();
    let vars = Variables::default();
    let versions: Vec<_> = (0..2u8)
        .map(|v| {
            let dir = base.path().join(format!("config-{v}"));
            std::fs::create_dir_all(&dir).unwrap();
            write_config(&dir, v);
            Inputs::load(&dir.join("anchor.yaml"), engine.roots())
                .unwrap()
                .desired(&vars)
                .unwrap()
        })
        .collect();

    engine.apply(&versions[0], false).unwrap();
    let noop: Vec<Duration> = (0..noop_runs)
        .map(|_| {
            let start = Instant::now();
            let report = engine.apply(&versions[0], false).unwrap();
            assert!(!report.changed());
            start.elapsed()
        })
        .collect();

    let rewrite: Vec<Duration> = (0..rewrite_runs)
        .map(|i| {
            let start = Instant::now();
            let report = engine.apply(&versions[(i + 1) % 2], false).unwrap();
            assert_eq!(report.written.len(), FILES);
            start.elapsed()
        })
        .collect();

    vec![
        row("apply, nothing changed", noop),
        row(&format!("apply rewriting every file of {FILE_SIZE} B"), rewrite),
    ]
}
