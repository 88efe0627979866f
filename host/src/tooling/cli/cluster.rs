//! `capstan cluster`: a local Kubernetes control plane (etcd,
//! kube-apiserver and kube-controller-manager on loopback) for developing
//! and testing controllers. See `docs/cluster.md`.
//!
//! Each cluster has a name and a state directory
//! (`$XDG_STATE_HOME/capstan/clusters/<name>`, default
//! `~/.local/state/capstan/clusters/<name>`, or `--dir` / `$CAPSTAN_CP_DIR`)
//! holding `kubeconfig`, `pki/`, `etcd/` (the data), `logs/<binary>.log`,
//! `pids/<binary>` and the ports it listens on. The binaries are built once
//! per version into `$CAPSTAN_CACHE/control-plane/` (see [`build`]).

pub mod build;
pub mod pki;
pub mod process;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};

use self::build::BINARIES;
use self::process::{Lock, pick_port};

/// The name of the cluster when none is given.
pub const DEFAULT_NAME: &str = "capstan";

/// What to do with a local cluster.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a cluster (building the binaries the first time, ~6 min on 2
    /// cores), wait until it is ready, and print its kubeconfig path on
    /// stdout. A cluster already running is reused; a stopped one starts
    /// again with its data.
    Up(UpArgs),
    /// Stop a cluster's processes; with `--purge` also delete its data,
    /// certificates and kubeconfig.
    Down {
        /// Which cluster.
        #[command(flatten)]
        target: Target,
        /// Also delete the cluster's state directory.
        #[arg(long)]
        purge: bool,
    },
    /// List the clusters with their health; with `--name` or `--dir`, show
    /// one and exit 0 only if it is ready.
    Status {
        /// Only this cluster.
        #[arg(long, value_parser = cluster_name)]
        name: Option<String>,
        /// Only the cluster in this state directory.
        #[arg(long, env = "CAPSTAN_CP_DIR", value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print `export KUBECONFIG=...` for a running cluster, for
    /// `eval "$(capstan cluster env)"`.
    Env {
        /// Which cluster.
        #[command(flatten)]
        target: Target,
    },
    /// Print the kubeconfig path of a running cluster.
    Kubeconfig {
        /// Which cluster.
        #[command(flatten)]
        target: Target,
    },
    /// Build the binaries into the cache if they are not there yet; print
    /// their directory.
    Build {
        /// Build kube-scheduler too, from the same Kubernetes module (for
        /// running it beside a Capstan scheduler).
        #[arg(long)]
        with_scheduler: bool,
    },
    /// Kill kube-apiserver (SIGKILL), wait, and start it again on the same
    /// port (for tests of clients surviving an API server restart).
    #[command(hide = true)]
    RestartApiserver {
        /// Which cluster.
        #[command(flatten)]
        target: Target,
        /// Seconds to leave it down.
        #[arg(long, default_value_t = 0, value_name = "SECONDS")]
        down_for: u64,
    },
}

/// Which cluster a command works on.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The cluster's name (lower-case letters, digits and '-').
    #[arg(long, default_value = DEFAULT_NAME, value_parser = cluster_name)]
    pub name: String,
    /// The cluster's state directory, instead of the one its name gives.
    #[arg(long, env = "CAPSTAN_CP_DIR", value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Arguments of `capstan cluster up`.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    /// Which cluster.
    #[command(flatten)]
    pub target: Target,
    /// Run etcd and kube-apiserver only (like envtest): no garbage
    /// collection, no namespace deletion, no default ServiceAccounts. By
    /// default kube-controller-manager runs too, as in a real cluster.
    #[arg(long)]
    pub no_controller_manager: bool,
    /// Seconds each process may take to become ready.
    #[arg(long, env = "CAPSTAN_CP_TIMEOUT", default_value_t = 120, value_name = "SECONDS")]
    pub timeout: u64,
    /// etcd's client port (default: its last port while free, else a free one).
    #[arg(long, env = "CAPSTAN_CP_ETCD_PORT", value_name = "PORT")]
    pub etcd_port: Option<u16>,
    /// etcd's peer port (default: its last port while free, else a free one).
    #[arg(long, env = "CAPSTAN_CP_ETCD_PEER_PORT", value_name = "PORT")]
    pub etcd_peer_port: Option<u16>,
    /// kube-apiserver's port (default: its last port while free, else a free one).
    #[arg(long, env = "CAPSTAN_CP_APISERVER_PORT", value_name = "PORT")]
    pub apiserver_port: Option<u16>,
}

/// Checks a cluster name given on the command line.
fn cluster_name(s: &str) -> Result<String, String> {
    if crate::manifest::is_dns1123_label(s) {
        Ok(s.to_owned())
    } else {
        Err("not a valid cluster name (lower-case alphanumerics and '-', at most 63)".to_owned())
    }
}

