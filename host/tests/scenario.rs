//! `capstan test`: scenario folders run on the mock host, with readable
//! diffs and a non-zero exit on mismatch.

use std::path::{Path, PathBuf};
use std::process::Command;

use capstan_host::testing::find_component;
use capstan_host::tooling::scenario;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn greeter() -> PathBuf {
    find_component("greeter").unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn greeter_scenarios_pass() {
    let results = scenario::run_all(&greeter(), &repo().join("examples/greeter/scenarios")).await.expect("runs");
    assert_eq!(results.len(), 2);
    for case in &results {
        assert!(case.passed(), "{}: {:#?}", case.name, case.mismatches);
    }
}

#[tokio::test]
async fn a_wrong_expectation_is_reported_with_the_path_and_both_values() {
    let dir = repo().join("tests/fixtures/scenarios/wrong-expectation");
    let results = scenario::run_all(&greeter(), &dir).await.expect("runs");
    let mismatches = &results[0].mismatches;
    assert!(mismatches.iter().any(|m| m.contains("at .spec.replicas: expected 5, got 2")), "{mismatches:#?}");
    assert!(mismatches.iter().any(|m| m.contains("at .data.message: expected \"goodbye\", got \"hi there\"")));
}

/// The silences example's scenarios: Alertmanager's API stubbed in
/// `http.yaml`, the requests checked in `requests.yaml`, a step where it is
/// gone, a refused silence.
#[tokio::test]
async fn silences_scenarios_pass_against_stubbed_origins() {
    let silences = find_component("silences").unwrap_or_else(|e| panic!("{e}"));
    let results = scenario::run_all(&silences, &repo().join("examples/silences/scenarios")).await.expect("runs");
    assert_eq!(results.len(), 2);
    for case in &results {
        assert!(case.passed(), "{}: {:#?}", case.name, case.mismatches);
    }
}

#[tokio::test]
async fn a_wrong_stub_and_a_request_not_made_are_reported() {
    let silences = find_component("silences").unwrap_or_else(|e| panic!("{e}"));
    let dir = repo().join("tests/fixtures/scenarios/wrong-requests");
    let results = scenario::run_all(&silences, &dir).await.expect("runs");
    let mismatches = &results[0].mismatches;
    assert!(mismatches.iter().any(|m| m.starts_with("http.yaml: entry 1: unknown field `stauts`")), "{mismatches:#?}");
    // The POST was made, with another comment; nothing answered it.
    let request = mismatches
        .iter()
        .find(|m| m.starts_with("requests.yaml: no request made matches"))
        .unwrap_or_else(|| panic!("{mismatches:#?}"));
    assert!(request.contains(r#""comment":"swapping the disk""#), "the requests made are shown: {request}");
    assert_eq!(mismatches.len(), 2, "{mismatches:#?}");
}

#[test]
fn capstan_test_exits_non_zero_on_mismatch_and_zero_on_success() {
    let bin = env!("CARGO_BIN_EXE_capstan");
    let bad = Command::new(bin)
        .args(["test"])
        .arg(greeter())
        .arg(repo().join("tests/fixtures/scenarios/wrong-expectation"))
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("scenario wrong-expectation ... FAILED"), "{stdout}");
    assert!(stdout.contains("0 passed, 1 failed"), "{stdout}");

    let good = Command::new(bin)
        .args(["test"])
        .arg(greeter())
        .arg(repo().join("examples/greeter/scenarios"))
        .output()
        .expect("runs");
    assert_eq!(good.status.code(), Some(0), "{}", String::from_utf8_lossy(&good.stdout));
}

#[test]
fn capstan_inspect_prints_the_manifest() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["inspect", "--output", "json"])
        .arg(greeter())
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(doc["name"], "greeter");
    assert_eq!(doc["primary"]["kind"], "Greeting");
    assert_eq!(doc["finalizer"], "examples.capstan.dev/greeter-cleanup");
    assert_eq!(doc["crds"][0], "greetings.examples.capstan.dev");
    assert_eq!(doc["roles"]["reconcile"], true);
    assert_eq!(doc["roles"]["admission"], serde_json::json!([]));
}

#[test]
fn capstan_inspect_shows_the_roles_a_component_serves() {
    let inspect = |component: PathBuf| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["inspect", "--output", "json"])
            .arg(component)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("json")
    };
    let webhooks = inspect(greeter_webhooks());
    let roles = &webhooks["roles"];
    assert_eq!(roles["reconcile"], false);
    assert_eq!(roles["admission"][0]["name"], "validate.greetings.webhooks.examples.capstan.dev");
    assert_eq!(roles["admission"][0]["operations"], serde_json::json!(["CREATE", "UPDATE"]));
    assert_eq!(roles["admission"][2]["type"], "mutating");
    assert_eq!(roles["conversion"][0]["kind"], "Greeting");
    let scheduler = inspect(find_component("zone-scheduler").unwrap_or_else(|e| panic!("{e}")));
    assert_eq!(scheduler["roles"]["scheduler"], "zone-spread");
    assert_eq!(scheduler["primary"]["kind"], "Pod");
}

