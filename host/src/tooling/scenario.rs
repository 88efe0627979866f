//! Data-driven controller tests, in any guest language: `capstan test
//! <component> <scenario-dir>`.
//!
//! A scenario directory holds one folder per case (or is itself one case).
//! A case is a folder of YAML:
//!
//! | file | meaning |
//! |---|---|
//! | `given.yaml` | objects to create first (multi-document) |
//! | `expect.yaml` | objects expected afterwards; each is a subset match of the live object with the same kind, namespace and name |
//! | `absent.yaml` | objects (kind, namespace, name) expected not to exist |
//! | `events.yaml` | Events expected to have been recorded: a list of `{reason, type, regarding: {kind, name}}`, each a subset match |
//! | `error.txt` | the run is expected to fail with an error containing this text (a reconcile error, or an admission webhook's denial of a write) |
//! | `conversion.yaml` | a conversion to check: `desiredAPIVersion`, `objects`, and `expect` (subset match per object, in order) or `error` (text the failure contains) |
//! | `http.yaml` | stubs answering the component's outbound HTTP requests (declared origins only, as on a host): a list of `{method, url, status, headers, body}` (`url` exact, or a prefix ending in `*`; `body` a string, or JSON), or `{method, url, error}` for a failure (`connection-refused`, `connection-timeout`, `dns-error`); the newest matching stub answers; a request no stub matches fails with `connection-refused`. Nothing leaves the process |
//! | `requests.yaml` | requests expected to have been made (during this step): a list of `{method, url, body}`, each a subset match of some request (`body` against the request's JSON body, or its text) |
//! | `steps/<nn-name>/` | further steps, in name order: `apply.yaml` (objects to create, or merge into existing ones), `delete.yaml` (objects to delete), `http.yaml` (more stubs, newer than the earlier ones), and their own `expect.yaml`, `absent.yaml`, `events.yaml`, `requests.yaml`, `error.txt` |
//!
//! Several clusters: an object in `given.yaml`, `apply.yaml`,
//! `delete.yaml`, `expect.yaml` or `absent.yaml` (and an entry of
//! `events.yaml`) may say which cluster it is in with a top-level
//! `cluster: NAME` beside `apiVersion` (`default` without one). The first
//! object that names a cluster engages it: the component runs there too,
//! once per cluster, told the name in its requests, as on a host serving
//! several (see [`MockHost::add_cluster`]). The clusters share the HTTP
//! stubs. Recorded Events carry their `cluster`, so an `events.yaml`
//! entry without one matches an Event in any cluster.
//!
//! A CustomResourceDefinition in `given.yaml` or `apply.yaml` serves its
//! kind (with its schema) from then on; CRDs are created before the other
//! objects of the same file.
//!
//! Writes from `given.yaml`, `apply.yaml` and `delete.yaml` pass through the
//! admission webhooks the component declares, as on a real API server:
//! mutating webhooks change what is stored, and a denial keeps the object
//! out and counts as the step's error (expect it with `error.txt`). A
//! scheduler the component declares makes one attempt per pending Pod that
//! names it after each step settles (see [`MockHost::schedule_pending`]).
//!
//! After `given.yaml` and after each step, the mock host runs until idle
//! (requeues and retries due later are not run). In subset matches, maps
//! match key by key, and each element of an expected list must match some
//! element of the actual list.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::cluster::mock::{HttpRequest, HttpStub};
use crate::cluster::{self, Cluster, Patch, Propagation, Subresource};
use crate::manifest::Operation;
use crate::object::{Gvk, ObjectRef};
use crate::tooling::testing::{self, Admission, MockHost, Run};

/// Why a scenario could not be run at all (as opposed to failing).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or folder could not be read.
    #[error("{path}: cannot read: {error}")]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// A YAML file does not parse.
    #[error("{path}: invalid YAML: {reason}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's reason.
        reason: String,
    },
    /// The folder holds no case.
    #[error("{0}: no scenario found (expected given.yaml or conversion.yaml, or folders that have one)")]
    Empty(PathBuf),
    /// The mock host failed to start or load the component.
    #[error(transparent)]
    Host(#[from] testing::Error),
}

/// The result of one case.
#[derive(Debug)]
pub struct CaseResult {
    /// Case name (folder name).
    pub name: String,
    /// Mismatches, empty if the case passed.
    pub mismatches: Vec<String>,
}

impl CaseResult {
    /// True if nothing mismatched.
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }
}

