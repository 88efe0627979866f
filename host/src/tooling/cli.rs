//! The `capstan` command line: parsing and the subcommands' output. `main`
//! only sets up tracing and calls [`run`].

/// `print!` for a command's results on stdout; a reader that went away
/// (`capstan … | head`) ends the command quietly, see [`stdout_closed`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout().lock(), $($arg)*) {
            $crate::tooling::cli::stdout_closed(e)
        }
    }};
}

/// `println!` for a command's results on stdout, as [`out!`].
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::tooling::cli::stdout_closed(e)
        }
    }};
}

pub mod cluster;
pub mod dev;
pub mod generate;
pub mod scaffold;

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::{Value, json};

use crate::manifest::{Manifest, Mapping, Scope};
use crate::runtime::component::Loader;
use crate::runtime::limits::Limits;
use crate::tooling::scenario;
use crate::tooling::testing::default_cache_dir;

/// Ends the command after a failed write of its results to stdout: when
/// the reader went away (`capstan new x | head`), quietly with exit code
/// 141, as a Unix tool that SIGPIPE ends; otherwise with the error and
/// exit code 2. Never a panic (what `println!` does).
pub fn stdout_closed(error: std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(141);
    }
    eprintln!("error: cannot write to stdout: {error}");
    std::process::exit(2);
}

/// Capstan: Kubernetes controllers as WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "capstan", version, about, long_about = None)]
pub struct Cli {
    /// Log filter, e.g. `info` or `capstan=debug,guest=trace`. Default:
    /// `warn` for `inspect`, `test`, `gen`, `new`, `status` and `cluster` (guest logs would
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
    /// The trace export `capstan run` asks for; `None` for other commands.
    pub fn trace(&self) -> Option<&TraceArgs> {
        match &self.command {
            Command::Run(run) => Some(&run.trace),
            _ => None,
        }
    }

    /// The log filter to use.
    pub fn log_filter(&self) -> &str {
        match (&self.log, &self.command) {
            (Some(filter), _) => filter,
            (
                None,
                Command::Inspect { .. }
                | Command::Test { .. }
                | Command::E2e { .. }
                | Command::Gen(_)
                | Command::New(_)
                | Command::Sdk { .. }
                | Command::Status { .. }
                | Command::Push { .. }
                | Command::Pull { .. },
            ) => "warn",
            // Probes of a starting API server fail by design until it is ready.
            (None, Command::Cluster(_)) => "warn,kube_client=off",
            (None, Command::Run(_) | Command::Dev(_)) => "info",
        }
    }
}

