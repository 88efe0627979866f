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

#[test]
fn run_without_a_reachable_cluster_says_so_and_exits_non_zero() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-{}", std::process::id()));
    let kubeconfig = unreachable_kubeconfig(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["run", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("any.wasm")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach the cluster at https://127.0.0.1:1/"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_with_a_missing_kubeconfig_names_the_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["run", "--kubeconfig", "/nonexistent/kubeconfig", "any.wasm"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot read kubeconfig /nonexistent/kubeconfig"), "{stderr}");
}

#[test]
fn json_log_format_writes_one_object_per_line_the_error_included() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-json-{}", std::process::id()));
    let kubeconfig = unreachable_kubeconfig(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["--log-format", "json", "--log", "debug", "run", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("any.wasm")
        .output()
        .expect("runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2));
    let lines = json_lines(&out.stderr);
    assert!(lines.iter().all(|l| l.contains_key("timestamp") && l.contains_key("level") && l.contains_key("target")));
    let error = lines.iter().find(|l| l["message"] == "command failed").expect("the error is logged");
    assert_eq!(error["level"], "ERROR");
    let text = error["error"].as_str().expect("error field");
    assert!(text.contains("cannot reach the cluster at https://127.0.0.1:1/"), "{text}");
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
    assert!(["compiled", "cache"].contains(&span["source"].as_str().unwrap_or_default()), "{span}");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("stdout stays the JSON document");
    assert_eq!(doc["name"], "greeter");
}
