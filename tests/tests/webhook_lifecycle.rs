//! What becomes of the webhook configurations and the CRD conversion a
//! host installed (`--install-webhooks`) when it swaps in a new version of
//! the component and when it stops gracefully, on the real kube-apiserver,
//! with `capstan run --components DIR` as a process of its own serving
//! `greeter-webhooks`. As docs/webhooks.md ("When a host stops, crashes or
//! loses a component") says:
//!
//! - a hot swap (a new version of the same file): the configurations are
//!   updated by the new version. `greeter-webhooks-v2` drops the lenient
//!   validating webhook (its entry goes) and the defaulting one (the only
//!   mutating webhook: its configuration goes, so nothing calls for a
//!   webhook no version serves), and its own code answers the reviews; the
//!   conversion stays pointed at the host and converts;
//! - a graceful stop (SIGTERM): the configurations and the conversion are
//!   kept, so that while nothing answers `Fail` refuses writes and reads at
//!   the other version fail; a restart on the same address serves them
//!   again;
//! - the file then holding another component: the first one is removed
//!   from the host, and its configurations with it; its conversion stays.
//!
//! One test: the configurations are cluster-wide, named by the component.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use capstan_host::serve::webhook::install::OWNER_ANNOTATION;
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
const LENIENT: &str = "lenient.greetings.webhooks.examples.capstan.dev";
const DEFAULT: &str = "default.greetings.webhooks.examples.capstan.dev";

/// `capstan run` following a components folder in a namespace, installing
/// CRDs and webhooks.
struct Run {
    child: tokio::process::Child,
    /// Its `--listen` port (`/status`).
    port: u16,
}

/// Starts `capstan run --components dir`, its webhook server on
/// `webhook_port` (the owner of what it installs is
/// `https://127.0.0.1:<webhook_port>`), its log in a file named `name`.
fn run(binary: &Path, kubeconfig: &Path, ns: &TestNamespace, dir: &Path, webhook_port: u16, name: &str) -> Result<Run> {
    let port = free_port()?;
    let log = std::fs::File::create(std::env::temp_dir().join(format!("capstan-{}-{name}.log", ns.name())))?;
    let child = tokio::process::Command::new(binary)
        .args(["run", "--install-crds", "--install-webhooks", "-n", ns.name()])
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--webhook-listen=127.0.0.1:{webhook_port}"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--components")
        .arg(dir)
        .env("CAPSTAN_LOG", "info,kube_client=off")
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()?;
    Ok(Run { child, port })
}

/// Stops `run` as an operator or the kubelet does (SIGTERM) and waits for
/// its clean exit.
async fn stop(mut run: Run) -> Result<()> {
    let pid = run.child.id().context("the host runs")?;
    let signalled = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status()?;
    ensure!(signalled.success(), "kill -TERM failed");
    let exit = tokio::time::timeout(TIMEOUT, run.child.wait()).await.context("the host exits on SIGTERM")??;
    ensure!(exit.success(), "the host exited with {exit}");
    Ok(())
}

