//! The host's own objects: its Namespace, the ConfigMap that carries the
//! components, and its Deployment.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    EnvVarSource, HTTPGetAction, KeyToPath, LocalObjectReference, Namespace, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, Probe, ResourceRequirements, SeccompProfile, SecretVolumeSource, SecurityContext, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::{Component, Error, Options, to_value};

/// The most a ConfigMap holds (`data` and `binaryData` together), as the
/// API server checks it.
pub const CONFIG_MAP_LIMIT: usize = 1024 * 1024;

/// The most the annotations of an object hold, as the API server checks
/// them: a client-side `kubectl apply` keeps the whole object, as JSON,
/// in its `kubectl.kubernetes.io/last-applied-configuration` annotation.
pub const LAST_APPLIED_LIMIT: usize = 256 * 1024;

/// The annotation a client-side `kubectl apply` writes.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Where the host's docker config (from the registry secret) is mounted.
pub const REGISTRY_CREDENTIALS_DIR: &str = "/var/run/capstan/registry";

/// Where the components are in the host's container.
pub const COMPONENTS_DIR: &str = "/components";

/// Where the host keeps its compile cache (`CAPSTAN_CACHE`).
pub const CACHE_DIR: &str = "/cache";

/// The port of `/healthz`, `/readyz`, `/metrics` and `/status`.
pub const HEALTH_PORT: i32 = 8080;

/// The user (and group) the host runs as: distroless `nonroot`.
pub const RUN_AS: i64 = 65532;

/// The host's Namespace; enforces the `restricted` Pod Security Standard.
pub(crate) fn namespace(options: &Options) -> Result<Value, Error> {
    let mut labels = options.labels(None);
    labels.insert("pod-security.kubernetes.io/enforce".to_owned(), "restricted".to_owned());
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(options.namespace.clone()), labels: Some(labels), ..ObjectMeta::default() },
        ..Namespace::default()
    };
    to_value(&ns)
}

/// The name of the ConfigMap carrying the components.
pub(crate) fn config_map_name(options: &Options) -> String {
    format!("{}-components", options.name)
}

/// The ConfigMap carrying the components: a `<controller>.oci` key with
/// the reference of each component that has one, a gzipped
/// `<controller>.wasm.gz` key in `binaryData` for the others (the host
/// loads them as they are; a component compresses to about a quarter of
/// its size).
///
/// # Errors
///
/// [`Error::TooLargeForConfigMap`] when it does not fit what applies it
/// ([`LAST_APPLIED_LIMIT`] for the object as JSON, or with
/// [`Options::server_side`] [`CONFIG_MAP_LIMIT`] for its data);
/// [`Error::Reference`] for a reference that does not parse.
pub(crate) fn components_config_map(components: &[Component], options: &Options) -> Result<Value, Error> {
    let mut data = BTreeMap::new();
    let mut binary = BTreeMap::new();
    let mut sizes = Vec::new();
    for c in components {
        let controller = c.manifest.name.clone();
        match &c.reference {
            Some(reference) => {
                let parsed: crate::serve::oci::Reference =
                    reference.parse().map_err(|error| Error::Reference { controller: controller.clone(), error })?;
                if crate::serve::oci::is_loopback(parsed.registry()) {
                    tracing::warn!(
                        controller,
                        reference = %parsed,
                        "the reference names a registry on loopback: in the cluster that is the host's own Pod, \
                         where no registry runs; push the component to a registry the cluster's nodes can reach"
                    );
                }
                data.insert(format!("{controller}.oci"), format!("{parsed}\n"));
            }
            None => {
                let gz = gzip(&c.wasm);
                sizes.push(format!("{controller} {} bytes, {} gzipped", c.wasm.len(), gz.len()));
                binary.insert(format!("{controller}.wasm.gz"), ByteString(gz));
            }
        }
    }
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(options)),
            namespace: Some(options.namespace.clone()),
            labels: Some(options.labels(None)),
            ..ObjectMeta::default()
        },
        data: (!data.is_empty()).then_some(data),
        binary_data: (!binary.is_empty()).then_some(binary),
        ..ConfigMap::default()
    };
    let value = to_value(&cm)?;
    let (total, limit) = if options.server_side {
        let data = cm.data.iter().flatten().map(|(k, v)| k.len() + v.len());
        let binary = cm.binary_data.iter().flatten().map(|(k, v)| k.len() + v.0.len());
        (data.chain(binary).sum(), CONFIG_MAP_LIMIT)
    } else {
        let json = serde_json::to_vec(&value).map_or(usize::MAX, |j| j.len());
        (json.saturating_add(LAST_APPLIED.len()), LAST_APPLIED_LIMIT)
    };
    if total > limit {
        return Err(Error::TooLargeForConfigMap { total, sizes, server_side: options.server_side });
    }
    Ok(value)
}

