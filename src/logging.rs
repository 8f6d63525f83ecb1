//! Tracing setup: structured logs on stderr, plain or JSON. `RUST_LOG` overrides the level.
//!
//! The convention is kubectl's: a one-shot verb prints one human summary (stdout) and logs only
//! warnings and errors unless asked (`-v` for info, `-vv` for debug); `--log-format json` means a
//! machine reads the logs, so it gets info too. The daemons and the preStop hook (whose output
//! only ever reaches a log) log at info.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// The least severe level logged.
pub fn default_level(format: LogFormat, verbose: u8, daemon: bool) -> &'static str {
    match (verbose, format, daemon) {
        (2.., _, _) => "debug",
        (1, _, _) | (_, LogFormat::Json, _) | (_, _, true) => "info",
        _ => "warn",
    }
}

pub fn init(format: LogFormat, level: &str) {
    // kube-client logs every failed request at ERROR; the errors reach us and we log them with
    // context, so its own lines are off unless RUST_LOG asks for them.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(format!("{level},kube_client=off")));
    // Colour only on a terminal: a pod's log file (and journald) would keep the escape codes.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Plain => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The error and its causes on one line; a cause already spelled out by the message above it
/// (our typed errors name their source) is not repeated.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
    }
    out
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