fn read(path: &Path) -> Result<Option<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(Error::Read { path: path.to_owned(), error }),
    }
}

/// Reads a multi-document YAML file into JSON values (missing file: none).
pub fn read_yaml_documents(path: &Path) -> Result<Vec<Value>, Error> {
    let Some(text) = read(path)? else { return Ok(Vec::new()) };
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let value =
            Value::deserialize(doc).map_err(|e| Error::Yaml { path: path.to_owned(), reason: e.to_string() })?;
        match value {
            Value::Null => {}
            // An empty item (`- `) is skipped like an empty document.
            Value::Array(items) => docs.extend(items.into_iter().filter(|i| !i.is_null())),
            other => docs.push(other),
        }
    }
    Ok(docs)
}

/// True if `dir` is a case: it has `given.yaml` or `conversion.yaml`.
fn is_case(dir: &Path) -> bool {
    dir.join("given.yaml").is_file() || dir.join("conversion.yaml").is_file()
}

/// The cases under `dir`: itself if it is one (it has `given.yaml` or
/// `conversion.yaml`), else its subfolders that are, in name order.
pub fn discover(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    if is_case(dir) {
        return Ok(vec![dir.to_owned()]);
    }
    let mut cases: Vec<PathBuf> = entries_of(dir)?.into_iter().filter(|p| is_case(p)).collect();
    cases.sort();
    if cases.is_empty() {
        return Err(Error::Empty(dir.to_owned()));
    }
    Ok(cases)
}

/// The paths of the entries of `dir`, in no order.
///
/// # Errors
///
/// [`Error::Read`] naming `dir` when it cannot be listed, or naming it and
/// the entry when one of its entries cannot be read: a folder that cannot
/// be read is not an empty one.
pub(crate) fn entries_of(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let read = |error| Error::Read { path: dir.to_owned(), error };
    std::fs::read_dir(dir).map_err(read)?.map(|entry| entry.map(|e| e.path()).map_err(read)).collect()
}

/// The step folders of `case` (`steps/<nn-name>/`), in name order; none
/// when it has no `steps` folder.
///
/// # Errors
///
/// [`Error::Read`] when `steps` is there but is not a folder or cannot be
/// listed, or when one of its entries cannot be looked at (a dangling
/// symlink, say): a step that cannot be read is not skipped.
pub(crate) fn steps_of(case: &Path) -> Result<Vec<PathBuf>, Error> {
    let dir = case.join("steps");
    match std::fs::metadata(&dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(Error::Read { path: dir, error }),
        Ok(m) if !m.is_dir() => {
            let error = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a folder of steps");
            return Err(Error::Read { path: dir, error });
        }
        Ok(_) => {}
    }
    let mut steps = Vec::new();
    for path in entries_of(&dir)? {
        match std::fs::metadata(&path) {
            Ok(m) if m.is_dir() => steps.push(path),
            Ok(_) => {}
            Err(error) => return Err(Error::Read { path, error }),
        }
    }
    steps.sort();
    Ok(steps)
}

/// Runs every case under `dir` against `component`.
///
/// # Errors
///
/// When a case cannot be run at all (unreadable files, the component is
/// rejected); a failing case is a [`CaseResult`] with mismatches.
pub async fn run_all(component: &Path, dir: &Path) -> Result<Vec<CaseResult>, Error> {
    let mut results = Vec::new();
    for case in discover(dir)? {
        results.push(run_case(component, &case).await?);
    }
    Ok(results)
}

