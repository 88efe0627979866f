//! Shared harness for Capstan's cross-crate test suites.
//!
//! # A real Kubernetes control plane
//!
//! [`ControlPlane::shared`] gives every test in a test binary the same real
//! kube-apiserver (with etcd and kube-controller-manager), started once:
//!
//! 1. If `CAPSTAN_E2E_KUBECONFIG` is set (to anything), the cluster that
//!    `$KUBECONFIG` points at is used as it is: nothing is started or stopped.
//! 2. Otherwise, if `capstan cluster status --name capstan` finds the local
//!    cluster `capstan` ready (or the one in `$CAPSTAN_CP_DIR`), that one is
//!    reused as it is (if it was started with `--no-controller-manager`,
//!    tests that need garbage collection or namespace deletion fail and say
//!    so).
//! 3. Otherwise `capstan cluster up` starts it on free loopback ports
//!    (building the binaries first if they are not cached yet: see
//!    `docs/cluster.md`).
//!
//! The `capstan` binary is this checkout's ([`capstan_binary`]). A control
//! plane that a test run started is **left running** when the tests end, so
//! the next `cargo test` starts in seconds. Whoever runs the tests (CI, the
//! test script, a developer) stops it with `capstan cluster down`.
//!
//! Every test should work in its own [`TestNamespace`] and call
//! [`TestNamespace::cleanup`] at its end. Namespaces that a crashed or
//! failed test left behind are deleted by the harness the next time it starts
//! once they are older than [`STALE_NAMESPACE_AGE`].

pub mod alertmanager;
pub mod bench;
pub mod jaeger;
pub mod registry;
pub mod webhook;

use std::collections::hash_map::RandomState;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::process::Command;
use tokio::sync::OnceCell;

/// The label every [`TestNamespace`] carries (value `"true"`), so that
/// leftovers can be found and deleted.
pub const TEST_LABEL: &str = "capstan.dev/test";

/// Field manager of every server-side apply done by this harness.
pub const FIELD_MANAGER: &str = "capstan-tests";

/// Test namespaces older than this are deleted when the harness starts.
pub const STALE_NAMESPACE_AGE: Duration = Duration::from_secs(30 * 60);

/// How long [`install_crd`] waits for a CRD to be established and served.
pub const CRD_TIMEOUT: Duration = Duration::from_secs(60);

/// A running Kubernetes control plane that tests talk to.
#[derive(Debug)]
pub struct ControlPlane {
    kubeconfig_path: PathBuf,
    config: Config,
}

static SHARED: OnceCell<std::result::Result<ControlPlane, String>> = OnceCell::const_new();

impl ControlPlane {
    /// The control plane shared by all tests of this process, found or
    /// started on first use (see the [crate docs](crate) for how).
    ///
    /// A failure to start is remembered: every later call returns the same
    /// error at once instead of trying again.
    pub async fn shared() -> Result<&'static ControlPlane> {
        SHARED
            .get_or_init(|| async { Self::connect().await.map_err(|e| format!("{e:#}")) })
            .await
            .as_ref()
            .map_err(|e| anyhow!("no Kubernetes control plane for the tests: {e}"))
    }

    async fn connect() -> Result<Self> {
        let kubeconfig_path = if std::env::var_os("CAPSTAN_E2E_KUBECONFIG").is_some() {
            let path = std::env::var_os("KUBECONFIG").context("CAPSTAN_E2E_KUBECONFIG is set but KUBECONFIG is not")?;
            PathBuf::from(path)
        } else {
            Self::start_local().await?
        };
        let plane = Self::from_kubeconfig(&kubeconfig_path).await?;
        let client = plane.client()?;
        let version = client
            .apiserver_version()
            .await
            .with_context(|| format!("asking {} for /version", plane.config.cluster_url))?;
        eprintln!(
            "capstan-tests: using Kubernetes {} at {} ({})",
            version.git_version,
            plane.config.cluster_url,
            kubeconfig_path.display()
        );
        delete_stale_namespaces(&client, STALE_NAMESPACE_AGE).await?;
        Ok(plane)
    }

    /// Reuses the cluster `capstan` if `capstan cluster status` finds it
    /// ready (even one started without kube-controller-manager), else runs
    /// `capstan cluster up`. Returns the kubeconfig path.
    async fn start_local() -> Result<PathBuf> {
        let binary = capstan_binary().await?;
        let args: &[&str] = if run_cluster(&binary, None, &["status", "--name", "capstan"]).await.is_ok() {
            &["kubeconfig"]
        } else {
            &["up"]
        };
        let stdout = run_cluster(&binary, None, args).await?;
        let last = stdout
            .lines()
            .last()
            .with_context(|| format!("`capstan cluster {}` printed no kubeconfig path", args.join(" ")))?;
        Ok(PathBuf::from(last.trim()))
    }

    /// A control plane described by a kubeconfig file (its current context).
    pub async fn from_kubeconfig(path: &Path) -> Result<Self> {
        let kubeconfig =
            Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
        let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading kubeconfig {}", path.display()))?;
        // Loopback only: never send test traffic through an ambient HTTPS_PROXY.
        config.proxy_url = None;
        Ok(Self { kubeconfig_path: path.to_path_buf(), config })
    }

    /// Path of the kubeconfig (admin credentials) of this control plane.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The URL of the API server.
    pub fn server_url(&self) -> String {
        self.config.cluster_url.to_string()
    }

    /// A new admin client (`system:masters`).
    ///
    /// Each call builds a fresh client: a `kube::Client` is tied to the tokio
    /// runtime it was made in, and every `#[tokio::test]` has its own.
    pub fn client(&self) -> Result<Client> {
        Client::try_from(self.config.clone()).context("building a Kubernetes client")
    }

    /// A client for the same server and CA that authenticates with a bearer
    /// `token` only (for example one from [`token_for_service_account`]).
    pub fn client_with_token(&self, token: &str) -> Result<Client> {
        let mut config = self.config.clone();
        config.auth_info = serde_json::from_value::<AuthInfo>(serde_json::json!({ "token": token }))
            .context("building token credentials")?;
        Client::try_from(config).context("building a Kubernetes client with a token")
    }
}

