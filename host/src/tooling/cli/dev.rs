//! `capstan dev`: the author's loop in one command. In a project made by
//! `capstan new` (Rust, Python or JavaScript): make sure a local cluster
//! runs, build the component, run it with its CRDs installed and its
//! webhooks served, rebuild on every source change and swap the new version
//! in (the host's hot loading, through a components folder), print the
//! host's log lines and the cluster's Events as they happen, stop on
//! Ctrl-C. A build that fails is shown and the running version serves on.
//! With `--member`, one host serves more clusters beside it, as `capstan
//! run --cluster` does: a fleet controller's members, or more clusters a
//! uniform controller runs in.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, new_debouncer};
use tokio::sync::mpsc;

/// Arguments of `capstan dev`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The project folder (made by `capstan new`).
    #[arg(default_value = ".")]
    pub dir: PathBuf,
    /// The local cluster to run on; started if it does not run
    /// (`capstan cluster up --name NAME`).
    #[arg(long, default_value = super::cluster::DEFAULT_NAME, value_name = "NAME")]
    pub cluster: String,
    /// Run on the cluster of this kubeconfig instead of a local one.
    #[arg(long, conflicts_with = "down")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only these namespaces (repeat, or separate with commas).
    /// Default: all.
    #[arg(long = "namespace", short = 'n', value_name = "NAMESPACE", value_delimiter = ',', value_parser = super::namespace_name)]
    pub namespaces: Vec<String>,
    /// Stop the local cluster on exit (it stays up by default; members
    /// too).
    #[arg(long)]
    pub down: bool,
    /// Also serve another cluster, as cluster NAME (repeatable): `NAME`,
    /// the local cluster of that name (`capstan cluster up --name NAME`,
    /// started if it does not run), or `NAME=KUBECONFIG[#CONTEXT]`. A
    /// fleet controller places its children there when it names NAME
    /// among its members; a uniform controller runs there too.
    #[arg(long = "member", value_name = "NAME[=KUBECONFIG[#CONTEXT]]", value_parser = super::member_arg)]
    pub members: Vec<Member>,
}

/// A cluster `capstan dev` serves beside its own (`--member`).
#[derive(Clone, Debug)]
pub enum Member {
    /// The local cluster of this name.
    Local(String),
    /// A cluster a kubeconfig reaches.
    Kubeconfig(super::ClusterArg),
}

impl Member {
    /// The name it is served as.
    pub fn name(&self) -> &str {
        match self {
            Member::Local(name) => name,
            Member::Kubeconfig(c) => &c.name,
        }
    }
}

/// How a project builds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Build {
    /// `cargo build --release --target wasm32-wasip2`; the component is
    /// `<target>/wasm32-wasip2/release/<crate>.wasm`.
    Cargo { crate_name: String },
    /// `sh build.sh OUT` (the Python and JavaScript templates).
    Script,
}

/// A project to develop.
#[derive(Clone, Debug)]
struct Project {
    dir: PathBuf,
    /// The component's file name in the components folder, without `.wasm`.
    name: String,
    build: Build,
}

impl Project {
    fn detect(dir: &Path) -> anyhow::Result<Self> {
        let dir = std::fs::canonicalize(dir).with_context(|| format!("no project folder {}", dir.display()))?;
        let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "component".into());
        if let Ok(cargo) = std::fs::read_to_string(dir.join("Cargo.toml")) {
            let name = package_name(&cargo)
                .with_context(|| format!("{}: no [package] name", dir.join("Cargo.toml").display()))?;
            let crate_name = name.replace('-', "_");
            return Ok(Self { dir, name: crate_name.clone(), build: Build::Cargo { crate_name } });
        }
        if dir.join("build.sh").is_file() {
            return Ok(Self { dir, name: crate::policy::names::to_snake(&folder), build: Build::Script });
        }
        bail!(
            "{}: not a project made by `capstan new` (no Cargo.toml and no build.sh); create one with: capstan new NAME",
            dir.display()
        )
    }

    /// Builds the component; returns its bytes, or the build's output when
    /// it fails.
    async fn build(&self, scratch: &Path) -> anyhow::Result<Result<Vec<u8>, String>> {
        let (mut command, artifact) = match &self.build {
            Build::Cargo { crate_name } => {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(|t| self.dir.join(t))
                    .unwrap_or_else(|| self.dir.join("target"));
                let mut command =
                    tokio::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
                command.args(["build", "--release", "--target", "wasm32-wasip2", "--color", "never"]);
                (command, target.join("wasm32-wasip2/release").join(format!("{crate_name}.wasm")))
            }
            Build::Script => {
                let out = scratch.join(format!("{}.wasm", self.name));
                let mut command = tokio::process::Command::new("sh");
                command.arg("build.sh").arg(&out);
                (command, out)
            }
        };
        let output = command
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .with_context(|| format!("cannot run the build in {}", self.dir.display()))?;
        if !output.status.success() {
            let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&output.stderr));
            return Ok(Err(text));
        }
        Ok(std::fs::read(&artifact)
            .map_err(|e| format!("the build succeeded but {} cannot be read: {e}", artifact.display())))
    }
}