/// Where named clusters keep their state: `$XDG_STATE_HOME/capstan/clusters`,
/// else `~/.local/state/capstan/clusters`.
///
/// # Errors
///
/// When neither `XDG_STATE_HOME` nor `HOME` is set.
pub fn clusters_root() -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("XDG_STATE_HOME").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("capstan/clusters"));
    }
    let home = std::env::var_os("HOME").context("neither XDG_STATE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".local/state/capstan/clusters"))
}

/// How long `kubeconfig` and `env` wait for a running but unready cluster.
const READY_WAIT: Duration = Duration::from_secs(30);

/// One local cluster: its name and state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// Its name (also the kubeconfig's context).
    pub name: String,
    /// Its state directory.
    pub dir: PathBuf,
}

/// How a cluster is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Every recorded process runs and `/readyz` says ok.
    Ready {
        /// The API server's URL.
        server: String,
        /// Whether kube-controller-manager runs.
        controller_manager: bool,
    },
    /// Nothing runs (never started, or stopped by `down`).
    Stopped,
    /// Some processes run but the cluster is not ready.
    Unhealthy(String),
}

impl Cluster {
    /// The cluster `target` names.
    ///
    /// # Errors
    ///
    /// When no state directory can be derived.
    pub fn from_target(target: &Target) -> anyhow::Result<Self> {
        let dir = match &target.dir {
            Some(dir) => std::path::absolute(dir).with_context(|| format!("bad directory {}", dir.display()))?,
            None => clusters_root()?.join(&target.name),
        };
        Ok(Self { name: target.name.clone(), dir })
    }

    /// Path of its kubeconfig (admin credentials).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    fn pid_file(&self, binary: &str) -> PathBuf {
        self.dir.join("pids").join(binary)
    }

    fn log(&self, binary: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{binary}.log"))
    }

    fn pki(&self) -> PathBuf {
        self.dir.join("pki")
    }

    /// The AdmissionConfiguration the API server starts with: it presents
    /// the webhook client certificate to every admission webhook.
    fn admission_config(&self) -> PathBuf {
        self.dir.join("admission.yaml")
    }

    /// The CA of the client certificate the API server presents to
    /// admission webhooks (for a host's `--webhook-client-ca`), if this
    /// cluster was started with one.
    pub fn webhook_client_ca(&self) -> Option<PathBuf> {
        let ca = self.pki().join("webhook-client-ca.crt");
        (self.admission_config().is_file() && ca.is_file()).then_some(ca)
    }

    /// Writes the AdmissionConfiguration and the kubeconfig it names: the
    /// webhook client certificate for every webhook (`*`).
    fn write_admission_config(&self) -> anyhow::Result<()> {
        let pki = self.pki();
        let kubeconfig = self.dir.join("webhook-client.kubeconfig");
        let users = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "users": [{"name": "*", "user": {
                "client-certificate": pki.join("webhook-client.crt"),
                "client-key": pki.join("webhook-client.key"),
            }}],
        });
        self.write("webhook-client.kubeconfig", &users)?;
        let plugin = |name: &str| {
            serde_json::json!({"name": name, "configuration": {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "WebhookAdmissionConfiguration",
                "kubeConfigFile": kubeconfig,
            }})
        };
        let config = serde_json::json!({
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [plugin("ValidatingAdmissionWebhook"), plugin("MutatingAdmissionWebhook")],
        });
        // JSON is YAML: the API server reads either.
        self.write("admission.yaml", &config)
    }

    /// The recorded processes, in start order.
    pub fn recorded(&self) -> Vec<(&'static str, u32)> {
        BINARIES
            .iter()
            .filter_map(|b| {
                let pid = std::fs::read_to_string(self.pid_file(b)).ok()?.trim().parse().ok()?;
                Some((*b, pid))
            })
            .collect()
    }

    fn port(&self, file: &str) -> Option<u16> {
        std::fs::read_to_string(self.dir.join(file)).ok()?.trim().parse().ok()
    }

    fn write(&self, file: &str, content: impl std::fmt::Display) -> anyhow::Result<()> {
        let path = self.dir.join(file);
        std::fs::write(&path, format!("{content}\n")).with_context(|| format!("cannot write {}", path.display()))
    }

    /// Checks its processes and asks its API server for `/readyz`.
    pub async fn health(&self) -> Health {
        let recorded = self.recorded();
        let running: Vec<_> = recorded.iter().filter(|(b, pid)| process::pid_is(*pid, b)).collect();
        if running.is_empty() {
            return Health::Stopped;
        }
        if running.len() < recorded.len() {
            let dead: Vec<_> = recorded.iter().filter(|r| !running.contains(r)).map(|(b, _)| *b).collect();
            return Health::Unhealthy(format!("not running: {}", dead.join(", ")));
        }
        let Some(port) = self.port("apiserver-port") else {
            return Health::Unhealthy("no kube-apiserver port recorded".to_owned());
        };
        match client(&self.kubeconfig()).await {
            Ok(client) if readyz(&client, Duration::from_secs(5)).await => Health::Ready {
                server: format!("https://127.0.0.1:{port}"),
                controller_manager: running.iter().any(|(b, _)| *b == "kube-controller-manager"),
            },
            Ok(_) => Health::Unhealthy("kube-apiserver /readyz is not ok".to_owned()),
            Err(e) => Health::Unhealthy(format!("{e:#}")),
        }
    }

    /// The kubeconfig path, if the cluster is ready. A cluster whose
    /// processes all run but whose API server does not answer `/readyz` yet
    /// (just started, or busy catching up with a large etcd) gets up to
    /// [`READY_WAIT`] before this gives up, saying why.
    async fn ready_kubeconfig(&self) -> anyhow::Result<PathBuf> {
        let deadline = Instant::now() + READY_WAIT;
        loop {
            match self.health().await {
                Health::Ready { .. } => return Ok(self.kubeconfig()),
                Health::Unhealthy(why) if Instant::now() < deadline && !why.starts_with("not running") => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Health::Unhealthy(why) => bail!(
                    "cluster {} in {} is not ready: {why} (logs in {}; restart it with: capstan cluster down{flag} && capstan cluster up{flag})",
                    self.name,
                    self.dir.display(),
                    self.dir.join("logs").display(),
                    flag = self.name_flag()
                ),
                Health::Stopped => bail!(
                    "cluster {} is not running in {} (start it with: capstan cluster up{})",
                    self.name,
                    self.dir.display(),
                    self.name_flag()
                ),
            }
        }
    }

    fn name_flag(&self) -> String {
        if self.name == DEFAULT_NAME { String::new() } else { format!(" --name {}", self.name) }
    }

    /// Writes the admin kubeconfig for the API server on `port`.
    fn write_kubeconfig(&self, port: u16) -> anyhow::Result<()> {
        use base64::Engine as _;
        let b64 = |file: &str| -> anyhow::Result<String> {
            let path = self.pki().join(file);
            let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
        };
        let name = &self.name;
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: https://127.0.0.1:{port}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: {name}-admin\n  user:\n    client-certificate-data: {crt}\n    \
             client-key-data: {key}\ncontexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {name}-admin\n\
             current-context: {name}\n",
            ca = b64("ca.crt")?,
            crt = b64("admin.crt")?,
            key = b64("admin.key")?,
        );
        let tmp = self.dir.join("kubeconfig.tmp");
        pki::write_private(&tmp, &text).with_context(|| format!("cannot write {}", tmp.display()))?;
        std::fs::rename(&tmp, self.kubeconfig()).context("cannot write the kubeconfig")
    }
}

