//! The `capstan` command: runs Kubernetes controllers written as
//! WebAssembly components. See `capstan --help`.

use capstan_host::tooling::cli::{Cli, LogFormat};
use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    let format = cli.log_format;
    let filter = EnvFilter::try_new(cli.log_filter()).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a terminal, not for a file or a log collector.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Human => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).with_current_span(false).with_span_list(true).init(),
    }
    match capstan_host::tooling::cli::run(cli).await {
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
