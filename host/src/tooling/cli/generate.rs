//! `capstan gen`: CRDs, RBAC and deployment manifests generated from
//! components (see [`crate::tooling::generate`]).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{Args, Subcommand};

use crate::policy::PluralOverride;
use crate::tooling::generate::network::{self, Cidr};
use crate::tooling::generate::{self, Component, Delivery, File, Options};

/// What to generate.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// The CustomResourceDefinitions the components define, as YAML.
    Crd {
        /// Components (.wasm).
        #[arg(required = true)]
        components: Vec<PathBuf>,
        /// Write one file per CRD (`<name>.yaml`) into this folder instead
        /// of printing them.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// The ServiceAccount, ClusterRoles, Roles and bindings with exactly
    /// the permissions the host and the components need.
    Rbac {
        /// Components (.wasm); none gives the host's own RBAC only.
        components: Vec<PathBuf>,
        /// RBAC options.
        #[command(flatten)]
        rbac: RbacArgs,
    },
    /// What the host needs in the member clusters of fleet controllers: per
    /// fleet controller a ClusterRole (every verb on its owned kinds, reads
    /// of what it may read) bound to whom the host's kubeconfig for the
    /// member authenticates as. Apply it in each member.
    MemberRbac {
        /// Components (.wasm); those that are not fleet controllers are
        /// left out.
        #[arg(required = true)]
        components: Vec<PathBuf>,
        /// Whom the host authenticates as in the member: `User:NAME`,
        /// `Group:NAME` or `ServiceAccount:NAMESPACE/NAME`.
        #[arg(long, value_name = "KIND:NAME", value_parser = member_subject)]
        subject: k8s_openapi::api::rbac::v1::Subject,
        /// Prefix of the roles' names (the host's name in `gen rbac`).
        #[arg(long, default_value = "capstan")]
        name: String,
        /// Also let the host install in the member the CRDs of the kinds a
        /// fleet controller owns (for `capstan run --install-crds`).
        #[arg(long)]
        install_crds: bool,
    },
    /// Everything to install the host: Namespace, CRDs, RBAC, the
    /// components ConfigMap and the Deployment. Apply it with `kubectl
    /// apply -f` (or, with `--server-side`, `kubectl apply --server-side
    /// -f`).
    Manifest {
        /// Components: files (.wasm, carried in the ConfigMap gzipped),
        /// references (`oci://REGISTRY/REPOSITORY:TAG`, pulled to read
        /// their manifest; the ConfigMap names them and the host pulls
        /// them), or `FILE=oci://…` (the manifest read from the file, the
        /// component delivered by the reference it was pushed to).
        components: Vec<PathBuf>,
        /// Installation options.
        #[command(flatten)]
        install: InstallArgs,
        /// Write one file per piece into this folder instead of printing.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// A kustomize base with the same objects as `manifest`; with `--base`,
    /// an overlay that adds the components to a base generated without
    /// them.
    Kustomize {
        /// Components: files, references, or `FILE=oci://…`, as for
        /// `manifest`.
        components: Vec<PathBuf>,
        /// Installation options.
        #[command(flatten)]
        install: InstallArgs,
        /// Make an overlay on this base (a path relative to the output
        /// folder, e.g. `../../base`).
        #[arg(long)]
        base: Option<String>,
        /// The folder to write.
        #[arg(long, short, required = true)]
        output: PathBuf,
    },
    /// A sample custom resource for each CRD (or the one `--kind` names),
    /// from its schema: required fields, defaults, enums and examples.
    Resource {
        /// A CRD file (YAML or JSON; several documents allowed) or a
        /// component (.wasm) whose manifest carries CRDs.
        source: PathBuf,
        /// Only the CRD of this kind (its kind, plural or CRD name).
        #[arg(long)]
        kind: Option<String>,
        /// The version to sample (default: the storage version).
        #[arg(long)]
        version: Option<String>,
        /// `metadata.name` of the sample.
        #[arg(long, default_value = "example")]
        name: String,
        /// `metadata.namespace` of a namespaced kind.
        #[arg(long, short, default_value = "default")]
        namespace: String,
        /// Include every optional field, not only those with an example or
        /// a default.
        #[arg(long)]
        all: bool,
    },
}

/// A `--subject` of `gen member-rbac`: `User:NAME`, `Group:NAME` or
/// `ServiceAccount:NAMESPACE/NAME`.
fn member_subject(s: &str) -> Result<k8s_openapi::api::rbac::v1::Subject, String> {
    use k8s_openapi::api::rbac::v1::Subject;
    let (kind, name) = s.split_once(':').ok_or("expected KIND:NAME, e.g. User:capstan")?;
    if name.is_empty() {
        return Err("the subject has no name".to_owned());
    }
    let rbac = Some("rbac.authorization.k8s.io".to_owned());
    match kind {
        "User" | "Group" => {
            Ok(Subject { kind: kind.to_owned(), name: name.to_owned(), api_group: rbac, namespace: None })
        }
        "ServiceAccount" => {
            let (namespace, name) = name.split_once('/').ok_or("a ServiceAccount is NAMESPACE/NAME")?;
            if !crate::manifest::is_dns1123_label(namespace) || !crate::manifest::is_dns1123_subdomain(name) {
                return Err(format!("ServiceAccount {namespace}/{name}: not a namespace and a name"));
            }
            Ok(Subject {
                kind: kind.to_owned(),
                name: name.to_owned(),
                api_group: None,
                namespace: Some(namespace.to_owned()),
            })
        }
        other => Err(format!("subject kind {other:?}: User, Group or ServiceAccount")),
    }
}

/// Options of the RBAC.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The host's namespace.
    #[arg(long, default_value = "capstan-system")]
    pub namespace: String,
    /// Name of the host's ServiceAccount, ClusterRole and Deployment, and
    /// prefix of the components' roles.
    #[arg(long, default_value = "capstan")]
    pub name: String,
    /// Also let the host create CRDs and patch the components' CRDs (for
    /// `capstan run --install-crds`).
    #[arg(long)]
    pub install_crds: bool,
    /// The plural of a kind no component defines and capstan does not
    /// know, as KIND.GROUP=PLURAL (KIND=PLURAL for the core group).
    /// Repeatable.
    #[arg(long = "plural", value_name = "KIND.GROUP=PLURAL")]
    pub plurals: Vec<PluralOverride>,
    /// A namespace the host will watch (`capstan run -n`): namespaced
    /// resources get Roles there instead of ClusterRoles, and the
    /// Deployment passes it to the host. Repeat the option or separate
    /// the namespaces with commas. Default: all namespaces.
    #[arg(long = "watch-namespace", short = 'w', value_name = "NAMESPACE", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
}

