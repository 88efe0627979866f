//! What the host adds to one outbound HTTP call of a guest: the same GET
//! to a server on loopback, timed as the guest sees it (through
//! `wasi:http`, the host's checks and its client) and made directly from
//! this process with hyper, side by side in one run.
//!
//! ```sh
//! cargo build --profile dist -p capstan-tests --bin bench-egress
//! tests/build-guests.sh      # fetcher.wasm; export CAPSTAN_GUESTS=<the dir it prints> if not found
//! flock -o /tmp/capstan-bench.lock target/dist/bench-egress --rounds 200
//! ```
//!
//! # What runs
//!
//! A tiny HTTP/1.1 server in this process, on a port the `fetcher`
//! fixture declares (`http://127.0.0.1:18000-18099`), answering every
//! request with `hello` and closing the connection (the host opens one
//! connection per request, so the direct calls do too). Each round, in
//! turn:
//!
//! - `guest`: the `fetcher` fixture on the mock host
//!   (`capstan_host::testing::MockHost`, the host's own runtime, imports
//!   and HTTP client; requests to the network, `MockCluster::use_network`)
//!   reconciles a ConfigMap that asks for 16 GETs (the per-call budget);
//!   the guest times each call with its monotonic clock (the fixture's
//!   `micros`, with `timed: yes`): from building the request to the whole body read, across
//!   the WIT boundary, the host's egress checks and budgets, the
//!   connection, the exchange;
//! - `direct`: 16 GETs from this process with hyper's HTTP/1.1 client on a
//!   fresh TCP connection each, timed the same way.
//!
//! # Measured
//!
//! Per call, over all rounds: p50, p90 and p99 of each, and the host's
//! addition (guest minus direct, at each percentile). The benchmark prints
//! figures and asserts nothing about them.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use capstan_host::object::{Gvk, ObjectRef};
use capstan_host::testing::{MockHost, find_component};
use clap::Parser;
use http_body_util::BodyExt as _;
use serde_json::json;

/// Calls per round: the guest's per-invocation budget.
const CALLS: usize = 16;

#[derive(Parser, Debug)]
struct Args {
    /// Rounds; each makes `CALLS` calls both ways.
    #[arg(long, default_value_t = 200)]
    rounds: usize,
}

/// Serves `hello` to every request on a port of 18000-18099.
async fn server() -> Result<u16> {
    let mut bound = None;
    for port in 18000..18100 {
        if let Ok(listener) = tokio::net::TcpListener::bind(("127.0.0.1", port)).await {
            bound = Some(listener);
            break;
        }
    }
    let listener = bound.context("no free port in 18000-18099")?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move { capstan_tests::answer_hello(&mut stream).await });
        }
    });
    Ok(port)
}

/// One GET on a fresh connection, the body read whole, as the host's
/// client makes it.
async fn direct(port: u16) -> Result<Duration> {
    let start = Instant::now();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake::<_, http_body_util::Empty<bytes::Bytes>>(
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await?;
    tokio::spawn(connection);
    let request =
        hyper::Request::get("/ok").header("host", format!("127.0.0.1:{port}")).body(http_body_util::Empty::new())?;
    let response = sender.send_request(request).await?;
    ensure!(response.status() == 200, "{}", response.status());
    let body = response.into_body().collect().await?.to_bytes();
    ensure!(body.as_ref() == b"hello", "{body:?}");
    Ok(start.elapsed())
}

/// The guest's `CALLS` calls of one round, as it timed them.
async fn guest(host: &mut MockHost, round: usize, url: &str) -> Result<Vec<Duration>> {
    let name = format!("round-{round}");
    host.seed(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"behaviour": "fetch", "urls": url, "times": CALLS.to_string(), "timed": "yes"},
    }))?;
    host.run_until_idle().await?;
    let child = ObjectRef::new(Gvk::new("", "v1", "ConfigMap"), Some("default"), format!("{name}-fetch"));
    let cm = host.cluster().get_sync(&child).context("the fetch child")?;
    let results = cm["data"]["results"].as_str().unwrap_or_default();
    ensure!(results.lines().all(|l| l == "status:200 bytes:5"), "{results}");
    let micros = cm["data"]["micros"].as_str().unwrap_or_default();
    let times: Vec<Duration> = micros.split(',').filter_map(|m| m.parse().ok()).map(Duration::from_micros).collect();
    ensure!(times.len() == CALLS, "{micros}");
    Ok(times)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let port = server().await?;
    let url = format!("http://127.0.0.1:{port}/ok");
    let mut host = MockHost::new()?;
    host.cluster().use_network(true);
    host.load(find_component("fetcher").map_err(anyhow::Error::msg)?).await?;
    // Warm both paths (instance, compiled code, the server).
    guest(&mut host, usize::MAX, &url).await?;
    for _ in 0..CALLS {
        direct(port).await?;
    }
    let (mut via_guest, mut via_direct) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        via_guest.extend(guest(&mut host, round, &url).await?);
        for _ in 0..CALLS {
            via_direct.push(direct(port).await?);
        }
    }
    via_guest.sort();
    via_direct.sort();
    println!(
        "{} calls each way ({} rounds of {CALLS}), GET of 5 bytes on loopback, a fresh connection per call",
        via_guest.len(),
        args.rounds
    );
    println!("{:<8} {:>9} {:>9} {:>9}", "µs", "p50", "p90", "p99");
    for (label, times) in [("guest", &via_guest), ("direct", &via_direct)] {
        let [p50, p90, p99] = [0.5, 0.9, 0.99].map(|p| micros(percentile(times, p)));
        println!("{label:<8} {p50:>9.1} {p90:>9.1} {p99:>9.1}");
    }
    let added = [0.5, 0.9, 0.99].map(|p| micros(percentile(&via_guest, p)) - micros(percentile(&via_direct, p)));
    println!("{:<8} {:>9.1} {:>9.1} {:>9.1}", "added", added[0], added[1], added[2]);
    Ok(())
}