/// Runs one case.
///
/// # Errors
///
/// As [`run_all`].
pub async fn run_case(component: &Path, case: &Path) -> Result<CaseResult, Error> {
    let name = case.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Winch's code, from the compile cache after the first case.
    let steps = steps_of(case)?;
    let mut host = MockHost::with_loader(testing::tool_loader(testing::default_cache_dir())?);
    host.load(component).await?;
    let mut mismatches = Vec::new();

    let mut denials = Vec::new();
    stub_http(&host, case, "", &mut mismatches)?;
    for object in crds_first(read_yaml_documents(&case.join("given.yaml"))?) {
        let (in_cluster, object) = match engage(&mut host, object).await {
            Ok(o) => o,
            Err(e) => {
                mismatches.push(format!("given.yaml: {e}"));
                continue;
            }
        };
        if let Err(e) = apply(&host, &in_cluster, object, Start::Given, &mut denials).await {
            mismatches.push(format!("given.yaml: {e}"));
        }
    }
    let run = host.run_until_idle().await;
    check(&host, case, "", run, denials, 0, &mut mismatches).await?;
    check_conversion(&host, case, &mut mismatches).await?;

    for step in steps {
        let label = format!("steps/{}/", step.file_name().map(|n| n.to_string_lossy()).unwrap_or_default());
        let mut denials = Vec::new();
        let since = host.cluster().http().requests().len();
        stub_http(&host, &step, &label, &mut mismatches)?;
        for object in crds_first(read_yaml_documents(&step.join("apply.yaml"))?) {
            let (in_cluster, object) = match engage(&mut host, object).await {
                Ok(o) => o,
                Err(e) => {
                    mismatches.push(format!("{label}apply.yaml: {e}"));
                    continue;
                }
            };
            if let Err(e) = apply(&host, &in_cluster, object, Start::Step, &mut denials).await {
                mismatches.push(format!("{label}apply.yaml: {e}"));
            }
        }
        for object in read_yaml_documents(&step.join("delete.yaml"))? {
            let Some(r) = ObjectRef::of(&object) else {
                mismatches.push(format!("{label}delete.yaml: an entry lacks apiVersion, kind or metadata.name"));
                continue;
            };
            let target = match in_named(&host, &object) {
                Ok(cluster) => cluster,
                Err(e) => {
                    mismatches.push(format!("{label}delete.yaml: {r}: {e}"));
                    continue;
                }
            };
            let old = target.get(&r).await.ok();
            match host.admit(Operation::Delete, None, old).await? {
                Admission::Denied { message, .. } => denials.push(format!("{r}: {message}")),
                Admission::Allowed { .. } => {
                    if let Err(e) = target.delete(&r, Propagation::Default).await {
                        mismatches.push(format!("{label}delete.yaml: {r}: {e}"));
                    }
                }
            }
        }
        let run = host.run_until_idle().await;
        check(&host, &step, &label, run, denials, since, &mut mismatches).await?;
    }
    Ok(CaseResult { name, mismatches })
}

/// The name an entry's `cluster` field gives (`default` without one).
///
/// # Errors
///
/// When `cluster` is there but not a DNS-1123 label.
fn cluster_of(entry: &Value) -> Result<&str, String> {
    match entry.get("cluster") {
        None => Ok(cluster::DEFAULT_CLUSTER),
        Some(Value::String(name)) if crate::manifest::is_dns1123_label(name) => Ok(name),
        Some(other) => Err(format!("cluster {}: not a DNS-1123 label", compact(other))),
    }
}

/// Every cluster other than `default` that an entry of `case` names, with
/// the first file (relative to the case) that names it, in the order the
/// files name them (given, then each step).
///
/// # Errors
///
/// As [`read_yaml_documents`].
pub(crate) fn other_clusters(case: &Path) -> Result<Vec<(String, PathBuf)>, Error> {
    const FILES: [&str; 7] =
        ["given.yaml", "apply.yaml", "delete.yaml", "expect.yaml", "absent.yaml", "events.yaml", "requests.yaml"];
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for dir in std::iter::once(case.to_owned()).chain(steps_of(case)?) {
        for file in FILES {
            let path = dir.join(file);
            for entry in read_yaml_documents(&path)? {
                if let Some(name) = entry.get("cluster").filter(|c| c.as_str() != Some(cluster::DEFAULT_CLUSTER)) {
                    let name = name.as_str().map_or_else(|| compact(name), str::to_owned);
                    if !found.iter().any(|(known, _)| *known == name) {
                        found.push((name, path.strip_prefix(case).unwrap_or(&path).to_owned()));
                    }
                }
            }
        }
    }
    Ok(found)
}

/// The cluster `entry` names (`default` without a `cluster` field), and
/// the entry without the field.
///
/// # Errors
///
/// When `cluster` is there but not a DNS-1123 label.
pub(crate) fn take_cluster(mut entry: Value) -> Result<(String, Value), String> {
    let name = cluster_of(&entry)?.to_owned();
    if let Some(fields) = entry.as_object_mut() {
        fields.remove("cluster");
    }
    Ok((name, entry))
}

/// The cluster an `expect`, `absent` or `delete` entry names.
fn in_named<'a>(host: &'a MockHost, entry: &Value) -> Result<&'a cluster::mock::MockCluster, String> {
    let name = cluster_of(entry)?;
    host.cluster_named(name).ok_or_else(|| format!("no object of this case is in cluster {name:?}"))
}