/// Options of an installation.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// RBAC options.
    #[command(flatten)]
    pub rbac: RbacArgs,
    /// The host's image. No image is published: build deploy/Dockerfile
    /// and push it where your cluster pulls from [default: the
    /// placeholder registry.invalid/capstan:VERSION].
    #[arg(long)]
    pub image: Option<String>,
    /// The component files are in the image, at /components, instead of
    /// in the ConfigMap (references still go in the ConfigMap).
    #[arg(long, requires = "image")]
    pub components_in_image: bool,
    /// The manifest is applied server-side (`kubectl apply --server-side`):
    /// the ConfigMap may carry 1 MiB of components instead of the 256 KiB
    /// a client-side `kubectl apply` keeps in its last-applied annotation.
    #[arg(long)]
    pub server_side: bool,
    /// An image pull secret (`kubernetes.io/dockerconfigjson`) in the
    /// host's namespace: the host pulls components with its credentials,
    /// and the pod pulls its image with it.
    #[arg(long, value_name = "SECRET")]
    pub registry_secret: Option<String>,
    /// How to reach the registries of component references.
    #[command(flatten)]
    pub registry: super::RegistryArgs,
    /// Leave out the Deployment and the components ConfigMap, to run the
    /// host outside the cluster.
    #[arg(long)]
    pub skip_deployment: bool,
    /// The `failurePolicy` of an admission webhook in the generated
    /// configurations, over what its component declares, passed on to the
    /// host as well: `COMPONENT/WEBHOOK=Ignore|Fail`, or
    /// `COMPONENT=Ignore|Fail` for all of a component's. Repeat or
    /// separate with commas. It must name a component given and a webhook
    /// it declares. (Without the Deployment, pass it to `capstan run`.)
    #[arg(
        long = "webhook-failure-policy",
        value_name = "COMPONENT[/WEBHOOK]=POLICY",
        value_delimiter = ',',
        conflicts_with = "skip_deployment"
    )]
    pub webhook_failure_policies: Vec<crate::serve::webhook::policy::Override>,
    /// The NetworkPolicy of the host's Pods (boxed: it would make every
    /// `capstan` command as large as `gen`'s).
    #[command(flatten)]
    pub network: Box<NetworkPolicyArgs>,
    /// Where the host exports its traces (boxed, like `network`).
    #[command(flatten)]
    pub traces: Box<TraceArgs>,
}