/// The `name` of the `[package]` table of a Cargo.toml.
fn package_name(cargo: &str) -> Option<String> {
    let mut in_package = false;
    for line in cargo.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(value) = line.strip_prefix("name").map(str::trim_start) {
            let value = value.strip_prefix('=')?.trim();
            return Some(value.trim_matches('"').to_owned());
        }
    }
    None
}

/// Bytes of compiled functions `capstan dev` keeps for the next build.
const DEV_FUNCTION_CACHE: usize = 512 << 20;

/// True for a changed path that does not call for a rebuild: build output,
/// dependencies, caches, hidden files and folders.
fn ignored(project: &Path, path: &Path) -> bool {
    let rel = path.strip_prefix(project).unwrap_or(path);
    let skip_dir = |c: &std::path::Component<'_>| {
        let s = c.as_os_str().to_string_lossy();
        s.starts_with('.') || ["target", "node_modules", "__pycache__"].contains(&s.as_ref())
    };
    rel.components().any(|c| skip_dir(&c))
        || rel.extension().is_some_and(|e| ["wasm", "pyc", "tmp", "swp"].contains(&e.to_string_lossy().as_ref()))
        || rel.file_name().is_some_and(|n| n.to_string_lossy().ends_with('~'))
}

/// True if `path` was modified at or after `since`, or is gone.
fn written_since(path: &Path, since: std::time::SystemTime) -> bool {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => meta.is_file() && meta.modified().is_ok_and(|m| m >= since),
        Err(_) => true,
    }
}

