//! A real trace backend on loopback for the tests: Jaeger (`cmd/jaeger`,
//! the OpenTelemetry-collector-based binary), built once from the Go module
//! proxy into `$CAPSTAN_CACHE/jaeger/jaeger-<version>/jaeger`, and started
//! by each test that needs one with in-memory storage, OTLP receivers
//! (HTTP and gRPC) and the query API on free ports. Nothing is left running: the
//! process is killed when the [`Jaeger`] is dropped.
//!
//! Jaeger's module carries a `replace` line, so `go install …@version`
//! refuses it; it is built from a builder module of ours,
//! `tests/jaeger/go.{mod,sum}`, that requires it (the way the control
//! plane is built, see `capstan cluster build`).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::Value;
use tokio::process::{Child, Command};

/// The Jaeger version the tests run (the module version of
/// `github.com/jaegertracing/jaeger`).
pub const JAEGER_VERSION: &str = "v1.75.0";

const PACKAGE: &str = "github.com/jaegertracing/jaeger/cmd/jaeger";
const GO_MOD: &str = include_str!("../jaeger/go.mod");
const GO_SUM: &str = include_str!("../jaeger/go.sum");

/// The jaeger binary, built into the cache first if it is not there.
///
/// # Errors
///
/// When there is no Go toolchain, or the build fails (its output is in the
/// error).
pub async fn binary() -> Result<PathBuf> {
    crate::go_binary(
        &PathBuf::from("jaeger").join(format!("jaeger-{JAEGER_VERSION}")),
        "jaeger",
        &format!("Jaeger {JAEGER_VERSION}"),
        &[("go.mod", GO_MOD), ("go.sum", GO_SUM)],
        &["build", "-mod=mod", "-trimpath", "-ldflags=-s -w", "-o", "jaeger", PACKAGE],
    )
    .await
}

/// A running Jaeger on `127.0.0.1`: in-memory storage, OTLP/HTTP and
/// OTLP/gRPC receivers and the query API.
#[derive(Debug)]
pub struct Jaeger {
    binary: PathBuf,
    dir: PathBuf,
    otlp_port: u16,
    otlp_grpc_port: u16,
    query_port: u16,
    child: Option<Child>,
}

impl Jaeger {
    /// Starts Jaeger on free ports and waits until its query API answers.
    ///
    /// # Errors
    ///
    /// When it cannot be built or does not answer within 60 s.
    pub async fn start() -> Result<Self> {
        let binary = binary().await?;
        let dir = std::env::temp_dir().join(format!("capstan-jaeger-{}", crate::random_suffix(8)));
        std::fs::create_dir_all(&dir)?;
        let (otlp_port, otlp_grpc_port) = (crate::free_port()?, crate::free_port()?);
        let (query_port, query_grpc_port) = (crate::free_port()?, crate::free_port()?);
        // Every listener on a port of ours (the collector's own metrics
        // and the extensions a test does not need are left out).
        let config = format!(
            "service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: memory
    http:
      endpoint: 127.0.0.1:{query_port}
    grpc:
      endpoint: 127.0.0.1:{query_grpc_port}
  jaeger_storage:
    backends:
      memory:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
      grpc:
        endpoint: 127.0.0.1:{otlp_grpc_port}
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: memory
"
        );
        std::fs::write(dir.join("config.yaml"), config)?;
        let mut jaeger = Self { binary, dir, otlp_port, otlp_grpc_port, query_port, child: None };
        jaeger.resume().await?;
        Ok(jaeger)
    }

    /// The base URL of the OTLP/HTTP receiver, what
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes.
    pub fn otlp_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_port)
    }

    /// The URL of the OTLP/gRPC receiver, what `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// takes with `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`.
    pub fn otlp_grpc_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.otlp_grpc_port)
    }

    /// Stops Jaeger (what it stored is lost); [`resume`](Self::resume)
    /// starts it again on the same ports.
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts Jaeger again on the same ports, with empty storage.
    ///
    /// # Errors
    ///
    /// When it does not answer within 60 s.
    pub async fn resume(&mut self) -> Result<()> {
        ensure!(self.child.is_none(), "Jaeger runs already");
        let log = std::fs::File::create(self.dir.join("jaeger.log"))?;
        let child = Command::new(&self.binary)
            .arg("--config")
            .arg(self.dir.join("config.yaml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))?;
        self.child = Some(child);
        for _ in 0..600 {
            if crate::http_get(self.query_port, "/api/services").await.is_ok_and(|(code, _)| code == 200) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("Jaeger did not answer within 60 s:\n{}", self.log())
    }

    /// The pid of the running Jaeger (`None` while stopped), for its CPU
    /// time and memory.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    /// What Jaeger logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("jaeger.log")).unwrap_or_default()
    }

    /// The traces of `service` Jaeger holds (the query API's
    /// `/api/traces?service=…`): each a JSON object with `traceID`, `spans`
    /// (`operationName`, `tags`, `references`, …) and `processes`.
    ///
    /// # Errors
    ///
    /// When the query API does not answer 200 with JSON.
    pub async fn traces(&self, service: &str) -> Result<Vec<Value>> {
        let (code, body) =
            crate::http_get(self.query_port, &format!("/api/traces?service={service}&limit=1000&lookback=1h")).await?;
        ensure!(code == 200, "GET /api/traces: {code} {body}");
        let body: Value =
            serde_json::from_str(dechunk(&body).as_str()).context("the query API's answer is not JSON")?;
        Ok(body["data"].as_array().cloned().unwrap_or_default())
    }
}

impl Drop for Jaeger {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.start_kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The body of an HTTP/1.1 answer that may be chunked (`http_get` returns
/// it as it came).
fn dechunk(body: &str) -> String {
    if body.trim_start().starts_with('{') {
        return body.to_owned();
    }
    let (mut out, mut rest) = (Vec::new(), body.as_bytes());
    while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&rest[..end]).ok().and_then(|s| usize::from_str_radix(s.trim(), 16).ok());
        let data = &rest[end + 2..];
        match size {
            Some(n) if n > 0 && data.len() >= n => {
                out.extend_from_slice(&data[..n]);
                rest = data[n..].strip_prefix(b"\r\n").unwrap_or(&data[n..]);
            }
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of the tag `key` of a span of the query API.
pub fn tag<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["tags"].as_array()?.iter().find(|t| t["key"] == key).map(|t| &t["value"])
}