/// The collector the host in the cluster sends its traces to (see
/// [`crate::tooling::generate::trace`]): written into the Deployment as
/// the `OTEL_*` variables `capstan run` reads.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The OTLP collector's base URL, e.g.
    /// http://otel-collector.observability:4318 (HTTP) or :4317 (gRPC):
    /// the Deployment sets OTEL_EXPORTER_OTLP_ENDPOINT, and
    /// --network-policy allows egress to its port.
    #[arg(long = "otlp-endpoint", value_name = "URL", conflicts_with = "skip_deployment")]
    pub endpoint: Option<String>,
    /// How spans travel: http/protobuf or grpc.
    #[arg(long = "otlp-protocol", value_name = "PROTOCOL", default_value = "http/protobuf", requires = "endpoint")]
    pub protocol: String,
    /// The spans' service.name [default: --name].
    #[arg(long = "otlp-service-name", value_name = "NAME", requires = "endpoint")]
    pub service_name: Option<String>,
    /// Which traces are exported: always_on, always_off, traceidratio,
    /// parentbased_always_on, parentbased_always_off,
    /// parentbased_traceidratio [default: the host's, every one].
    #[arg(long = "traces-sampler", value_name = "SAMPLER", requires = "endpoint")]
    pub sampler: Option<String>,
    /// The ratio of the traceidratio samplers, between 0 and 1.
    #[arg(long = "traces-sampler-arg", value_name = "RATIO", requires = "sampler")]
    pub sampler_arg: Option<String>,
}

impl TraceArgs {
    fn traces(&self) -> anyhow::Result<Option<generate::trace::Traces>> {
        let Some(endpoint) = &self.endpoint else { return Ok(None) };
        let protocol = crate::telemetry::Protocol::parse(&self.protocol)?;
        let mut traces = generate::trace::Traces::new(endpoint, protocol)?;
        if let Some(name) = &self.service_name {
            traces = traces.service_name(name)?;
        }
        if let Some(sampler) = &self.sampler {
            traces = traces.sampler(sampler, self.sampler_arg.as_deref())?;
        }
        Ok(Some(traces))
    }
}

/// The NetworkPolicy of the host's Pods (see
/// [`crate::tooling::generate::network`]).
#[derive(Debug, Args)]
pub struct NetworkPolicyArgs {
    /// Also write a NetworkPolicy for the host's Pods: the health port
    /// (8080) from anywhere; with webhooks, the webhook port (9443) from
    /// outside the Pod network only (needs --pod-cidr); egress to DNS, the
    /// API server, the components' declared egress origins (an IP address
    /// as itself, a name as any address on its ports) and the registries
    /// of components given by reference.
    #[arg(long, conflicts_with = "skip_deployment")]
    pub network_policy: bool,
    /// An address range of the Pod network (e.g. 10.244.0.0/16): the
    /// webhook port admits every address of its family but these. One per
    /// address family in a dual-stack cluster; repeat or separate with
    /// commas.
    #[arg(long = "pod-cidr", value_name = "CIDR", value_delimiter = ',', requires = "network_policy")]
    pub pod_cidrs: Vec<Cidr>,
    /// An address range of the API server's endpoints (`kubectl get
    /// endpointslices -n default -l kubernetes.io/service-name=kubernetes`),
    /// not the `kubernetes` Service's IP, which the CNI rewrites before the
    /// policy applies. Repeat or separate with commas. Default: ports 443
    /// and 6443 to any address.
    #[arg(long = "api-server-cidr", value_name = "CIDR", value_delimiter = ',', requires = "network_policy")]
    pub api_server_cidrs: Vec<Cidr>,
}