/// Runs `binary cluster <args>` (with `CAPSTAN_CP_DIR` set to
/// `state_dir`, if given); returns its stdout, or an error carrying its
/// stderr.
async fn run_cluster(binary: &Path, state_dir: Option<&Path>, args: &[&str]) -> Result<String> {
    let mut command = Command::new(binary);
    if let Some(dir) = state_dir {
        command.env("CAPSTAN_CP_DIR", dir);
    }
    let output = command
        .arg("cluster")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", binary.display()))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        bail!("`capstan cluster {}` failed ({}):\n{}", args.join(" "), output.status, stderr.trim_end());
    }
    eprint!("{stderr}");
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A control plane of one test's own, for tests that change the cluster for
/// everyone (CRDs installed late, an API server restart). Stopped when
/// dropped.
#[derive(Debug)]
pub struct PrivateControlPlane {
    state_dir: PathBuf,
    binary: PathBuf,
    plane: ControlPlane,
}

impl PrivateControlPlane {
    /// Starts etcd and kube-apiserver (and kube-controller-manager if
    /// asked) in a fresh state directory, with this checkout's `capstan`
    /// ([`capstan_binary`]).
    ///
    /// # Errors
    ///
    /// When `capstan cluster up` fails.
    pub async fn start(with_controller_manager: bool) -> Result<Self> {
        Self::start_with(capstan_binary().await?, with_controller_manager).await
    }

    /// [`start`](Self::start) with the `capstan` binary given: a benchmark's
    /// own build, so that it does not build this checkout's debug binary
    /// first.
    ///
    /// # Errors
    ///
    /// When `capstan cluster up` fails.
    pub async fn start_with(binary: PathBuf, with_controller_manager: bool) -> Result<Self> {
        let state_dir = std::env::temp_dir().join(format!("capstan-cp-{}", random_suffix(8)));
        let args: &[&str] = if with_controller_manager { &["up"] } else { &["up", "--no-controller-manager"] };
        let stdout = run_cluster(&binary, Some(&state_dir), args).await?;
        let kubeconfig = stdout.lines().last().context("`capstan cluster up` printed no kubeconfig path")?;
        let plane = ControlPlane::from_kubeconfig(Path::new(kubeconfig.trim())).await?;
        Ok(Self { state_dir, binary, plane })
    }

    /// The control plane.
    pub fn plane(&self) -> &ControlPlane {
        &self.plane
    }

    /// Stops kube-apiserver, waits `down_for`, starts it again on the same
    /// port.
    ///
    /// # Errors
    ///
    /// When `capstan cluster restart-apiserver` fails.
    pub async fn restart_apiserver(&self, down_for: Duration) -> Result<()> {
        let secs = down_for.as_secs().to_string();
        run_cluster(&self.binary, Some(&self.state_dir), &["restart-apiserver", "--down-for", &secs]).await.map(drop)
    }
}