/// `bytes`, gzipped at the best compression. (Writing to a `Vec` cannot
/// fail.)
fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let written = encoder.write_all(bytes).and_then(|()| encoder.finish());
    written.unwrap_or_default()
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([("cpu".to_owned(), Quantity(cpu.to_owned())), ("memory".to_owned(), Quantity(memory.to_owned()))])
}

fn probe(path: &str, initial_delay: i32, period: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String("http".to_owned()),
            ..HTTPGetAction::default()
        }),
        initial_delay_seconds: Some(initial_delay),
        period_seconds: Some(period),
        ..Probe::default()
    }
}

fn components_volume(options: &Options) -> (Volume, VolumeMount) {
    let volume = Volume {
        name: "components".to_owned(),
        config_map: Some(ConfigMapVolumeSource { name: config_map_name(options), ..ConfigMapVolumeSource::default() }),
        ..Volume::default()
    };
    let mount = VolumeMount {
        name: "components".to_owned(),
        mount_path: COMPONENTS_DIR.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    (volume, mount)
}

/// The registry secret as the host's docker config: its volume, mount and
/// `DOCKER_CONFIG`.
fn registry_credentials(options: &Options) -> Option<(Volume, VolumeMount, EnvVar)> {
    let name = options.registry_secret.as_ref()?;
    let volume = Volume {
        name: "registry-credentials".to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(name.clone()),
            items: Some(vec![KeyToPath {
                key: ".dockerconfigjson".to_owned(),
                path: "config.json".to_owned(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    let mount = VolumeMount {
        name: "registry-credentials".to_owned(),
        mount_path: REGISTRY_CREDENTIALS_DIR.to_owned(),
        read_only: Some(true),
        ..VolumeMount::default()
    };
    let var = EnvVar {
        name: "DOCKER_CONFIG".to_owned(),
        value: Some(REGISTRY_CREDENTIALS_DIR.to_owned()),
        ..EnvVar::default()
    };
    Some((volume, mount, var))
}

/// The host's command line: `run --components /components --leader-elect`,
/// its HTTP endpoints on the Pod IP (for the kubelet's probes and
/// Prometheus) and on loopback (for `kubectl port-forward`, the only way
/// to `/status`), `--install-crds` when the host is to install the CRDs
/// itself, and `--namespace <ns>` for each watched namespace.
fn args(options: &Options, with_webhooks: bool) -> Vec<String> {
    let mut args = vec![
        "run".to_owned(),
        "--components".to_owned(),
        COMPONENTS_DIR.to_owned(),
        "--leader-elect".to_owned(),
        format!("--listen=$(POD_IP):{HEALTH_PORT}"),
        format!("--listen=127.0.0.1:{HEALTH_PORT}"),
    ];
    if options.install_crds {
        args.push("--install-crds".to_owned());
    }
    for ns in &options.watch_namespaces {
        args.extend(["--namespace".to_owned(), ns.clone()]);
    }
    if with_webhooks {
        args.extend(super::webhooks::args(options));
    }
    args
}

/// The container's ports: health and metrics (`http`), and with webhooks
/// the `webhooks` port the Service targets.
fn ports(with_webhooks: bool) -> Vec<ContainerPort> {
    let port = |name: &str, port: i32| ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    };
    let mut ports = vec![port("http", HEALTH_PORT)];
    if with_webhooks {
        ports.push(port("webhooks", i32::from(super::WEBHOOK_PORT)));
    }
    ports
}

/// An environment variable from the downward API.
fn downward(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// The host's Deployment: one replica of `capstan run --components
/// /components`, as the ServiceAccount of the same name, meeting the
/// `restricted` Pod Security Standard, with a writable `emptyDir` for the
/// compile cache (`CAPSTAN_CACHE`), and `POD_NAME`, `POD_NAMESPACE` and
/// `POD_IP` from the downward API (the replica's name in Events and
/// Leases; the Leases' namespace; the address `--listen` serves on). `with_config_map` mounts the components ConfigMap at
/// `/components`; without it the components are whatever the image holds
/// there.
///
/// With leader election, a rolling update is safe: the new replica stands
/// by until the old one releases its Leases as it stops.
pub(crate) fn deployment(options: &Options, with_config_map: bool, with_webhooks: bool) -> Result<Value, Error> {
    let labels = options.labels(None);
    let selector = BTreeMap::from([("app.kubernetes.io/name".to_owned(), options.name.clone())]);
    let mut volumes = vec![Volume {
        name: "cache".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity("1Gi".to_owned())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }];
    let mut mounts =
        vec![VolumeMount { name: "cache".to_owned(), mount_path: CACHE_DIR.to_owned(), ..VolumeMount::default() }];
    if with_config_map {
        let (volume, mount) = components_volume(options);
        volumes.push(volume);
        mounts.push(mount);
    }
    let mut env = vec![
        EnvVar { name: "CAPSTAN_CACHE".to_owned(), value: Some(CACHE_DIR.to_owned()), ..EnvVar::default() },
        downward("POD_NAME", "metadata.name"),
        downward("POD_NAMESPACE", "metadata.namespace"),
        downward("POD_IP", "status.podIP"),
    ];
    if let Some(traces) = &options.traces {
        env.extend(traces.env(&options.name));
    }
    if let Some((volume, mount, var)) = registry_credentials(options) {
        volumes.push(volume);
        mounts.push(mount);
        env.push(var);
    }
    let container = Container {
        name: "capstan".to_owned(),
        image: Some(options.image.clone()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        args: Some(args(options, with_webhooks)),
        env: Some(env),
        ports: Some(ports(with_webhooks)),
        liveness_probe: Some(probe("/healthz", 15, 20)),
        readiness_probe: Some(probe("/readyz", 5, 10)),
        resources: Some(ResourceRequirements {
            requests: Some(quantities("100m", "128Mi")),
            limits: Some(quantities("1", "512Mi")),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), ..Capabilities::default() }),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let deployment = Deployment {
        metadata: ObjectMeta {
            name: Some(options.name.clone()),
            namespace: Some(options.namespace.clone()),
            labels: Some(labels.clone()),
            ..ObjectMeta::default()
        },
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector { match_labels: Some(selector), ..LabelSelector::default() },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                ..DeploymentStrategy::default()
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..ObjectMeta::default() }),
                spec: Some(PodSpec {
                    service_account_name: Some(options.name.clone()),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(RUN_AS),
                        run_as_group: Some(RUN_AS),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers: vec![container],
                    volumes: Some(volumes),
                    image_pull_secrets: options
                        .registry_secret
                        .as_ref()
                        .map(|name| vec![LocalObjectReference { name: name.clone() }]),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    };
    to_value(&deployment)
}

/// A strategic-merge patch for a kustomize overlay: sets the image and,
/// `with_config_map`, mounts the components ConfigMap; `with_webhooks`,
/// sets the command line (a list the patch replaces) and adds the
/// `webhooks` port.
pub(crate) fn deployment_patch(options: &Options, with_config_map: bool, with_webhooks: bool) -> Value {
    let mut container = json!({"name": "capstan", "image": options.image});
    if with_webhooks {
        container["args"] = json!(args(options, true));
        container["ports"] = json!(ports(true));
    }
    let mut spec = json!({});
    if with_config_map {
        let (volume, mount) = components_volume(options);
        container["volumeMounts"] = json!([mount]);
        spec["volumes"] = json!([volume]);
    }
    spec["containers"] = json!([container]);
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": options.name, "namespace": options.namespace},
        "spec": {"template": {"spec": spec}},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Manifest;
    use crate::object::Gvk;

    fn component(name: &str, size: usize) -> Component {
        Component::new(Manifest::bare(name, Gvk::new("", "v1", "ConfigMap")), vec![0; size])
    }

    /// A component of `size` bytes that does not compress.
    fn incompressible(name: &str, size: usize) -> Component {
        let mut c = component(name, 0);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        c.wasm = (0..size)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect();
        c
    }

    #[test]
    fn references_go_as_text_and_files_must_fit_the_last_applied_annotation_unless_applied_server_side() {
        let options = Options::default();
        let reference = "oci://registry.example/capstan/big:v1";
        let cm = components_config_map(
            &[incompressible("big", 4 * CONFIG_MAP_LIMIT).reference(reference), component("small", 10_000)],
            &options,
        )
        .expect("a reference takes a line");
        assert_eq!(cm["data"]["big.oci"], format!("{reference}\n"));
        assert!(cm["binaryData"]["small.wasm.gz"].is_string(), "{cm}");
        assert!(cm["binaryData"].get("big.wasm.gz").is_none(), "{cm}");
        // 200 KiB of incompressible bytes: 267 KiB as base64, too much for
        // the annotation; server-side it fits.
        let file = [incompressible("a", 200 * 1024)];
        let err = components_config_map(&file, &options).expect_err("too large for a client-side apply");
        assert!(matches!(err, Error::TooLargeForConfigMap { server_side: false, .. }), "{err}");
        assert!(err.to_string().contains("256 KiB"), "{err}");
        components_config_map(&file, &options.clone().server_side(true)).expect("fits server-side");
        let bad = component("bad", 1).reference("ghcr.io/no-scheme:v1");
        assert!(matches!(components_config_map(&[bad], &options), Err(Error::Reference { .. })));
    }

    #[test]
    fn a_registry_secret_becomes_the_hosts_docker_config_and_a_pull_secret() {
        let d = deployment(&Options::default().registry_secret(Some("pull".into())), false, false).expect("serialises");
        let pod = d.pointer("/spec/template/spec").expect("pod spec");
        assert_eq!(pod["imagePullSecrets"], json!([{"name": "pull"}]));
        assert_eq!(
            pod["volumes"][1]["secret"],
            json!({"secretName": "pull", "items": [{"key": ".dockerconfigjson", "path": "config.json"}]})
        );
        let c = &pod["containers"][0];
        assert_eq!(c["env"][4], json!({"name": "DOCKER_CONFIG", "value": REGISTRY_CREDENTIALS_DIR}));
        assert_eq!(c["volumeMounts"][1]["mountPath"], REGISTRY_CREDENTIALS_DIR);
    }

    #[test]
    fn components_are_gzipped_and_what_does_not_fit_compressed_fails_clearly() {
        let options = Options::default().server_side(true);
        // 4 MiB that compress well fit.
        let cm = components_config_map(&[component("a", 4 * CONFIG_MAP_LIMIT)], &options).expect("compresses");
        let gz = cm.pointer("/binaryData/a.wasm.gz").and_then(Value::as_str).expect("a.wasm.gz");
        assert!(gz.len() < 64 * 1024, "base64 of the gzipped bytes: {}", gz.len());
        // What does not compress counts as it is.
        let half = CONFIG_MAP_LIMIT / 2 - 1024;
        components_config_map(&[incompressible("a", half), incompressible("b", half)], &options)
            .expect("fits when compressed");
        let err = components_config_map(&[incompressible("a", half), incompressible("b", half + 4096)], &options)
            .expect_err("too much");
        assert!(matches!(err, Error::TooLargeForConfigMap { total, .. } if total > CONFIG_MAP_LIMIT));
        assert!(err.to_string().contains("gzipped"), "{err}");
    }

    #[test]
    fn a_gzipped_config_map_entry_is_the_component() {
        use std::io::Read as _;
        let c = incompressible("a", 10_000);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gzip(&c.wasm).as_slice()).read_to_end(&mut out).expect("gunzips");
        assert_eq!(out, c.wasm);
    }

    #[test]
    fn a_trace_collector_becomes_the_otel_variables_of_the_host_container() {
        use crate::telemetry::Protocol;
        let traces =
            super::super::trace::Traces::new("http://otel-collector.observability:4318", Protocol::HttpProtobuf)
                .expect("valid endpoint");
        let d = deployment(&Options::default().name("shop").traces(traces), true, false).expect("serialises");
        let env = d.pointer("/spec/template/spec/containers/0/env").expect("env");
        let value = |name: &str| env.as_array().into_iter().flatten().find(|v| v["name"] == name).map(|v| &v["value"]);
        assert_eq!(value("OTEL_EXPORTER_OTLP_ENDPOINT"), Some(&json!("http://otel-collector.observability:4318")));
        assert_eq!(value("OTEL_EXPORTER_OTLP_PROTOCOL"), Some(&json!("http/protobuf")));
        assert_eq!(value("OTEL_SERVICE_NAME"), Some(&json!("shop")), "the host's name by default");
        assert_eq!(value("OTEL_TRACES_SAMPLER"), None, "the host's default sampler unless one is given");
        let without = deployment(&Options::default(), true, false).expect("serialises");
        assert!(!without.to_string().contains("OTEL_"), "no collector, no variables: {without}");
    }

    #[test]
    fn the_deployment_runs_as_a_non_root_user_with_a_read_only_root() {
        let d = deployment(&Options::default(), true, false).expect("serialises");
        let pod = d.pointer("/spec/template/spec").expect("pod spec");
        assert_eq!(pod["securityContext"]["runAsUser"], 65532);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        let c = &pod["containers"][0];
        assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        let listen = ["--listen=$(POD_IP):8080", "--listen=127.0.0.1:8080"];
        assert_eq!(c["args"], json!(["run", "--components", "/components", "--leader-elect", listen[0], listen[1]]));
        assert_eq!(c["env"][3]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
        assert_eq!(c["env"][2]["name"], "POD_NAMESPACE");
        assert_eq!(c["env"][2]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["port"], "http");
        assert_eq!(pod["volumes"][1]["configMap"]["name"], "capstan-components");
        let without = deployment(&Options::default(), false, false).expect("serialises");
        assert_eq!(without.pointer("/spec/template/spec/volumes").and_then(Value::as_array).map(Vec::len), Some(1));
    }
}