/// Puts `component` in `dir` as `greeter-webhooks.wasm` in one rename, as
/// a deploy should.
fn deploy(dir: &Path, component: &str) -> Result<()> {
    let staged = dir.join(".staged");
    std::fs::copy(find_component(component).map_err(anyhow::Error::msg)?, &staged)?;
    std::fs::rename(&staged, dir.join("greeter-webhooks.wasm"))?;
    Ok(())
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn greetings(ns: &TestNamespace, version: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(GROUP, version, "Greeting");
    Api::namespaced_with(ns.client(), ns.name(), &ApiResource::from_gvk_with_plural(&gvk, "greetings"))
}

fn greeting(name: &str, spec: Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": format!("{GROUP}/v1alpha1"), "kind": "Greeting",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

/// What is installed for the component: the validating configuration's
/// owner and webhook names, and the mutating configuration's webhook
/// names (`None`: no such configuration).
#[derive(Debug, PartialEq)]
struct Installed {
    owner: String,
    validating: Vec<String>,
    mutating: Option<Vec<String>>,
}

async fn installed(ns: &TestNamespace) -> Result<Option<Installed>> {
    let Some(validating) = Api::<ValidatingWebhookConfiguration>::all(ns.client()).get_opt(CONFIGURATION).await? else {
        return Ok(None);
    };
    let mutating = Api::<MutatingWebhookConfiguration>::all(ns.client()).get_opt(CONFIGURATION).await?;
    let owner = validating.metadata.annotations.unwrap_or_default().get(OWNER_ANNOTATION).cloned().unwrap_or_default();
    let mut names: Vec<String> = validating.webhooks.unwrap_or_default().into_iter().map(|w| w.name).collect();
    names.sort();
    let mutating = mutating.map(|m| m.webhooks.unwrap_or_default().into_iter().map(|w| w.name).collect());
    Ok(Some(Installed { owner, validating: names, mutating }))
}

/// The Greeting CRD's conversion strategy and webhook URL.
async fn conversion(ns: &TestNamespace) -> Result<(String, String)> {
    let crd = Api::<CustomResourceDefinition>::all(ns.client()).get(&format!("greetings.{GROUP}")).await?;
    let conversion = crd.spec.conversion.context("a conversion stanza")?;
    let url = conversion.webhook.and_then(|w| w.client_config).and_then(|c| c.url).unwrap_or_default();
    Ok((conversion.strategy, url))
}

/// Waits until the API server calls the webhooks `owner` installed: an
/// empty Greeting is denied by the guest (not refused for a call that
/// failed).
async fn served(ns: &TestNamespace, owner: &str) -> Result<()> {
    wait_for(TIMEOUT, || async {
        installed(ns).await.ok().flatten().filter(|i| i.owner == owner)?;
        match greetings(ns, "v1alpha1")
            .create(&PostParams::default(), &greeting("probe", json!({"message": ""})).ok()?)
            .await
        {
            Err(kube::Error::Api(s)) if s.message.contains("spec.message must not be empty") => Some(()),
            Ok(_) => {
                let _ = greetings(ns, "v1alpha1").delete("probe", &DeleteParams::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await
    .context("the API server calls the host's webhooks")
}

/// The `/status` entry of the host's one component file.
async fn status(run: &Run) -> Result<Value> {
    let (code, body) = capstan_tests::http_get(run.port, "/status").await?;
    ensure!(code == 200, "/status answered {code}: {body}");
    let status: Value = serde_json::from_str(&body)?;
    Ok(status["components"][0].clone())
}

#[tokio::test(flavor = "multi_thread")]
async fn webhooks_are_updated_by_a_hot_swap_and_kept_through_a_graceful_stop() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("webhook-lifecycle").await?;
    let binary = capstan_binary().await?;
    let kubeconfig = plane.kubeconfig_path();
    let dir = Dir(std::env::temp_dir().join(format!("capstan-webhook-lifecycle-{}", ns.name())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0)?;
    let webhook_port = free_port()?;
    let owner = format!("https://127.0.0.1:{webhook_port}");
    let convert_url = format!("{owner}/convert/greeter-webhooks");

    // v1 serves: two validating webhooks, one mutating, the conversion.
    deploy(&dir.0, "greeter-webhooks")?;
    let first = run(&binary, kubeconfig, &ns, &dir.0, webhook_port, "first")?;
    served(&ns, &owner).await?;
    let v1 = Installed {
        owner: owner.clone(),
        validating: vec![LENIENT.to_owned(), VALIDATE.to_owned()],
        mutating: Some(vec![DEFAULT.to_owned()]),
    };
    assert_eq!(installed(&ns).await?.as_ref(), Some(&v1));
    assert_eq!(conversion(&ns).await?, ("Webhook".to_owned(), convert_url.clone()));
    let refused = greetings(&ns, "v1alpha1")
        .create(&PostParams::default(), &greeting("fifteen", json!({"message": "hi", "replicas": 15}))?)
        .await;
    match refused {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("between 0 and 10, not 15"), "{}", s.message),
        other => anyhow::bail!("v1 let 15 replicas through: {other:?}"),
    }

    // Hot swap: v2 lands in the folder. Its configurations replace v1's:
    // the lenient entry goes, and the mutating configuration with it (v2
    // serves no defaulting webhook: one left behind would refuse every
    // write under `Fail`).
    deploy(&dir.0, "greeter-webhooks-v2")?;
    let v2 = Installed { owner: owner.clone(), validating: vec![VALIDATE.to_owned()], mutating: None };
    let followed = wait_for(TIMEOUT, || async { installed(&ns).await.ok().flatten().filter(|i| *i == v2) }).await;
    if followed.is_err() {
        anyhow::bail!("the configurations do not follow v2: {:?}", installed(&ns).await?);
    }
    // v2's code answers: 15 replicas are allowed now, and not defaulted.
    let stored = wait_for(TIMEOUT, || async {
        let fifteen = greeting("fifteen", json!({"message": "hi", "replicas": 15})).ok()?;
        greetings(&ns, "v1alpha1").create(&PostParams::default(), &fifteen).await.ok()
    })
    .await
    .context("v2 serves the validating webhook")?;
    assert_eq!(stored.data["spec"], json!({"message": "hi", "replicas": 15}));
    let plain = greetings(&ns, "v1alpha1")
        .create(&PostParams::default(), &greeting("plain", json!({"message": "hi"}))?)
        .await?;
    assert_eq!(plain.data["spec"], json!({"message": "hi"}), "no defaulting webhook is called");
    // `/status`: one swap, and v2's one webhook served.
    let swapped = status(&first).await?;
    assert_eq!((&swapped["swaps"], &swapped["state"]), (&json!(1), &json!("serving")), "{swapped}");
    let webhooks: Vec<&Value> = swapped["webhooks"].as_array().into_iter().flatten().map(|w| &w["name"]).collect();
    assert_eq!(webhooks, [&json!(VALIDATE)], "{swapped}");
    // The conversion still points at the host, and converts.
    assert_eq!(conversion(&ns).await?, ("Webhook".to_owned(), convert_url.clone()));
    let read = greetings(&ns, "v1").get("fifteen").await?;
    assert_eq!(read.data["spec"], json!({"greeting": {"text": "hi", "replicas": 15}}), "{:?}", read.data);

    // Graceful stop: everything is kept, for a restart to serve again.
    stop(first).await?;
    assert_eq!(installed(&ns).await?.as_ref(), Some(&v2), "the configurations outlive a graceful stop");
    assert_eq!(conversion(&ns).await?, ("Webhook".to_owned(), convert_url.clone()), "so does the conversion");
    // Meanwhile `Fail` refuses writes, and a read at v1 (the conversion)
    // fails: nothing answers.
    match greetings(&ns, "v1alpha1")
        .create(&PostParams::default(), &greeting("while-stopped", json!({"message": "hi"}))?)
        .await
    {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("failed calling webhook"), "{}", s.message),
        other => anyhow::bail!("a write went through a stopped host's Fail webhook: {other:?}"),
    }
    match greetings(&ns, "v1").get("fifteen").await {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("conversion webhook"), "{}", s.message),
        other => anyhow::bail!("a read at v1 converted with no host: {other:?}"),
    }

    // Restarted on the same address (the same owner): it serves them again.
    let second = run(&binary, kubeconfig, &ns, &dir.0, webhook_port, "second")?;
    served(&ns, &owner).await?;
    assert_eq!(installed(&ns).await?.as_ref(), Some(&v2));
    let read = wait_for(TIMEOUT, || async { greetings(&ns, "v1").get("fifteen").await.ok() }).await?;
    assert_eq!(read.data["spec"]["greeting"]["replicas"], json!(15));

    // The file now holds another component: greeter-webhooks is gone from
    // the host, and so are its configurations (nothing is left to refuse
    // Greetings); its conversion stays, as for a removal.
    deploy(&dir.0, "strict-webhooks")?;
    wait_for(TIMEOUT, || async { installed(&ns).await.ok().filter(Option::is_none) })
        .await
        .context("greeter-webhooks' configurations are withdrawn")?;
    assert!(Api::<MutatingWebhookConfiguration>::all(ns.client()).get_opt(CONFIGURATION).await?.is_none());
    let strict = Api::<ValidatingWebhookConfiguration>::all(ns.client()).get_opt("capstan-strict-webhooks").await?;
    assert!(strict.is_some(), "the new component's configurations are installed");
    assert_eq!(conversion(&ns).await?.0, "Webhook");
    let unchecked = wait_for(TIMEOUT, || async {
        let empty = greeting("unchecked", json!({"message": ""})).ok()?;
        greetings(&ns, "v1alpha1").create(&PostParams::default(), &empty).await.ok()
    })
    .await
    .context("a Greeting is written with no webhook of greeter-webhooks left")?;
    assert_eq!(unchecked.data["spec"], json!({"message": ""}));

    stop(second).await?;
    for name in [CONFIGURATION, "capstan-strict-webhooks"] {
        let _ = Api::<ValidatingWebhookConfiguration>::all(ns.client()).delete(name, &DeleteParams::default()).await;
        let _ = Api::<MutatingWebhookConfiguration>::all(ns.client()).delete(name, &DeleteParams::default()).await;
    }
    let crds = Api::<CustomResourceDefinition>::all(ns.client());
    for crd in [format!("greetings.{GROUP}"), "vaults.fixtures.capstan.dev".to_owned()] {
        let _ = crds.delete(&crd, &DeleteParams::default()).await;
    }
    ns.cleanup().await
}