/// An admin client for the cluster of `kubeconfig`; never through a proxy.
async fn client(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let kc = Kubeconfig::read_from(kubeconfig).with_context(|| format!("cannot read {}", kubeconfig.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("invalid kubeconfig {}", kubeconfig.display()))?;
    config.proxy_url = None;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    kube::Client::try_from(config).context("cannot build a client")
}

/// Whether `/readyz` says `ok` within `timeout` (short while polling a
/// starting server: a socket that is bound but not serving yet would
/// otherwise hold each probe for the client's whole timeout).
async fn readyz(client: &kube::Client, timeout: Duration) -> bool {
    let request = hyper::http::Request::get("/readyz").body(Vec::new()).expect("a valid request");
    matches!(
        tokio::time::timeout(timeout, client.request_text(request)).await,
        Ok(Ok(body)) if body.trim() == "ok"
    )
}

async fn etcd_healthy(port: u16) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        stream.write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").await.ok()?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await.ok()?;
        Some(body.contains("\"health\":\"true\""))
    };
    matches!(tokio::time::timeout(Duration::from_secs(2), probe).await, Ok(Some(true)))
}

/// Shell quoting for `env`'s output.
fn shell_quote(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,".contains(c)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The last lines of a log, to show with an error.
fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `capstan cluster ...`; returns the exit code.
///
/// # Errors
///
/// Anything that stops the command; the message names the step and the log
/// to read.
pub async fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Up(args) => {
            outln!("{}", up(args).await?.display());
            Ok(0)
        }
        Command::Down { target, purge } => {
            let cluster = Cluster::from_target(&target)?;
            let _lock = Lock::acquire(&cluster.dir, Duration::from_secs(120)).await?;
            down(&cluster, purge).await?;
            Ok(0)
        }
        Command::Status { name, dir } => status(name, dir).await,
        Command::Env { target } => {
            let kubeconfig = Cluster::from_target(&target)?.ready_kubeconfig().await?;
            outln!("export KUBECONFIG={}", shell_quote(&kubeconfig.to_string_lossy()));
            Ok(0)
        }
        Command::Kubeconfig { target } => {
            outln!("{}", Cluster::from_target(&target)?.ready_kubeconfig().await?.display());
            Ok(0)
        }
        Command::Build { with_scheduler } => {
            let root = build::cache_root()?;
            let dir = if with_scheduler {
                build::ensure_built_with_scheduler(&root).await?
            } else {
                build::ensure_built(&root).await?
            };
            outln!("{}", dir.display());
            Ok(0)
        }
        Command::RestartApiserver { target, down_for } => {
            restart_apiserver(&Cluster::from_target(&target)?, Duration::from_secs(down_for)).await.map(|()| 0)
        }
    }
}