/// Takes the `cluster` field off a `given` or `apply` object, engaging
/// the cluster it names when it is new: the component then runs there
/// too. Returns the name and the object as it is written.
async fn engage(host: &mut MockHost, mut object: Value) -> Result<(String, Value), String> {
    let name = cluster_of(&object)?.to_owned();
    if let Some(fields) = object.as_object_mut() {
        fields.remove("cluster");
    }
    if host.cluster_named(&name).is_none() {
        host.add_cluster(&name).await.map_err(|e| e.to_string())?;
    }
    Ok((name, object))
}

/// Adds the stubs of `dir`'s `http.yaml`, if it has one; an entry that is
/// not a stub is a mismatch naming it.
fn stub_http(host: &MockHost, dir: &Path, label: &str, mismatches: &mut Vec<String>) -> Result<(), Error> {
    for (i, entry) in read_yaml_documents(&dir.join("http.yaml"))?.into_iter().enumerate() {
        match serde_json::from_value::<HttpStub>(entry) {
            Ok(stub) => host.cluster().http().stub(stub),
            Err(e) => mismatches.push(format!("{label}http.yaml: entry {i}: {e}")),
        }
    }
    Ok(())
}

/// A request made, as `requests.yaml` entries are matched against it.
fn request_json(request: &HttpRequest) -> Value {
    let body = request.json().unwrap_or_else(|| Value::String(String::from_utf8_lossy(&request.body).into_owned()));
    serde_json::json!({"method": request.method, "url": request.url, "body": body})
}

/// The objects with CustomResourceDefinitions first (otherwise in file
/// order), so that a file may define a kind after using it.
fn crds_first(mut objects: Vec<Value>) -> Vec<Value> {
    objects.sort_by_key(|o| o.get("kind").and_then(Value::as_str) != Some("CustomResourceDefinition"));
    objects
}

/// Which file an object comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Start {
    /// `given.yaml`: a new object keeps its `status` (fixtures need one).
    Given,
    /// A step's `apply.yaml`.
    Step,
}

/// Creates `object`, or merges it into the existing one (spec and
/// metadata; status through the status subresource), after the admission
/// webhooks: a denial is added to `denials` and nothing is written. A kind
/// a loaded component converts is stored at its CRD's storage version, as
/// the API server stores it: the existing object is converted to the
/// file's version, merged and reviewed there, and the result converted
/// back through the component.
async fn apply(
    host: &MockHost,
    in_cluster: &str,
    object: Value,
    from: Start,
    denials: &mut Vec<String>,
) -> Result<(), cluster::Error> {
    let cluster = host.cluster_named(in_cluster).unwrap_or_else(|| host.cluster());
    let r = ObjectRef::of(&object).ok_or_else(|| cluster::Error::BadRequest("object lacks identity".into()))?;
    let storage = host
        .storage_version(&r.gvk.group, &r.gvk.kind)
        .filter(|v| *v != r.gvk.version && host.converts(&r.gvk.group, &r.gvk.kind))
        .map(|v| ObjectRef { gvk: Gvk::new(r.gvk.group.as_str(), v.as_str(), r.gvk.kind.as_str()), ..r.clone() });
    let conversion = |e: String| cluster::Error::BadRequest(format!("{r}: {e}"));
    let existing = match cluster.get(storage.as_ref().unwrap_or(&r)).await {
        Ok(existing) if storage.is_some() => Some(host.convert_to(existing, &r.gvk).await.map_err(conversion)?),
        Ok(existing) => Some(existing),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e),
    };
    let (operation, merged) = match &existing {
        Some(old) => {
            let mut merged = old.clone();
            json_merge(&mut merged, &object);
            (Operation::Update, merged)
        }
        None => (Operation::Create, object.clone()),
    };
    let admitted = match host.admit(operation, Some(merged.clone()), existing.clone()).await {
        Ok(Admission::Denied { message, .. }) => {
            denials.push(format!("{r}: {message}"));
            return Ok(());
        }
        Ok(Admission::Allowed { object, .. }) => object,
        Err(e) => return Err(cluster::Error::BadRequest(e.to_string())),
    };
    if let Some(stored) = storage {
        let whole = admitted.unwrap_or(merged);
        let converted = host.convert_to(whole, &stored.gvk).await.map_err(conversion)?;
        return store(cluster, &stored, converted, existing.is_some(), from).await;
    }
    // What a mutating webhook changed is stored; otherwise the file's
    // object is merged as before (so that `null` still removes a field).
    let object = match (admitted, &existing) {
        (Some(admitted), None) => admitted,
        (Some(admitted), Some(_)) if admitted != merged => admitted,
        _ => object,
    };
    match existing {
        Some(_) => {
            let mut main = object.clone();
            let status = main.as_object_mut().and_then(|m| m.remove("status"));
            cluster.patch(&r, Patch::Merge(main), Subresource::Main).await?;
            if let Some(status) = status {
                cluster.patch(&r, Patch::Merge(serde_json::json!({"status": status})), Subresource::Status).await?;
            }
            Ok(())
        }
        None => store(cluster, &r, object, false, from).await,
    }
}

