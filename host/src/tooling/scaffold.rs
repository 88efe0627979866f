//! `capstan new`: a controller or scheduler project from a language's
//! template, which builds into a component and passes `capstan test` out of
//! the box.
//!
//! Templates are files under `host/templates/<language>/` (controllers) and
//! `host/templates/scheduler/<language>/` (schedulers, sharing their
//! scenarios and the language's build files), embedded in the binary; a
//! language is a [`Lang`] variant, a kind of project a [`Role`] variant, and
//! each pair has a file table. In the
//! files, `{{name}}` is the controller name (a DNS-1123 label; a scheduler's
//! name too), `{{crate}}` its snake-case form, `{{kind}}`, `{{plural}}` and
//! `{{group}}` name the custom resource (`{{kind}}` names a scheduler's
//! type), `{{sdk_dependency}}` and `{{sdk_source}}` say where the
//! SDK comes from, and `{{capstan_version}}` is this capstan's version.
//!
//! ```no_run
//! use capstan_host::tooling::scaffold::{self, Options, Sdk};
//!
//! let project = scaffold::create(&Options::new("backup").sdk(Sdk::Path("/src/capstan/guest-sdk".into())))?;
//! assert_eq!(project.kind, "Backup");
//! # Ok::<(), scaffold::Error>(())
//! ```

use std::path::{Component as PathPart, Path, PathBuf};

use crate::policy::names::{self, Rule};

/// Why a project cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A name, kind or group breaks a Kubernetes naming rule.
    #[error(transparent)]
    Name(#[from] crate::policy::Error),
    /// The API group has no dot or is not a DNS subdomain.
    #[error("group {0:?} must be a DNS subdomain with a dot, like example.com")]
    Group(String),
    /// The target folder exists and has files in it.
    #[error("{0}: exists and is not empty; choose another --dir")]
    NotEmpty(PathBuf),
    /// A file or folder could not be created or read.
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A language with a project template.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, with the `capstan-guest` SDK.
    #[default]
    Rust,
    /// Python, with `guest-sdk/python` and componentize-py.
    Python,
    /// JavaScript, with `guest-sdk/js`, esbuild and jco (QuickJS).
    Js,
}

/// What kind of project to create.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// A controller of a custom resource: its CRD, a child it owns, status,
    /// scenarios.
    #[default]
    Controller,
    /// A scheduler: Pods select it with `spec.schedulerName: <name>`; it
    /// filters the Nodes (Ready, not cordoned, taints, resources), picks
    /// the one with the most free CPU, and says why when none fits.
    Scheduler,
}

/// One file of a template: where it goes and its text with placeholders.
struct TemplateFile {
    path: &'static str,
    text: &'static str,
}

/// `template!["python": "app.py" => "app.py.tmpl", …]`: files under
/// `host/templates/python/`; a scheduler's table names its files from
/// `host/templates/` (`template!["": …]`) to share the language's own.
macro_rules! template {
    ($dir:literal: $($path:literal => $file:literal),* $(,)?) => {
        &[$(TemplateFile { path: $path, text: include_str!(concat!("../../templates/", $dir, "/", $file)) }),*]
    };
}

const RUST: &[TemplateFile] = template!["rust":
    "Cargo.toml" => "Cargo.toml.tmpl",
    ".gitignore" => "gitignore.tmpl",
    "README.md" => "README.md.tmpl",
    "src/lib.rs" => "src/lib.rs.tmpl",
    "scenarios/basic/given.yaml" => "scenarios/basic/given.yaml.tmpl",
    "scenarios/basic/expect.yaml" => "scenarios/basic/expect.yaml.tmpl",
    "scenarios/empty-message/given.yaml" => "scenarios/empty-message/given.yaml.tmpl",
    "scenarios/empty-message/absent.yaml" => "scenarios/empty-message/absent.yaml.tmpl",
    "scenarios/empty-message/expect.yaml" => "scenarios/empty-message/expect.yaml.tmpl",
    "scenarios/empty-message/error.txt" => "scenarios/empty-message/error.txt.tmpl",
];