/// Copies `bytes` into the components folder as one rename, so the host
/// never sees half a file. Returns false when the file is already so.
fn publish(components: &Path, name: &str, bytes: &[u8]) -> anyhow::Result<bool> {
    let path = components.join(format!("{name}.wasm"));
    if std::fs::read(&path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    let tmp = components.join(format!(".{name}.wasm.tmp"));
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(true)
}

/// Runs `capstan dev`; returns the exit code.
///
/// # Errors
///
/// When the folder is not a project, the first build fails, the cluster
/// cannot be started or reached, or the host does not start.
pub async fn run(args: Args) -> anyhow::Result<i32> {
    let project = Project::detect(&args.dir)?;
    let work = crate::tooling::cli::cluster::build::cache_root()?.join("dev").join(format!(
        "{}-{:016x}",
        project.name,
        fnv(project.dir.to_string_lossy().as_bytes())
    ));
    let components = work.join("components");
    let scratch = work.join("build");
    for dir in [&components, &scratch] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }

    let names: std::collections::BTreeSet<&str> = args.members.iter().map(Member::name).collect();
    if names.len() < args.members.len() {
        bail!("--member: a cluster name is given twice");
    }
    let kubeconfig = match &args.kubeconfig {
        Some(path) => path.clone(),
        None => {
            outln!("dev: cluster {}", args.cluster);
            super::cluster::ensure_up(&args.cluster).await?
        }
    };
    let client = super::client(Some(&kubeconfig), None).await?;
    // Members are reached before anything is built: one that cannot be is
    // said at once.
    let mut members = Vec::new();
    for member in &args.members {
        let (kubeconfig, context) = match member {
            Member::Local(name) => {
                if args.kubeconfig.is_none() && *name == args.cluster {
                    bail!("--member {name}: that is the cluster capstan dev runs on");
                }
                outln!("dev: member {name} (local cluster {name})");
                (super::cluster::ensure_up_in(name, None).await?, None)
            }
            Member::Kubeconfig(c) => {
                outln!("dev: member {} (kubeconfig {})", c.name, c.kubeconfig.display());
                (c.kubeconfig.clone(), c.context.clone())
            }
        };
        let member_client = super::client(Some(&kubeconfig), context).await?;
        members.push((member.name().to_owned(), member_client));
    }

    outln!("dev: building {} in {}", project.name, project.dir.display());
    let started = Instant::now();
    let bytes = match project.build(&scratch).await? {
        Ok(bytes) => bytes,
        Err(output) => {
            out!("{output}");
            bail!("the first build failed; nothing to run (fix it and run capstan dev again)");
        }
    };
    publish(&components, &project.name, &bytes)?;
    outln!("dev: built in {:.1} s", started.elapsed().as_secs_f64());

    let webhooks = crate::tooling::e2e::serve_webhooks().await?;
    let runtime = crate::serve::host::HostBuilder::new_runtime(Default::default(), DEV_FUNCTION_CACHE, true)?;
    let fleet = crate::serve::fleet::Fleet::new({
        let (namespaces, components, registry) =
            (args.namespaces.clone(), components.clone(), Arc::clone(&webhooks.registry));
        move |client| {
            crate::serve::host::HostBuilder::new(client)
                // One runtime for every cluster: a rebuilt Python or
                // JavaScript component differs from the last one mostly in
                // its snapshot, so its interpreter's functions are not
                // compiled again; a changed component reconciles within
                // seconds, on Winch's code, and runs cranelift's once it is
                // ready.
                .runtime(Some(runtime.clone()))
                .namespaces(namespaces.clone())
                .install_crds(true)
                .cache_dir(crate::tooling::testing::default_cache_dir())
                .components_dir(Some(components.clone()))
                .webhooks(Some(Arc::clone(&registry)))
        }
    });
    let home = client.clone();
    let started = fleet.engage(crate::serve::fleet::DEFAULT_CLUSTER, async move { Ok(home) });
    let member_starts: Vec<_> = members
        .iter()
        .map(|(name, client)| {
            let client = client.clone();
            (name.clone(), fleet.engage(name, async move { Ok(client) }))
        })
        .collect();
    let first = async { started.await.map_err(|_| anyhow::anyhow!("disengaged"))? };
    if let Err(e) = first.await {
        fleet.shutdown().await;
        webhooks.server.shutdown().await;
        return Err(e.context(format!("the host did not start {}", project.name)));
    }
    for (name, started) in member_starts {
        match started.await {
            Ok(Ok(())) => outln!("dev: serving member {name}"),
            Ok(Err(e)) => outln!("dev: member {name} is not served: {e:#}"),
            Err(_) => outln!("dev: member {name} is not served"),
        }
    }
    outln!(
        "dev: serving {} (kubeconfig {}); edit the sources to swap in a new version, Ctrl-C to stop",
        project.name,
        kubeconfig.display()
    );

    let mut events = vec![tokio::spawn(print_events(client.clone(), args.namespaces.clone(), None))];
    for (name, client) in &members {
        events.push(tokio::spawn(print_events(client.clone(), args.namespaces.clone(), Some(name.clone()))));
    }
    let (tx, mut changes) = mpsc::unbounded_channel::<Vec<PathBuf>>();
    let mut debouncer = new_debouncer(Duration::from_millis(300), move |result: DebounceEventResult| {
        if let Ok(events) = result {
            let _ = tx.send(events.into_iter().map(|e| e.path).collect());
        }
    })
    .context("cannot watch the project's sources")?;
    debouncer
        .watcher()
        .watch(&project.dir, RecursiveMode::Recursive)
        .with_context(|| format!("cannot watch {}", project.dir.display()))?;

    let rebuilds = async {
        // Builds read the sources, and reading is an event too: only a file
        // written (or removed) since the last build started counts.
        let mut last_build = std::time::SystemTime::now();
        while let Some(paths) = changes.recv().await {
            let mut relevant: Vec<PathBuf> = paths;
            // Changes that came in meanwhile go into this build too.
            while let Ok(more) = changes.try_recv() {
                relevant.extend(more);
            }
            relevant.retain(|p| !ignored(&project.dir, p) && written_since(p, last_build));
            // Name a file that is still there (editors and sed write a temporary file and rename it).
            let Some(first) = relevant.iter().find(|p| p.exists()).or(relevant.first()) else { continue };
            last_build = std::time::SystemTime::now();
            let shown = first.strip_prefix(&project.dir).unwrap_or(first).display().to_string();
            outln!("dev: {shown} changed; building");
            let started = Instant::now();
            match project.build(&scratch).await {
                Ok(Ok(bytes)) => match publish(&components, &project.name, &bytes) {
                    Ok(true) => {
                        outln!("dev: built in {:.1} s; swapping the new version in", started.elapsed().as_secs_f64())
                    }
                    Ok(false) => {
                        outln!("dev: built in {:.1} s; the component did not change", started.elapsed().as_secs_f64())
                    }
                    Err(e) => outln!("dev: {e:#}"),
                },
                Ok(Err(output)) => {
                    out!("{output}");
                    outln!("dev: the build failed; the running version keeps serving");
                }
                Err(e) => outln!("dev: {e:#}; the running version keeps serving"),
            }
        }
    };
    tokio::select! {
        () = rebuilds => {}
        () = super::shutdown_signal() => {}
    }
    outln!("dev: stopping");
    drop(debouncer);
    events.iter().for_each(tokio::task::JoinHandle::abort);
    let clusters = std::iter::once((crate::serve::fleet::DEFAULT_CLUSTER.to_owned(), client)).chain(members);
    let mut installed = Vec::new();
    for (name, client) in clusters {
        let Some(host) = fleet.host(&name) else { continue };
        let served = host.status().into_iter().filter_map(|s| s.name);
        let components: Vec<_> =
            served.filter_map(|component| webhooks.registry.get_in(&name, &component).ok()).collect();
        installed.push((name, client, components));
    }
    fleet.shutdown().await;
    webhooks.server.shutdown().await;
    // Nothing answers at the webhooks' address any more.
    for (name, client, components) in installed {
        let cluster = crate::cluster::kube::KubeCluster::new(client, None);
        let Some(install) = webhooks.registry.install_for(&name) else { continue };
        for served in components {
            let manifest = &served.component.manifest;
            if let Err(e) = crate::serve::webhook::install::uninstall(&cluster, manifest, &install).await {
                tracing::warn!(cluster = %name, component = %manifest.name, error = %e, "cannot remove the webhook configurations");
            }
        }
    }
    let locals = args.members.iter().filter_map(|m| match m {
        Member::Local(name) => Some(name.as_str()),
        Member::Kubeconfig(_) => None,
    });
    let locals: Vec<&str> =
        args.kubeconfig.is_none().then_some(args.cluster.as_str()).into_iter().chain(locals).collect();
    for name in locals {
        if args.down {
            super::cluster::stop_in(name, if name == args.cluster { cluster_dir() } else { None }).await?;
        } else {
            outln!("dev: cluster {name} keeps running (capstan cluster down --name {name} to stop it)");
        }
    }
    Ok(0)
}