/// The clusters whose state directories are in `root`, by name: none
/// when `root` is not there (no cluster was made yet).
///
/// # Errors
///
/// When `root` is there but cannot be listed (not a folder, no
/// permission), or an entry of it cannot be read or looked at, naming it:
/// a folder that cannot be read is not one without clusters.
fn clusters_in(root: &Path) -> anyhow::Result<Vec<Cluster>> {
    let cannot = |path: &Path| format!("cannot read the clusters' state directory {}", path.display());
    let entries = match std::fs::read_dir(root) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        entries => entries.with_context(|| cannot(root))?,
    };
    let mut clusters = Vec::new();
    for entry in entries {
        let dir = entry.with_context(|| cannot(root))?.path();
        let is_dir = std::fs::metadata(&dir).with_context(|| cannot(&dir))?.is_dir();
        if is_dir {
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            clusters.push(Cluster { name, dir });
        }
    }
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(clusters)
}

async fn status(name: Option<String>, dir: Option<PathBuf>) -> anyhow::Result<i32> {
    let single = name.is_some() || dir.is_some();
    let clusters = if single {
        vec![Cluster::from_target(&Target { name: name.unwrap_or_else(|| DEFAULT_NAME.to_owned()), dir })?]
    } else {
        clusters_in(&clusters_root()?)?
    };
    if clusters.is_empty() {
        outln!("no clusters (start one with: capstan cluster up)");
        return Ok(0);
    }
    let mut rows = vec![["NAME".to_owned(), "STATUS".to_owned(), "SERVER".to_owned(), "DIR".to_owned()]];
    let mut all_ready = true;
    for cluster in &clusters {
        let (state, server) = match cluster.health().await {
            Health::Ready { server, controller_manager: true } => ("ready".to_owned(), server),
            Health::Ready { server, controller_manager: false } => ("ready (no controller-manager)".to_owned(), server),
            Health::Stopped => {
                all_ready = false;
                ("stopped".to_owned(), "-".to_owned())
            }
            Health::Unhealthy(why) => {
                all_ready = false;
                (format!("unhealthy: {why}"), "-".to_owned())
            }
        };
        rows.push([cluster.name.clone(), state, server, cluster.dir.display().to_string()]);
    }
    let widths: Vec<usize> = (0..4).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    for row in &rows {
        outln!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
    }
    Ok(if single && !all_ready { 1 } else { 0 })
}

async fn down(cluster: &Cluster, purge: bool) -> anyhow::Result<()> {
    if !cluster.dir.exists() {
        eprintln!("cluster: no cluster {} in {}; nothing to stop", cluster.name, cluster.dir.display());
        return Ok(());
    }
    for (binary, pid) in cluster.recorded().into_iter().rev() {
        if process::pid_is(pid, binary) {
            eprintln!("cluster: stopping {binary} (pid {pid})");
            process::stop(pid, binary).await;
        }
    }
    let pids = cluster.dir.join("pids");
    if pids.exists() {
        std::fs::remove_dir_all(&pids).with_context(|| format!("cannot remove {}", pids.display()))?;
    }
    if purge && cluster.dir.exists() {
        std::fs::remove_dir_all(&cluster.dir).with_context(|| format!("cannot remove {}", cluster.dir.display()))?;
        let _ = std::fs::remove_file(cluster.dir.with_extension("lock"));
        eprintln!("cluster: removed {}", cluster.dir.display());
    } else if cluster.dir.exists() {
        eprintln!(
            "cluster: {} stopped; its data stays in {} (`--purge` removes it)",
            cluster.name,
            cluster.dir.display()
        );
    }
    Ok(())
}

