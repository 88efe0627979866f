//! Smoke tests against a real Kubernetes control plane (kube-apiserver, etcd
//! and kube-controller-manager; see `control-plane/README.md`).
//!
//! The first test to run starts the control plane (or reuses a running one)
//! through [`ControlPlane::shared`].

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use capstan_tests::{ControlPlane, FIELD_MANAGER, TestNamespace, install_crd, token_for_service_account, wait_for};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use serde_json::json;

const GREETING_CRD: &str = include_str!("../fixtures/greeting-crd.yaml");

fn greeting_crd() -> Result<serde_json::Value> {
    serde_yaml_ng::from_str(GREETING_CRD).context("parsing fixtures/greeting-crd.yaml")
}

fn greeting_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("examples.capstan.dev", "v1alpha1", "Greeting"),
        "greetings",
    )
}

fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta { name: Some(name.to_owned()), ..ObjectMeta::default() },
        data: Some(data.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()),
        ..ConfigMap::default()
    }
}

/// The HTTP status code of a `kube::Error::Api`, if it is one.
fn api_error_code<T: std::fmt::Debug>(result: &kube::Result<T>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

/// The next event of a watch stream, failing after 20 s.
async fn next_event<S>(stream: &mut S) -> Result<WatchEvent<ConfigMap>>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .context("no watch event within 20 s")?
        .context("the watch ended")?
        .context("watch error")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_server_reports_the_pinned_kubernetes_version() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let pinned = include_str!("../control-plane/versions.env")
        .lines()
        .find_map(|l| l.strip_prefix("KUBERNETES_VERSION="))
        .context("KUBERNETES_VERSION missing from versions.env")?
        .trim();
    let version = plane.client()?.apiserver_version().await?;
    assert_eq!(version.git_version, pinned, "gitVersion stamped by cp.sh build");
    let minor = pinned.split('.').nth(1).context("version has no minor")?;
    assert_eq!(version.major, "1");
    assert_eq!(version.minor, minor);
    assert_eq!(version.git_tree_state, "clean");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_map_can_be_created_read_listed_watched_applied_and_deleted() -> Result<()> {
    let ns = TestNamespace::new("smoke-configmap").await?;
    let api: Api<ConfigMap> = ns.api();

    // Watch from "now", then expect ADDED, MODIFIED and DELETED for our object.
    let start = api.list(&ListParams::default()).await?;
    let version = start.metadata.resource_version.context("list has no resourceVersion")?;
    let mut events =
        api.watch(&WatchParams::default().fields("metadata.name=greeting").timeout(60), &version).await?.boxed();

    let created = api.create(&PostParams::default(), &config_map("greeting", &[("hello", "world")])).await?;
    assert!(created.metadata.uid.is_some(), "the server assigned a uid");

    let got = api.get("greeting").await?;
    assert_eq!(got.data.as_ref().and_then(|d| d.get("hello")).map(String::as_str), Some("world"));

    let names: Vec<String> =
        api.list(&ListParams::default()).await?.into_iter().filter_map(|cm| cm.metadata.name).collect();
    assert!(names.iter().any(|n| n == "greeting"), "listed: {names:?}");

    match next_event(&mut events).await? {
        WatchEvent::Added(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("greeting")),
        other => bail!("expected ADDED, got {other:?}"),
    }

    // Server-side apply changes a value and adds a label; the field manager is recorded.
    let applied = api
        .patch(
            "greeting",
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": "greeting", "labels": { "capstan.dev/applied": "yes" } },
                "data": { "hello": "kubernetes" },
            })),
        )
        .await?;
    assert_eq!(applied.data.as_ref().and_then(|d| d.get("hello")).map(String::as_str), Some("kubernetes"));
    let managers: Vec<_> =
        applied.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.as_deref()).collect();
    assert!(managers.contains(&FIELD_MANAGER), "managers: {managers:?}");

    match next_event(&mut events).await? {
        WatchEvent::Modified(cm) => {
            assert_eq!(cm.data.as_ref().and_then(|d| d.get("hello")).map(String::as_str), Some("kubernetes"))
        }
        other => bail!("expected MODIFIED, got {other:?}"),
    }

    api.delete("greeting", &DeleteParams::default()).await?;
    match next_event(&mut events).await? {
        WatchEvent::Deleted(cm) => assert_eq!(cm.metadata.name.as_deref(), Some("greeting")),
        other => bail!("expected DELETED, got {other:?}"),
    }
    assert_eq!(api_error_code(&api.get("greeting").await), Some(404));

    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_greeting_crd_is_established_and_a_greeting_gets_defaults_and_status() -> Result<()> {
    let ns = TestNamespace::new("smoke-greeting").await?;
    let crd = install_crd(&ns.client(), greeting_crd()?).await?;
    assert_eq!(crd.spec.names.short_names.as_deref(), Some(&["greet".to_owned()][..]));
    let columns: Vec<_> =
        crd.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.as_str()).collect();
    assert_eq!(columns, ["Message", "Replicas", "Ready", "Age"]);

    let api: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &greeting_resource());
    let hello: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": { "name": "hello" },
        "spec": { "message": "Hello, Capstan" },
    }))?;
    let created = api.create(&PostParams::default(), &hello).await?;
    assert_eq!(created.data["spec"]["replicas"], json!(1), "replicas defaults to 1");
    let generation = created.metadata.generation.context("no generation")?;

    // The status subresource: a status patch changes status only.
    let with_status = api
        .patch_status(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "status": {
                    "observedGeneration": generation,
                    "message": "greeted",
                    "conditions": [{ "type": "Ready", "status": "True", "reason": "Greeted" }],
                },
            })),
        )
        .await?;
    assert_eq!(with_status.data["status"]["observedGeneration"], json!(generation));
    assert_eq!(with_status.data["spec"]["message"], json!("Hello, Capstan"));
    assert_eq!(with_status.metadata.generation, Some(generation), "status does not bump generation");

    // …and a status sent to the main resource is ignored.
    let ignored = api
        .patch(
            "hello",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 3 }, "status": { "message": "ignored" } })),
        )
        .await?;
    assert_eq!(ignored.data["spec"]["replicas"], json!(3));
    assert_eq!(ignored.data["status"]["message"], json!("greeted"));
    assert!(ignored.metadata.generation > Some(generation), "a spec change bumps generation");

    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_greeting_with_negative_replicas_is_rejected_with_422() -> Result<()> {
    let ns = TestNamespace::new("smoke-invalid").await?;
    install_crd(&ns.client(), greeting_crd()?).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client(), ns.name(), &greeting_resource());
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": { "name": "negative" },
        "spec": { "message": "too few", "replicas": -1 },
    }))?;
    let result = api.create(&PostParams::default(), &bad).await;
    match &result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert_eq!(status.reason, "Invalid");
            assert!(status.message.contains("spec.replicas"), "{}", status.message);
        }
        other => bail!("expected a 422 rejection, got {other:?}"),
    }

    let missing_message: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.capstan.dev/v1alpha1",
        "kind": "Greeting",
        "metadata": { "name": "silent" },
        "spec": { "replicas": 1 },
    }))?;
    let result = api.create(&PostParams::default(), &missing_message).await;
    assert_eq!(api_error_code(&result), Some(422), "spec.message is required: {result:?}");

    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_account_may_not_list_secrets_but_may_list_config_maps_once_granted_a_role() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let ns = TestNamespace::new("smoke-rbac").await?;
    let admin = ns.client();

    let sa = ServiceAccount {
        metadata: ObjectMeta { name: Some("reader".to_owned()), ..ObjectMeta::default() },
        ..ServiceAccount::default()
    };
    ns.api::<ServiceAccount>().create(&PostParams::default(), &sa).await?;
    let token = token_for_service_account(&admin, ns.name(), "reader").await?;
    let as_reader = plane.client_with_token(&token)?;

    let secrets: Api<Secret> = Api::namespaced(as_reader.clone(), ns.name());
    let config_maps: Api<ConfigMap> = Api::namespaced(as_reader, ns.name());
    assert_eq!(api_error_code(&secrets.list(&ListParams::default()).await), Some(403));
    assert_eq!(api_error_code(&config_maps.list(&ListParams::default()).await), Some(403));

    let role = Role {
        metadata: ObjectMeta { name: Some("configmap-reader".to_owned()), ..ObjectMeta::default() },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".to_owned()]),
            verbs: vec!["get".to_owned(), "list".to_owned(), "watch".to_owned()],
            ..PolicyRule::default()
        }]),
    };
    ns.api::<Role>().create(&PostParams::default(), &role).await?;
    let binding = RoleBinding {
        metadata: ObjectMeta { name: Some("reader-reads-configmaps".to_owned()), ..ObjectMeta::default() },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: "configmap-reader".to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: "reader".to_owned(),
            namespace: Some(ns.name().to_owned()),
            ..Subject::default()
        }]),
    };
    ns.api::<RoleBinding>().create(&PostParams::default(), &binding).await?;

    // The RBAC authorizer reads from an informer cache: allow it a moment.
    wait_for(Duration::from_secs(10), || async { config_maps.list(&ListParams::default()).await.ok() })
        .await
        .context("the ServiceAccount still cannot list ConfigMaps after the RoleBinding")?;
    assert_eq!(
        api_error_code(&secrets.list(&ListParams::default()).await),
        Some(403),
        "the Role grants ConfigMaps only"
    );

    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owned_config_map_is_garbage_collected_after_its_owner_is_deleted() -> Result<()> {
    let ns = TestNamespace::new("smoke-gc").await?;
    let api: Api<ConfigMap> = ns.api();

    let owner = api.create(&PostParams::default(), &config_map("owner", &[("role", "owner")])).await?;
    let mut child = config_map("child", &[("role", "child")]);
    child.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
        name: "owner".to_owned(),
        uid: owner.metadata.uid.clone().context("owner has no uid")?,
        block_owner_deletion: Some(true),
        controller: Some(true),
    }]);
    api.create(&PostParams::default(), &child).await?;

    api.delete("owner", &DeleteParams::background()).await?;
    wait_for(Duration::from_secs(90), || async {
        (api_error_code(&api.get("child").await) == Some(404)).then_some(())
    })
    .await
    .context(
        "the child ConfigMap was not garbage collected within 90 s \
         (is kube-controller-manager running? `cp.sh up --with-controller-manager`)",
    )?;

    ns.cleanup().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_namespace_is_emptied_and_removed_by_the_controller_manager() -> Result<()> {
    let ns = TestNamespace::new("smoke-ns-delete").await?;
    let client = ns.client();
    let name = ns.name().to_owned();
    ns.api::<ConfigMap>().create(&PostParams::default(), &config_map("leftover", &[("a", "b")])).await?;
    ns.cleanup().await?;

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    wait_for(Duration::from_secs(60), || async {
        (api_error_code(&namespaces.get(&name).await) == Some(404)).then_some(())
    })
    .await
    .with_context(|| {
        format!(
            "namespace {name} was not removed within 60 s \
             (is kube-controller-manager running? `cp.sh up --with-controller-manager`)"
        )
    })?;
    ensure!(namespaces.get_opt(&name).await?.is_none());
    Ok(())
}