/// Arguments of `capstan run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Components to run, one controller each: files (.wasm, .wasm.gz) or
    /// references to OCI registries (`oci://REGISTRY/REPOSITORY:TAG` or
    /// `…@sha256:DIGEST`), whose tags are followed: when one moves, the
    /// new version is pulled, verified and swapped in.
    #[arg(required_unless_present = "components_dir", value_name = "COMPONENT")]
    pub components: Vec<PathBuf>,
    /// Also run every `*.wasm`, `*.wasm.gz` and `*.oci` (a file holding an
    /// `oci://` reference) in this directory, and follow it: a new file
    /// starts a controller, a changed one replaces the running version
    /// (a rejected one leaves it serving), a removed one stops it.
    #[arg(long = "components", value_name = "DIR")]
    pub components_dir: Option<PathBuf>,
    /// How often to look up the tags of followed references, in seconds.
    #[arg(long, default_value_t = crate::serve::follow::POLL_INTERVAL.as_secs_f64(), value_name = "SECONDS")]
    pub poll_interval: f64,
    /// Registry options.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Run each new version of a running controller on this percentage of
    /// its objects first; it replaces the running version once they all
    /// reconcile, and is rejected at its first error or trap.
    #[arg(long, value_name = "PERCENT", value_parser = clap::value_parser!(u8).range(1..100))]
    pub canary: Option<u8>,
    /// Do not review each component's permissions against the host's own
    /// (SelfSubjectAccessReview) before running it.
    #[arg(long)]
    pub skip_permission_check: bool,
    /// Accept components whose permissions name a wildcard group or kind
    /// (`*`), close to cluster-admin; refused by default.
    #[arg(long)]
    pub allow_wildcard_permissions: bool,
    /// Accept components whose egress names any host (`https://*`);
    /// refused by default.
    #[arg(long)]
    pub allow_wildcard_egress: bool,
    /// PEM bundle of CA certificates that components' outbound HTTPS
    /// trusts besides the platform's roots (e.g. an internal CA).
    #[arg(long, value_name = "FILE")]
    pub egress_ca: Option<PathBuf>,
    /// Most outbound HTTP requests of one guest call.
    #[arg(long, value_name = "N", default_value_t = crate::runtime::limits::DEFAULT_HTTP_CALLS)]
    pub max_http_calls: u32,
    /// Most response body bytes one guest call reads over HTTP, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = crate::runtime::limits::DEFAULT_HTTP_BYTES >> 20)]
    pub max_http_mib: u64,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context (default: the current context).
    #[arg(long)]
    pub context: Option<String>,
    /// Also serve the cluster a kubeconfig names, as cluster NAME:
    /// `NAME=KUBECONFIG` or `NAME=KUBECONFIG#CONTEXT` (repeatable). Every
    /// component runs in each cluster (its own watches, queues, leader
    /// Lease and grants there); a cluster that is down or refuses the
    /// host holds up only itself. The cluster of `--kubeconfig`/`--context`
    /// is named `default`.
    #[arg(long = "cluster", value_name = "NAME=KUBECONFIG[#CONTEXT]", value_parser = cluster_arg)]
    pub clusters: Vec<ClusterArg>,
    /// Also serve every cluster whose kubeconfig a Secret in NAMESPACE of
    /// the default cluster holds (the Cluster API convention: Secret
    /// `NAME-kubeconfig`, key `value`; optionally only Secrets matching a
    /// label SELECTOR): engaged when the Secret appears, again when it
    /// changes, disengaged when it goes. Such a kubeconfig must carry its
    /// credentials inline (no `exec`, no files).
    #[arg(long, value_name = "NAMESPACE[,SELECTOR]", value_parser = secrets_source)]
    pub clusters_from_secrets: Option<crate::serve::fleet::secrets::Source>,
    /// Watch only these namespaces: repeat the option (`-n a -n b`) or
    /// separate them with commas (`-n a,b`). Default: all namespaces.
    /// Cluster-scoped kinds are watched whole either way; guests may still
    /// read objects in other namespaces where their grants allow.
    #[arg(long = "namespace", short = 'n', value_name = "NAMESPACE", value_delimiter = ',', value_parser = namespace_name)]
    pub namespaces: Vec<String>,
    /// Apply the CRDs the components define (server-side apply) and wait
    /// until they are established.
    #[arg(long)]
    pub install_crds: bool,
    /// A CRD (by name, e.g. `greetings.example.com`) that exists without
    /// the `capstan.dev/installed-by` annotation (kubectl, Helm or an older
    /// host installed it) and that the host may take over: with
    /// `--install-crds` it applies the component's definition over it;
    /// with `--install-webhooks` it may set its conversion. Repeat the
    /// option or separate names with commas. Without it such a CRD is left
    /// as it is. A CRD another component installed is never taken over.
    #[arg(long = "adopt-crd", value_name = "CRD", value_delimiter = ',', env = "CAPSTAN_ADOPT_CRDS")]
    pub adopt_crds: Vec<String>,
    /// Serve the components' admission and conversion webhooks over HTTPS
    /// on this address, e.g. `0.0.0.0:9443`. Default: not served. With
    /// `--cluster` or `--clusters-from-secrets`, every cluster's API
    /// server calls here, each under a path of its own
    /// (`/clusters/NAME/…`; none for `default`).
    #[arg(long, value_name = "ADDR")]
    pub webhook_listen: Option<std::net::SocketAddr>,
    /// Serve the certificate in this directory (`tls.crt`, `tls.key`, and
    /// optionally `ca.crt` for the caBundle), reloaded when it changes.
    /// Default: a CA and serving certificate the host makes at start, for
    /// 127.0.0.1, localhost and the host of `--webhook-url`.
    #[arg(long, value_name = "DIR", requires = "webhook_listen")]
    pub webhook_cert_dir: Option<PathBuf>,
    /// The address the API server calls the webhooks at, e.g.
    /// `https://capstan-webhooks.ops.svc:443`. Default:
    /// `https://127.0.0.1:<port of --webhook-listen>`. With
    /// `--webhook-service`, the address the other clusters' API servers
    /// (`--cluster`, `--clusters-from-secrets`) call at, while the
    /// `default` cluster's calls go through the Service.
    #[arg(long, value_name = "URL", requires = "webhook_listen")]
    pub webhook_url: Option<String>,
    /// The Service the API server calls the webhooks through, as
    /// `NAMESPACE/NAME[:PORT]` (port 443 unless given): the host runs in a
    /// Pod behind it. The self-made certificate then names
    /// `NAME.NAMESPACE.svc`. `capstan gen manifest` sets this. A Service
    /// is reachable from its own cluster only: with `--cluster` or
    /// `--clusters-from-secrets`, also give `--webhook-url` for the others.
    #[arg(long, value_name = "NAMESPACE/NAME[:PORT]", requires = "webhook_listen")]
    pub webhook_service: Option<crate::serve::webhook::ServiceRef>,
    /// Accept admission calls only from clients with a certificate of the
    /// CA in this PEM file: the API server, configured to present one
    /// (an AdmissionConfiguration with a `kubeConfigFile`; `capstan
    /// cluster up` sets this up, see docs/webhooks.md). A certificate of
    /// another CA fails the handshake; an admission call without one gets
    /// 401. Conversion calls are not asked for one (the API server
    /// presents none to conversion webhooks). Default: any caller that
    /// reaches the port (keep it private with a NetworkPolicy).
    #[arg(long, value_name = "FILE", requires = "webhook_listen", env = "CAPSTAN_WEBHOOK_CLIENT_CA")]
    pub webhook_client_ca: Option<PathBuf>,
    /// With `--webhook-client-ca`: accept only client certificates that
    /// carry this name (a DNS name or IP address subjectAltName). Repeat
    /// the option or separate with commas. Default: any name.
    #[arg(
        long = "webhook-client-name",
        value_name = "NAME",
        value_delimiter = ',',
        requires = "webhook_client_ca",
        env = "CAPSTAN_WEBHOOK_CLIENT_NAMES"
    )]
    pub webhook_client_names: Vec<String>,
    /// Most webhook calls (admission and conversion) one component serves
    /// at once; a call past it waits up to a second, then gets HTTP 429 (a
    /// failed call). Each component has its own, so a slow or flooded one
    /// cannot take the guest instances the others need.
    #[arg(
        long,
        value_name = "CALLS",
        default_value_t = crate::serve::webhook::DEFAULT_BUDGET,
        value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..), usize::from),
        env = "CAPSTAN_WEBHOOK_CONCURRENCY"
    )]
    pub webhook_concurrency: usize,
    /// Apply a Validating- and MutatingWebhookConfiguration per component
    /// that declares webhooks, and the conversion stanza of the CRDs it
    /// converts, with the caBundle of the serving certificate.
    #[arg(long, requires = "webhook_listen")]
    pub install_webhooks: bool,
    /// With `--install-webhooks`: replace webhook configurations and CRD
    /// conversion stanzas that another host installed and that still
    /// answers at its address (by default they are left alone and the
    /// component is rejected, naming that host).
    #[arg(long, requires = "install_webhooks")]
    pub take_over_webhooks: bool,
    /// With `--install-webhooks`: the `failurePolicy` to install for an
    /// admission webhook, over what its component declares:
    /// `COMPONENT/WEBHOOK=Ignore|Fail`, or `COMPONENT=Ignore|Fail` for all
    /// of a component's (a webhook named wins). `Ignore` lets writes of its
    /// kinds through unchecked while no host answers; `Fail` refuses them.
    /// Repeat the option or separate with commas. A webhook the component
    /// does not declare rejects the component; a component the host does
    /// not run stops the start, unless it may come later (`--components`,
    /// `oci://` references, a rejected file): then a warning. Conversion
    /// has no failure policy.
    #[arg(
        long = "webhook-failure-policy",
        value_name = "COMPONENT[/WEBHOOK]=POLICY",
        value_delimiter = ',',
        requires = "install_webhooks",
        env = "CAPSTAN_WEBHOOK_FAILURE_POLICIES"
    )]
    pub webhook_failure_policies: Vec<crate::serve::webhook::policy::Override>,
    /// Memory limit per guest instance, in MiB.
    #[arg(long, default_value_t = 64)]
    pub memory_limit_mib: usize,
    /// Deadline per guest call, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    pub deadline_ms: u64,
    /// Most calls one guest instance serves before a fresh one is made;
    /// 1: a fresh instance for every call. An instance serves one
    /// controller only and is dropped after any trap.
    #[arg(long, default_value_t = crate::runtime::limits::DEFAULT_REUSE, value_name = "CALLS")]
    pub instance_reuse: u32,
    /// Serve a component the compile cache does not hold from code of the
    /// baseline compiler (Winch, seconds faster to compile, slower to run)
    /// until cranelift's optimized code, compiled in the background,
    /// replaces it. `false`: wait for cranelift.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub baseline_compile: bool,
    /// Most `kube.*` host calls one guest invocation may make; later ones
    /// return `denied` to the guest, naming the limit.
    #[arg(long, default_value_t = crate::runtime::limits::DEFAULT_HOST_CALLS, env = "CAPSTAN_MAX_HOST_CALLS")]
    pub max_host_calls: u32,
    /// Most events one guest invocation may record with `events.record`;
    /// later ones return `denied` to the guest, naming the limit.
    #[arg(long, default_value_t = crate::runtime::limits::DEFAULT_EVENTS, env = "CAPSTAN_MAX_EVENTS")]
    pub max_events: u32,
    /// Log lines a second each controller may make the host write
    /// (its guest's lines, and warnings about its calls); more are
    /// dropped and counted.
    #[arg(long, default_value_t = 10, value_name = "LINES")]
    pub log_lines_per_second: u32,
    /// Log lines each controller may make the host write at once, before
    /// `--log-lines-per-second` applies.
    #[arg(long, default_value_t = 50, value_name = "LINES")]
    pub log_burst: u32,
    /// Name of this replica in Events (default: $POD_NAME or the hostname).
    #[arg(long, env = "POD_NAME")]
    pub instance: Option<String>,
    /// Serve /metrics, /healthz, /readyz and /status on this address;
    /// repeat it (or separate with commas) for several, e.g. the Pod IP
    /// and loopback. Default: loopback only.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR", value_delimiter = ',', value_parser = listen_addr)]
    pub listen: Vec<std::net::SocketAddr>,
    /// Answer /status to every peer; by default only loopback peers
    /// (`kubectl port-forward`, `capstan status` on the host) get it, as it
    /// names component files, digests and objects.
    #[arg(long)]
    pub status_from_anywhere: bool,
    /// Elect a leader per controller among replicas, with one Lease per
    /// controller (`capstan-<name>`): standbys keep their caches warm and
    /// take over when the leader stops renewing.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the Leases (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,
    /// How long a Lease holds after its last renewal, in seconds.
    #[arg(long, default_value_t = 15.0, value_name = "SECONDS")]
    pub lease_duration: f64,
    /// How long a leader keeps trying to renew before it stops
    /// reconciling, in seconds (less than the lease duration).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub renew_deadline: f64,
    /// How often candidates try to acquire and leaders renew, in seconds.
    #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
    pub retry_period: f64,
    /// Trace export to an OpenTelemetry collector.
    #[command(flatten)]
    pub trace: TraceArgs,
}