/// The processes one `up` started, stopped again if it fails.
#[derive(Default)]
struct Started(Mutex<Vec<(&'static str, std::process::Child)>>);

impl Started {
    fn push(&self, binary: &'static str, child: std::process::Child) {
        self.0.lock().expect("not poisoned").push((binary, child));
    }

    /// Stops and forgets the last one (it died, or is to be retried).
    fn forget_last(&self, cluster: &Cluster) {
        if let Some((binary, mut child)) = self.0.lock().expect("not poisoned").pop() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(cluster.pid_file(binary));
        }
    }

    /// Stops every one, last first.
    fn stop_all(&self, cluster: &Cluster) {
        while !self.0.lock().expect("not poisoned").is_empty() {
            self.forget_last(cluster);
        }
    }

    fn wait_child<R>(&self, f: impl FnOnce(&mut std::process::Child) -> R) -> R {
        let mut started = self.0.lock().expect("not poisoned");
        let (_, child) = started.last_mut().expect("a started process");
        f(child)
    }
}

/// What became of a process started with [`start`].
enum Outcome {
    Ready,
    PortTaken,
}

/// What starting one process needs: the cluster, the binaries, how long
/// each may take, and the list of what this command started.
struct Starter<'a> {
    cluster: &'a Cluster,
    started: &'a Started,
    bin_dir: &'a Path,
    timeout: Duration,
}