const PYTHON: &[TemplateFile] = template!["python":
    "app.py" => "app.py.tmpl",
    "build.sh" => "build.sh.tmpl",
    "pyproject.toml" => "pyproject.toml.tmpl",
    "tests/test_app.py" => "tests/test_app.py.tmpl",
    ".gitignore" => "gitignore.tmpl",
    "README.md" => "README.md.tmpl",
    "scenarios/basic/given.yaml" => "scenarios/basic/given.yaml.tmpl",
    "scenarios/basic/expect.yaml" => "scenarios/basic/expect.yaml.tmpl",
    "scenarios/empty-message/given.yaml" => "scenarios/empty-message/given.yaml.tmpl",
    "scenarios/empty-message/absent.yaml" => "scenarios/empty-message/absent.yaml.tmpl",
    "scenarios/empty-message/expect.yaml" => "scenarios/empty-message/expect.yaml.tmpl",
    "scenarios/empty-message/error.txt" => "scenarios/empty-message/error.txt.tmpl",
];

const JS: &[TemplateFile] = template!["js":
    "app.js" => "app.js.tmpl",
    "build.sh" => "build.sh.tmpl",
    "package.json" => "package.json.tmpl",
    "test/app.test.js" => "test/app.test.js.tmpl",
    ".gitignore" => "gitignore.tmpl",
    "README.md" => "README.md.tmpl",
    "scenarios/basic/given.yaml" => "scenarios/basic/given.yaml.tmpl",
    "scenarios/basic/expect.yaml" => "scenarios/basic/expect.yaml.tmpl",
    "scenarios/empty-message/given.yaml" => "scenarios/empty-message/given.yaml.tmpl",
    "scenarios/empty-message/absent.yaml" => "scenarios/empty-message/absent.yaml.tmpl",
    "scenarios/empty-message/expect.yaml" => "scenarios/empty-message/expect.yaml.tmpl",
    "scenarios/empty-message/error.txt" => "scenarios/empty-message/error.txt.tmpl",
];

/// The scenarios every scheduler template carries (its name is the
/// scheduler name the Pods in them ask for).
macro_rules! scheduler_template {
    ($($path:literal => $file:literal),* $(,)?) => {
        template!["":
            $($path => $file,)*
            "scenarios/most-free-cpu/given.yaml" => "scheduler/scenarios/most-free-cpu/given.yaml.tmpl",
            "scenarios/most-free-cpu/expect.yaml" => "scheduler/scenarios/most-free-cpu/expect.yaml.tmpl",
            "scenarios/most-free-cpu/events.yaml" => "scheduler/scenarios/most-free-cpu/events.yaml.tmpl",
            "scenarios/unschedulable-until-a-node-is-added/given.yaml" =>
                "scheduler/scenarios/unschedulable-until-a-node-is-added/given.yaml.tmpl",
            "scenarios/unschedulable-until-a-node-is-added/expect.yaml" =>
                "scheduler/scenarios/unschedulable-until-a-node-is-added/expect.yaml.tmpl",
            "scenarios/unschedulable-until-a-node-is-added/events.yaml" =>
                "scheduler/scenarios/unschedulable-until-a-node-is-added/events.yaml.tmpl",
            "scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/apply.yaml" =>
                "scheduler/scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/apply.yaml.tmpl",
            "scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/expect.yaml" =>
                "scheduler/scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/expect.yaml.tmpl",
            "scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/events.yaml" =>
                "scheduler/scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/events.yaml.tmpl",
        ]
    };
}

const RUST_SCHEDULER: &[TemplateFile] = scheduler_template![
    "Cargo.toml" => "scheduler/rust/Cargo.toml.tmpl",
    ".gitignore" => "rust/gitignore.tmpl",
    "README.md" => "scheduler/rust/README.md.tmpl",
    "src/lib.rs" => "scheduler/rust/src/lib.rs.tmpl",
];

const PYTHON_SCHEDULER: &[TemplateFile] = scheduler_template![
    "app.py" => "scheduler/python/app.py.tmpl",
    "build.sh" => "python/build.sh.tmpl",
    "pyproject.toml" => "scheduler/python/pyproject.toml.tmpl",
    "tests/test_app.py" => "scheduler/python/tests/test_app.py.tmpl",
    ".gitignore" => "python/gitignore.tmpl",
    "README.md" => "scheduler/python/README.md.tmpl",
];

const JS_SCHEDULER: &[TemplateFile] = scheduler_template![
    "app.js" => "scheduler/js/app.js.tmpl",
    "build.sh" => "js/build.sh.tmpl",
    "package.json" => "scheduler/js/package.json.tmpl",
    "test/app.test.js" => "scheduler/js/test/app.test.js.tmpl",
    ".gitignore" => "js/gitignore.tmpl",
    "README.md" => "scheduler/js/README.md.tmpl",
];

