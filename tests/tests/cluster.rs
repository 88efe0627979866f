//! `capstan cluster` as a user runs it: a second, named cluster starts next
//! to the shared one, `status` lists it as ready, the kubeconfig that `env`
//! exports works with a kube client, and `down` stops it (`--purge` removes
//! its state).
//!
//! The cluster's state lives under a temporary `XDG_STATE_HOME`, so the
//! test sees and stops only what it started.

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{Context as _, Result, ensure};
use capstan_tests::{ControlPlane, capstan_binary, random_suffix};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};

/// A named cluster under a private state root; stopped and purged when
/// dropped, whatever the test did.
struct NamedCluster {
    binary: PathBuf,
    root: PathBuf,
    name: String,
}

impl NamedCluster {
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(&self.binary);
        command
            .env("XDG_STATE_HOME", &self.root)
            .env_remove("CAPSTAN_CP_DIR")
            .arg("cluster")
            .args(args)
            .stdin(std::process::Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> Result<Output> {
        self.command(args).output().with_context(|| format!("running capstan cluster {}", args.join(" ")))
    }

    fn ok(&self, args: &[&str]) -> Result<String> {
        let output = self.run(args)?;
        ensure!(
            output.status.success(),
            "capstan cluster {} failed ({}):\n{}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

impl Drop for NamedCluster {
    fn drop(&mut self) {
        let _ = self.command(&["down", "--name", &self.name, "--purge"]).output();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn kubeconfig_from_env_line(line: &str) -> Result<PathBuf> {
    let path = line.trim().strip_prefix("export KUBECONFIG=").context("an `export KUBECONFIG=` line")?;
    Ok(PathBuf::from(path.trim_matches('\'')))
}

#[tokio::test]
async fn a_second_named_cluster_starts_answers_and_stops() -> Result<()> {
    // The shared cluster runs (or starts) first: the new one runs beside it.
    let shared = ControlPlane::shared().await?;
    let cluster = NamedCluster {
        binary: capstan_binary().await?,
        root: std::env::temp_dir().join(format!("capstan-clusters-{}", random_suffix(8))),
        name: format!("e2e-{}", random_suffix(6)),
    };
    let name = cluster.name.as_str();

    let kubeconfig = cluster.ok(&["up", "--name", name])?;
    let kubeconfig = PathBuf::from(kubeconfig.lines().last().context("up printed the kubeconfig path")?.trim());
    let dir = cluster.root.join("capstan/clusters").join(name);
    ensure!(kubeconfig == dir.join("kubeconfig"), "kubeconfig {} not in {}", kubeconfig.display(), dir.display());

    let status = cluster.ok(&["status"])?;
    let row = status.lines().find(|l| l.starts_with(name)).with_context(|| format!("{name} in:\n{status}"))?;
    ensure!(row.split_whitespace().nth(1) == Some("ready"), "not ready: {row}");
    ensure!(cluster.run(&["status", "--name", name])?.status.success(), "status --name {name} exits 0 when ready");

    let env = cluster.ok(&["env", "--name", name])?;
    let exported = kubeconfig_from_env_line(&env)?;
    ensure!(exported == kubeconfig, "env exports {}", exported.display());
    let plane = ControlPlane::from_kubeconfig(&exported).await?;
    ensure!(plane.server_url() != shared.server_url(), "a cluster of its own, not the shared one");
    let namespaces: Api<Namespace> = Api::all(plane.client()?);
    let names: Vec<String> =
        namespaces.list(&ListParams::default()).await?.into_iter().filter_map(|n| n.metadata.name).collect();
    ensure!(names.iter().any(|n| n == "kube-system"), "namespaces: {names:?}");

    // A second `up` reuses it.
    let again = cluster.ok(&["up", "--name", name])?;
    ensure!(again.trim_end().ends_with(&*kubeconfig.to_string_lossy()), "second up: {again}");

    let pids: Vec<u32> = ["etcd", "kube-apiserver", "kube-controller-manager"]
        .iter()
        .map(|b| {
            std::fs::read_to_string(dir.join("pids").join(b)).context("a pid file")?.trim().parse().context("a pid")
        })
        .collect::<Result<_>>()?;
    cluster.ok(&["down", "--name", name])?;
    for pid in pids {
        ensure!(!alive(pid), "process {pid} still runs after down");
    }
    let stopped = cluster.run(&["status", "--name", name])?;
    ensure!(!stopped.status.success(), "status --name exits non-zero when stopped");
    ensure!(String::from_utf8_lossy(&stopped.stdout).contains("stopped"));
    ensure!(dir.join("pki/ca.crt").is_file(), "down without --purge keeps the state");
    ensure!(shared.client()?.apiserver_version().await.is_ok(), "the shared cluster still answers");

    cluster.ok(&["down", "--name", name, "--purge"])?;
    ensure!(!dir.exists(), "--purge removes {}", dir.display());
    Ok(())
}

/// Whether `pid` runs and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        .map(|stat| stat.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}