/// Trace export (`capstan run`): the standard `OTEL_*` variables, or the
/// flags that match them. Off unless an endpoint is set.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceArgs {
    /// Export traces over OTLP to the collector at this base URL, e.g.
    /// `http://collector:4318` (HTTP: `/v1/traces` is appended) or
    /// `http://collector:4317` (gRPC: as it is). Default: no export.
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Export traces to this URL as it is (overrides `--otlp-endpoint`).
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")]
    pub otlp_traces_endpoint: Option<String>,
    /// OTLP protocol: `http/protobuf` (collectors take it on port 4318)
    /// or `grpc` (port 4317).
    #[arg(long, value_name = "PROTOCOL", env = "OTEL_EXPORTER_OTLP_PROTOCOL", default_value = "http/protobuf")]
    pub otlp_protocol: String,
    /// OTLP protocol of traces (overrides `--otlp-protocol`).
    #[arg(long, value_name = "PROTOCOL", env = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")]
    pub otlp_traces_protocol: Option<String>,
    /// `service.name` of the exported spans.
    #[arg(long, value_name = "NAME", env = "OTEL_SERVICE_NAME", default_value = "capstan")]
    pub service_name: String,
    /// Which traces to export: `always_on`, `always_off`, `traceidratio`,
    /// `parentbased_always_on`, `parentbased_always_off` or
    /// `parentbased_traceidratio`.
    #[arg(long, value_name = "SAMPLER", env = "OTEL_TRACES_SAMPLER", default_value = "parentbased_always_on")]
    pub traces_sampler: String,
    /// The ratio of the `traceidratio` samplers, 0 to 1 (default 1).
    #[arg(long, value_name = "RATIO", env = "OTEL_TRACES_SAMPLER_ARG")]
    pub traces_sampler_arg: Option<String>,
    /// Finished spans that may wait for the collector; more are dropped
    /// and counted in `capstan_trace_spans_dropped_total`.
    #[arg(long, value_name = "SPANS", env = "CAPSTAN_TRACE_QUEUE_SIZE", default_value_t = crate::telemetry::DEFAULT_QUEUE_SIZE)]
    pub trace_queue_size: usize,
}

impl TraceArgs {
    /// The export these arguments configure.
    ///
    /// # Errors
    ///
    /// An unknown sampler or protocol, or a ratio outside 0..=1.
    pub fn config(&self) -> Result<crate::telemetry::Config, crate::telemetry::Error> {
        let sampler = crate::telemetry::Sampler::parse(&self.traces_sampler, self.traces_sampler_arg.as_deref())?;
        let config = crate::telemetry::Config {
            service_name: self.service_name.clone(),
            sampler,
            queue_size: self.trace_queue_size,
            ..crate::telemetry::Config::default()
        };
        let endpoint = match (&self.otlp_traces_endpoint, &self.otlp_endpoint) {
            (Some(url), _) if !url.is_empty() => Some((url, true)),
            (_, Some(url)) if !url.is_empty() => Some((url, false)),
            _ => None,
        };
        let protocol = self.otlp_traces_protocol.as_deref().filter(|p| !p.is_empty()).unwrap_or(&self.otlp_protocol);
        match endpoint {
            Some((url, signal)) => Ok(config.protocol(protocol)?.endpoint(url, signal)),
            None => Ok(config),
        }
    }
}

impl RunArgs {
    /// The leader election settings the arguments ask for.
    ///
    /// # Errors
    ///
    /// For durations that are not positive numbers of seconds, or that
    /// break `retry period < renew deadline < lease duration`.
    pub fn leader_election(&self) -> anyhow::Result<Option<crate::control::leader::LeaseSettings>> {
        if !self.leader_elect {
            return Ok(None);
        }
        let seconds = |name: &str, s: f64| {
            std::time::Duration::try_from_secs_f64(s).map_err(|_| anyhow::anyhow!("--{name} {s}: not a duration"))
        };
        let identity = self.instance.clone().unwrap_or_else(crate::control::leader::default_identity);
        let settings = crate::control::leader::LeaseSettings::new(&self.leader_election_namespace, identity).timing(
            seconds("lease-duration", self.lease_duration)?,
            seconds("renew-deadline", self.renew_deadline)?,
            seconds("retry-period", self.retry_period)?,
        );
        settings.validate()?;
        Ok(Some(settings))
    }
}

/// How to reach OCI registries (`push`, `pull`, `run oci://…`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RegistryArgs {
    /// Speak plain HTTP, not HTTPS, to this registry (`HOST[:PORT]`);
    /// repeat or separate with commas. Loopback registries (`localhost`,
    /// `127.0.0.0/8`, `[::1]`) always get plain HTTP; every other registry
    /// gets HTTPS unless named here.
    #[arg(
        long = "insecure-registry",
        value_name = "HOST[:PORT]",
        value_delimiter = ',',
        env = "CAPSTAN_INSECURE_REGISTRIES"
    )]
    pub insecure: Vec<String>,
    /// Longest time one fetch from a registry may take in all, in
    /// seconds, however slowly the registry answers: for a followed
    /// reference, the lookup of its tag, the manifest and the layer
    /// together; for `pull`, the manifest and the layer. A slower one
    /// fails (and a followed reference is tried again at the next poll).
    #[arg(
        long,
        default_value_t = crate::serve::oci::TIMEOUT.as_secs_f64(),
        value_name = "SECONDS",
        value_parser = positive_seconds,
        env = "CAPSTAN_PULL_TIMEOUT"
    )]
    pub pull_timeout: f64,
}

/// A positive number of seconds.
fn positive_seconds(s: &str) -> Result<f64, String> {
    s.parse::<f64>()
        .ok()
        .filter(|n| std::time::Duration::try_from_secs_f64(*n).is_ok_and(|d| !d.is_zero()))
        .ok_or_else(|| format!("{s}: not a positive number of seconds"))
}

impl RegistryArgs {
    /// The registry client these arguments describe, caching pulled layers
    /// under the default cache (`$CAPSTAN_CACHE`, `~/.cache/capstan`).
    pub fn registry(&self) -> crate::serve::oci::Registry {
        let cache = cluster::build::cache_root().ok();
        // A `Default` value (0) has the default deadline.
        let timeout = std::time::Duration::try_from_secs_f64(self.pull_timeout)
            .ok()
            .filter(|d| !d.is_zero())
            .unwrap_or(crate::serve::oci::TIMEOUT);
        let options = crate::serve::oci::Options::default().cache_dir(cache).timeout(timeout);
        let options = self.insecure.iter().fold(options, |o, r| o.insecure(r));
        crate::serve::oci::Registry::new(options)
    }
}

/// `sha256:` digest of everything a manifest lets its component reach, as
/// `capstan inspect` prints it (`grantsDigest`; the
/// `dev.capstan.grants-digest` annotation of a pushed component): its
/// grants, its admission webhooks (what they see, change and may refuse,
/// with their selectors and failure policy), the CRDs it converts, its
/// scheduler name, its egress, and the clusters it runs in and reaches (a
/// fleet's home and members). Equal digests, equal reach.
pub fn grants_digest(manifest: &Manifest) -> String {
    let doc = manifest_document(manifest, "", "");
    let mut reach = json!({
        "grants": doc["grants"],
        "admission": doc["roles"]["admission"],
        "conversion": doc["roles"]["conversion"],
        "scheduler": doc["roles"]["scheduler"],
        "egress": doc["egress"],
    });
    // Added only when declared, so that the digests of components that
    // declare neither stay what they were.
    if !manifest.clusters.is_empty() {
        reach["clusters"] = doc["clusters"].clone();
    }
    if manifest.fleet.is_some() {
        reach["fleet"] = doc["fleet"].clone();
    }
    crate::serve::oci::sha256(&serde_json::to_vec(&reach).expect("a JSON value serialises"))
}

/// An address for `--listen`: `IP:PORT`, an IPv6 address with or without
/// brackets (`--listen=$(POD_IP):8080` in a Pod of an IPv6 cluster).
fn listen_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    let bad = || format!("{s:?} is not IP:PORT");
    let (ip, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let ip: std::net::IpAddr = ip.parse().map_err(|_| bad())?;
    Ok((ip, port.parse::<u16>().map_err(|_| bad())?).into())
}

/// Checks a namespace name given on the command line.
fn namespace_name(s: &str) -> Result<String, String> {
    if crate::manifest::is_dns1123_label(s) {
        Ok(s.to_owned())
    } else {
        Err("not a valid namespace name (lower-case alphanumerics and '-', at most 63)".to_owned())
    }
}

/// A cluster `capstan run --cluster` serves besides the default one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterArg {
    /// Its name: a DNS-1123 label, not `default`.
    pub name: String,
    /// The kubeconfig that reaches it.
    pub kubeconfig: PathBuf,
    /// The kubeconfig's context, if not its current one.
    pub context: Option<String>,
}

/// A member of `capstan dev`: `NAME` (the local cluster of that name) or
/// `NAME=KUBECONFIG[#CONTEXT]` (as [`cluster_arg`]).
pub(crate) fn member_arg(s: &str) -> Result<dev::Member, String> {
    if s.contains('=') {
        return cluster_arg(s).map(dev::Member::Kubeconfig);
    }
    cluster_arg(&format!("{s}=local")).map(|c| dev::Member::Local(c.name))
}

