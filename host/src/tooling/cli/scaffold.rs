//! `capstan new`: a controller or scheduler project (see
//! [`crate::tooling::scaffold`]).

use std::path::PathBuf;

use anyhow::bail;

use crate::tooling::scaffold::{self, Lang, Options, Role, Sdk, find_checkout, is_sdk};

/// Arguments of `capstan new`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The controller's name, normalised to a DNS-1123 label (`MyApp`
    /// becomes `my-app`); a scheduler's is also the scheduler name Pods ask
    /// for in `spec.schedulerName`.
    pub name: String,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// What the project is: a controller of a custom resource, or a
    /// scheduler of the Pods that name it.
    #[arg(long, value_enum, default_value = "controller")]
    pub role: Role,
    /// The folder to create [default: ./NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The API group of the custom resource (a controller's).
    #[arg(long, default_value = "example.com")]
    pub group: String,
    /// The kind of the custom resource (a scheduler's: the name of its
    /// type) [default: the name in UpperCamelCase].
    #[arg(long)]
    pub kind: Option<String>,
    /// A Capstan checkout (or its guest-sdk folder) to take the SDK from by
    /// path [default: the checkout the new folder or the current directory
    /// is in; outside one, the SDK this binary carries, written into the
    /// project's capstan-sdk/ folder].
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// Runs `capstan new`; returns the exit code.
///
/// # Errors
///
/// An `--sdk` that is not a checkout, or what [`scaffold::create`] reports.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let checkout = match &args.sdk {
        Some(path) if is_sdk(&path.join("guest-sdk")) => Some(path.clone()),
        Some(path) if is_sdk(path) => Some(path.join("..")),
        Some(path) => bail!("{}: neither a Capstan checkout nor its guest-sdk folder", path.display()),
        None => {
            let start = args.dir.clone().unwrap_or_else(|| PathBuf::from("."));
            find_checkout(&start).or_else(|| find_checkout(std::path::Path::new(".")))
        }
    };
    if args.role == Role::Scheduler && args.group != "example.com" {
        bail!("--group names a controller's custom resource; a scheduler has none");
    }
    let mut options = Options::new(&args.name).lang(args.lang).role(args.role).group(&args.group);
    if let Some(dir) = &args.dir {
        options = options.dir(dir);
    }
    if let Some(kind) = &args.kind {
        options = options.kind(kind);
    }
    if let Some(root) = &checkout {
        options = options.sdk(Sdk::Path(root.join("guest-sdk")));
        if root.join("Cargo.lock").is_file() {
            options = options.lockfile(root.join("Cargo.lock"));
        }
    }
    let project = scaffold::create(&options)?;
    match project.role {
        Role::Controller => outln!(
            "created controller {} for {}.{} ({}) in {}",
            project.name,
            project.plural,
            project.group,
            project.kind,
            project.dir.display()
        ),
        Role::Scheduler => outln!(
            "created scheduler {} (for Pods with spec.schedulerName: {}) in {}",
            project.name,
            project.name,
            project.dir.display()
        ),
    }
    for file in &project.files {
        outln!("  {}", file.display());
    }
    outln!("next:");
    outln!("  cd {}", project.dir.display());
    let (build, unit_tests) = match args.lang {
        Lang::Rust => ("cargo build --release --target wasm32-wasip2", "cargo test"),
        Lang::Python => ("sh build.sh        # see README.md for the toolchain", "python3 -m pytest"),
        Lang::Js => ("sh build.sh        # see README.md for the toolchain", "npm test"),
    };
    outln!("  {build}");
    outln!("  {unit_tests}");
    outln!("  capstan test {} scenarios", project.component.display());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[derive(clap::Parser)]
    struct New {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn role_is_a_controller_unless_a_scheduler_is_asked_for_and_a_scheduler_takes_no_group() {
        let parse = |args: &[&str]| New::try_parse_from([&["new", "mine"], args].concat()).expect("parses").args;
        assert_eq!(parse(&[]).role, Role::Controller);
        assert_eq!(parse(&["--role", "scheduler", "--lang", "js"]).role, Role::Scheduler);
        let err = run(parse(&["--role", "scheduler", "--group", "example.org"])).expect_err("refused");
        assert_eq!(err.to_string(), "--group names a controller's custom resource; a scheduler has none");
    }
}