#[test]
fn capstan_inspect_names_the_file_and_reason_for_a_bad_component() {
    let out = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["inspect"])
        .arg(repo().join("README.md"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("README.md: not a WebAssembly file"), "{stderr}");
}

#[tokio::test]
async fn a_scenario_defines_custom_kinds_and_uses_any_built_in_kind() {
    let dir = repo().join("tests/fixtures/scenarios/custom-kinds");
    let results = scenario::run_all(&greeter(), &dir).await.expect("runs");
    assert!(results[0].passed(), "{:#?}", results[0].mismatches);
}

fn greeter_webhooks() -> PathBuf {
    find_component("greeter-webhooks").unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn webhook_scenarios_deny_default_and_convert_on_the_mock_host() {
    let dir = repo().join("examples/greeter-webhooks/scenarios");
    let results = scenario::run_all(&greeter_webhooks(), &dir).await.expect("runs");
    assert_eq!(results.len(), 9, "every case ran");
    for case in &results {
        assert!(case.passed(), "{}: {:#?}", case.name, case.mismatches);
    }
}

#[tokio::test]
async fn a_denied_write_is_an_error_and_a_wrong_conversion_a_mismatch() {
    let root = std::env::temp_dir().join(format!("capstan-scenario-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    // A write the validating webhook denies, without error.txt to expect it.
    let denied = root.join("denied");
    std::fs::create_dir_all(&denied).expect("mkdir");
    std::fs::write(
        denied.join("given.yaml"),
        "apiVersion: webhooks.examples.capstan.dev/v1alpha1\nkind: Greeting\n\
         metadata: {name: big, namespace: demo}\nspec: {message: hi, replicas: 11}\n",
    )
    .expect("write");
    // A conversion expected to give what it does not.
    let wrong = root.join("wrong-conversion");
    std::fs::create_dir_all(&wrong).expect("mkdir");
    std::fs::write(
        wrong.join("conversion.yaml"),
        "desiredAPIVersion: webhooks.examples.capstan.dev/v1\nobjects:\n\
         - {apiVersion: webhooks.examples.capstan.dev/v1alpha1, kind: Greeting, metadata: {name: a}, spec: {message: hi}}\n\
         expect:\n- {spec: {greeting: {text: bye}}}\n",
    )
    .expect("write");
    let results = scenario::run_all(&greeter_webhooks(), &root).await.expect("runs");
    std::fs::remove_dir_all(&root).expect("clean up");
    let denied = &results[0].mismatches;
    assert!(
        denied
            .iter()
            .any(|m| m.contains("unexpected error") && m.contains("spec.replicas must be between 0 and 10, not 11")),
        "{denied:#?}"
    );
    let wrong = &results[1].mismatches;
    assert!(wrong.iter().any(|m| m.contains("at .spec.greeting.text: expected \"bye\", got \"hi\"")), "{wrong:#?}");
}

#[tokio::test]
async fn scheduler_scenarios_bind_report_and_retry_on_the_mock_host() {
    let scheduler = find_component("zone-scheduler").unwrap_or_else(|e| panic!("{e}"));
    let dir = repo().join("examples/zone-scheduler/scenarios");
    let results = scenario::run_all(&scheduler, &dir).await.expect("runs");
    let names: Vec<&str> = results.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["cordoned-and-not-ready", "spread-fit-and-retry", "taints-and-tolerations"]);
    for case in &results {
        assert!(case.passed(), "{}: {:#?}", case.name, case.mismatches);
    }
}

/// Objects that name a cluster engage it: the component runs once per
/// cluster, each reconcile is told its cluster, and each cluster's
/// children stay in it; a cluster first named in a step is engaged then.
#[tokio::test]
async fn a_scenario_runs_the_component_in_every_cluster_its_objects_name() {
    let fixture = find_component("fixture").unwrap_or_else(|e| panic!("{e}"));
    let results =
        scenario::run_all(&fixture, &repo().join("tests/fixtures/scenarios/two-clusters")).await.expect("runs");
    assert_eq!(results.len(), 1);
    assert!(results[0].passed(), "{:#?}", results[0].mismatches);

    let results =
        scenario::run_all(&fixture, &repo().join("tests/fixtures/scenarios/wrong-cluster")).await.expect("runs");
    let mismatches = &results[0].mismatches;
    assert!(
        mismatches.iter().any(|m| m.contains("at .data.cluster: expected \"west\", got \"default\"")),
        "{mismatches:#?}"
    );
    assert!(mismatches.iter().any(|m| m.contains("no object of this case is in cluster \"north\"")), "{mismatches:#?}");
    assert_eq!(mismatches.len(), 2, "{mismatches:#?}");
}
