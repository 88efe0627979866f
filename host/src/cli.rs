//! The `capstan` command line: parsing and the subcommands' output. `main`
//! only sets up tracing and calls [`run`].

pub mod generate;
pub mod scaffold;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::component::Loader;
use crate::engine::{Engine, EngineConfig};
use crate::limits::Limits;
use crate::manifest::{Manifest, Mapping, Scope};
use crate::runtime::Runtime;
use crate::scenario;
use crate::testing::default_cache_dir;

/// Capstan: Kubernetes controllers as WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, long_about = None)]
pub struct Cli {
    /// Log filter, e.g. `info` or `capstan=debug,guest=trace`. Default:
    /// `warn` for `inspect`, `test`, `gen` and `new` (guest logs would
    /// drown the results), `info` otherwise.
    #[arg(long, global = true, env = "CAPSTAN_LOG")]
    pub log: Option<String>,
    /// Log line format on stderr: `human` (text) or `json` (one JSON
    /// object per line, for log collectors).
    #[arg(long, global = true, env = "CAPSTAN_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Formats of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Text for people, with ANSI colours on a terminal.
    Human,
    /// One JSON object per line: `timestamp`, `level`, `target`, the
    /// event's fields (`message` among them) and `spans`.
    Json,
}

/// Output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

impl Cli {
    /// The log filter to use.
    pub fn log_filter(&self) -> &str {
        match (&self.log, &self.command) {
            (Some(filter), _) => filter,
            (None, Command::Inspect { .. } | Command::Test { .. } | Command::Gen(_) | Command::New(_)) => "warn",
            (None, Command::Run(_)) => "info",
        }
    }
}

/// Arguments of `capstan run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Components (.wasm) to run, one controller each.
    #[arg(required_unless_present = "components_dir")]
    pub components: Vec<PathBuf>,
    /// Also run every `*.wasm` in this directory (read at start; watching
    /// it for changes comes with hot loading).
    #[arg(long = "components", value_name = "DIR")]
    pub components_dir: Option<PathBuf>,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, short)]
    pub namespace: Option<String>,
    /// Apply the CRDs the components define (server-side apply) and wait
    /// until they are established.
    #[arg(long)]
    pub install_crds: bool,
    /// Memory limit per guest instance, in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_limit_mib: usize,
    /// Deadline per guest call, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    pub deadline_ms: u64,
    /// Name of this replica in Events (default: $POD_NAME or the hostname).
    #[arg(long, env = "POD_NAME")]
    pub instance: Option<String>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print what a component declares: its manifest, grants and contract.
    Inspect {
        /// The component (.wasm).
        component: PathBuf,
        /// Output format.
        #[arg(long, short, value_enum, default_value = "yaml")]
        output: Format,
    },
    /// Run components as controllers against a cluster.
    Run(RunArgs),
    /// Run a component's scenarios on the mock host: given objects,
    /// expected objects, events and errors (see `capstan_host::scenario`).
    Test {
        /// The component (.wasm).
        component: PathBuf,
        /// A scenario folder, or a folder of them.
        scenarios: PathBuf,
    },
    /// Generate CRDs, RBAC and deployment manifests from components.
    #[command(subcommand)]
    Gen(generate::Command),
    /// Create a controller project that builds into a component and passes
    /// `capstan test`.
    New(scaffold::Args),
}

fn loader() -> anyhow::Result<Loader> {
    let engine = Engine::new(EngineConfig::default())?;
    let runtime = Runtime::new(&engine, Limits::default()).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    Ok(Loader::new(runtime, default_cache_dir()))
}

