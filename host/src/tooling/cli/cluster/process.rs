//! The processes of a local cluster: starting them detached, recognising
//! them by PID, stopping them, free loopback ports, and the lock that
//! serialises commands on one cluster.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;

/// Starts `program` detached from this command: its own process group (a
/// Ctrl-C in the terminal does not reach it), stdin from `/dev/null`,
/// stdout and stderr appended to `log`. It outlives `capstan`.
///
/// # Errors
///
/// When the log cannot be opened or the program cannot start.
pub fn launch(program: &Path, args: &[String], log: &Path) -> anyhow::Result<std::process::Child> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::File::create(log).with_context(|| format!("cannot write {}", log.display()))?;
    let err = out.try_clone()?;
    std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {}", program.display()))
}

/// Whether `pid` is alive and runs the binary called `name` (guards
/// against a recorded PID reused by another program).
pub fn pid_is(pid: u32, name: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    // A zombie has an empty command line: it is not running.
    cmdline
        .split(|b| *b == 0)
        .next()
        .and_then(|argv0| Path::new(std::str::from_utf8(argv0).ok()?).file_name().map(|f| f == name))
        .unwrap_or(false)
}

fn signal(pid: u32, signal: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Stops `pid` if it still runs `name`: SIGTERM, up to 10 s, then SIGKILL.
/// Returns whether it was running.
pub async fn stop(pid: u32, name: &str) -> bool {
    if !pid_is(pid, name) {
        return false;
    }
    signal(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_is(pid, name) {
        if Instant::now() >= deadline {
            eprintln!("cluster: {name} (pid {pid}) ignored SIGTERM for 10 s; sending SIGKILL");
            signal(pid, rustix::process::Signal::KILL);
            let deadline = Instant::now() + Duration::from_secs(5);
            while pid_is(pid, name) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    true
}

/// Kills `pid` at once (SIGKILL: a crash, not a drain) if it still runs
/// `name`, and waits until it is gone.
pub async fn kill(pid: u32, name: &str) {
    if pid_is(pid, name) {
        signal(pid, rustix::process::Signal::KILL);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_is(pid, name) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A free loopback TCP port, as the kernel hands out for port 0.
///
/// # Errors
///
/// When no socket can be bound on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}

/// Whether nothing listens on `port` on 127.0.0.1 (so it can be bound).
pub fn port_is_free(port: u16) -> bool {
    port != 0 && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Picks a port: `pinned` if given, else `previous` while it is free (a
/// restarted cluster keeps its address), else a free one not in `taken`.
///
/// # Errors
///
/// When no socket can be bound on 127.0.0.1.
pub fn pick_port(pinned: Option<u16>, previous: Option<u16>, taken: &[u16]) -> std::io::Result<u16> {
    if let Some(port) = pinned {
        return Ok(port);
    }
    if let Some(port) = previous.filter(|p| !taken.contains(p) && port_is_free(*p)) {
        return Ok(port);
    }
    loop {
        let port = free_port()?;
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
}

/// An exclusive lock on a cluster (`<dir>.lock`), held until dropped.
#[derive(Debug)]
pub struct Lock {
    _file: std::fs::File,
}

impl Lock {
    /// Takes the lock, waiting up to `timeout` for another command.
    ///
    /// # Errors
    ///
    /// When the lock file cannot be created, or another command holds it
    /// for longer than `timeout`.
    pub async fn acquire(dir: &Path, timeout: Duration) -> anyhow::Result<Self> {
        use rustix::fs::{FlockOperation, flock};
        let path = dir.with_extension("lock");
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let deadline = Instant::now() + timeout;
        let mut said = false;
        while flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            if !said {
                eprintln!("cluster: waiting for another command working on {}", dir.display());
                said = true;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "another command held {} for {} s",
                path.display(),
                timeout.as_secs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Self { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_port_is_taken_as_it_is() {
        assert_eq!(pick_port(Some(6443), Some(1), &[]).expect("port"), 6443);
    }

    #[test]
    fn the_previous_port_is_kept_while_free_and_replaced_when_taken() {
        let free = free_port().expect("port");
        assert_eq!(pick_port(None, Some(free), &[]).expect("port"), free);
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).expect("bind");
        let busy = listener.local_addr().expect("addr").port();
        assert!(!port_is_free(busy));
        let picked = pick_port(None, Some(busy), &[]).expect("port");
        assert_ne!(picked, busy);
        assert!(port_is_free(picked));
    }

    #[test]
    fn ports_already_given_to_this_cluster_are_not_picked_twice() {
        let first = pick_port(None, None, &[]).expect("port");
        let second = pick_port(None, Some(first), &[first]).expect("port");
        assert_ne!(first, second);
    }

    #[test]
    fn a_pid_is_recognised_by_its_binary_name() {
        let me = std::process::id();
        let exe = std::env::current_exe().expect("exe");
        let name = exe.file_name().expect("name").to_str().expect("utf-8");
        assert!(pid_is(me, name));
        assert!(!pid_is(me, "kube-apiserver"));
        assert!(!pid_is(u32::MAX, name));
    }
}
