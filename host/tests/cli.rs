//! The `capstan` binary's own error paths.

use std::process::Command;

use serde_json::Value;

/// A kubeconfig pointing at port 1 on loopback, where nothing listens.
fn unreachable_kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    std::fs::create_dir_all(dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .expect("write kubeconfig");
    kubeconfig
}

/// Every stderr line parsed as a JSON object; panics on a line that is not.
fn json_lines(stderr: &[u8]) -> Vec<serde_json::Map<String, Value>> {
    let stderr = String::from_utf8_lossy(stderr);
    assert!(!stderr.trim().is_empty(), "no log lines");
    stderr
        .lines()
        .map(|line| match serde_json::from_str(line) {
            Ok(Value::Object(o)) => o,
            other => panic!("not a JSON object ({other:?}): {line}\n{stderr}"),
        })
        .collect()
}

/// Runs `capstan` with `args`, reads its stderr until a line satisfies
/// `wanted` (at most 60 s), checks it still runs, and stops it. Returns the
/// line.
fn first_line_while_running(args: &[&std::ffi::OsStr], wanted: impl Fn(&str) -> bool) -> String {
    use std::io::BufRead as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut seen = Vec::new();
    let found = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if wanted(&line) => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let running = child.try_wait().expect("status").is_none();
    let _ = child.kill();
    let _ = child.wait();
    let found = found.unwrap_or_else(|| panic!("no such line; stderr was:\n{}", seen.join("\n")));
    assert!(running, "still running (retrying) when it said so");
    found
}

#[test]
fn run_without_a_reachable_cluster_keeps_trying_and_says_so() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-{}", std::process::id()));
    let kubeconfig = unreachable_kubeconfig(&dir);
    let args = ["run", "--listen", "127.0.0.1:0", "--kubeconfig"].map(std::ffi::OsStr::new);
    let args: Vec<&std::ffi::OsStr> = args.into_iter().chain([kubeconfig.as_os_str(), "any.wasm".as_ref()]).collect();
    let line = first_line_while_running(&args, |l| l.contains("cannot reach the cluster"));
    assert!(line.contains("retrying"), "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_with_a_missing_kubeconfig_names_the_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["run", "--listen", "127.0.0.1:0", "--kubeconfig", "/nonexistent/kubeconfig", "any.wasm"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read kubeconfig /nonexistent/kubeconfig"), "{stderr}");
}

#[test]
fn json_log_format_writes_one_object_per_line_the_retries_included() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-json-{}", std::process::id()));
    let kubeconfig = unreachable_kubeconfig(&dir);
    let args = ["--log-format", "json", "--log", "debug", "run", "--listen", "127.0.0.1:0", "--kubeconfig"]
        .map(std::ffi::OsStr::new);
    let args: Vec<&std::ffi::OsStr> = args.into_iter().chain([kubeconfig.as_os_str(), "any.wasm".as_ref()]).collect();
    let line = first_line_while_running(&args, |l| l.contains("cannot reach the cluster"));
    let _ = std::fs::remove_dir_all(&dir);
    let lines = json_lines(line.as_bytes());
    let retry = &lines[0];
    assert!(retry.contains_key("timestamp") && retry.contains_key("target"));
    assert_eq!(retry["level"], "WARN");
    assert_eq!(retry["message"], "cannot reach the cluster, retrying");
    assert!(retry.contains_key("error") && retry.contains_key("retry_in_ms"), "{retry:?}");
}

#[test]
fn json_log_format_from_the_environment_carries_the_component_load_span() {
    let greeter = capstan_host::testing::find_component("greeter").unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .env("CAPSTAN_LOG_FORMAT", "json")
        .env("CAPSTAN_LOG", "capstan_host=debug")
        .args(["inspect", "-o", "json"])
        .arg(&greeter)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines = json_lines(&out.stderr);
    let ready = lines.iter().find(|l| l["message"] == "component ready").expect("a load event");
    let span = &ready["spans"][0];
    assert_eq!(span["name"], "load_component");
    assert_eq!(span["controller"], "greeter");
    assert_eq!(span["path"], greeter.display().to_string());
    assert!(span["digest"].as_str().is_some_and(|d| d.len() == 64), "{span}");
    // Winch (`baseline`) compiles a component the compile cache does not
    // hold yet (a fresh machine, a rebuilt guest); cranelift or the cache
    // otherwise.
    assert!(["compiled", "cache", "baseline"].contains(&span["source"].as_str().unwrap_or_default()), "{span}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("stdout stays the JSON document");
    assert_eq!(doc["name"], "greeter");
}

// Issue 28 item 6: `inspect` shows the problem the host refuses a
// component for at load.
#[test]
fn inspect_names_an_owned_kind_the_host_could_write_no_child_of() {
    let unwritable = capstan_host::testing::find_component("unwritable").unwrap_or_else(|e| panic!("{e}"));
    let out = Command::new(env!("CARGO_BIN_EXE_capstan")).arg("inspect").arg(&unwritable).output().expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "no document for a refused component");
    assert!(stderr.contains("owns[0]: controller unwritable could write no v1/ConfigMap child"), "{stderr}");
    assert!(
        stderr.contains("give the owned kind a scope: cluster, or the namespaces its children live in"),
        "{stderr}"
    );
}

#[test]
fn a_reader_that_goes_away_ends_a_command_quietly() {
    // `capstan new x | head -1`: stdout closes after the first line.
    let dir = std::env::temp_dir().join(format!("capstan-cli-pipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["new", "closed-pipe"])
        .current_dir(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("capstan runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("capstan ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(dir.join("closed-pipe/Cargo.toml").is_file(), "the project is made before the listing");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_python_template_builds_with_the_projects_own_virtualenv() {
    // `capstan dev` runs `sh build.sh` without the project's `.venv` on PATH.
    let dir = std::env::temp_dir().join(format!("capstan-cli-venv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let new = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["new", "venv-check", "--lang", "python", "--dir"])
        .arg(dir.join("p"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("capstan new runs");
    assert!(new.status.success(), "{}", String::from_utf8_lossy(&new.stderr));
    let project = dir.join("p");
    let bin = project.join(".venv/bin");
    std::fs::create_dir_all(&bin).expect("venv folder");
    // A stand-in componentize-py that says it ran.
    let tool = bin.join("componentize-py");
    std::fs::write(&tool, "#!/bin/sh\necho \"stand-in componentize-py $*\" >&2\nexit 3\n").expect("written");
    let mut permissions = std::fs::metadata(&tool).expect("written").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&tool, permissions).expect("executable");
    let build = Command::new("sh")
        .arg("build.sh")
        .current_dir(&project)
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("sh runs");
    let stderr = String::from_utf8_lossy(&build.stderr);
    assert!(stderr.contains("stand-in componentize-py"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
