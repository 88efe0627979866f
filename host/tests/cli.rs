//! The `capstan` binary's own error paths.

use std::process::Command;

#[test]
fn run_without_a_reachable_cluster_says_so_and_exits_non_zero() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    // Port 1 on loopback: nothing listens there.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n",
    )
    .expect("write kubeconfig");
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