/// Writes the whole of `object`: replaced (and its status) when it
/// `exists`, else seeded (`given.yaml`) or created with its status written
/// after, as a client would.
async fn store(
    cluster: &cluster::mock::MockCluster,
    r: &ObjectRef,
    object: Value,
    exists: bool,
    from: Start,
) -> Result<(), cluster::Error> {
    if exists {
        cluster.replace(object.clone(), Subresource::Main).await?;
        if object.get("status").is_some() {
            cluster.replace(object, Subresource::Status).await?;
        }
        return Ok(());
    }
    if from == Start::Given {
        return cluster.seed(object).map(drop);
    }
    let status = object.get("status").cloned();
    cluster.create(object).await?;
    match status {
        Some(status) => {
            cluster.patch(r, Patch::Merge(serde_json::json!({"status": status})), Subresource::Status).await.map(drop)
        }
        None => Ok(()),
    }
}

/// RFC 7386 merge of `patch` into `target`, as `apply.yaml` merges.
fn json_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Checks the case's `conversion.yaml`, if it has one.
async fn check_conversion(host: &MockHost, case: &Path, mismatches: &mut Vec<String>) -> Result<(), Error> {
    let Some(spec) = read_yaml_documents(&case.join("conversion.yaml"))?.into_iter().next() else { return Ok(()) };
    let desired = spec.get("desiredAPIVersion").and_then(Value::as_str).unwrap_or_default();
    let objects = spec.get("objects").and_then(Value::as_array).cloned().unwrap_or_default();
    let expected_error = spec.get("error").and_then(Value::as_str);
    let converted = match host.convert(desired, objects.clone()).await {
        Ok(result) => result,
        Err(e) => {
            mismatches.push(format!("conversion.yaml: {e}"));
            return Ok(());
        }
    };
    match (converted, expected_error) {
        (Err(message), Some(text)) if message.contains(text) => {}
        (Err(message), _) => mismatches.push(format!("conversion.yaml: the conversion failed: {message}")),
        (Ok(_), Some(text)) => {
            mismatches.push(format!("conversion.yaml: expected a failure containing {text:?}, it succeeded"));
        }
        (Ok(converted), None) => {
            if converted.len() != objects.len() {
                mismatches.push(format!("conversion.yaml: {} objects in, {} out", objects.len(), converted.len()));
            }
            let expected = spec.get("expect").and_then(Value::as_array).cloned().unwrap_or_default();
            for (i, (e, a)) in expected.iter().zip(&converted).enumerate() {
                let mut diffs = Vec::new();
                subset_diff(e, a, String::new(), &mut diffs);
                for d in diffs {
                    mismatches.push(format!("conversion.yaml: expect[{i}]: {d}"));
                }
            }
        }
    }
    Ok(())
}

/// The object `r` names, at `r`'s version: a kind a loaded component
/// converts is read at its storage version and converted, as the API
/// server reads it.
async fn read_at(host: &MockHost, cluster: &cluster::mock::MockCluster, r: &ObjectRef) -> Result<Value, String> {
    let storage = host
        .storage_version(&r.gvk.group, &r.gvk.kind)
        .filter(|v| *v != r.gvk.version && host.converts(&r.gvk.group, &r.gvk.kind));
    let Some(version) = storage else { return cluster.get(r).await.map_err(|e| e.to_string()) };
    let stored = ObjectRef { gvk: Gvk::new(r.gvk.group.as_str(), version.as_str(), r.gvk.kind.as_str()), ..r.clone() };
    let object = cluster.get(&stored).await.map_err(|e| e.to_string())?;
    host.convert_to(object, &r.gvk).await.map_err(|e| format!("converting to {}: {e}", r.gvk.api_version()))
}

