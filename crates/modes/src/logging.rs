//! Tracing setup: structured logs on stderr, plain or JSON. `RUST_LOG` (EnvFilter directives)
//! overrides the level.
//!
//! The convention is kubectl's: a one-shot verb prints one human summary (stdout) and logs only
//! warnings and errors unless asked (`-v` for info, `-vv` for debug); `--log-format json` means a
//! machine reads the logs, so it gets info too. The daemons and the preStop hook (whose output
//! only ever reaches a log) log at info.

use std::io::IsTerminal;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::cli::LogFormat;

/// The least severe level logged.
pub(crate) fn default_level(format: LogFormat, verbose: u8, daemon: bool) -> &'static str {
    match (verbose, format, daemon) {
        (2.., _, _) => "debug",
        (1, _, _) | (_, LogFormat::Json, _) | (_, _, true) => "info",
        _ => "warn",
    }
}

pub(crate) fn init(format: LogFormat, level: &str) {
    // Colour only on a terminal: a pod's log file (and journald) would keep the escape codes.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => install(EnvFilter::new(directives), format, ansi),
        // kube-client logs every failed request at ERROR; the errors reach us and we log them
        // with context, so its own lines are off unless RUST_LOG asks for them. A plain target
        // filter: EnvFilter's directive parser would keep a regex engine resident in the daemon.
        _ => install(
            Targets::new()
                .with_default(level.parse::<LevelFilter>().unwrap_or(LevelFilter::INFO))
                .with_target("kube_client", LevelFilter::OFF),
            format,
            ansi,
        ),
    }
}

fn install<F>(filter: F, format: LogFormat, ansi: bool)
where
    F: Layer<Registry> + Send + Sync + 'static,
{
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    // A second init (tests) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Plain => registry.with(output.with_target(false)).try_init(),
        LogFormat::Json => registry.with(output.json().flatten_event(true)).try_init(),
    };
}

/// The error and its causes on one line; a cause already spelled out by the message above it
/// (our typed errors name their source) is not repeated.
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
    kube_anchor_core::errors::error_chain(e.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_shot_verbs_are_quiet_unless_asked() {
        assert_eq!(default_level(LogFormat::Plain, 0, false), "warn");
        assert_eq!(default_level(LogFormat::Plain, 1, false), "info");
        assert_eq!(default_level(LogFormat::Plain, 2, false), "debug");
        assert_eq!(default_level(LogFormat::Json, 0, false), "info");
        assert_eq!(default_level(LogFormat::Plain, 0, true), "info");
        assert_eq!(default_level(LogFormat::Json, 3, true), "debug");
    }
}