/// The state folder `CAPSTAN_CP_DIR` names for the cluster `capstan dev`
/// runs on; members are in their own.
fn cluster_dir() -> Option<PathBuf> {
    std::env::var_os("CAPSTAN_CP_DIR").map(PathBuf::from)
}

/// Prints every Event recorded from now on, as it happens; a member's
/// (`cluster` given) with its name.
async fn print_events(client: kube::Client, namespaces: Vec<String>, cluster: Option<String>) {
    use k8s_openapi::api::core::v1::Event;
    use kube::runtime::watcher::{self, watcher};
    let since = k8s_openapi::jiff::Timestamp::now();
    let apis: Vec<kube::Api<Event>> = if namespaces.is_empty() {
        vec![kube::Api::all(client)]
    } else {
        namespaces.iter().map(|ns| kube::Api::namespaced(client.clone(), ns)).collect()
    };
    let streams = apis.into_iter().map(|api| watcher(api, watcher::Config::default()).boxed());
    let mut events = futures::stream::select_all(streams);
    let mut seen = std::collections::HashSet::new();
    while let Some(item) = events.next().await {
        let (watcher::Event::Apply(e) | watcher::Event::InitApply(e)) = (match item {
            Ok(event) => event,
            Err(_) => continue,
        }) else {
            continue;
        };
        let when = e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0));
        if when.is_none_or(|w| w < since) || !seen.insert((e.metadata.uid.clone(), e.count)) {
            continue;
        }
        let o = &e.involved_object;
        outln!(
            "event{}: {} {} {}/{}{}: {}",
            cluster.as_deref().map(|c| format!(" [{c}]")).unwrap_or_default(),
            e.type_.as_deref().unwrap_or("Normal"),
            e.reason.as_deref().unwrap_or(""),
            o.kind.as_deref().unwrap_or(""),
            o.namespace.as_deref().map(|n| format!("{n}/")).unwrap_or_default(),
            o.name.as_deref().unwrap_or(""),
            e.message.as_deref().unwrap_or("")
        );
    }
}