impl RbacArgs {
    fn options(&self) -> Options {
        let options = Options::default().namespace(&self.namespace).name(&self.name).install_crds(self.install_crds);
        let options = self.watch_namespaces.iter().fold(options, |o, ns| o.watch_namespace(ns));
        self.plurals.iter().cloned().fold(options, Options::plural)
    }
}

impl InstallArgs {
    /// Says on stderr that the Deployment names the placeholder image.
    fn warn_placeholder_image(&self) {
        if self.image.is_none() && !self.skip_deployment {
            eprintln!(
                "note: the Deployment names the placeholder image {}: no host image is published; build \
                 deploy/Dockerfile, push it where your cluster pulls from, and pass --image",
                generate::DEFAULT_IMAGE
            );
        }
    }

    fn options(&self) -> anyhow::Result<Options> {
        let policies = crate::serve::webhook::policy::FailurePolicies::new(self.webhook_failure_policies.clone())?;
        let mut options = self
            .rbac
            .options()
            .skip_deployment(self.skip_deployment)
            .server_side(self.server_side)
            .registry_secret(self.registry_secret.clone())
            .failure_policies(policies);
        if let Some(image) = &self.image {
            options = options.image(image);
        }
        if self.components_in_image {
            options = options.delivery(Delivery::Image);
        }
        let args = &self.network;
        if args.network_policy {
            let policy = args.pod_cidrs.iter().fold(network::Policy::new(), |p, c| p.pod_cidr(*c));
            options = options.network_policy(args.api_server_cidrs.iter().fold(policy, |p, c| p.api_server_cidr(*c)));
        }
        if let Some(traces) = self.traces.traces()? {
            options = options.traces(traces);
        }
        Ok(options)
    }
}

/// Reads and loads each component: a file, a reference (pulled), or
/// `FILE=oci://…` (the file, delivered by the reference).
async fn load(paths: &[PathBuf], registry: &super::RegistryArgs) -> anyhow::Result<Vec<Component>> {
    let loader = super::loader()?;
    let mut components = Vec::with_capacity(paths.len());
    for path in paths {
        let text = path.to_string_lossy();
        let (file, reference) = match text.split_once("=oci://") {
            Some((file, rest)) => (Some(PathBuf::from(file)), Some(format!("{}{rest}", crate::serve::oci::SCHEME))),
            None if crate::serve::oci::is_reference(&text) => (None, Some(text.into_owned())),
            None => (Some(path.clone()), None),
        };
        let wasm = match (&file, &reference) {
            (Some(file), _) => {
                tokio::fs::read(file).await.with_context(|| format!("cannot read {}", file.display()))?
            }
            (None, reference) => {
                let reference = reference.as_deref().context("a component is a file or a reference")?;
                registry.registry().pull(&reference.parse()?).await?.bytes
            }
        };
        if let Some(reference) = &reference {
            reference.parse::<crate::serve::oci::Reference>()?;
        }
        let path = file.as_deref().unwrap_or(path.as_path());
        let loaded = loader.load_bytes(path, wasm.clone()).await?;
        for p in loaded.manifest.wildcard_permissions() {
            let verbs: Vec<&str> = p.verbs.iter().map(|v| v.as_str()).collect();
            eprintln!(
                "warning: {}: controller {} asks for {} on {}/{}: a wildcard, close to cluster-admin; \
                 the host refuses it unless run with --allow-wildcard-permissions",
                path.display(),
                loaded.manifest.name,
                verbs.join(","),
                p.group,
                p.kind
            );
        }
        let component = Component::new((*loaded.manifest).clone(), wasm);
        components.push(match reference {
            Some(reference) => component.reference(reference),
            None => component,
        });
    }
    Ok(components)
}