fn cluster_arg(s: &str) -> Result<ClusterArg, String> {
    let (name, rest) = s.split_once('=').ok_or("expected NAME=KUBECONFIG[#CONTEXT]")?;
    if !crate::manifest::is_dns1123_label(name) {
        return Err(format!(
            "cluster name {name:?}: not a DNS-1123 label (lower-case alphanumerics and '-', at most 63)"
        ));
    }
    if name == crate::serve::fleet::DEFAULT_CLUSTER {
        return Err("the cluster of --kubeconfig/--context is named `default`; pick another name".to_owned());
    }
    let (path, context) = match rest.rsplit_once('#') {
        Some((path, context)) if !context.is_empty() => (path, Some(context.to_owned())),
        Some(_) => return Err("an empty context after '#'".to_owned()),
        None => (rest, None),
    };
    if path.is_empty() {
        return Err("no kubeconfig after '='".to_owned());
    }
    Ok(ClusterArg { name: name.to_owned(), kubeconfig: PathBuf::from(path), context })
}

fn secrets_source(s: &str) -> Result<crate::serve::fleet::secrets::Source, String> {
    let (namespace, selector) = match s.split_once(',') {
        Some((namespace, selector)) => (namespace, Some(selector.to_owned()).filter(|s| !s.is_empty())),
        None => (s, None),
    };
    Ok(crate::serve::fleet::secrets::Source { namespace: namespace_name(namespace)?, selector })
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
    Run(Box<RunArgs>),
    /// Push a component to an OCI registry as a Wasm OCI artifact (config
    /// `application/vnd.wasm.config.v0+json`, one `application/wasm`
    /// layer), its controller name, contract and grants digest as
    /// annotations. Credentials: the docker config file.
    Push {
        /// The component (.wasm, or .wasm.gz: pushed decompressed).
        component: PathBuf,
        /// Where to: `oci://REGISTRY/REPOSITORY:TAG`.
        reference: String,
        /// Registry options.
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Pull a component from an OCI registry, its layer checked against its
    /// digest (and cached by it), and write it to a file.
    Pull {
        /// What: `oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:DIGEST`.
        reference: String,
        /// The file to write.
        #[arg(long, short)]
        output: PathBuf,
        /// Registry options.
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Print what a running host has loaded: per component file its
    /// controller, digest, state, reconcile counts and last rejection.
    Status {
        /// The host's address (`capstan run --listen`).
        #[arg(long, default_value = "http://127.0.0.1:8080", env = "CAPSTAN_URL")]
        url: String,
        /// Output format (default: a table).
        #[arg(long, short, value_enum)]
        output: Option<Format>,
    },
    /// Run a component's scenarios on the mock host: given objects,
    /// expected objects, events and errors (see `capstan_host::tooling::scenario`).
    Test {
        /// The component (.wasm).
        component: PathBuf,
        /// A scenario folder, or a folder of them.
        scenarios: PathBuf,
    },
    /// Run a component's scenarios (the folders `capstan test` runs) against
    /// a real cluster: each case in a namespace of its own, the component
    /// run in process, each step waited for until it holds (see
    /// `docs/controllers.md`). Exit code 1 when a case fails.
    E2e {
        /// The component (.wasm).
        component: PathBuf,
        /// A scenario folder, or a folder of them.
        scenarios: PathBuf,
        /// How long each step may take to hold, in seconds.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        /// Leave each case's namespace behind.
        #[arg(long)]
        keep: bool,
        /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Kubeconfig context (default: the current context).
        #[arg(long)]
        context: Option<String>,
        /// Also run in the cluster a kubeconfig names, as cluster NAME:
        /// `NAME=KUBECONFIG` or `NAME=KUBECONFIG#CONTEXT` (repeatable), for
        /// cases whose objects say `cluster: NAME`. Every case then runs in
        /// each cluster given, the component once per cluster.
        #[arg(long = "cluster", value_name = "NAME=KUBECONFIG[#CONTEXT]", value_parser = cluster_arg)]
        clusters: Vec<ClusterArg>,
    },
    /// Generate CRDs, RBAC and deployment manifests from components.
    #[command(subcommand)]
    Gen(generate::Command),
    /// Create a controller project that builds into a component and passes
    /// `capstan test`.
    New(scaffold::Args),
    /// A local Kubernetes control plane (etcd, kube-apiserver,
    /// kube-controller-manager on loopback) to develop and test against.
    #[command(subcommand)]
    Cluster(cluster::Command),
    /// The author's loop in a project made by `capstan new`: start a local
    /// cluster if none runs, build the component, run it with its CRDs
    /// installed, rebuild and swap in a new version on every source change,
    /// print log lines and Events; Ctrl-C stops.
    Dev(dev::Args),
    /// Write out the guest SDKs (Rust, Python, JavaScript) and the WIT
    /// contract this binary carries, in a checkout's layout: for building
    /// components without a Capstan checkout.
    Sdk {
        /// The folder to write into (created if missing; the SDK's files
        /// already there are overwritten).
        #[arg(long)]
        out: PathBuf,
    },
}

fn loader() -> anyhow::Result<Loader> {
    Ok(crate::tooling::testing::tool_loader(default_cache_dir())?)
}

/// The manifest as a document for `capstan inspect`.
pub fn manifest_document(manifest: &Manifest, digest: &str, contract: &str) -> Value {
    let kind = |g: &crate::object::Gvk| json!({"group": g.group, "version": g.version, "kind": g.kind});
    let grants = crate::runtime::grants::Grants::from_manifest(manifest);
    let scope = |s: &Scope| match s {
        Scope::Cluster => json!("cluster"),
        Scope::OwnNamespace => json!("own-namespace"),
        Scope::Namespaces(n) => json!({"namespaces": n}),
    };
    let field = |f: &crate::manifest::FieldRef| match f {
        crate::manifest::FieldRef::Name => json!("name"),
        crate::manifest::FieldRef::Namespace => json!("namespace"),
        crate::manifest::FieldRef::Label(l) => json!({"label": l}),
        crate::manifest::FieldRef::Annotation(a) => json!({"annotation": a}),
    };
    let wildcards: Vec<String> = manifest
        .wildcard_permissions()
        .map(|p| {
            format!("{} on {}/{}", p.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(","), p.group, p.kind)
        })
        .collect();
    json!({
        "name": manifest.name,
        "contract": contract,
        "digest": format!("sha256:{digest}"),
        "grantsDigest": null,
        "primary": kind(&manifest.primary),
        "owns": manifest.owns.iter().map(|o| json!({
            "kind": kind(&o.kind),
            "labelSelector": o.label_selector,
            "scope": o.scope.as_ref().map(scope),
        })).collect::<Vec<_>>(),
        "watches": manifest.watches.iter().map(|w| json!({
            "kind": kind(&w.kind),
            "mapping": match &w.mapping {
                Mapping::None => json!("none"),
                Mapping::Label(l) => json!({"label": l}),
                Mapping::SameName => json!("same-name"),
                Mapping::Namespace => json!("namespace"),
                Mapping::All => json!("all"),
                Mapping::Reference(r) => json!({"reference": {"name": field(&r.name), "namespace": r.namespace.as_ref().map(field)}}),
            },
            "labelSelector": w.label_selector,
        })).collect::<Vec<_>>(),
        "finalizer": manifest.finalizer,
        "resyncSeconds": manifest.resync.map(|d| d.as_secs()),
        "maxConcurrency": manifest.max_concurrency,
        "roles": {
            "reconcile": manifest.roles.reconcile,
            "admission": manifest.roles.admission.iter().map(|w| json!({
                "name": w.name,
                "type": if w.mutating { "mutating" } else { "validating" },
                "kinds": w.kinds.iter().map(&kind).collect::<Vec<_>>(),
                "operations": w.operations.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                "failurePolicy": w.failure_policy(),
                "timeoutSeconds": w.timeout.as_secs(),
                "sideEffects": w.side_effects(),
                // What reviewing is: seeing the objects, changing them
                // (mutating), refusing writes of them (either type).
                "access": if w.mutating { json!(["read", "write", "veto"]) } else { json!(["read", "veto"]) },
                // Where: the host narrows the declared selector to the
                // namespaces it serves (`-n`), else to all but these.
                "namespaces": json!({"exceptSystem": crate::serve::webhook::install::SYSTEM_NAMESPACES}),
                "namespaceSelector": w.namespace_selector,
                "objectSelector": w.object_selector,
                "ownKinds": w.kinds.iter().filter(|k| manifest.reviews_as_own_kind(w, k)).map(&kind).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "conversion": manifest.roles.conversion.iter().map(|gk| json!({"group": gk.group, "kind": gk.kind})).collect::<Vec<_>>(),
            "scheduler": manifest.roles.scheduler,
        },
        "crds": manifest.crds.iter().filter_map(|c| crate::object::meta_str(c, "name")).collect::<Vec<_>>(),
        "grants": grants.rules().iter().map(|r| json!({
            "group": r.group,
            "kind": r.kind,
            "verbs": r.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
            "scope": scope(&r.scope),
            "status": r.status,
            "resourceNames": r.resource_names,
        })).collect::<Vec<_>>(),
        "egress": manifest.egress.origins().iter().map(ToString::to_string).collect::<Vec<_>>(),
        "clusters": manifest.clusters,
        "fleet": manifest.fleet.as_ref().map(|f| json!({
            "home": f.home,
            // None named: every cluster the host serves but the home.
            "members": if f.members.is_empty() { json!("all") } else { json!(f.members) },
        })),
        "warnings": wildcards.iter().map(|w| format!("wildcard permission {w}: the host refuses it unless run with --allow-wildcard-permissions"))
            .chain(manifest.egress.wildcard().map(|o| format!("egress to any host ({o}): the host refuses it unless run with --allow-wildcard-egress")))
            .collect::<Vec<_>>(),
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
            let mut doc = manifest_document(&loaded.manifest, &loaded.digest, &loaded.contract);
            doc["grantsDigest"] = json!(grants_digest(&loaded.manifest));
            match output {
                Format::Json => outln!("{}", serde_json::to_string_pretty(&doc)?),
                Format::Yaml => out!("{}", serde_yaml_ng::to_string(&doc)?),
            }
            Ok(0)
        }
        Command::Run(args) => run_host(*args).await,
        Command::Push { component, reference, registry } => push(&component, &reference, &registry).await,
        Command::Pull { reference, output, registry } => pull(&reference, &output, &registry).await,
        Command::Status { url, output } => {
            let doc = crate::serve::server::get_status(&url).await?;
            match output {
                Some(Format::Json) => outln!("{}", serde_json::to_string_pretty(&doc)?),
                Some(Format::Yaml) => out!("{}", serde_yaml_ng::to_string(&doc)?),
                None => out!("{}", status_table(&doc)),
            }
            Ok(0)
        }
        Command::Gen(command) => generate::run(command).await,
        Command::New(args) => scaffold::run(args),
        Command::Sdk { out } => {
            let written = crate::tooling::sdk::write(&out)
                .with_context(|| format!("cannot write the SDK into {}", out.display()))?;
            outln!(
                "wrote {} files of capstan-guest {} into {}",
                written.len(),
                env!("CARGO_PKG_VERSION"),
                out.display()
            );
            outln!("  Rust:       capstan-guest = {{ path = \"{}\" }}", out.join("guest-sdk").display());
            outln!("  Python:     pip install {}", out.join("guest-sdk/python").display());
            outln!("  JavaScript: npm install {}", out.join("guest-sdk/js").display());
            outln!("  WIT:        {}", out.join("wit").display());
            Ok(0)
        }
        Command::Cluster(command) => cluster::run(command).await,
        Command::Dev(args) => dev::run(args).await,
        Command::Test { component, scenarios } => {
            let results = scenario::run_all(&component, &scenarios)
                .await
                .with_context(|| format!("cannot run scenarios in {}", scenarios.display()))?;
            Ok(report(&results))
        }
        Command::E2e { component, scenarios, timeout, keep, kubeconfig, context, clusters } => {
            let client = client(kubeconfig.as_deref(), context).await?;
            let names: std::collections::BTreeSet<&str> = clusters.iter().map(|c| c.name.as_str()).collect();
            if names.len() < clusters.len() {
                anyhow::bail!("--cluster: a cluster name is given twice");
            }
            let mut members = Vec::new();
            for cluster in clusters {
                let member = self::client(Some(&cluster.kubeconfig), cluster.context)
                    .await
                    .with_context(|| format!("cluster {}", cluster.name))?;
                members.push((cluster.name, member));
            }
            let options = crate::tooling::e2e::Options {
                timeout: std::time::Duration::from_secs(timeout),
                keep,
                members,
                ..Default::default()
            };
            let results = crate::tooling::e2e::run_all(client, &component, &scenarios, &options)
                .await
                .with_context(|| format!("cannot run scenarios in {}", scenarios.display()))?;
            Ok(report(&results))
        }
    }
}

/// `capstan push`: checks that the file is a component that loads, then
/// pushes it with its summary.
async fn push(component: &std::path::Path, reference: &str, registry: &RegistryArgs) -> anyhow::Result<i32> {
    let reference: crate::serve::oci::Reference = reference.parse()?;
    let started = std::time::Instant::now();
    let wasm = crate::runtime::component::read(component).await?;
    let loaded = loader()?.load_bytes(component, wasm.clone()).await?;
    let summary = crate::serve::oci::Summary {
        controller: loaded.manifest.name.clone(),
        contract: loaded.contract.clone(),
        grants_digest: grants_digest(&loaded.manifest),
    };
    let title =
        component.file_name().map(|n| n.to_string_lossy().trim_end_matches(".gz").to_owned()).unwrap_or_default();
    let pushed = registry.registry().push(&reference, wasm, &summary, &title).await?;
    outln!(
        "pushed {reference} ({} bytes, controller {}, in {:.2} s)\n  manifest {}\n  layer    {}\n  pinned   {}",
        pushed.size,
        summary.controller,
        started.elapsed().as_secs_f64(),
        pushed.manifest_digest,
        pushed.layer_digest,
        reference.at_digest(&pushed.manifest_digest)
    );
    Ok(0)
}

/// `capstan pull`: pulls, verifies and writes the component.
async fn pull(reference: &str, output: &std::path::Path, registry: &RegistryArgs) -> anyhow::Result<i32> {
    let reference: crate::serve::oci::Reference = reference.parse()?;
    let started = std::time::Instant::now();
    let pulled = registry.registry().pull(&reference).await?;
    let tmp = output.with_extension("capstan-pull.tmp");
    std::fs::write(&tmp, &pulled.bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, output).with_context(|| format!("cannot write {}", output.display()))?;
    let controller = pulled.summary.as_ref().map_or("-", |s| s.controller.as_str());
    outln!(
        "pulled {reference} to {} ({} bytes, controller {controller}, {}, in {:.2} s)\n  manifest {}\n  layer    {} (verified)",
        output.display(),
        pulled.bytes.len(),
        if pulled.cached { "layer from the cache" } else { "layer downloaded" },
        started.elapsed().as_secs_f64(),
        pulled.manifest_digest,
        pulled.layer_digest
    );
    Ok(0)
}

/// Connects to the cluster the arguments name and checks it answers.
///
/// # Errors
///
/// When no configuration is found or the API server does not answer.
pub async fn connect(kubeconfig: Option<&std::path::Path>, context: Option<String>) -> anyhow::Result<kube::Client> {
    let client = client(kubeconfig, context).await?;
    let version = client.apiserver_version().await.context("cannot reach the cluster")?;
    tracing::info!(version = %version.git_version, "connected");
    Ok(client)
}

/// Connects like [`connect`], but waits for an API server that does not
/// answer yet: tries again with a growing delay (from
/// [`crate::cluster::kube::CONNECT_BACKOFF_START`], doubling up to
/// [`crate::cluster::kube::CONNECT_BACKOFF_MAX`]) until
/// it answers. A kubeconfig that cannot be read still fails at once.
///
/// # Errors
///
/// When no configuration is found or it is invalid.
///
/// # Cancel safety
///
/// Cancel-safe: nothing is kept between attempts.
pub async fn connect_with_retry(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> anyhow::Result<kube::Client> {
    let client = client(kubeconfig, context).await?;
    crate::cluster::kube::wait_until_answers(&client).await;
    Ok(client)
}

/// Prints each case's outcome and what did not hold; the exit code: 0 when
/// every case passed, else 1.
fn report(results: &[scenario::CaseResult]) -> i32 {
    let mut failed = 0;
    for case in results {
        if case.passed() {
            outln!("scenario {} ... ok", case.name);
        } else {
            failed += 1;
            outln!("scenario {} ... FAILED", case.name);
            for m in &case.mismatches {
                outln!("    {m}");
            }
        }
    }
    outln!("{} passed, {failed} failed", results.len() - failed);
    i32::from(failed != 0)
}

/// A client for the cluster the arguments name (nothing is sent yet).
async fn client(kubeconfig: Option<&std::path::Path>, context: Option<String>) -> anyhow::Result<kube::Client> {
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
    tracing::info!(server = %config.cluster_url, "cluster configured");
    kube::Client::try_from(config).context("cannot build a client")
}

async fn run_host(args: RunArgs) -> anyhow::Result<i32> {
    use std::sync::Arc;
    let leader_election = args.leader_election()?;
    let poll_interval = std::time::Duration::try_from_secs_f64(args.poll_interval)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow::anyhow!("--poll-interval {}: not a positive number of seconds", args.poll_interval))?;
    let (mut files, mut references) = (Vec::new(), Vec::new());
    for c in &args.components {
        match c.to_str().filter(|s| crate::serve::oci::is_reference(s)) {
            Some(reference) => references.push(reference.parse::<crate::serve::oci::Reference>()?),
            None => files.push(c.clone()),
        }
    }
    let registry = Arc::new(args.registry.registry());
    let limits = Limits::default()
        .memory(args.memory_limit_mib << 20)
        .deadline(std::time::Duration::from_millis(args.deadline_ms))
        .reuse(args.instance_reuse)
        .host_calls(args.max_host_calls)
        .events(args.max_events)
        .http_calls(args.max_http_calls)
        .http_bytes(args.max_http_mib << 20)
        .log(crate::runtime::limits::LogBudget::new(args.log_lines_per_second, args.log_burst));
    if let Some(file) = &args.egress_ca {
        let pem = std::fs::read(file).map_err(|e| anyhow::anyhow!("--egress-ca {}: {e}", file.display()))?;
        let count = crate::runtime::imports::http::trust_bundle(&pem)
            .map_err(|e| anyhow::anyhow!("--egress-ca {}: {e}", file.display()))?;
        tracing::info!(file = %file.display(), certificates = count, "outbound HTTPS trusts the CA bundle");
    }
    let instance = args.instance.clone().or_else(|| std::env::var("HOSTNAME").ok());
    let names: std::collections::BTreeSet<&str> = args.clusters.iter().map(|c| c.name.as_str()).collect();
    if names.len() < args.clusters.len() {
        anyhow::bail!("--cluster: a cluster name is given twice");
    }
    check_webhook_endpoints(&args)?;
    let runtime = crate::serve::host::HostBuilder::new_runtime(limits, 0, args.baseline_compile)?;
    let webhooks = match serve_webhooks(&args).await {
        Ok(webhooks) => webhooks,
        Err(e) => return Err(e),
    };
    let fleet = Arc::new(crate::serve::fleet::Fleet::new({
        let namespaces = args.namespaces.clone();
        let adopt_crds = args.adopt_crds.clone();
        let components_dir = args.components_dir.clone();
        let (install_crds, check_permissions) = (args.install_crds, !args.skip_permission_check);
        let (allow_wildcards, canary) = (args.allow_wildcard_permissions, args.canary);
        let allow_wildcard_egress = args.allow_wildcard_egress;
        let webhooks = webhooks.as_ref().map(|w| Arc::clone(&w.registry));
        let registry = Arc::clone(&registry);
        move |client| {
            let mut builder = crate::serve::host::HostBuilder::new(client)
                .runtime(Some(runtime.clone()))
                .namespaces(namespaces.clone())
                .install_crds(install_crds)
                .adopt_crds(adopt_crds.clone())
                .check_permissions(check_permissions)
                .allow_wildcard_permissions(allow_wildcards)
                .allow_wildcard_egress(allow_wildcard_egress)
                .canary(canary)
                .cache_dir(default_cache_dir())
                .instance(instance.clone())
                .components_dir(components_dir.clone())
                .webhooks(webhooks.clone())
                .leader_election(leader_election.clone())
                .registry(Some(Arc::clone(&registry)))
                .poll_interval(poll_interval);
            for c in &files {
                builder = builder.component(c);
            }
            for r in &references {
                builder = builder.reference(r.clone());
            }
            builder
        }
    }));
    // The probes answer from the start: alive, and not ready until every
    // cluster's host runs (each may wait for its API server first).
    let probes = crate::serve::server::Probes {
        ready: Box::new({
            let fleet = Arc::clone(&fleet);
            move || fleet.readiness()
        }),
        status: Box::new({
            let fleet = Arc::clone(&fleet);
            move || fleet.status_document()
        }),
    };
    let options = crate::serve::server::Options::default().status_from_anywhere(args.status_from_anywhere);
    let server = match crate::serve::server::serve(&args.listen, Arc::new(probes), options).await {
        Ok(server) => server,
        Err(e) => {
            if let Some(webhooks) = webhooks {
                webhooks.server.shutdown().await;
            }
            return Err(anyhow::Error::new(e).context(format!("cannot listen on {:?}", args.listen)));
        }
    };
    let started = fleet.engage(crate::serve::fleet::DEFAULT_CLUSTER, {
        let (kubeconfig, context) = (args.kubeconfig.clone(), args.context.clone());
        async move { connect_with_retry(kubeconfig.as_deref(), context).await }
    });
    for cluster in &args.clusters {
        let cluster = cluster.clone();
        // Its first start is reported in `/readyz` and `/status`; a
        // cluster that cannot be served does not stop the others.
        drop(fleet.engage(&cluster.name, async move {
            connect_with_retry(Some(&cluster.kubeconfig), cluster.context).await
        }));
    }
    let secrets = args.clusters_from_secrets.clone().map(|source| {
        let (kubeconfig, context, fleet) = (args.kubeconfig.clone(), args.context.clone(), Arc::clone(&fleet));
        tokio::spawn(async move {
            match connect_with_retry(kubeconfig.as_deref(), context).await {
                Ok(client) => drop(crate::serve::fleet::secrets::follow(fleet, client, source).await),
                Err(e) => tracing::error!(error = %format!("{e:#}"), "cannot follow kubeconfig Secrets"),
            }
        })
    });
    let stop = {
        let fleet = Arc::clone(&fleet);
        async move {
            if let Some(secrets) = secrets {
                secrets.abort();
            }
            server.shutdown().await;
            if let Some(webhooks) = webhooks {
                webhooks.server.shutdown().await;
            }
            fleet.shutdown().await;
        }
    };
    tokio::select! {
        first = started => match first {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                stop.await;
                return Err(e);
            }
            Err(_) => {}
        },
        () = shutdown_signal() => {
            tracing::info!("shutting down before the host started");
            stop.await;
            return Ok(0);
        }
    }
    shutdown_signal().await;
    tracing::info!("shutting down");
    stop.await;
    Ok(0)
}

/// Checks that every cluster's API server can be given an address of the
/// webhooks: a Service serves its own (`default`) cluster only, so with
/// other clusters a URL is needed for them too; without other clusters,
/// one of the two.
fn check_webhook_endpoints(args: &RunArgs) -> anyhow::Result<()> {
    let members = !args.clusters.is_empty() || args.clusters_from_secrets.is_some();
    match (&args.webhook_service, &args.webhook_url) {
        (Some(_), None) if members && args.install_webhooks => anyhow::bail!(
            "--webhook-service: the other clusters' API servers cannot reach a Service of the default cluster; \
             also pass --webhook-url, the address they call the host at"
        ),
        (Some(_), Some(_)) if !members => anyhow::bail!(
            "--webhook-service and --webhook-url: give one (both only with --cluster or --clusters-from-secrets: \
             the Service for the default cluster, the URL for the others)"
        ),
        _ => Ok(()),
    }
}

/// The webhook server of `capstan run`, and what it serves.
struct Webhooks {
    registry: std::sync::Arc<crate::serve::webhook::Registry>,
    server: crate::serve::server::Server,
    _watch: Option<crate::serve::webhook::tls::CertWatch>,
}

/// Starts serving webhooks if `--webhook-listen` asks, before the host
/// starts (so that configurations it installs point at a server).
async fn serve_webhooks(args: &RunArgs) -> anyhow::Result<Option<Webhooks>> {
    use crate::serve::webhook::tls::{Certs, ClientAuth};
    use crate::serve::webhook::{Endpoint, Install, Registry, policy::FailurePolicies};
    let Some(listen) = args.webhook_listen else { return Ok(None) };
    let url = |url: &String| Endpoint::Url(url.clone());
    let (endpoint, members_endpoint) = match (&args.webhook_service, &args.webhook_url) {
        (Some(service), members) => (Endpoint::Service(service.clone()), members.as_ref().map(url)),
        (None, Some(address)) => (url(address), None),
        (None, None) => (Endpoint::Url(format!("https://127.0.0.1:{}", listen.port())), None),
    };
    let certs = match &args.webhook_cert_dir {
        Some(dir) => Certs::from_dir(dir)?,
        None => {
            let mut names = vec!["127.0.0.1".to_owned(), "localhost".to_owned()];
            let extra = [&endpoint].into_iter().chain(&members_endpoint).flat_map(|endpoint| match endpoint {
                Endpoint::Service(service) => service.dns_names(),
                Endpoint::Url(url) => {
                    let host = url.split("://").nth(1).unwrap_or(url).split(['/', ':']).next().unwrap_or_default();
                    vec![host.to_owned()]
                }
            });
            for name in extra {
                if !name.is_empty() && !names.contains(&name) {
                    names.push(name);
                }
            }
            Certs::self_managed(&names)?
        }
    };
    let clients = match &args.webhook_client_ca {
        Some(ca) => Some(ClientAuth::from_file(ca)?.names(args.webhook_client_names.iter().cloned())),
        None => {
            tracing::warn!(
                "webhook callers are not verified: anyone who reaches --webhook-listen may call the webhooks \
                 (pass --webhook-client-ca, or keep the port private with a NetworkPolicy)"
            );
            None
        }
    };
    let certs = std::sync::Arc::new(certs.verifying(clients));
    let watch = certs.watch()?;
    let failure_policies = FailurePolicies::new(args.webhook_failure_policies.iter().cloned())?;
    let install = args.install_webhooks.then(|| Install {
        failure_policies,
        members_endpoint,
        ..Install::new(endpoint, certs.ca_bundle())
    });
    let registry = std::sync::Arc::new(
        Registry::new().installing(install).taking_over(args.take_over_webhooks).budget(args.webhook_concurrency),
    );
    let server = crate::serve::webhook::serve(listen, std::sync::Arc::clone(&certs), std::sync::Arc::clone(&registry))
        .await
        .with_context(|| format!("cannot listen on {listen}"))?;
    Ok(Some(Webhooks { registry, server, _watch: watch }))
}

/// The status document as a table, one line per component file.
fn status_table(doc: &Value) -> String {
    let mut rows = vec![
        ["FILE", "CONTROLLER", "STATE", "DIGEST", "SWAPS", "OK", "FAILED", "QUEUE", "REJECTED"]
            .map(str::to_owned)
            .to_vec(),
    ];
    for c in doc["components"].as_array().into_iter().flatten() {
        let text = |key: &str| match &c[key] {
            Value::String(s) => s.clone(),
            Value::Null => "-".to_owned(),
            other => other.to_string(),
        };
        let file = c["path"].as_str().and_then(|p| p.rsplit('/').next()).unwrap_or("-").to_owned();
        let digest =
            c["digest"].as_str().map_or("-".to_owned(), |d| d.trim_start_matches("sha256:").chars().take(12).collect());
        let rejected = match &c["rejected"] {
            Value::Null => "-".to_owned(),
            r => format!("{}: {}", r["kind"].as_str().unwrap_or("?"), r["reason"].as_str().unwrap_or("")),
        };
        rows.push(vec![
            file,
            text("name"),
            text("state"),
            digest,
            text("swaps"),
            text("reconciled"),
            text("failed"),
            text("queue"),
            rejected,
        ]);
    }
    let widths: Vec<usize> =
        (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row.iter().zip(&widths).map(|(c, w)| format!("{c:w$}")).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    if let Some(reasons) = doc["notReady"].as_array().filter(|r| !r.is_empty()) {
        out.push_str("not ready:\n");
        for r in reasons {
            out.push_str(&format!("  {}\n", r.as_str().unwrap_or_default()));
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    fn namespaces(args: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(["capstan", "run", "c.wasm"].iter().chain(args)).expect("parses");
        match cli.command {
            Command::Run(run) => run.namespaces,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn the_grants_digest_changes_with_what_a_webhook_reaches_and_inspect_shows_it() {
        use crate::manifest::{AdmissionWebhook, Operation, Permission, Scope, Verb};
        use crate::object::Gvk;
        let secret = Gvk::new("", "v1", "Secret");
        let mut m = Manifest::bare("vaults", Gvk::new("example.com", "v1", "Vault"));
        m.permissions.push(Permission {
            group: String::new(),
            kind: "Secret".into(),
            verbs: vec![Verb::Get, Verb::Patch],
            scope: Scope::Cluster,
            status: false,
            resource_names: vec![],
        });
        let without = grants_digest(&m);
        let webhook = |mutating: bool| AdmissionWebhook {
            name: "secrets.example.com".into(),
            mutating,
            kinds: vec![secret.clone()],
            operations: vec![Operation::Create],
            ignore_failures: false,
            timeout: std::time::Duration::from_secs(5),
            side_effects_on_dry_run: false,
            namespace_selector: None,
            object_selector: None,
        };
        m.roles.admission.push(webhook(false));
        let validating = grants_digest(&m);
        assert_ne!(without, validating, "a webhook reaches what grants alone do not show");
        m.roles.admission[0] = webhook(true);
        let mutating = grants_digest(&m);
        assert_ne!(validating, mutating, "changing is more than seeing");
        m.roles.admission[0].object_selector = Some(serde_json::json!({"matchLabels": {"a": "b"}}));
        assert_ne!(mutating, grants_digest(&m), "the selector is part of the reach");
        let doc = manifest_document(&m, "", "");
        let shown = &doc["roles"]["admission"][0];
        assert_eq!(shown["access"], serde_json::json!(["read", "write", "veto"]));
        assert_eq!(shown["objectSelector"], serde_json::json!({"matchLabels": {"a": "b"}}));
        assert_eq!(shown["ownKinds"], serde_json::json!([]), "granted by the permission, not as its own kind");
    }

    #[test]
    fn run_takes_namespaces_repeated_or_separated_by_commas() {
        assert!(namespaces(&[]).is_empty(), "all namespaces by default");
        assert_eq!(namespaces(&["-n", "a"]), ["a"]);
        assert_eq!(namespaces(&["-n", "a", "--namespace", "b"]), ["a", "b"]);
        assert_eq!(namespaces(&["-n", "a,b", "-n", "c"]), ["a", "b", "c"]);
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let cli = Cli::try_parse_from(["capstan", "run", "c.wasm"].iter().chain(args)).expect("parses");
        match cli.command {
            Command::Run(run) => *run,
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn listen_is_loopback_by_default_and_takes_several_addresses() {
        let args = run_args(&[]);
        assert_eq!(args.listen, ["127.0.0.1:8080".parse::<std::net::SocketAddr>().expect("an address")]);
        assert!(!args.status_from_anywhere);
        let args = run_args(&["--listen=10.244.0.7:8080", "--listen", "127.0.0.1:8080", "--status-from-anywhere"]);
        assert_eq!(args.listen.len(), 2);
        assert!(args.status_from_anywhere);
        // $(POD_IP):8080 in an IPv6 cluster.
        assert_eq!(run_args(&["--listen=fd00::7:8080"]).listen, [listen_addr("[fd00::7]:8080").expect("valid")]);
        assert!(listen_addr("fd00::7").is_err() && listen_addr("0.0.0.0").is_err());
    }

    #[test]
    fn leader_election_is_off_by_default_and_checks_its_timing() {
        assert!(run_args(&[]).leader_election().expect("valid").is_none());
        let on = run_args(&["--leader-elect", "--leader-election-namespace", "ops", "--instance", "pod-1"])
            .leader_election()
            .expect("valid")
            .expect("on");
        assert_eq!((on.namespace.as_str(), on.identity.as_str()), ("ops", "pod-1"));
        assert_eq!(on.lease_duration, std::time::Duration::from_secs(15));
        let inverted = run_args(&["--leader-elect", "--renew-deadline", "20"]).leader_election();
        assert!(inverted.is_err(), "a renew deadline longer than the lease is refused");
        assert!(run_args(&["--leader-elect", "--retry-period=-1"]).leader_election().is_err());
    }

    #[test]
    fn trace_export_speaks_http_by_default_and_grpc_when_asked() {
        use crate::telemetry::Protocol;
        let http = run_args(&["--otlp-endpoint", "http://c:4318"]).trace.config().expect("valid");
        assert_eq!(
            (http.protocol, http.endpoint.as_deref()),
            (Protocol::HttpProtobuf, Some("http://c:4318/v1/traces"))
        );
        let grpc =
            run_args(&["--otlp-endpoint", "http://c:4317", "--otlp-protocol", "grpc"]).trace.config().expect("valid");
        assert_eq!((grpc.protocol, grpc.endpoint.as_deref()), (Protocol::Grpc, Some("http://c:4317")));
        // The traces protocol wins over the general one.
        let traces = run_args(&[
            "--otlp-endpoint=http://c:4317",
            "--otlp-protocol=http/protobuf",
            "--otlp-traces-protocol=grpc",
        ]);
        assert_eq!(traces.trace.config().expect("valid").protocol, Protocol::Grpc);
        let json = run_args(&["--otlp-endpoint=http://c:4318", "--otlp-protocol=http/json"]).trace.config();
        assert!(matches!(json, Err(crate::telemetry::Error::Protocol(p)) if p == "http/json"));
    }

    #[test]
    fn the_status_table_has_a_row_per_file_and_shows_rejections() {
        let doc = json!({
            "components": [
                {"path": "/c/greeter.wasm", "name": "greeter", "state": "running", "digest": "sha256:0123456789abcdef",
                 "swaps": 1, "reconciled": 7, "failed": 0, "queue": 0,
                 "rejected": {"kind": "core_module", "reason": "greeter.wasm: a core WebAssembly module"}},
                {"path": "/c/broken.wasm", "name": null, "state": "rejected", "digest": null,
                 "swaps": 0, "reconciled": 0, "failed": 0, "queue": 0,
                 "rejected": {"kind": "world", "reason": "not a capstan controller"}},
            ],
            "ready": false,
            "notReady": ["greeter: caches not synced yet"],
        });
        let table = status_table(&doc);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("FILE"), "{table}");
        assert!(lines[1].starts_with("greeter.wasm") && lines[1].contains("0123456789ab "), "{table}");
        assert!(lines[1].contains("core_module: greeter.wasm"), "{table}");
        assert!(lines[2].starts_with("broken.wasm") && lines[2].contains("rejected"), "{table}");
        assert!(table.contains("not ready:\n  greeter: caches not synced yet"), "{table}");
    }

    #[test]
    fn webhook_options_need_a_webhook_address() {
        let args = run_args(&["--webhook-listen", "127.0.0.1:9443", "--install-webhooks"]);
        assert_eq!(args.webhook_listen, Some("127.0.0.1:9443".parse().expect("an address")));
        assert!(args.install_webhooks && args.webhook_cert_dir.is_none() && args.webhook_url.is_none());
        for alone in [&["--install-webhooks"][..], &["--webhook-cert-dir", "/certs"], &["--webhook-url", "https://h"]] {
            let err = Cli::try_parse_from(["capstan", "run", "c.wasm"].iter().chain(alone)).expect_err("refused");
            assert!(err.to_string().contains("--webhook-listen"), "{alone:?}: {err}");
        }
    }

    #[tokio::test]
    async fn a_webhook_service_is_installed_as_a_service_reference_with_a_certificate_for_its_name() {
        let args =
            run_args(&["--webhook-listen", "127.0.0.1:0", "--webhook-service", "ops/hooks:8443", "--install-webhooks"]);
        let service = args.webhook_service.clone().expect("parsed");
        assert_eq!((service.namespace.as_str(), service.name.as_str(), service.port), ("ops", "hooks", 8443));
        let webhooks = serve_webhooks(&args).await.expect("served").expect("asked for");
        let install = webhooks.registry.install_settings().expect("installing");
        assert_eq!(install.endpoint, crate::serve::webhook::Endpoint::Service(service));
        webhooks.server.shutdown().await;
        for bad in ["hooks", "ops/Hooks", "ops/hooks:0", "ops/hooks:http"] {
            let err = Cli::try_parse_from([
                "capstan",
                "run",
                "c.wasm",
                "--webhook-listen",
                "127.0.0.1:0",
                "--webhook-service",
                bad,
            ])
            .expect_err(bad);
            assert!(err.to_string().contains("--webhook-service"), "{bad}: {err}");
        }
        let both = ["--webhook-listen", "127.0.0.1:0", "--webhook-service", "ops/hooks", "--webhook-url", "https://h"];
        let err = check_webhook_endpoints(&run_args(&both)).expect_err("one cluster: one endpoint").to_string();
        assert!(err.contains("give one"), "{err}");
        // With other clusters: the Service for the default one, the URL for the others.
        let member = ["--cluster", "west=w.kubeconfig", "--install-webhooks"];
        let args = run_args(&[&both[..], &member[..]].concat());
        check_webhook_endpoints(&args).expect("both, with members");
        let webhooks = serve_webhooks(&args).await.expect("served").expect("asked for");
        let install = webhooks.registry.install_for("west").expect("installing");
        assert_eq!(install.endpoint, crate::serve::webhook::Endpoint::Url("https://h".into()));
        let install = webhooks.registry.install_for("default").expect("installing");
        assert!(matches!(install.endpoint, crate::serve::webhook::Endpoint::Service(_)), "{install:?}");
        webhooks.server.shutdown().await;
        let service_only = run_args(&["--webhook-listen", "127.0.0.1:0", "--webhook-service", "ops/hooks"]);
        let service_only = RunArgs { clusters: args.clusters.clone(), install_webhooks: true, ..service_only };
        let err = check_webhook_endpoints(&service_only).expect_err("members cannot reach a Service").to_string();
        assert!(err.contains("also pass --webhook-url"), "{err}");
    }

    #[tokio::test]
    async fn webhooks_are_served_on_their_own_address_and_install_nothing_unless_asked() {
        let args = run_args(&["--webhook-listen", "127.0.0.1:0", "--webhook-url", "https://hooks.ops.svc:443"]);
        let webhooks = serve_webhooks(&args).await.expect("served").expect("asked for");
        assert!(webhooks.registry.install_settings().is_none(), "nothing installed without --install-webhooks");
        assert_ne!(webhooks.server.local_addr().port(), 0);
        webhooks.server.shutdown().await;
    }

    #[tokio::test]
    async fn a_webhook_failure_policy_is_installed_only_with_install_webhooks_and_checked_at_start() {
        let install = ["--webhook-listen", "127.0.0.1:0", "--install-webhooks"];
        let with = |extra: &[&str]| run_args(&install.iter().chain(extra).copied().collect::<Vec<_>>());
        let args = with(&[
            "--webhook-failure-policy",
            "greeter/validate.greetings.example.com=Ignore,other=Fail",
            "--webhook-failure-policy=greeter=Fail",
        ]);
        let targets: Vec<String> = args.webhook_failure_policies.iter().map(ToString::to_string).collect();
        assert_eq!(targets, ["greeter/validate.greetings.example.com=Ignore", "other=Fail", "greeter=Fail"]);
        let webhooks = serve_webhooks(&args).await.expect("served").expect("asked for");
        let policies = &webhooks.registry.install_settings().expect("installing").failure_policies;
        assert_eq!(policies.overrides().len(), 3, "the host installs with them");
        webhooks.server.shutdown().await;
        // Nothing to apply them to without --install-webhooks.
        let err = Cli::try_parse_from(["capstan", "run", "c.wasm", "--webhook-failure-policy", "greeter=Ignore"])
            .expect_err("without --install-webhooks");
        assert!(err.to_string().contains("--install-webhooks"), "{err}");
        // A malformed value stops the parse, naming the option.
        let bad = ["capstan", "run", "c.wasm", "--webhook-listen", "127.0.0.1:0", "--install-webhooks"];
        let err = Cli::try_parse_from(bad.iter().chain(&["--webhook-failure-policy", "greeter=ignore"]))
            .expect_err("lower-case policy");
        assert!(err.to_string().contains("--webhook-failure-policy") && err.to_string().contains("Ignore or Fail"));
        // One target, both policies: the host does not start.
        let both = with(&["--webhook-failure-policy", "greeter=Ignore,greeter=Fail"]);
        let err = serve_webhooks(&both).await.err().expect("a conflict");
        assert!(err.to_string().contains("given both Ignore and Fail"), "{err}");
    }

    #[test]
    fn run_rejects_a_namespace_that_is_not_a_dns_label() {
        for bad in ["Team_A", "a,,b", ""] {
            let err = Cli::try_parse_from(["capstan", "run", "c.wasm", "-n", bad]).expect_err(bad);
            assert!(err.to_string().contains("not a valid namespace name"), "{bad:?}: {err}");
        }
    }
}
