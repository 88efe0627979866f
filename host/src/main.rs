//! The `capstan` command: runs Kubernetes controllers written as
//! WebAssembly components. See `capstan --help`.

use clap::Parser;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() {
    let cli = capstan_host::cli::Cli::parse();
    let filter = EnvFilter::try_new(cli.log_filter()).unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match capstan_host::cli::run(cli).await {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}