/// FNV-1a, for a stable folder name per project path.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_package_name_is_read_from_the_package_table() {
        let cargo = "[workspace]\nname = \"no\"\n\n[package]\nversion = \"1\"\nname = \"my-app\"\n[dependencies]\nname = \"x\"\n";
        assert_eq!(package_name(cargo).as_deref(), Some("my-app"));
        assert_eq!(package_name("[dependencies]\nname = \"x\"\n"), None);
    }

    #[test]
    fn build_output_and_hidden_files_do_not_trigger_a_build() {
        let p = Path::new("/p");
        for path in [
            "/p/target/x.rs",
            "/p/.build/app.js",
            "/p/node_modules/a/b.js",
            "/p/app.wasm",
            "/p/x/__pycache__/a.py",
            "/p/.git/HEAD",
            "/p/src/lib.rs~",
        ] {
            assert!(ignored(p, Path::new(path)), "{path}");
        }
        for path in ["/p/src/lib.rs", "/p/app.py", "/p/app.js", "/p/Cargo.toml", "/p/capstan-sdk/guest-sdk/src/lib.rs"]
        {
            assert!(!ignored(p, Path::new(path)), "{path}");
        }
    }

    #[test]
    fn a_file_read_but_not_written_is_no_change() {
        let dir = std::env::temp_dir().join(format!("capstan-dev-mtime-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("created");
        let file = dir.join("lib.rs");
        std::fs::write(&file, "fn main() {}").expect("written");
        let after_write = std::time::SystemTime::now() + Duration::from_millis(10);
        assert!(written_since(&file, std::time::SystemTime::UNIX_EPOCH));
        let _ = std::fs::read(&file).expect("read");
        assert!(!written_since(&file, after_write), "a read is not a change");
        assert!(!written_since(&dir, std::time::SystemTime::UNIX_EPOCH), "a folder is not a source");
        assert!(written_since(&dir.join("gone.rs"), after_write), "a removed file is a change");
        std::fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn a_folder_without_a_project_is_refused_with_what_to_do() {
        let dir = std::env::temp_dir().join(format!("capstan-dev-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("created");
        let err = Project::detect(&dir).expect_err("not a project").to_string();
        assert!(err.contains("not a project made by `capstan new`") && err.contains("capstan new NAME"), "{err}");
        std::fs::remove_dir_all(&dir).expect("removed");
    }

    #[test]
    fn a_component_is_published_whole_and_only_when_it_changed() {
        let dir = std::env::temp_dir().join(format!("capstan-dev-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("created");
        assert!(publish(&dir, "c", b"one").expect("published"));
        assert!(!publish(&dir, "c", b"one").expect("the same"));
        assert!(publish(&dir, "c", b"two").expect("published"));
        assert_eq!(std::fs::read(dir.join("c.wasm")).expect("read"), b"two");
        assert!(!dir.join(".c.wasm.tmp").exists());
        std::fs::remove_dir_all(&dir).expect("removed");
    }
}
