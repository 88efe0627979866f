//! A real Prometheus Alertmanager on loopback for the tests: built once from
//! the Go module proxy into
//! `$CAPSTAN_CACHE/alertmanager/alertmanager-<version>/alertmanager`, and
//! started by each test that needs one with a one-receiver configuration,
//! no clustering (`--cluster.listen-address=`) and its storage in a
//! folder of its own, on a free port ([`Alertmanager::start`]) or on
//! [`E2E_PORT`] ([`Alertmanager::start_on`]), the one the `silences-e2e`
//! component of `tests/build-guests.sh` calls. Nothing is left running:
//! the process is killed when the [`Alertmanager`] is dropped.
//!
//! Its module zip lacks the web UI (`ui/app/dist`, built by npm and embedded
//! with `go:embed`), so `go install …@version` fails on it, and Go refuses
//! an `-overlay` of files in the module cache. The module's source is
//! therefore copied from the module cache beside the binary (`source/`),
//! with one placeholder page for each UI, and built from a builder module
//! of ours, `tests/alertmanager/go.{mod,sum}`, whose `replace` points at
//! that copy. The HTTP API (what the tests use) is untouched.
//!
//! ```no_run
//! # async fn example() -> anyhow::Result<()> {
//! use std::time::Duration;
//! use capstan_tests::alertmanager::{Alertmanager, silence_matching};
//!
//! let mut am = Alertmanager::start().await?;
//! let id = am.create_silence(&silence_matching("alertname", "Watchdog", Duration::from_secs(3600), "a test")).await?;
//! am.stop().await;
//! am.restart().await?; // the same port, the same storage: the silence is still there
//! assert!(am.silences().await?.iter().any(|s| s["id"] == id.as_str()));
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The Alertmanager version the tests run (the module version of
/// `github.com/prometheus/alertmanager`).
pub const ALERTMANAGER_VERSION: &str = "v0.35.0";

/// The port of the Alertmanager the e2e tests of `examples/silences` call.
///
/// That component declares the one origin it calls, fixed when it is built
/// (`SILENCES_ALERTMANAGER`), so its e2e build, `silences-e2e.wasm` from
/// `tests/build-guests.sh`, is built for `http://127.0.0.1:19093`, and
/// its tests start Alertmanager there with [`Alertmanager::start_on`].
/// Below Linux's ephemeral range (32768-60999), so no free port picked by
/// [`Alertmanager::start`] or any other test takes it. Only one
/// Alertmanager can use it at a time: the tests that do so run one after
/// another.
pub const E2E_PORT: u16 = 19093;

/// How long [`Alertmanager::start`] and [`Alertmanager::restart`] wait for
/// `/-/ready`, and [`Alertmanager::stop`] for a clean exit.
const TIMEOUT: Duration = Duration::from_secs(60);

const MODULE: &str = "github.com/prometheus/alertmanager";
const PACKAGE: &str = "github.com/prometheus/alertmanager/cmd/alertmanager";
const GO_MOD: &str = include_str!("../alertmanager/go.mod");
const GO_SUM: &str = include_str!("../alertmanager/go.sum");

/// The pages that stand in for the web UI the module zip lacks.
const UI_PAGES: [&str; 2] = ["ui/app/dist/elm/index.html", "ui/app/dist/mantine/index.html"];
const UI_PAGE: &str = "<!doctype html>\n<title>Alertmanager</title>\n<p>The web UI is not built into this test binary; the HTTP API is at /api/v2.\n";

/// The configuration every Alertmanager of the tests runs: one receiver
/// that sends nowhere, and the route to it.
const CONFIG: &str = "route:
  receiver: \"null\"
receivers:
  - name: \"null\"
";

/// The alertmanager binary, built into the cache first if it is not there.
///
/// # Errors
///
/// When there is no Go toolchain, the module cannot be downloaded, or the
/// build fails (its output is in the error).
pub async fn binary() -> Result<PathBuf> {
    let dir = PathBuf::from("alertmanager").join(format!("alertmanager-{ALERTMANAGER_VERSION}"));
    let root = capstan_host::tooling::cli::cluster::build::cache_root()?.join(&dir);
    if !root.join("alertmanager").is_file() {
        prepare_source(&root).await?;
    }
    // `alertmanager --version` and `/api/v2/status` report the version.
    let ldflags = format!(
        "-ldflags=-s -w -X github.com/prometheus/common/version.Version={}",
        ALERTMANAGER_VERSION.trim_start_matches('v')
    );
    crate::go_binary(
        &dir,
        "alertmanager",
        &format!("Alertmanager {ALERTMANAGER_VERSION}"),
        &[("go.mod", GO_MOD), ("go.sum", GO_SUM)],
        &["build", "-mod=mod", "-trimpath", &ldflags, "-o", "alertmanager", PACKAGE],
    )
    .await
}

/// Puts the module's source, with the placeholder UI pages, into
/// `<root>/source` (what the builder module's `replace` points at), unless
/// it is there already.
async fn prepare_source(root: &Path) -> Result<()> {
    let source = root.join("source");
    if UI_PAGES.iter().all(|page| source.join(page).is_file()) {
        return Ok(());
    }
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let output = Command::new("go")
        .args(["mod", "download", "-json", &format!("{MODULE}@{ALERTMANAGER_VERSION}")])
        .current_dir(root)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running `go mod download` (is Go installed?)")?;
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap_or_default();
    let Some(module_dir) = answer["Dir"].as_str().filter(|_| output.status.success()) else {
        bail!(
            "downloading {MODULE}@{ALERTMANAGER_VERSION} failed: {}{}",
            answer["Error"].as_str().unwrap_or_default(),
            String::from_utf8_lossy(&output.stderr)
        );
    };
    // Copied aside, then renamed into place: test binaries that prepare it
    // at the same time do not see half a copy.
    let staging = root.join(format!("source-{}", crate::random_suffix(8)));
    copy_dir(Path::new(module_dir), &staging)?;
    for page in UI_PAGES {
        let page = staging.join(page);
        std::fs::create_dir_all(page.parent().expect("a UI page is in a folder"))?;
        std::fs::write(page, UI_PAGE)?;
    }
    if let Err(error) = std::fs::rename(&staging, &source) {
        let _ = std::fs::remove_dir_all(&staging);
        // Another test binary put it there first.
        ensure!(source.is_dir(), "moving into {}: {error}", source.display());
    }
    Ok(())
}

/// Copies the folder `from` to `to` (files only: the module cache has no
/// links).
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// A silence for `POST /api/v2/silences`: one equality matcher
/// `label="value"`, from now for `lasting`, created by `capstan-tests`.
pub fn silence_matching(label: &str, value: &str, lasting: Duration, comment: &str) -> Value {
    let now = Timestamp::now();
    let ends = now + lasting;
    json!({
        "matchers": [{ "name": label, "value": value, "isRegex": false, "isEqual": true }],
        "startsAt": now.to_string(),
        "endsAt": ends.to_string(),
        "createdBy": "capstan-tests",
        "comment": comment,
    })
}

/// A running Alertmanager on `127.0.0.1`: the v2 HTTP API, no clustering,
/// its silences stored in a temporary folder that outlives
/// [`stop`](Self::stop) and is removed on drop.
#[derive(Debug)]
pub struct Alertmanager {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
}

impl Alertmanager {
    /// Starts Alertmanager on a free port and waits until `/-/ready`
    /// answers 200.
    ///
    /// # Errors
    ///
    /// When it cannot be built, exits, or is not ready within 60 s (its log
    /// is in the error).
    pub async fn start() -> Result<Self> {
        Self::start_on(crate::free_port()?).await
    }

    /// Starts Alertmanager on `port` of `127.0.0.1` (for a component
    /// built to call it there: [`E2E_PORT`]) and waits until `/-/ready`
    /// answers 200.
    ///
    /// # Errors
    ///
    /// When `port` stays taken for 10 s (another Alertmanager of a test
    /// that has not exited yet, or anything else: the error says so), and
    /// as [`start`](Self::start).
    pub async fn start_on(port: u16) -> Result<Self> {
        let binary = binary().await?;
        let dir = std::env::temp_dir().join(format!("capstan-alertmanager-{}", crate::random_suffix(8)));
        std::fs::create_dir_all(dir.join("data"))?;
        std::fs::write(dir.join("alertmanager.yml"), CONFIG)?;
        let mut alertmanager = Self { binary, dir, port, child: None };
        alertmanager.restart().await?;
        Ok(alertmanager)
    }

    /// The base URL of the HTTP API, `http://127.0.0.1:<port>` (the v2 API
    /// is under `/api/v2`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The port it listens on (the same across [`restart`](Self::restart)s).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops Alertmanager the way an operator would, with SIGTERM: it
    /// writes its silences to its storage folder and exits (killed after
    /// 60 s if it has not). Nothing answers on its port until
    /// [`restart`](Self::restart). Does nothing when it is not running.
    pub async fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if let Some(pid) = child.id() {
            let _ = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
        if tokio::time::timeout(TIMEOUT, child.wait()).await.is_err() {
            let _ = child.kill().await;
        }
    }

    /// Starts Alertmanager again (stopping it first if it runs) on the same
    /// port with the same storage: the silences it had are there again.
    ///
    /// # Errors
    ///
    /// When its port stays taken for 10 s (whatever listens there would
    /// pass for it), or it exits or is not ready within 60 s (its log is in
    /// the error).
    pub async fn restart(&mut self) -> Result<()> {
        self.stop().await;
        // Whatever answered `/-/ready` on a taken port would pass for this
        // Alertmanager: the port must be free first.
        self.wait_for_free_port().await?;
        // Appended to: the log of every run is kept.
        let log = std::fs::OpenOptions::new().create(true).append(true).open(self.dir.join("alertmanager.log"))?;
        let mut child = Command::new(&self.binary)
            .arg(format!("--config.file={}", self.dir.join("alertmanager.yml").display()))
            .arg(format!("--storage.path={}", self.dir.join("data").display()))
            .arg("--cluster.listen-address=")
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            if crate::http_get(self.port, "/-/ready").await.is_ok_and(|(code, _)| code == 200) {
                self.child = Some(child);
                return Ok(());
            }
            if let Some(status) = child.try_wait()? {
                bail!("Alertmanager exited ({status}):\n{}", self.log());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("Alertmanager was not ready within {} s:\n{}", TIMEOUT.as_secs(), self.log());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (at most 10 s) until nothing listens on the port: a process
    /// killed a moment ago may hold it still.
    async fn wait_for_free_port(&self) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match std::net::TcpListener::bind(("127.0.0.1", self.port)) {
                Ok(_) => return Ok(()),
                Err(e) if tokio::time::Instant::now() > deadline => {
                    bail!("port {} of 127.0.0.1 is taken, Alertmanager cannot listen there: {e}", self.port)
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// What Alertmanager logged, every run of it.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("alertmanager.log")).unwrap_or_default()
    }

    /// Every silence it holds, expired ones included (`GET
    /// /api/v2/silences`): each a JSON object with `id`, `status.state`
    /// (`active`, `pending` or `expired`), `matchers`, `startsAt`,
    /// `endsAt`, `createdBy`, `comment` and `updatedAt`.
    ///
    /// # Errors
    ///
    /// When it does not answer 200 with a JSON array (or is stopped).
    pub async fn silences(&self) -> Result<Vec<Value>> {
        let (code, body) = self.request("GET", "/api/v2/silences", None).await?;
        ensure!(code == 200, "GET /api/v2/silences: {code} {body}");
        serde_json::from_str(&body).with_context(|| format!("GET /api/v2/silences is not a JSON array: {body}"))
    }

    /// One silence (`GET /api/v2/silence/{id}`), `None` when there is none
    /// with that id.
    ///
    /// # Errors
    ///
    /// When it answers neither 200 with JSON nor 404 (or is stopped).
    pub async fn silence(&self, id: &str) -> Result<Option<Value>> {
        let (code, body) = self.request("GET", &format!("/api/v2/silence/{id}"), None).await?;
        match code {
            200 => Ok(Some(serde_json::from_str(&body).context("a silence is not JSON")?)),
            404 => Ok(None),
            _ => bail!("GET /api/v2/silence/{id}: {code} {body}"),
        }
    }

    /// Creates a silence (`POST /api/v2/silences`; see
    /// [`silence_matching`]), or updates one if `silence` has the `id` of
    /// one, and returns its id.
    ///
    /// # Errors
    ///
    /// When Alertmanager refuses it (its answer is in the error) or is
    /// stopped.
    pub async fn create_silence(&self, silence: &Value) -> Result<String> {
        let (code, body) = self.request("POST", "/api/v2/silences", Some(silence)).await?;
        ensure!(code == 200, "POST /api/v2/silences: {code} {body}");
        let answer: Value = serde_json::from_str(&body).with_context(|| format!("POST /api/v2/silences: {body}"))?;
        answer["silenceID"].as_str().map(str::to_owned).with_context(|| format!("no silenceID in {body}"))
    }

    /// Expires a silence (`DELETE /api/v2/silence/{id}`): it stays listed,
    /// in state `expired`.
    ///
    /// # Errors
    ///
    /// When Alertmanager does not answer 200 (an unknown id is 404) or is
    /// stopped.
    pub async fn expire(&self, id: &str) -> Result<()> {
        let (code, body) = self.request("DELETE", &format!("/api/v2/silence/{id}"), None).await?;
        ensure!(code == 200, "DELETE /api/v2/silence/{id}: {code} {body}");
        Ok(())
    }

    /// One HTTP request, the status code and the body. HTTP/1.0, so the
    /// answer is never chunked and ends when the connection does.
    async fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Result<(u16, String)> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .with_context(|| format!("{method} {path}: nothing answers on {}", self.url()))?;
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.port,
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        let code = answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("an HTTP status line")?;
        let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
        Ok((code, body))
    }
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