/// The manifest as a document for `capstan inspect`.
pub fn manifest_document(manifest: &Manifest, digest: &str, contract: &str) -> Value {
    let kind = |g: &crate::object::Gvk| json!({"group": g.group, "version": g.version, "kind": g.kind});
    let grants = crate::grants::Grants::from_manifest(manifest);
    json!({
        "name": manifest.name,
        "contract": contract,
        "digest": format!("sha256:{digest}"),
        "primary": kind(&manifest.primary),
        "owns": manifest.owns.iter().map(kind).collect::<Vec<_>>(),
        "watches": manifest.watches.iter().map(|w| json!({
            "kind": kind(&w.kind),
            "mapping": match &w.mapping {
                Mapping::None => json!("none"),
                Mapping::Label(l) => json!({"label": l}),
                Mapping::SameName => json!("same-name"),
                Mapping::Namespace => json!("namespace"),
            },
            "labelSelector": w.label_selector,
        })).collect::<Vec<_>>(),
        "finalizer": manifest.finalizer,
        "resyncSeconds": manifest.resync.map(|d| d.as_secs()),
        "maxConcurrency": manifest.max_concurrency,
        "crds": manifest.crds.iter().filter_map(|c| crate::object::meta_str(c, "name")).collect::<Vec<_>>(),
        "grants": grants.rules().iter().map(|r| json!({
            "group": r.group,
            "kind": r.kind,
            "verbs": r.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
            "scope": match &r.scope {
                Scope::Cluster => json!("cluster"),
                Scope::OwnNamespace => json!("own-namespace"),
                Scope::Namespaces(n) => json!({"namespaces": n}),
            },
            "status": r.status,
        })).collect::<Vec<_>>(),
    })
}

/// Runs a parsed command line; returns the process exit code.
///
/// # Errors
///
/// Anything that stops the command; `main` prints it.
pub async fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Inspect { component, output } => {
            let loaded = loader()?.load(&component).await?;
            let doc = manifest_document(&loaded.manifest, &loaded.digest, &loaded.contract);
            match output {
                Format::Json => println!("{}", serde_json::to_string_pretty(&doc)?),
                Format::Yaml => print!("{}", serde_yaml_ng::to_string(&doc)?),
            }
            Ok(0)
        }
        Command::Run(args) => run_host(args).await,
        Command::Gen(command) => generate::run(command).await,
        Command::New(args) => scaffold::run(args),
        Command::Test { component, scenarios } => {
            let results = scenario::run_all(&component, &scenarios)
                .await
                .with_context(|| format!("cannot run scenarios in {}", scenarios.display()))?;
            let mut failed = 0;
            for case in &results {
                if case.passed() {
                    println!("scenario {} ... ok", case.name);
                } else {
                    failed += 1;
                    println!("scenario {} ... FAILED", case.name);
                    for m in &case.mismatches {
                        println!("    {m}");
                    }
                }
            }
            println!("{} passed, {failed} failed", results.len() - failed);
            Ok(if failed == 0 { 0 } else { 1 })
        }
    }
}

/// Connects to the cluster the arguments name and checks it answers.
///
/// # Errors
///
/// When no configuration is found or the API server does not answer.
pub async fn connect(kubeconfig: Option<&std::path::Path>, context: Option<String>) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions { context, ..KubeConfigOptions::default() };
    let config = match kubeconfig {
        Some(path) => {
            let kc =
                Kubeconfig::read_from(path).with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .with_context(|| format!("invalid kubeconfig {}", path.display()))?
        }
        None if options.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("no cluster configured: pass --kubeconfig, set KUBECONFIG, or run in a pod")?,
    };
    let url = config.cluster_url.clone();
    let client = kube::Client::try_from(config).context("cannot build a client")?;
    let version = client.apiserver_version().await.with_context(|| format!("cannot reach the cluster at {url}"))?;
    tracing::info!(server = %url, version = %version.git_version, "connected");
    Ok(client)
}

async fn run_host(args: RunArgs) -> anyhow::Result<i32> {
    let client = connect(args.kubeconfig.as_deref(), args.context).await?;
    let limits = Limits::default()
        .memory(args.memory_limit_mib << 20)
        .deadline(std::time::Duration::from_millis(args.deadline_ms));
    let instance = args.instance.or_else(|| std::env::var("HOSTNAME").ok());
    let mut builder = crate::host::HostBuilder::new(client)
        .namespace(args.namespace)
        .install_crds(args.install_crds)
        .limits(limits)
        .cache_dir(default_cache_dir())
        .instance(instance);
    let mut components = args.components;
    if let Some(dir) = &args.components_dir {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot read components directory {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
            .collect();
        found.sort();
        if found.is_empty() {
            anyhow::bail!("no *.wasm components in {}", dir.display());
        }
        components.extend(found);
    }
    for c in components {
        builder = builder.component(c);
    }
    let host = builder.start().await?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    host.shutdown().await;
    Ok(0)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