impl Drop for PrivateControlPlane {
    fn drop(&mut self) {
        let _ = std::process::Command::new(&self.binary)
            .env("CAPSTAN_CP_DIR", &self.state_dir)
            .args(["cluster", "down", "--purge"])
            .stdin(std::process::Stdio::null())
            .output();
        let _ = std::fs::remove_file(self.state_dir.with_extension("lock"));
    }
}

/// Deletes namespaces labelled [`TEST_LABEL`] that are older than `max_age`.
pub async fn delete_stale_namespaces(client: &Client, max_age: Duration) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let list = namespaces
        .list(&ListParams::default().labels(&format!("{TEST_LABEL}=true")))
        .await
        .context("listing test namespaces")?;
    let now = Timestamp::now();
    for ns in list {
        let (Some(name), Some(created)) = (ns.metadata.name, ns.metadata.creation_timestamp) else {
            continue;
        };
        let age = now.duration_since(created.0);
        if ns.metadata.deletion_timestamp.is_none() && age.as_secs() >= max_age.as_secs() as i64 {
            eprintln!("capstan-tests: deleting stale test namespace {name}");
            delete_ignoring_not_found(&namespaces, &name).await?;
        }
    }
    Ok(())
}

async fn delete_ignoring_not_found<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {name}")),
    }
}

/// A random lowercase alphanumeric suffix of `len` characters.
pub fn random_suffix(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut out = String::with_capacity(len);
    while out.len() < len {
        // RandomState is seeded from the OS once per process and then
        // incremented: every instance hashes differently.
        let mut bits = RandomState::new().build_hasher().finish();
        for _ in 0..8 {
            if out.len() == len {
                break;
            }
            out.push(char::from(ALPHABET[(bits % 36) as usize]));
            bits /= 36;
        }
    }
    out
}

/// A fresh namespace `<prefix>-<random>` for one test, labelled
/// [`TEST_LABEL`]`=true`.
///
/// Call [`TestNamespace::cleanup`] at the end of the test (async code cannot
/// delete it on drop). One that is left behind is deleted by a later test
/// run (see [`STALE_NAMESPACE_AGE`]).
#[derive(Clone)]
pub struct TestNamespace {
    client: Client,
    name: String,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace").field("name", &self.name).finish()
    }
}

impl TestNamespace {
    /// Creates the namespace on the [shared](ControlPlane::shared) control
    /// plane. `prefix` is lower-cased and cut so that the name stays a valid
    /// DNS label.
    pub async fn new(prefix: &str) -> Result<Self> {
        let plane = ControlPlane::shared().await?;
        let client = plane.client()?;
        let mut prefix: String = prefix
            .to_ascii_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(50)
            .collect();
        prefix = prefix.trim_matches('-').to_owned();
        if prefix.is_empty() {
            prefix = "test".to_owned();
        }
        let name = format!("{prefix}-{}", random_suffix(8));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(TEST_LABEL.to_owned(), "true".to_owned())].into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating test namespace {name}"))?;
        Ok(Self { client, name })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The admin client this namespace was created with.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// An `Api` for namespaced objects of kind `K` in this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// Deletes the namespace (in the background: without kube-controller-manager
    /// it stays `Terminating`, which is harmless).
    pub async fn cleanup(self) -> Result<()> {
        delete_ignoring_not_found(&Api::<Namespace>::all(self.client), &self.name).await
    }
}

/// How many times `events` occurred: one per Event, or its series' count.
pub fn occurrences(events: &[k8s_openapi::api::events::v1::Event]) -> i32 {
    events.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum()
}