impl Lang {
    fn template(self, role: Role) -> &'static [TemplateFile] {
        match (role, self) {
            (Role::Controller, Lang::Rust) => RUST,
            (Role::Controller, Lang::Python) => PYTHON,
            (Role::Controller, Lang::Js) => JS,
            (Role::Scheduler, Lang::Rust) => RUST_SCHEDULER,
            (Role::Scheduler, Lang::Python) => PYTHON_SCHEDULER,
            (Role::Scheduler, Lang::Js) => JS_SCHEDULER,
        }
    }

    /// The folder of this language's SDK inside a checkout.
    fn sdk_subdir(self) -> &'static str {
        match self {
            Lang::Rust => "guest-sdk",
            Lang::Python => "guest-sdk/python",
            Lang::Js => "guest-sdk/js",
        }
    }

    /// The WIT folder of the checkout the language's SDK builds against.
    fn wit_subdir(self) -> &'static str {
        "wit"
    }

    /// Where the built component will be, relative to the project folder.
    fn component_path(self, crate_name: &str, name: &str) -> PathBuf {
        match self {
            Lang::Rust => Path::new("target/wasm32-wasip2/release").join(format!("{crate_name}.wasm")),
            Lang::Python | Lang::Js => PathBuf::from(format!("{name}.wasm")),
        }
    }
}

/// Where the project takes the SDK from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Sdk {
    /// A local `capstan-guest` crate folder (`guest-sdk/` of a checkout).
    /// Written as a relative path when the project is inside the same
    /// checkout, else as an absolute one.
    Path(PathBuf),
    /// The SDK this binary carries ([`crate::tooling::sdk`]), written into the
    /// project's `capstan-sdk/` folder and taken from there by relative
    /// path: a project made outside a checkout builds with no network
    /// source other than crates.io, PyPI or npm.
    #[default]
    Carried,
}

/// The folder of a project that holds the carried SDK.
pub const CARRIED_SDK_DIR: &str = "capstan-sdk";

/// What to create.
#[derive(Clone, Debug)]
#[must_use]
pub struct Options {
    name: String,
    lang: Lang,
    role: Role,
    dir: Option<PathBuf>,
    group: String,
    kind: Option<String>,
    sdk: Sdk,
    lockfile: Option<PathBuf>,
}

impl Options {
    /// A project named `name`, normalised to a DNS-1123 label (`MyApp`
    /// becomes `my-app`).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            lang: Lang::Rust,
            role: Role::Controller,
            dir: None,
            group: "example.com".to_owned(),
            kind: None,
            sdk: Sdk::default(),
            lockfile: None,
        }
    }

    /// The language. Default: [`Lang::Rust`].
    pub fn lang(mut self, lang: Lang) -> Self {
        self.lang = lang;
        self
    }

    /// What kind of project. Default: [`Role::Controller`]. A scheduler's
    /// name is the scheduler name Pods ask for in `spec.schedulerName`;
    /// [`group`](Self::group) and [`kind`](Self::kind) do not apply to it
    /// (the kind names its Rust, Python or JavaScript type).
    pub fn role(mut self, role: Role) -> Self {
        self.role = role;
        self
    }

    /// The folder to create it in; it must not exist or be empty. Default:
    /// `./<name>`.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// The API group of its custom resource. Default: `example.com`.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// The kind of its custom resource. Default: the name in UpperCamelCase.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Where the SDK comes from. Default: [`Sdk::Carried`].
    pub fn sdk(mut self, sdk: Sdk) -> Self {
        self.sdk = sdk;
        self
    }

    /// A `Cargo.lock` to start from (the checkout's, so the project builds
    /// with the dependency versions the SDK is tested with). Default: none.
    pub fn lockfile(mut self, lockfile: impl Into<PathBuf>) -> Self {
        self.lockfile = Some(lockfile.into());
        self
    }
}

/// A created project.
#[derive(Clone, Debug)]
pub struct Project {
    /// Its folder.
    pub dir: PathBuf,
    /// The controller name (a scheduler's: also its scheduler name).
    pub name: String,
    /// What kind of project it is.
    pub role: Role,
    /// The custom resource's kind.
    pub kind: String,
    /// The custom resource's plural.
    pub plural: String,
    /// The custom resource's group.
    pub group: String,
    /// The files written, relative to `dir`.
    pub files: Vec<PathBuf>,
    /// Where the built component will be, relative to `dir`.
    pub component: PathBuf,
}

