//! `capstan dev`: the author's loop in one command. In a project made by
//! `capstan new` (Rust, Python or JavaScript): make sure a local cluster
//! runs, build the component, run it with its CRDs installed and its
//! webhooks served, rebuild on every source change and swap the new version
//! in (the host's hot loading, through a components folder), print the
//! host's log lines and the cluster's Events as they happen, stop on
//! Ctrl-C. A build that fails is shown and the running version serves on.

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
    /// Stop the local cluster on exit (it stays up by default).
    #[arg(long)]
    pub down: bool,
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

    let kubeconfig = match &args.kubeconfig {
        Some(path) => path.clone(),
        None => {
            outln!("dev: cluster {}", args.cluster);
            super::cluster::ensure_up(&args.cluster).await?
        }
    };
    let client = super::client(Some(&kubeconfig), None).await?;

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
    let host = crate::serve::host::HostBuilder::new(client.clone())
        .namespaces(args.namespaces.clone())
        .install_crds(true)
        .cache_dir(crate::tooling::testing::default_cache_dir())
        // A rebuilt Python or JavaScript component differs from the last
        // one mostly in its snapshot: its interpreter's functions are not
        // compiled again.
        .function_cache(DEV_FUNCTION_CACHE)
        // A changed component reconciles within seconds, on Winch's code,
        // and runs cranelift's once it is ready.
        .baseline(true)
        .components_dir(Some(components.clone()))
        .webhooks(Some(Arc::clone(&webhooks.registry)))
        .start()
        .await
        .with_context(|| format!("the host did not start {}", project.name))?;
    outln!(
        "dev: serving {} (kubeconfig {}); edit the sources to swap in a new version, Ctrl-C to stop",
        project.name,
        kubeconfig.display()
    );

    let events = tokio::spawn(print_events(client.clone(), args.namespaces.clone()));
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
    events.abort();
    let installed: Vec<_> = host
        .status()
        .into_iter()
        .filter_map(|s| s.name)
        .filter_map(|name| webhooks.registry.get(&name).ok().map(|s| s.component))
        .collect();
    host.shutdown().await;
    webhooks.server.shutdown().await;
    // Nothing answers at the webhooks' address any more.
    let cluster = crate::cluster::kube::KubeCluster::new(client, None);
    for component in installed {
        crate::tooling::e2e::uninstall_webhooks(&cluster, &webhooks.registry, &component.manifest).await;
    }
    if args.down && args.kubeconfig.is_none() {
        super::cluster::stop(&args.cluster).await?;
    } else if args.kubeconfig.is_none() {
        outln!("dev: cluster {} keeps running (capstan cluster down to stop it)", args.cluster);
    }
    Ok(0)
}

/// Prints every Event recorded from now on, as it happens.
async fn print_events(client: kube::Client, namespaces: Vec<String>) {
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
            "event: {} {} {}/{}{}: {}",
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