async fn check(
    host: &MockHost,
    dir: &Path,
    label: &str,
    run: Result<Run, testing::Error>,
    denials: Vec<String>,
    requests_since: usize,
    mismatches: &mut Vec<String>,
) -> Result<(), Error> {
    let expected_error = read(&dir.join("error.txt"))?.map(|s| s.trim().to_owned());
    let mut failures: Vec<String> = match &run {
        Ok(run) => run
            .failures()
            .filter_map(|s| s.report.result.as_ref().err().map(|e| format!("{}: {e}", s.report.object)))
            .collect(),
        Err(e) => vec![e.to_string()],
    };
    failures.extend(denials);
    match (&expected_error, failures.is_empty()) {
        (Some(text), _) if !failures.iter().any(|f| f.contains(text.as_str())) => {
            mismatches.push(format!("{label}error.txt: expected an error containing {text:?}, got {failures:?}"));
        }
        (None, false) => {
            for f in failures {
                mismatches.push(format!("{label}unexpected error: {f}"));
            }
        }
        _ => {}
    }

    for expected in read_yaml_documents(&dir.join("expect.yaml"))? {
        let Some(r) = ObjectRef::of(&expected) else {
            mismatches.push(format!("{label}expect.yaml: an entry lacks apiVersion, kind or metadata.name"));
            continue;
        };
        let mut expected = expected;
        let read = match in_named(host, &expected) {
            Ok(cluster) => read_at(host, cluster, &r).await,
            Err(e) => Err(e),
        };
        if let Some(fields) = expected.as_object_mut() {
            fields.remove("cluster");
        }
        match read {
            Ok(actual) => {
                let mut diffs = Vec::new();
                subset_diff(&expected, &actual, String::new(), &mut diffs);
                for d in diffs {
                    mismatches.push(format!("{label}expect.yaml: {r}: {d}"));
                }
            }
            Err(e) => mismatches.push(format!("{label}expect.yaml: {r}: {e}")),
        }
    }
    for absent in read_yaml_documents(&dir.join("absent.yaml"))? {
        let Some(r) = ObjectRef::of(&absent) else {
            mismatches.push(format!("{label}absent.yaml: an entry lacks apiVersion, kind or metadata.name"));
            continue;
        };
        match in_named(host, &absent) {
            Ok(cluster) if cluster.get(&r).await.is_ok() => {
                mismatches.push(format!("{label}absent.yaml: {r} still exists"));
            }
            Ok(_) => {}
            Err(e) => mismatches.push(format!("{label}absent.yaml: {r}: {e}")),
        }
    }
    let recorded: Vec<Value> = host
        .cluster_names()
        .into_iter()
        .flat_map(|name| {
            let events = host.cluster_named(&name).map(cluster::mock::MockCluster::events).unwrap_or_default();
            events.into_iter().map(move |e| (name.clone(), e))
        })
        .map(|(name, e)| {
            serde_json::json!({
                "cluster": name,
                "reason": e.reason,
                "type": if e.warning { "Warning" } else { "Normal" },
                "action": e.action,
                "note": e.note,
                "regarding": {
                    "apiVersion": e.regarding.gvk.api_version(),
                    "kind": e.regarding.gvk.kind,
                    "namespace": e.regarding.namespace,
                    "name": e.regarding.name,
                },
            })
        })
        .collect();
    for expected in read_yaml_documents(&dir.join("events.yaml"))? {
        let found = recorded.iter().any(|actual| subset_matches(&expected, actual));
        if !found {
            mismatches.push(format!(
                "{label}events.yaml: no recorded event matches {}; recorded: {}",
                compact(&expected),
                recorded.iter().map(compact).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let made: Vec<Value> = host.cluster().http().requests().iter().skip(requests_since).map(request_json).collect();
    for mut expected in read_yaml_documents(&dir.join("requests.yaml"))? {
        // Methods match in any case, as stubs do.
        if let Some(method) = expected.get_mut("method")
            && let Some(m) = method.as_str()
        {
            *method = Value::String(m.to_ascii_uppercase());
        }
        let found = made.iter().any(|actual| subset_matches(&expected, actual));
        if !found {
            mismatches.push(format!(
                "{label}requests.yaml: no request made matches {}; made: {}",
                compact(&expected),
                if made.is_empty() {
                    "none".to_owned()
                } else {
                    made.iter().map(compact).collect::<Vec<_>>().join(", ")
                }
            ));
        }
    }
    Ok(())
}

fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Whether `expected` is a subset of `actual` (see [`subset_diff`]).
fn subset_matches(expected: &Value, actual: &Value) -> bool {
    let mut diffs = Vec::new();
    subset_diff(expected, actual, String::new(), &mut diffs);
    diffs.is_empty()
}

/// Appends to `out` every place where `expected` is not a subset of
/// `actual`, as `at <path>: expected X, got Y`.
pub fn subset_diff(expected: &Value, actual: &Value, path: String, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => subset_diff(ev, av, p, out),
                    None if ev.is_null() => {}
                    None => out.push(format!("at {p}: expected {}, missing", compact(ev))),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            for (i, ev) in e.iter().enumerate() {
                let matched = a.iter().any(|av| subset_matches(ev, av));
                if !matched {
                    let mut msg = format!("at {path}[{i}]: expected an element matching {}", compact(ev));
                    let _ = write!(msg, ", got {}", compact(actual));
                    out.push(msg);
                }
            }
        }
        (Value::Number(e), Value::Number(a)) if e.as_f64() == a.as_f64() => {}
        (e, a) if e == a => {}
        (e, a) => out.push(format!(
            "at {}: expected {}, got {}",
            if path.is_empty() { "." } else { &path },
            compact(e),
            compact(a)
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn subset_match_ignores_extra_fields_and_list_order() {
        let expected = json!({"data": {"a": "1"}, "list": [{"type": "Ready"}]});
        let actual = json!({"data": {"a": "1", "b": "2"}, "list": [{"type": "Other"}, {"type": "Ready", "x": 1}]});
        let mut out = Vec::new();
        subset_diff(&expected, &actual, String::new(), &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn subset_mismatch_names_the_path() {
        let mut out = Vec::new();
        subset_diff(&json!({"spec": {"replicas": 3}}), &json!({"spec": {"replicas": 2}}), String::new(), &mut out);
        assert_eq!(out, vec!["at .spec.replicas: expected 3, got 2"]);
        let mut out = Vec::new();
        subset_diff(&json!({"data": {"k": "v"}}), &json!({}), String::new(), &mut out);
        assert_eq!(out, vec!["at .data: expected {\"k\":\"v\"}, missing"]);
    }

    /// A fresh case folder under the temporary directory.
    fn case(what: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("capstan-scenario-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("made");
        dir
    }

    #[test]
    fn steps_are_the_folders_of_steps_in_name_order_and_none_without_it() {
        let dir = case("steps");
        assert!(steps_of(&dir).expect("no steps folder").is_empty());
        for step in ["02-update", "01-create"] {
            std::fs::create_dir_all(dir.join("steps").join(step)).expect("made");
        }
        std::fs::write(dir.join("steps/README.md"), "notes").expect("written");
        let steps = steps_of(&dir).expect("listed");
        assert_eq!(steps, [dir.join("steps/01-create"), dir.join("steps/02-update")]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_step_that_cannot_be_read_is_an_error_naming_it_not_a_step_fewer() {
        let dir = case("dangling");
        std::fs::create_dir_all(dir.join("steps/01-create")).expect("made");
        std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("steps/02-update")).expect("linked");
        let err = steps_of(&dir).expect_err("a dangling step");
        assert!(matches!(&err, Error::Read { path, .. } if *path == dir.join("steps/02-update")), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_steps_file_or_a_case_that_is_a_file_is_an_error_naming_it_not_empty() {
        let dir = case("file");
        std::fs::write(dir.join("steps"), "not a folder").expect("written");
        let err = steps_of(&dir).expect_err("steps is a file");
        assert!(matches!(&err, Error::Read { path, .. } if *path == dir.join("steps")), "{err}");
        assert!(err.to_string().contains("not a folder of steps"), "{err}");
        let err = entries_of(&dir.join("steps")).expect_err("not a folder");
        assert!(
            matches!(&err, Error::Read { path, error } if *path == dir.join("steps")
            && error.kind() == std::io::ErrorKind::NotADirectory),
            "{err}"
        );
        let err = discover(&dir.join("steps")).expect_err("not a folder");
        assert!(matches!(&err, Error::Read { path, .. } if *path == dir.join("steps")), "{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
