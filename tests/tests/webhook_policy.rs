//! The operator's `failurePolicy` (`capstan run --webhook-failure-policy`)
//! on the real kube-apiserver, with `capstan run` as a process of its own
//! serving `greeter-webhooks`, whose validating and defaulting webhooks
//! declare `Fail`.
//!
//! Killed (`kill -9`: nothing withdraws the configurations), a host whose
//! webhooks keep `Fail` leaves every write of a Greeting refused; one run
//! with `Ignore` chosen for them leaves writes going through, unchecked.
//! A choice naming a webhook the component does not declare, or a
//! component the host does not run, stops the start.
//!
//! One test: the configurations are cluster-wide, named by the component.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::testing::find_component;
use capstan_tests::{ControlPlane, TestNamespace, capstan_binary, free_port, wait_for};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
const GROUP: &str = "webhooks.examples.capstan.dev";
const CONFIGURATION: &str = "capstan-greeter-webhooks";
const VALIDATE: &str = "validate.greetings.webhooks.examples.capstan.dev";
const DEFAULT: &str = "default.greetings.webhooks.examples.capstan.dev";

/// `capstan run` serving `component` in `ns`, installing its CRD and
/// webhooks, with `extra` arguments.
struct Run {
    child: tokio::process::Child,
    /// Its `--listen` port (`/status`).
    port: u16,
    /// What it installs as the owner of the configurations.
    owner: String,
}

/// Starts it, its log going to `stderr`.
fn command(binary: &Path, kubeconfig: &Path, ns: &str, component: &Path, extra: &[&str], stderr: Stdio) -> Result<Run> {
    let (port, webhook_port) = (free_port()?, free_port()?);
    let mut command = tokio::process::Command::new(binary);
    command
        .args(["run", "--install-crds", "--install-webhooks", "-n", ns])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--webhook-listen=127.0.0.1:{webhook_port}"))
        .args(extra)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg(component)
        .env("CAPSTAN_LOG", "info,kube_client=off")
        .stdout(Stdio::null())
        .stderr(stderr)
        .kill_on_drop(true);
    let child = command.spawn()?;
    Ok(Run { child, port, owner: format!("https://127.0.0.1:{webhook_port}") })
}

/// A log file for a host that runs a while (a pipe nobody reads would
/// stop it once full).
fn log(ns: &TestNamespace, name: &str) -> Result<Stdio> {
    let path = std::env::temp_dir().join(format!("capstan-{}-{name}.log", ns.name()));
    Ok(std::fs::File::create(path)?.into())
}

fn greetings(ns: &TestNamespace) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, "v1alpha1", "Greeting");
    Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk_with_plural(&gvk, "greetings"))
}

/// A Greeting with an empty message: the validating webhook denies it.
fn empty(name: &str) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Greeting",
        "metadata": {"name": name}, "spec": {"message": ""},
    }))?)
}

/// The owner and the `failurePolicy` of each webhook of the installed
/// configurations, by webhook name.
async fn installed(ns: &TestNamespace) -> Result<(String, Vec<(String, String)>)> {
    let validating = Api::<ValidatingWebhookConfiguration>::all(ns.client()).get(CONFIGURATION).await?;
    let mutating = Api::<MutatingWebhookConfiguration>::all(ns.client()).get(CONFIGURATION).await?;
    let owner = validating
        .metadata
        .annotations
        .unwrap_or_default()
        .get(capstan_host::serve::webhook::install::OWNER_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let mut policies: Vec<(String, String)> = validating
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .map(|w| (w.name, w.failure_policy.unwrap_or_default()))
        .chain(
            mutating.webhooks.unwrap_or_default().into_iter().map(|w| (w.name, w.failure_policy.unwrap_or_default())),
        )
        .collect();
    policies.sort();
    Ok((owner, policies))
}

fn policy_of<'a>(policies: &'a [(String, String)], webhook: &str) -> Option<&'a str> {
    policies.iter().find(|(name, _)| name == webhook).map(|(_, p)| p.as_str())
}