fn write(dir: &Path, files: &[File], header: &str) -> anyhow::Result<()> {
    generate::write(dir, files, header)?;
    for file in files {
        outln!("wrote {}", dir.join(&file.path).display());
    }
    Ok(())
}

fn print_or_write(files: Vec<File>, output: Option<&Path>, header: &str) -> anyhow::Result<()> {
    match output {
        Some(dir) => write(dir, &files, header),
        None => {
            let objects: Vec<_> = files.into_iter().flat_map(|f| f.objects).collect();
            out!("{}", generate::to_yaml(&objects, header)?);
            Ok(())
        }
    }
}

/// Runs `capstan gen …`; returns the exit code.
///
/// # Errors
///
/// A component that cannot be loaded, or what [`crate::tooling::generate`] reports.
pub async fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Crd { components, output } => {
            let components = load(&components, &super::RegistryArgs::default()).await?;
            let header = generate::header("capstan gen crd", &components);
            let files = generate::crds(&components)?
                .into_iter()
                .map(|crd| {
                    let name = crate::object::meta_str(&crd, "name").unwrap_or("crd").to_owned();
                    File { path: PathBuf::from(format!("{name}.yaml")), objects: vec![crd] }
                })
                .collect();
            print_or_write(files, output.as_deref(), &header)?;
        }
        Command::Rbac { components, rbac } => {
            let components = load(&components, &super::RegistryArgs::default()).await?;
            let header = generate::header("capstan gen rbac", &components);
            out!("{}", generate::to_yaml(&generate::rbac(&components, &rbac.options())?, &header)?);
        }
        Command::MemberRbac { components, subject, name, install_crds } => {
            let components = load(&components, &super::RegistryArgs::default()).await?;
            let header = generate::header("capstan gen member-rbac", &components);
            let options = Options::default().name(&name).install_crds(install_crds);
            out!("{}", generate::to_yaml(&generate::member_rbac(&components, &options, &subject)?, &header)?);
        }
        Command::Manifest { components, install, output } => {
            let components = load(&components, &install.registry).await?;
            install.warn_placeholder_image();
            let header = generate::header("capstan gen manifest", &components);
            print_or_write(generate::files(&components, &install.options()?)?, output.as_deref(), &header)?;
        }
        Command::Kustomize { components, install, base, output } => {
            let components = load(&components, &install.registry).await?;
            if base.is_none() {
                install.warn_placeholder_image();
            }
            let header = generate::header("capstan gen kustomize", &components);
            write(&output, &generate::kustomize(&components, &install.options()?, base.as_deref())?, &header)?;
        }
        Command::Resource { source, kind, version, name, namespace, all } => {
            let crds = crds_in(&source).await?;
            let chosen: Vec<&serde_json::Value> = match &kind {
                Some(kind) => crds.iter().filter(|crd| names_kind(crd, kind)).collect(),
                None => crds.iter().collect(),
            };
            if chosen.is_empty() {
                let kinds: Vec<&str> = crds.iter().filter_map(|c| c["spec"]["names"]["kind"].as_str()).collect();
                anyhow::bail!(
                    "{} has no CRD{} (kinds there: {})",
                    source.display(),
                    kind.map(|k| format!(" of kind {k}")).unwrap_or_default(),
                    if kinds.is_empty() { "none".to_owned() } else { kinds.join(", ") }
                );
            }
            let options = generate::sample::Options { version, name, namespace, all };
            let mut out = String::new();
            for crd in chosen {
                let sample = generate::sample::resource(crd, &options)?;
                if !out.is_empty() {
                    out.push_str("---\n");
                }
                out.push_str(&serde_yaml_ng::to_string(&sample)?);
            }
            out!("{out}");
        }
    }
    Ok(0)
}

/// Whether `crd` defines `kind` (its kind, plural or CRD name; any case).
fn names_kind(crd: &serde_json::Value, kind: &str) -> bool {
    let names = &crd["spec"]["names"];
    [&names["kind"], &names["plural"], &crd["metadata"]["name"]]
        .iter()
        .any(|n| n.as_str().is_some_and(|n| n.eq_ignore_ascii_case(kind)))
}

