//! The `capstan` command: runs Kubernetes controllers written as
//! WebAssembly components. See `capstan --help`.

use capstan_host::telemetry::Export;
use capstan_host::tooling::cli::{Cli, LogFormat};
use clap::Parser;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let format = cli.log_format;
    let filter = EnvFilter::try_new(cli.log_filter()).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a terminal, not for a file or a log collector.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_ansi(ansi);
    let logs = match format {
        LogFormat::Human => logs.boxed(),
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(false).with_span_list(true).boxed(),
    };
    let export = match cli.trace().map(|t| t.config().and_then(|c| Export::start(&c))).transpose() {
        Ok(export) => export.flatten(),
        Err(e) => {
            eprintln!("error: {:#}", anyhow::Error::from(e));
            std::process::exit(2);
        }
    };
    // `--log` filters what is written to stderr, not what is exported: a
    // host run with `--log warn` still exports every span of its traces.
    let mut layers = vec![logs.with_filter(filter).boxed()];
    layers.extend(export.as_ref().map(|e| e.layer().with_filter(EnvFilter::new(Export::FILTER)).boxed()));
    tracing_subscriber::registry().with(layers).init();
    let result = capstan_host::tooling::cli::run(cli).await;
    if let Some(export) = export {
        export.shutdown();
    }
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // Every stderr line of a JSON log is JSON, the last error too.
            match format {
                LogFormat::Human => eprintln!("error: {e:#}"),
                LogFormat::Json => tracing::error!(error = format!("{e:#}"), "command failed"),
            }
            std::process::exit(2);
        }
    }
}