/// Polls `check` (every 200 ms) until it returns `Some`, and returns that
/// value; fails once `timeout` has passed.
pub async fn wait_for<T, F, Fut>(timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("condition not met within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Server-side applies a CustomResourceDefinition (field manager
/// [`FIELD_MANAGER`]) and waits until it is `Established` and discovery serves
/// its plural in every served version.
pub async fn install_crd(client: &Client, crd: serde_json::Value) -> Result<CustomResourceDefinition> {
    let crd: CustomResourceDefinition =
        serde_json::from_value(crd).context("the value is not a CustomResourceDefinition")?;
    let name = crd.metadata.name.clone().context("the CustomResourceDefinition has no metadata.name")?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&crd))
        .await
        .with_context(|| format!("applying CRD {name}"))?;

    let established = wait_for(CRD_TIMEOUT, || async {
        let crd = api.get(&name).await.ok()?;
        let conditions = crd.status.as_ref()?.conditions.as_ref()?;
        conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(crd)
    })
    .await
    .with_context(|| format!("CRD {name} did not become Established"))?;

    let group = &established.spec.group;
    let plural = &established.spec.names.plural;
    for version in established.spec.versions.iter().filter(|v| v.served) {
        let group_version = format!("{group}/{}", version.name);
        wait_for(CRD_TIMEOUT, || async {
            let resources = client.list_api_group_resources(&group_version).await.ok()?;
            resources.resources.iter().any(|r| &r.name == plural).then_some(())
        })
        .await
        .with_context(|| format!("discovery does not serve {plural} in {group_version}"))?;
    }
    Ok(established)
}

/// A bearer token for ServiceAccount `sa_name` in `namespace`, from the
/// TokenRequest API (valid for an hour, for the API server's own audience).
pub async fn token_for_service_account(client: &Client, namespace: &str, sa_name: &str) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(3600), ..TokenRequestSpec::default() }),
        ..TokenRequest::default()
    };
    let response: TokenRequest = api
        .create_subresource("token", sa_name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("requesting a token for ServiceAccount {namespace}/{sa_name}"))?;
    response.status.and_then(|s| s.token).filter(|t| !t.is_empty()).context("the TokenRequest response has no token")
}

/// Waits until the API server behind `client` stops answering (a restart
/// under way: `capstan cluster restart-apiserver` kills it only once it has
/// started and checked the cluster, seconds on a busy machine), polling
/// every 100 ms. Returns when it was seen gone.
pub async fn until_down(client: &Client, timeout: Duration) -> Result<std::time::Instant> {
    let deadline = std::time::Instant::now() + timeout;
    while client.apiserver_version().await.is_ok() {
        ensure!(std::time::Instant::now() < deadline, "the API server still answers after {timeout:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(std::time::Instant::now())
}

/// The checkout's root folder.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `capstan e2e <component> <scenarios> ARGS` (the component found by
/// [`capstan_host::testing::find_component`]) against the shared control
/// plane: its exit code and stdout (both printed, with stderr).
pub async fn e2e(component: &str, scenarios: &Path, args: &[&str]) -> Result<(i32, String)> {
    let plane = ControlPlane::shared().await?;
    let component = capstan_host::testing::find_component(component).map_err(anyhow::Error::msg)?;
    let out = Command::new(capstan_binary().await?)
        .arg("e2e")
        .arg(&component)
        .arg(scenarios)
        .args(args)
        .env("KUBECONFIG", plane.kubeconfig_path())
        .output()
        .await
        .context("running capstan e2e")?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code().unwrap_or(-1), stdout))
}

/// The `capstan` binary of this checkout, built first if needed (`cargo
/// build -p capstan-host --bin capstan`, a no-op when it is up to date), for
/// tests that run the host as a process of its own.
pub async fn capstan_binary() -> Result<PathBuf> {
    let repo = repo();
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| repo.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--quiet", "-p", "capstan-host", "--bin", "capstan"])
        .current_dir(&repo)
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .await
        .context("running cargo build")?;
    ensure!(built.success(), "cargo build -p capstan-host --bin capstan failed");
    Ok(target.join("debug").join("capstan"))
}