impl Starter<'_> {
    /// Starts `binary` and waits until `probe` says it is ready.
    async fn start(
        &self,
        binary: &'static str,
        args: Vec<String>,
        what: &str,
        probe: impl AsyncFn() -> bool,
    ) -> anyhow::Result<Outcome> {
        let Self { cluster, started, bin_dir, timeout } = *self;
        let log = cluster.log(binary);
        let child = process::launch(&bin_dir.join(binary), &args, &log)?;
        std::fs::write(cluster.pid_file(binary), format!("{}\n", child.id()))?;
        started.push(binary, child);
        let deadline = Instant::now() + timeout;
        loop {
            if probe().await {
                return Ok(Outcome::Ready);
            }
            if let Some(status) = started.wait_child(|c| c.try_wait())? {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                started.forget_last(cluster);
                if text.contains("address already in use") {
                    return Ok(Outcome::PortTaken);
                }
                bail!("{binary} exited during startup ({status}); read {}:\n{}", log.display(), tail(&log, 15));
            }
            if Instant::now() >= deadline {
                bail!(
                    "{binary} not {what} after {} s (--timeout, CAPSTAN_CP_TIMEOUT); read {}:\n{}",
                    timeout.as_secs(),
                    log.display(),
                    tail(&log, 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

fn etcd_args(cluster: &Cluster, client: u16, peer: u16) -> Vec<String> {
    let data = cluster.dir.join("etcd");
    vec![
        format!("--name={}", cluster.name),
        format!("--data-dir={}", data.display()),
        format!("--listen-client-urls=http://127.0.0.1:{client}"),
        format!("--advertise-client-urls=http://127.0.0.1:{client}"),
        format!("--listen-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer}"),
        format!("--initial-cluster={}=http://127.0.0.1:{peer}", cluster.name),
        "--initial-cluster-state=new".to_owned(),
        "--unsafe-no-fsync".to_owned(),
        "--log-level=warn".to_owned(),
    ]
}

fn apiserver_args(cluster: &Cluster, port: u16, etcd: u16, controller_manager: bool) -> Vec<String> {
    let pki = cluster.pki();
    let p = |f: &str| pki.join(f).display().to_string();
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd}"),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        "--advertise-address=127.0.0.1".to_owned(),
        "--endpoint-reconciler-type=none".to_owned(),
        format!("--cert-dir={}", cluster.dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        "--authorization-mode=RBAC".to_owned(),
        "--service-cluster-ip-range=10.0.0.0/24".to_owned(),
        "--allow-privileged=true".to_owned(),
        format!("--service-account-issuer=https://127.0.0.1:{port}"),
        format!("--service-account-key-file={}", p("sa.pub")),
        format!("--service-account-signing-key-file={}", p("sa.key")),
    ];
    if cluster.admission_config().is_file() {
        // Absent in a cluster made before it: no client certificate then.
        args.push(format!("--admission-control-config-file={}", cluster.admission_config().display()));
    }
    if !controller_manager {
        // Nothing would create the `default` ServiceAccounts.
        args.push("--disable-admission-plugins=ServiceAccount".to_owned());
    }
    args
}

fn controller_manager_args(cluster: &Cluster) -> Vec<String> {
    let pki = cluster.pki();
    let p = |f: &str| pki.join(f).display().to_string();
    vec![
        format!("--kubeconfig={}", cluster.kubeconfig().display()),
        "--bind-address=127.0.0.1".to_owned(),
        "--secure-port=0".to_owned(),
        "--controllers=*".to_owned(),
        format!("--service-account-private-key-file={}", p("sa.key")),
        format!("--root-ca-file={}", p("ca.crt")),
        "--use-service-account-credentials=false".to_owned(),
        "--leader-elect=false".to_owned(),
        format!("--cluster-signing-cert-file={}", p("ca.crt")),
        format!("--cluster-signing-key-file={}", p("ca.key")),
        format!("--flex-volume-plugin-dir={}", cluster.dir.join("flexvolume").display()),
    ]
}

/// Starts the cluster `name` (with kube-controller-manager) unless it runs,
/// as `capstan cluster up --name NAME`; returns its kubeconfig path.
/// `$CAPSTAN_CP_DIR` names its state directory, as for the command.
///
/// # Errors
///
/// As `capstan cluster up`.
pub async fn ensure_up(name: &str) -> anyhow::Result<PathBuf> {
    ensure_up_in(name, std::env::var_os("CAPSTAN_CP_DIR").map(PathBuf::from)).await
}

/// [`ensure_up`] with its state in `dir` (default: that of the name).
///
/// # Errors
///
/// As `capstan cluster up`.
pub async fn ensure_up_in(name: &str, dir: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    up(UpArgs {
        target: Target { name: name.to_owned(), dir },
        no_controller_manager: false,
        timeout: 120,
        etcd_port: None,
        etcd_peer_port: None,
        apiserver_port: None,
    })
    .await
}

/// Stops the cluster `name` whose state is in `dir` (default: that of the
/// name), keeping its data, as `capstan cluster down --name NAME`.
///
/// # Errors
///
/// As `capstan cluster down`.
pub async fn stop_in(name: &str, dir: Option<PathBuf>) -> anyhow::Result<()> {
    let target = Target { name: name.to_owned(), dir };
    let cluster = Cluster::from_target(&target)?;
    let _lock = Lock::acquire(&cluster.dir, Duration::from_secs(120)).await?;
    down(&cluster, false).await
}

async fn up(args: UpArgs) -> anyhow::Result<PathBuf> {
    let cluster = Cluster::from_target(&args.target)?;
    let timeout = Duration::from_secs(args.timeout);
    let _lock = Lock::acquire(&cluster.dir, timeout).await?;
    let with_cm = !args.no_controller_manager;
    match cluster.health().await {
        Health::Ready { controller_manager, .. } => {
            if with_cm && !controller_manager {
                bail!(
                    "cluster {} runs WITHOUT kube-controller-manager in {}; stop it first: capstan cluster down{}",
                    cluster.name,
                    cluster.dir.display(),
                    cluster.name_flag()
                );
            }
            eprintln!(
                "cluster: {} is already running and ready in {}; reusing it",
                cluster.name,
                cluster.dir.display()
            );
            return Ok(cluster.kubeconfig());
        }
        Health::Unhealthy(why) => {
            eprintln!("cluster: {} is unhealthy ({why}); stopping what is left of it first", cluster.name);
            down(&cluster, false).await?;
        }
        Health::Stopped => {}
    }
    let started = Started::default();
    let t0 = Instant::now();
    let result = tokio::select! {
        result = start_all(&cluster, &args, &started, t0) => result,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    if let Err(e) = result {
        if !started.0.lock().expect("not poisoned").is_empty() {
            eprintln!("cluster: cleaning up after the failed start: stopping what this command started");
            started.stop_all(&cluster);
        }
        return Err(e.context(format!(
            "cannot start cluster {} (logs in {})",
            cluster.name,
            cluster.dir.join("logs").display()
        )));
    }
    eprintln!(
        "cluster: {} up in {:.1} s; logs in {}; stop with: capstan cluster down{}",
        cluster.name,
        t0.elapsed().as_secs_f64(),
        cluster.dir.join("logs").display(),
        cluster.name_flag()
    );
    if let Some(ca) = cluster.webhook_client_ca() {
        eprintln!(
            "cluster: the API server presents a client certificate to admission webhooks; verify it with: \
             --webhook-client-ca {} --webhook-client-name {}",
            ca.display(),
            pki::WEBHOOK_CLIENT_NAME
        );
    }
    Ok(cluster.kubeconfig())
}

async fn start_all(cluster: &Cluster, args: &UpArgs, started: &Started, t0: Instant) -> anyhow::Result<()> {
    let timeout = Duration::from_secs(args.timeout);
    let bin_dir = build::ensure_built(&build::cache_root()?).await.context("step build")?;
    for sub in ["logs", "pids"] {
        let dir = cluster.dir.join(sub);
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    pki::ensure(&cluster.pki()).context("step pki")?;
    cluster.write_admission_config().context("step pki")?;
    let starter = Starter { cluster, started, bin_dir: &bin_dir, timeout };

    // etcd
    let mut etcd_port = None;
    for attempt in 1..=3 {
        let client = pick_port(args.etcd_port, cluster.port("etcd-port"), &[])?;
        let peer = pick_port(args.etcd_peer_port, cluster.port("etcd-peer-port"), &[client])?;
        let outcome = starter
            .start("etcd", etcd_args(cluster, client, peer), "healthy", async || etcd_healthy(client).await)
            .await
            .context("step start-etcd")?;
        if let Outcome::Ready = outcome {
            cluster.write("etcd-port", client)?;
            cluster.write("etcd-peer-port", peer)?;
            etcd_port = Some(client);
            break;
        }
        if args.etcd_port.is_some() || args.etcd_peer_port.is_some() {
            bail!("step start-etcd: port {client} or {peer} (pinned) is already in use");
        }
        eprintln!(
            "cluster: etcd: port {client} or {peer} was taken meanwhile; retrying with other ports ({attempt}/3)"
        );
    }
    let etcd_port = etcd_port.context("step start-etcd: no free ports after 3 attempts")?;
    eprintln!("cluster: etcd ready on 127.0.0.1:{etcd_port} ({:.1} s)", t0.elapsed().as_secs_f64());

    let port = start_apiserver(&starter, args.apiserver_port, etcd_port, !args.no_controller_manager).await?;
    eprintln!("cluster: kube-apiserver ready on https://127.0.0.1:{port} ({:.1} s)", t0.elapsed().as_secs_f64());

    let client = client(&cluster.kubeconfig()).await?;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    let deadline = Instant::now() + timeout;
    while namespaces.get_opt("default").await.ok().flatten().is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "step default-namespace: namespace 'default' did not appear within {} s; read {}",
            timeout.as_secs(),
            cluster.log("kube-apiserver").display()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    if !args.no_controller_manager {
        let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(client, "default");
        // Ready once its service-account controller has made default/default.
        starter
            .start(
                "kube-controller-manager",
                controller_manager_args(cluster),
                "ready (no ServiceAccount default/default)",
                async || accounts.get_opt("default").await.ok().flatten().is_some(),
            )
            .await
            .context("step start-kube-controller-manager")?;
        eprintln!("cluster: kube-controller-manager ready ({:.1} s)", t0.elapsed().as_secs_f64());
    }
    Ok(())
}

/// Starts kube-apiserver (retrying on a port taken meanwhile unless it is
/// pinned) and writes the kubeconfig; returns its port.
async fn start_apiserver(
    starter: &Starter<'_>,
    pinned: Option<u16>,
    etcd_port: u16,
    controller_manager: bool,
) -> anyhow::Result<u16> {
    let cluster = starter.cluster;
    let etcd_ports = [etcd_port, cluster.port("etcd-peer-port").unwrap_or(0)];
    for attempt in 1..=3 {
        let port = pick_port(pinned, cluster.port("apiserver-port"), &etcd_ports)?;
        cluster.write("apiserver-port", port)?;
        cluster.write_kubeconfig(port)?;
        let client = client(&cluster.kubeconfig()).await?;
        let args = apiserver_args(cluster, port, etcd_port, controller_manager);
        let outcome = starter
            .start("kube-apiserver", args, "ready", async || readyz(&client, Duration::from_millis(500)).await)
            .await
            .context("step start-kube-apiserver")?;
        if let Outcome::Ready = outcome {
            return Ok(port);
        }
        if pinned.is_some() {
            bail!("step start-kube-apiserver: port {port} (pinned) is already in use");
        }
        eprintln!("cluster: kube-apiserver: port {port} was taken meanwhile; retrying with another port ({attempt}/3)");
    }
    bail!("step start-kube-apiserver: no free port after 3 attempts")
}

async fn restart_apiserver(cluster: &Cluster, down_for: Duration) -> anyhow::Result<()> {
    let _lock = Lock::acquire(&cluster.dir, Duration::from_secs(120)).await?;
    let Health::Ready { controller_manager, .. } = cluster.health().await else {
        bail!("no running cluster {} in {}", cluster.name, cluster.dir.display());
    };
    let pid = cluster.recorded().into_iter().find(|(b, _)| *b == "kube-apiserver").map(|(_, p)| p);
    let (Some(pid), Some(port), Some(etcd)) = (pid, cluster.port("apiserver-port"), cluster.port("etcd-port")) else {
        bail!("cluster {} recorded no kube-apiserver", cluster.name);
    };
    eprintln!("cluster: killing kube-apiserver (pid {pid}, SIGKILL); down for {} s", down_for.as_secs());
    process::kill(pid, "kube-apiserver").await;
    let _ = std::fs::remove_file(cluster.pid_file("kube-apiserver"));
    tokio::time::sleep(down_for).await;
    let bin_dir = build::ensure_built(&build::cache_root()?).await?;
    let started = Started::default();
    let starter = Starter { cluster, started: &started, bin_dir: &bin_dir, timeout: Duration::from_secs(120) };
    if let Err(e) = start_apiserver(&starter, Some(port), etcd, controller_manager).await {
        started.stop_all(cluster);
        return Err(e);
    }
    eprintln!("cluster: kube-apiserver restarted on port {port}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::tooling::cli::Cli;

    #[test]
    fn clusters_are_the_folders_of_the_state_directory_and_none_before_it_is_made() {
        let root = std::env::temp_dir().join(format!("capstan-clusters-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        assert!(clusters_in(&root).expect("not made yet").is_empty());
        for name in ["staging", "capstan"] {
            std::fs::create_dir_all(root.join(name)).expect("made");
        }
        std::fs::write(root.join("notes.txt"), "not a cluster").expect("written");
        let names: Vec<String> = clusters_in(&root).expect("listed").into_iter().map(|c| c.name).collect();
        assert_eq!(names, ["capstan", "staging"]);
        std::fs::remove_dir_all(&root).expect("cleaned up");
    }

    #[test]
    fn a_state_directory_that_cannot_be_read_is_an_error_naming_it_not_no_clusters() {
        let root = std::env::temp_dir().join(format!("capstan-clusters-unreadable-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("made");
        // A file where the folder should be.
        let file = root.join("clusters");
        std::fs::write(&file, "not a folder").expect("written");
        let err = clusters_in(&file).expect_err("not a folder");
        assert!(format!("{err:#}").contains(&format!("state directory {}: ", file.display())), "{err:#}");
        // An entry that cannot be looked at (a dangling symlink).
        std::fs::create_dir_all(root.join("states/capstan")).expect("made");
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("states/gone")).expect("linked");
        let err = clusters_in(&root.join("states")).expect_err("a dangling entry");
        assert!(format!("{err:#}").contains(&root.join("states/gone").display().to_string()), "{err:#}");
        std::fs::remove_dir_all(&root).expect("cleaned up");
    }

    fn parse(args: &[&str]) -> Command {
        let cli = Cli::try_parse_from([&["capstan", "cluster"], args].concat()).expect("parses");
        match cli.command {
            crate::tooling::cli::Command::Cluster(command) => command,
            other => panic!("not a cluster command: {other:?}"),
        }
    }

    #[test]
    fn up_defaults_to_the_capstan_cluster_with_a_controller_manager() {
        let Command::Up(args) = parse(&["up"]) else { panic!("not up") };
        assert_eq!(args.target.name, DEFAULT_NAME);
        assert!(!args.no_controller_manager);
        assert_eq!(args.timeout, 120);
    }

    #[test]
    fn up_takes_a_name_ports_and_no_controller_manager() {
        let Command::Up(args) =
            parse(&["up", "--name", "dev-2", "--no-controller-manager", "--apiserver-port", "6443"])
        else {
            panic!("not up")
        };
        assert_eq!(args.target.name, "dev-2");
        assert!(args.no_controller_manager);
        assert_eq!(args.apiserver_port, Some(6443));
    }

    #[test]
    fn invalid_cluster_names_are_refused() {
        assert!(Cli::try_parse_from(["capstan", "cluster", "up", "--name", "Not_Valid"]).is_err());
        assert!(Cli::try_parse_from(["capstan", "cluster", "down", "--name", "../x"]).is_err());
    }

    #[test]
    fn down_purges_only_when_asked() {
        let Command::Down { target, purge } = parse(&["down", "--name", "x"]) else { panic!("not down") };
        assert_eq!((target.name.as_str(), purge), ("x", false));
        let Command::Down { purge, .. } = parse(&["down", "--name", "x", "--purge"]) else { panic!("not down") };
        assert!(purge);
    }

    #[test]
    fn a_named_cluster_lives_under_the_clusters_root() {
        let cluster = Cluster::from_target(&Target { name: "dev".to_owned(), dir: None }).expect("cluster");
        assert_eq!(cluster.dir, clusters_root().expect("root").join("dev"));
        assert_eq!(cluster.kubeconfig(), cluster.dir.join("kubeconfig"));
        let given =
            Cluster::from_target(&Target { name: "dev".to_owned(), dir: Some("/tmp/cp-x".into()) }).expect("cluster");
        assert_eq!(given.dir, PathBuf::from("/tmp/cp-x"));
    }

    #[tokio::test]
    async fn a_cluster_never_started_is_stopped() {
        let dir = std::env::temp_dir().join(format!("capstan-cluster-none-{}", std::process::id()));
        let cluster = Cluster { name: "none".to_owned(), dir };
        assert_eq!(cluster.health().await, Health::Stopped);
        assert!(cluster.ready_kubeconfig().await.is_err());
    }

    #[test]
    fn env_output_is_quoted_for_the_shell() {
        assert_eq!(shell_quote("/tmp/a/kubeconfig"), "/tmp/a/kubeconfig");
        assert_eq!(shell_quote("/tmp/a b/it's"), r"'/tmp/a b/it'\''s'");
    }

    #[test]
    fn apiserver_without_controller_manager_disables_service_account_admission() {
        let cluster = Cluster { name: "x".to_owned(), dir: "/s".into() };
        let with = apiserver_args(&cluster, 1, 2, true);
        let without = apiserver_args(&cluster, 1, 2, false);
        assert!(!with.iter().any(|a| a.contains("ServiceAccount")));
        assert!(without.contains(&"--disable-admission-plugins=ServiceAccount".to_owned()));
        assert!(with.contains(&"--service-account-issuer=https://127.0.0.1:1".to_owned()));
    }
}
