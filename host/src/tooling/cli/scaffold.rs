//! `capstan new`: a controller project (see [`crate::tooling::scaffold`]).

use std::path::PathBuf;

use anyhow::bail;

use crate::tooling::scaffold::{self, Lang, Options, Sdk, find_checkout, is_sdk};

/// Arguments of `capstan new`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The controller's name, normalised to a DNS-1123 label (`MyApp`
    /// becomes `my-app`).
    pub name: String,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: Lang,
    /// The folder to create [default: ./NAME].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The API group of the custom resource.
    #[arg(long, default_value = "example.com")]
    pub group: String,
    /// The kind of the custom resource [default: the name in UpperCamelCase].
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
    let mut options = Options::new(&args.name).lang(args.lang).group(&args.group);
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
    outln!(
        "created controller {} for {}.{} ({}) in {}",
        project.name,
        project.plural,
        project.group,
        project.kind,
        project.dir.display()
    );
    for file in &project.files {
        outln!("  {}", file.display());
    }
    outln!("next:");
    outln!("  cd {}", project.dir.display());
    match args.lang {
        Lang::Rust => outln!("  cargo build --release --target wasm32-wasip2"),
        Lang::Python | Lang::Js => outln!("  sh build.sh        # see README.md for the toolchain"),
    }
    outln!("  capstan test {} scenarios", project.component.display());
    Ok(0)
}