/// Finds the Capstan checkout `start` is in: the nearest ancestor folder
/// with a `guest-sdk/Cargo.toml` of package `capstan-guest`.
pub fn find_checkout(start: &Path) -> Option<PathBuf> {
    let start = std::path::absolute(start).ok()?;
    start.ancestors().find(|dir| is_sdk(&dir.join("guest-sdk"))).map(Path::to_path_buf)
}

/// True if `dir` holds the `capstan-guest` crate.
pub fn is_sdk(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| t.contains("name = \"capstan-guest\""))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |error| Error::Io { path: path.to_owned(), error }
}

/// Whether a project may be written into `dir`, from what listing it
/// gave: it is not there yet, or it is an empty folder.
///
/// # Errors
///
/// [`Error::NotEmpty`] when it has an entry, [`Error::Io`] naming `dir`
/// when it could not be listed for another reason than not being there
/// (not a folder, no permission, no file descriptor left): a folder that
/// cannot be read is not an empty one.
fn fresh<T>(dir: &Path, listing: std::io::Result<impl Iterator<Item = T>>) -> Result<()> {
    match listing {
        Ok(mut entries) => match entries.next() {
            Some(_) => Err(Error::NotEmpty(dir.to_owned())),
            None => Ok(()),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io(dir)(error)),
    }
}

