//! The Alertmanager harness ([`capstan_tests::alertmanager`]) against the
//! real thing: a silence created, read back, expired, and still there after
//! a restart on the same port and storage; a port already taken is refused.
//!
//! Run: `cargo test -p capstan-tests --test alertmanager_harness` (needs Go;
//! the first run builds Alertmanager into `$CAPSTAN_CACHE/alertmanager`).

use std::time::Duration;

use anyhow::{Context as _, Result};
use capstan_tests::alertmanager::{Alertmanager, silence_matching};
use serde_json::Value;

/// The silence with `id` among `silences`.
fn find<'a>(silences: &'a [Value], id: &str) -> Result<&'a Value> {
    silences.iter().find(|s| s["id"] == id).with_context(|| format!("no silence {id} in {silences:?}"))
}

#[tokio::test]
async fn a_silence_is_created_expired_and_survives_a_restart() -> Result<()> {
    let mut am = Alertmanager::start().await?;
    assert_eq!(am.url(), format!("http://127.0.0.1:{}", am.port()));
    let port = am.port();

    let id = am
        .create_silence(&silence_matching("alertname", "Watchdog", Duration::from_secs(3600), "expired by the test"))
        .await?;
    let silences = am.silences().await?;
    let silence = find(&silences, &id)?;
    assert_eq!(silence["status"]["state"], "active", "{silence}");
    assert_eq!(silence["comment"], "expired by the test");
    assert_eq!(silence["matchers"][0]["name"], "alertname");
    assert_eq!(silence["matchers"][0]["value"], "Watchdog");
    assert_eq!(am.silence(&id).await?.context("GET /api/v2/silence/{id}")?["id"], id.as_str());

    am.expire(&id).await?;
    let silences = am.silences().await?;
    assert_eq!(find(&silences, &id)?["status"]["state"], "expired", "{silences:?}");
    assert!(am.expire("00000000-0000-0000-0000-000000000000").await.is_err(), "an unknown silence cannot be expired");

    let kept = am
        .create_silence(&silence_matching("severity", "page", Duration::from_secs(3600), "kept across the restart"))
        .await?;

    am.stop().await;
    assert!(am.silences().await.is_err(), "a stopped Alertmanager answers nothing");

    am.restart().await?;
    assert_eq!(am.port(), port);
    let silences = am.silences().await?;
    assert_eq!(silences.len(), 2, "{silences:?}");
    assert_eq!(find(&silences, &id)?["status"]["state"], "expired", "{silences:?}");
    let kept = find(&silences, &kept)?;
    assert_eq!(kept["status"]["state"], "active", "{kept}");
    assert_eq!(kept["comment"], "kept across the restart");
    Ok(())
}

#[tokio::test]
async fn a_taken_port_is_refused_not_mistaken_for_a_ready_alertmanager() -> Result<()> {
    use tokio::io::AsyncWriteExt as _;
    // Something else on the port that answers 200 to anything, `/-/ready`
    // included.
    let impostor = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = impostor.local_addr()?.port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = impostor.accept().await {
            let _ = stream.write_all(b"HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        }
    });
    let error = Alertmanager::start_on(port).await.expect_err("the port is taken");
    assert!(format!("{error:#}").contains(&format!("port {port} of 127.0.0.1 is taken")), "{error:#}");
    Ok(())
}