/// The CRDs in a YAML or JSON file, or in a component's manifest.
async fn crds_in(source: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let name = source.to_string_lossy();
    if name.ends_with(".wasm") || name.ends_with(".wasm.gz") {
        let loaded = super::loader()?.load(source).await?;
        return Ok(loaded.manifest.crds.clone());
    }
    let text = std::fs::read_to_string(source).with_context(|| format!("cannot read {}", source.display()))?;
    let mut crds = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: serde_json::Value = serde::Deserialize::deserialize(document)
            .with_context(|| format!("{} is not YAML or JSON", source.display()))?;
        if value["kind"] == "CustomResourceDefinition" {
            crds.push(value);
        }
    }
    Ok(crds)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::tooling::cli::{Cli, Command as Top};

    fn install_args(args: &[&str]) -> Result<InstallArgs, clap::Error> {
        let cli = Cli::try_parse_from(["capstan", "gen", "manifest", "c.wasm"].iter().chain(args))?;
        match cli.command {
            Top::Gen(Command::Manifest { install, .. }) => Ok(install),
            other => panic!("not gen manifest: {other:?}"),
        }
    }

    #[test]
    fn a_webhook_failure_policy_goes_into_the_options_and_needs_the_deployment() {
        let install = install_args(&["--webhook-failure-policy", "greeter=Ignore"]).expect("parses");
        assert_eq!(install.webhook_failure_policies[0].to_string(), "greeter=Ignore");
        assert!(install.options().is_ok(), "valid");
        let err = install_args(&["--webhook-failure-policy", "greeter=Ignore", "--skip-deployment"])
            .expect_err("no host in the manifest to pass it to");
        assert!(err.to_string().contains("cannot be used with"), "{err}");
        let both = install_args(&["--webhook-failure-policy", "greeter=Ignore,greeter=Fail"]).expect("parses");
        assert!(both.options().is_err(), "one target, both policies");
    }

    #[test]
    fn network_policy_flags_parse_cidrs_and_need_the_policy_and_the_deployment() {
        let install =
            install_args(&["--network-policy", "--pod-cidr", "10.244.0.0/16,fd00:10:244::/56"]).expect("parses");
        assert_eq!(
            install.network.pod_cidrs.iter().map(Cidr::to_string).collect::<Vec<_>>(),
            ["10.244.0.0/16", "fd00:10:244::/56"]
        );
        assert!(install.options().is_ok());
        let err = install_args(&["--network-policy", "--pod-cidr", "10.244.0.1/16"]).expect_err("bits past the prefix");
        assert!(err.to_string().contains("invalid CIDR"), "{err}");
        let err = install_args(&["--pod-cidr", "10.244.0.0/16"]).expect_err("no policy to put it in");
        assert!(err.to_string().contains("--network-policy"), "{err}");
        let err = install_args(&["--network-policy", "--skip-deployment"]).expect_err("no host Pod");
        assert!(err.to_string().contains("cannot be used with"), "{err}");
    }

    #[test]
    fn trace_flags_go_into_the_options_and_bad_ones_are_refused_before_anything_is_written() {
        let install = install_args(&[
            "--otlp-endpoint",
            "http://otel-collector.observability:4317",
            "--otlp-protocol",
            "grpc",
            "--traces-sampler",
            "traceidratio",
            "--traces-sampler-arg",
            "0.5",
        ])
        .expect("parses");
        assert!(install.options().is_ok(), "valid");
        for bad in [
            &["--otlp-endpoint", "otel-collector:4317"][..],
            &["--otlp-endpoint", "http://c:4318", "--otlp-protocol", "http/json"],
            &["--otlp-endpoint", "http://c:4318", "--traces-sampler", "traceidratio", "--traces-sampler-arg", "7"],
        ] {
            let install = install_args(bad).expect("parses");
            assert!(install.options().is_err(), "{bad:?}");
        }
        let err = install_args(&["--traces-sampler", "always_on"]).expect_err("no collector to sample for");
        assert!(err.to_string().contains("--otlp-endpoint"), "{err}");
        let err = install_args(&["--otlp-endpoint", "http://c:4318", "--skip-deployment"]).expect_err("no host Pod");
        assert!(err.to_string().contains("cannot be used with"), "{err}");
    }
}