/// A Go program built once into `$CAPSTAN_CACHE/<dir>/<name>` and reused
/// from there: `go <args>` runs in an empty folder holding `files` (a
/// builder module's `go.mod` and `go.sum`, say) with `GOBIN` set to it,
/// and must leave `<name>` there. `what` names the program in the
/// messages.
///
/// # Errors
///
/// When there is no Go toolchain, or the build fails (its output is in the
/// error).
pub async fn go_binary(dir: &Path, name: &str, what: &str, files: &[(&str, &str)], args: &[&str]) -> Result<PathBuf> {
    // One build at a time in this process: the tests of a binary that all
    // start the program on a cold cache would otherwise each build it.
    static BUILD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = BUILD.lock().await;
    let dir = capstan_host::tooling::cli::cluster::build::cache_root()?.join(dir);
    let binary = dir.join(name);
    if binary.is_file() {
        return Ok(binary);
    }
    // Built into a folder of its own, then renamed into place: test
    // binaries that build it at the same time do not see half a file.
    let staging = dir.join(format!("staging-{}", random_suffix(8)));
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    for (file, text) in files {
        std::fs::write(staging.join(file), text)?;
    }
    eprintln!("capstan-tests: building {what} (first time only)");
    let output = Command::new("go")
        .args(args)
        .current_dir(&staging)
        .env("GOBIN", &staging)
        .env("CGO_ENABLED", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running `go {}` (is Go installed?)", args.join(" ")))?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        bail!("building {what} failed:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    std::fs::rename(staging.join(name), &binary).with_context(|| format!("moving into {}", binary.display()))?;
    let _ = std::fs::remove_dir_all(&staging);
    Ok(binary)
}

/// A free TCP port on 127.0.0.1 (free when this returns: a process started
/// right after can bind it).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// `GET http://127.0.0.1:<port><path>` (for a host's `/healthz`,
/// `/readyz`, `/status` and `/metrics`): the status code and the body.
///
/// # Errors
///
/// When nothing answers on `port` or the answer has no status line.
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let code = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("an HTTP status line")?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((code, body))
}

/// Whether the greeter reports `g` `Ready` for its `generation`
/// (`status.observedGeneration` and a `Ready=True` condition).
pub fn greeting_ready(g: &DynamicObject, generation: i64) -> bool {
    let status = &g.data["status"];
    status["observedGeneration"] == serde_json::json!(generation)
        && status["conditions"].as_array().is_some_and(|c| {
            c.iter().any(|c| c["type"] == serde_json::json!("Ready") && c["status"] == serde_json::json!("True"))
        })
}

/// The greeter's `Greeting`s in `namespace`.
pub fn greetings(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &greeting_resource())
}

/// A `Greeting` named `name` asking for `message` in `replicas` pods.
pub fn greeting(name: &str, message: &str, replicas: i64) -> DynamicObject {
    DynamicObject::new(name, &greeting_resource())
        .data(serde_json::json!({"spec": {"message": message, "replicas": replicas}}))
}

fn greeting_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Greeting"),
        "greetings",
    )
}

/// The CPU time (user + system) process `pid` has used, in seconds, from
/// `/proc/<pid>/stat` (at 100 ticks a second).
///
/// # Errors
///
/// If the process is gone or its stat cannot be read.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) start at ") ".
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).context("malformed /proc stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 here.
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// The peak resident memory of process `pid` (`VmHWM`), in MiB.
///
/// # Errors
///
/// If the process is gone or its status cannot be read.
pub fn peak_rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).context("no VmHWM")?;
    let kib: f64 = line.split_whitespace().nth(1).context("VmHWM value")?.parse()?;
    Ok(kib / 1024.0)
}

/// The resident memory of process `pid` now (`VmRSS`), in MiB.
///
/// # Errors
///
/// If the process is gone or its status cannot be read.
pub fn rss_mib(pid: u32) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).context("no VmRSS")?;
    let kib: f64 = line.split_whitespace().nth(1).context("VmRSS value")?.parse()?;
    Ok(kib / 1024.0)
}

/// A `PATH` with the pinned guest toolchains first (componentize-py, jco,
/// esbuild), as `tests/build-polyglot-guests.sh` records them in
/// `toolchains.env` beside the components it builds.
///
/// # Errors
///
/// When the guests or the file are not there (run that script first).
pub fn toolchain_path() -> Result<String> {
    let guests = capstan_host::testing::find_component("greeter").map_err(anyhow::Error::msg)?;
    let env = guests.with_file_name("toolchains.env");
    let text = std::fs::read_to_string(&env)
        .with_context(|| format!("{} (run tests/build-polyglot-guests.sh)", env.display()))?;
    let dirs: Vec<&str> = text.lines().filter_map(|l| l.split_once('=').map(|(_, v)| v)).collect();
    Ok(format!("{}:{}", dirs.join(":"), std::env::var("PATH").unwrap_or_default()))
}

/// The answer of [`answer_hello`]: `200 OK`, body `hello`, connection closed.
pub const HELLO: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello";

/// Reads one HTTP/1.1 request head from `stream` and answers [`HELLO`]
/// (the tests' servers on loopback, plain or TLS); nothing when the client
/// goes away first.
pub async fn answer_hello<S>(stream: &mut S)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let _ = stream.write_all(HELLO).await;
    let _ = stream.shutdown().await;
}
