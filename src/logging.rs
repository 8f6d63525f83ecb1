//! Tracing setup: structured logs on stderr, plain or JSON. `RUST_LOG` overrides the level.

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

pub fn init(format: LogFormat) {
    // kube-client logs every failed request at ERROR; the errors reach us and we log them with
    // context, so its own lines are off unless RUST_LOG asks for them.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube_client=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) is harmless: the first subscriber stays.
    let _ = match format {
        LogFormat::Plain => builder.with_target(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