/// `target` relative to `from` when both are inside `root`, else `target`.
fn relative_within(root: &Path, from: &Path, target: &Path) -> PathBuf {
    if !from.starts_with(root) || !target.starts_with(root) {
        return target.to_owned();
    }
    let common = from.components().zip(target.components()).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in from.components().skip(common) {
        out.push(PathPart::ParentDir);
    }
    out.extend(target.components().skip(common));
    out
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The Cargo.toml dependency line and README wording for `sdk`, for a
/// project in `dir` (absolute).
fn sdk_lines(sdk: &Sdk, dir: &Path) -> Result<(String, String)> {
    Ok(match sdk {
        Sdk::Path(path) => {
            let path = std::fs::canonicalize(path).map_err(io(path))?;
            let root = path.parent().unwrap_or(&path);
            let written = relative_within(root, dir, &path);
            let shown = written.display().to_string();
            (format!("capstan-guest = {{ path = {} }}", toml_string(&shown)), format!("the local checkout (`{shown}`)"))
        }
        Sdk::Carried => (
            format!("capstan-guest = {{ path = \"{CARRIED_SDK_DIR}/guest-sdk\" }}"),
            format!(
                "`{CARRIED_SDK_DIR}/`, written by `capstan new` (capstan {}); `capstan sdk --out {CARRIED_SDK_DIR}` \
                 rewrites it with the SDK of another capstan binary",
                env!("CARGO_PKG_VERSION")
            ),
        ),
    })
}

fn render(text: &str, vars: &[(&str, &str)]) -> String {
    vars.iter().fold(text.to_owned(), |out, (key, value)| out.replace(&format!("{{{{{key}}}}}"), value))
}

/// Creates the project.
///
/// # Errors
///
/// [`Error::Name`] for a name, kind or plural Kubernetes would reject,
/// [`Error::Group`], [`Error::NotEmpty`], [`Error::Io`].
pub fn create(options: &Options) -> Result<Project> {
    let name = names::to_label(&options.name);
    names::check("name", &name, Rule::Dns1035Label)?;
    let kind = options.kind.clone().unwrap_or_else(|| names::to_upper_camel(&name));
    names::check("kind", &kind, Rule::Kind)?;
    let singular = kind.to_ascii_lowercase();
    let plural = names::plural(&singular);
    names::check("plural", &plural, Rule::Dns1035Label)?;
    if !Rule::Dns1123Subdomain.allows(&options.group) || !options.group.contains('.') {
        return Err(Error::Group(options.group.clone()));
    }
    let crate_name = names::to_snake(&name);

    let dir = options.dir.clone().unwrap_or_else(|| PathBuf::from(&name));
    fresh(&dir, std::fs::read_dir(&dir))?;
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    let absolute = std::fs::canonicalize(&dir).map_err(io(&dir))?;
    let (sdk_dependency, sdk_source) = sdk_lines(&options.sdk, &absolute)?;
    // Python and JavaScript projects build against the checkout's SDK and
    // WIT folders (absolute paths; their build.sh lets the environment
    // override both).
    let (sdk_dir, wit_dir, lockfile) = match &options.sdk {
        Sdk::Path(path) => {
            let root =
                std::fs::canonicalize(path).map_err(io(path))?.parent().map(Path::to_path_buf).unwrap_or_default();
            (
                root.join(options.lang.sdk_subdir()).display().to_string(),
                root.join(options.lang.wit_subdir()).display().to_string(),
                options.lockfile.clone(),
            )
        }
        Sdk::Carried => {
            let carried = absolute.join(CARRIED_SDK_DIR);
            crate::tooling::sdk::write(&carried).map_err(io(&carried))?;
            // Relative: the build scripts run in the project folder, and the
            // project may move.
            (
                format!("./{CARRIED_SDK_DIR}/{}", options.lang.sdk_subdir()),
                format!("./{CARRIED_SDK_DIR}/{}", options.lang.wit_subdir()),
                Some(carried.join("Cargo.lock")),
            )
        }
    };

    let vars = [
        ("name", name.as_str()),
        ("crate", crate_name.as_str()),
        ("kind", kind.as_str()),
        ("plural", plural.as_str()),
        ("group", options.group.as_str()),
        ("sdk_dependency", sdk_dependency.as_str()),
        ("sdk_source", sdk_source.as_str()),
        ("capstan_version", env!("CARGO_PKG_VERSION")),
        ("sdk_dir", sdk_dir.as_str()),
        ("wit_dir", wit_dir.as_str()),
    ];
    let mut files = Vec::new();
    for file in options.lang.template(options.role) {
        let path = dir.join(file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::write(&path, render(file.text, &vars)).map_err(io(&path))?;
        files.push(PathBuf::from(file.path));
    }
    if options.sdk == Sdk::Carried {
        files.push(PathBuf::from(CARRIED_SDK_DIR));
    }
    if let (Some(lockfile), Lang::Rust) = (&lockfile, options.lang) {
        let path = dir.join("Cargo.lock");
        std::fs::copy(lockfile, &path).map_err(io(lockfile))?;
        files.push(PathBuf::from("Cargo.lock"));
    }
    let component = options.lang.component_path(&crate_name, &name);
    Ok(Project { dir, name, role: options.role, kind, plural, group: options.group.clone(), files, component })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(&'static str, &'static str)> {
        vec![
            ("name", "my-app"),
            ("crate", "my_app"),
            ("kind", "MyApp"),
            ("plural", "myapps"),
            ("group", "example.com"),
            ("sdk_dependency", "capstan-guest = { path = \"../guest-sdk\" }"),
            ("sdk_source", "a checkout"),
            ("sdk_dir", "/capstan/guest-sdk/python"),
            ("wit_dir", "/capstan/wit"),
            ("capstan_version", "0.1.0"),
        ]
    }

    #[test]
    fn error_messages_read_right() {
        assert_eq!(Error::NotEmpty("x".into()).to_string(), "x: exists and is not empty; choose another --dir");
        assert_eq!(
            Error::Group("nodot".into()).to_string(),
            "group \"nodot\" must be a DNS subdomain with a dot, like example.com"
        );
    }

    #[test]
    fn every_placeholder_in_every_template_is_filled() {
        for role in [Role::Controller, Role::Scheduler] {
            for lang in [Lang::Rust, Lang::Python, Lang::Js] {
                for file in lang.template(role) {
                    let out = render(file.text, &vars());
                    assert!(!out.contains("{{"), "{role:?} {lang:?} {}: unfilled placeholder in\n{out}", file.path);
                }
            }
        }
    }

    #[test]
    fn the_rust_template_uses_the_dependency_versions_of_the_workspace() {
        let workspace = include_str!("../../../Cargo.toml");
        let cargo = RUST.iter().find(|f| f.path == "Cargo.toml").expect("a Cargo.toml").text;
        for (krate, version) in [("kube", "5.0.0"), ("k8s-openapi", "0.29.0")] {
            assert!(workspace.contains(&format!("{krate} = {{ version = \"{version}\"")), "workspace {krate} moved");
            assert!(cargo.contains(&format!("{krate} = {{ version = \"{version}\"")), "template {krate} differs");
        }
        assert!(cargo.contains("\n[workspace]\n"), "its own workspace");
    }

    #[test]
    fn sdk_paths_are_relative_inside_the_checkout_and_absolute_outside() {
        let root = Path::new("/src/capstan");
        let sdk = root.join("guest-sdk");
        assert_eq!(relative_within(root, &root.join("examples/mine"), &sdk), Path::new("../../guest-sdk"));
        assert_eq!(relative_within(root, Path::new("/home/me/mine"), &sdk), sdk);
    }

    #[test]
    fn names_are_normalised_and_checked_before_anything_is_written() {
        let dir = std::env::temp_dir().join(format!("capstan-scaffold-{}", std::process::id()));
        let err = create(&Options::new("9lives").dir(&dir)).expect_err("kind would start with a digit");
        assert!(matches!(err, Error::Name(_)), "{err}");
        let err = create(&Options::new("ok").group("nodot").dir(&dir)).expect_err("group without a dot");
        assert_eq!(err.to_string(), "group \"nodot\" must be a DNS subdomain with a dot, like example.com");
        assert!(!dir.exists());
    }

    #[test]
    fn a_project_is_created_with_normalised_names_and_refuses_a_non_empty_folder() {
        let dir = std::env::temp_dir().join(format!("capstan-scaffold-ok-{}", std::process::id()));
        let project = create(&Options::new("My App").dir(&dir)).expect("created");
        assert_eq!(
            (project.name.as_str(), project.kind.as_str(), project.plural.as_str()),
            ("my-app", "MyApp", "myapps")
        );
        assert_eq!(project.component, Path::new("target/wasm32-wasip2/release/my_app.wasm"));
        let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).expect("written");
        assert!(cargo.contains("name = \"my-app\""));
        assert!(cargo.contains("capstan-guest = { path = \"capstan-sdk/guest-sdk\" }"), "{cargo}");
        assert!(is_sdk(&dir.join("capstan-sdk/guest-sdk")));
        assert!(dir.join("Cargo.lock").is_file(), "the lockfile the SDK is tested with");
        let lib = std::fs::read_to_string(dir.join("src/lib.rs")).expect("written");
        assert!(lib.contains("pub struct MyAppSpec"));
        assert!(matches!(create(&Options::new("my-app").dir(&dir)), Err(Error::NotEmpty(_))));
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }

    #[test]
    fn a_folder_that_cannot_be_listed_is_an_error_naming_it_not_an_empty_folder() {
        let dir = Path::new("/projects/mine");
        let emfile = || Err::<std::iter::Empty<()>, _>(std::io::Error::from_raw_os_error(24));
        let err = fresh(dir, emfile()).expect_err("no file descriptor left");
        assert!(matches!(&err, Error::Io { path, .. } if path == dir), "{err}");
        assert!(err.to_string().starts_with("/projects/mine: "), "{err}");
        let missing = Err::<std::iter::Empty<()>, _>(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(fresh(dir, missing).is_ok(), "not there yet: made");
        assert!(fresh(dir, Ok(std::iter::empty::<()>())).is_ok(), "empty");
        assert!(matches!(fresh(dir, Ok(std::iter::once(()))), Err(Error::NotEmpty(_))));

        // A file where the folder should be cannot be listed: that error,
        // not the one of making a folder over it.
        let file = std::env::temp_dir().join(format!("capstan-scaffold-file-{}", std::process::id()));
        std::fs::write(&file, "a file").expect("written");
        let err = create(&Options::new("mine").dir(&file)).expect_err("a file");
        assert!(
            matches!(&err, Error::Io { path, error } if *path == file && error.kind() == std::io::ErrorKind::NotADirectory),
            "{err}"
        );
        std::fs::remove_file(&file).expect("cleaned up");
    }

    #[test]
    fn a_scheduler_project_serves_its_name_and_carries_the_scheduler_scenarios() {
        let dir = std::env::temp_dir().join(format!("capstan-scaffold-scheduler-{}", std::process::id()));
        let project =
            create(&Options::new("Most Free").role(Role::Scheduler).lang(Lang::Python).dir(&dir)).expect("created");
        assert_eq!((project.name.as_str(), project.role), ("most-free", Role::Scheduler));
        assert_eq!(project.component, Path::new("most-free.wasm"));
        let app = std::fs::read_to_string(dir.join("app.py")).expect("written");
        assert!(app.contains("SCHEDULER_NAME = \"most-free\"") && app.contains("capstan.export(scheduler=MostFree)"));
        assert!(dir.join("tests/test_app.py").is_file() && dir.join("build.sh").is_file());
        let given = std::fs::read_to_string(dir.join("scenarios/most-free-cpu/given.yaml")).expect("written");
        assert!(given.contains("schedulerName: most-free"), "{given}");
        assert!(dir.join("scenarios/unschedulable-until-a-node-is-added/steps/01-add-a-node/apply.yaml").is_file());
        assert!(!dir.join("scenarios/basic").exists(), "none of the controller's scenarios");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