/// Waits until the API server calls `run`'s webhooks: an empty Greeting is
/// denied by the guest (not refused for a call that failed).
async fn served(ns: &TestNamespace, run: &Run) -> Result<()> {
    wait_for(TIMEOUT, || async {
        let (owner, _) = installed(ns).await.ok()?;
        if owner != run.owner {
            return None;
        }
        match greetings(ns).create(&PostParams::default(), &empty("probe").ok()?).await {
            Err(kube::Error::Api(s)) if s.message.contains("spec.message must not be empty") => Some(()),
            Ok(_) => {
                let _ = greetings(ns).delete("probe", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await
    .context("the API server calls the host's webhooks")
}

/// Kills `run` (SIGKILL: no shutdown runs, the configurations stay).
async fn kill(mut run: Run) -> Result<()> {
    run.child.kill().await?;
    Ok(())
}

/// Runs `capstan run` with `extra` until it exits; its stderr.
async fn refused_start(binary: &Path, kubeconfig: &Path, ns: &str, component: &Path, extra: &[&str]) -> Result<String> {
    let run = command(binary, kubeconfig, ns, component, extra, Stdio::piped())?;
    let output = tokio::time::timeout(TIMEOUT, run.child.wait_with_output()).await.context("the host exits")??;
    ensure!(!output.status.success(), "the host started");
    Ok(String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_choosing_ignore_keeps_writes_going_through_a_killed_host() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("webhook-policy").await?;
    let binary = capstan_binary().await?;
    let component = find_component("greeter-webhooks").map_err(anyhow::Error::msg)?;
    let kubeconfig = plane.kubeconfig_path();

    // A choice that names nothing real stops the start, saying what is there.
    let typo = format!("greeter-webhooks/typo.{GROUP}=Ignore");
    let stderr =
        refused_start(&binary, kubeconfig, ns.name(), &component, &["--webhook-failure-policy", &typo]).await?;
    assert!(stderr.contains("declares no such admission webhook") && stderr.contains(VALIDATE), "{stderr}");
    let stderr =
        refused_start(&binary, kubeconfig, ns.name(), &component, &["--webhook-failure-policy", "greeter=Ignore"])
            .await?;
    assert!(stderr.contains("names component greeter, not one of the components here (greeter-webhooks)"), "{stderr}");

    // As declared: Fail. Killed, the host leaves every write refused.
    let run = command(&binary, kubeconfig, ns.name(), &component, &[], log(&ns, "declared")?)?;
    served(&ns, &run).await?;
    let (_, policies) = installed(&ns).await?;
    assert_eq!(policy_of(&policies, VALIDATE), Some("Fail"), "{policies:?}");
    kill(run).await?;
    let refused = greetings(&ns).create(&PostParams::default(), &empty("while-none-answers")?).await;
    match refused {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("failed calling webhook"), "{}", s.message),
        other => anyhow::bail!("a write went through a dead Fail webhook: {other:?}"),
    }

    // The operator chooses Ignore for both webhooks declared Fail. The
    // next host takes over the configurations of the dead one, installs
    // that choice, and says so in its status.
    let chosen = [format!("greeter-webhooks/{VALIDATE}=Ignore"), format!("greeter-webhooks/{DEFAULT}=Ignore")];
    let args = ["--webhook-failure-policy", &chosen[0], "--webhook-failure-policy", &chosen[1]];
    let run = command(&binary, kubeconfig, ns.name(), &component, &args, log(&ns, "chosen")?)?;
    // Served: the guest still validates while it answers (a denial is not a
    // failure; failurePolicy does not apply to it).
    served(&ns, &run).await?;
    let (owner, policies) = installed(&ns).await?;
    assert_eq!(owner, run.owner);
    assert_eq!(policy_of(&policies, VALIDATE), Some("Ignore"), "{policies:?}");
    assert_eq!(policy_of(&policies, DEFAULT), Some("Ignore"), "{policies:?}");
    let (code, body) = capstan_tests::http_get(run.port, "/status").await?;
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body)?;
    let webhooks = status["components"][0]["webhooks"].as_array().context("webhooks in the status")?;
    let validate = webhooks.iter().find(|w| w["name"] == VALIDATE).context("the validating webhook")?;
    assert_eq!((&validate["failurePolicy"], &validate["failurePolicyFrom"]), (&json!("Ignore"), &json!("operator")));
    kill(run).await?;

    // Killed: the write goes through, unchecked (an empty message, no
    // defaulted replicas).
    let stored = greetings(&ns).create(&PostParams::default(), &empty("unchecked")?).await?;
    assert_eq!(stored.data["spec"], json!({"message": ""}), "{:?}", stored.data);

    Api::<ValidatingWebhookConfiguration>::all(ns.client()).delete(CONFIGURATION, &DeleteParams::default()).await?;
    Api::<MutatingWebhookConfiguration>::all(ns.client()).delete(CONFIGURATION, &DeleteParams::default()).await?;
    Api::<CustomResourceDefinition>::all(ns.client())
        .delete(&format!("greetings.{GROUP}"), &DeleteParams::default())
        .await?;
    ns.cleanup().await
}
