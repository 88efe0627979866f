//! `capstan new --role scheduler` in each language: the project made
//! outside any checkout (the SDK the binary carries, in `capstan-sdk/`)
//! builds, its unit tests pass, and its scenarios pass on the mock host as
//! `capstan test` runs them. No cluster is needed.
//!
//! In process (`scaffold::create`, `scenario::run_all`), not through the
//! binary: other clones' builds share the target folder and replace
//! `debug/capstan` with theirs. Python and JavaScript projects need the
//! toolchains `tests/build-polyglot-guests.sh` installs. Their `build.sh`
//! gives back the component built before from the same inputs, so each
//! language's `.build/` is kept in the target folder between runs: an
//! unchanged template or SDK costs no rebuild.

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Context as _, Result, ensure};
use capstan_host::tooling::scaffold::{self, Lang, Options, Role};
use capstan_host::tooling::scenario;
use capstan_tests::toolchain_path;

/// stdout and stderr of a finished command, for a failure's message.
fn report(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[tokio::test(flavor = "multi_thread")]
async fn scheduler_projects_build_pass_their_unit_tests_and_their_scenarios_in_every_language() -> Result<()> {
    let home = std::env::temp_dir().join(format!("capstan-new-scheduler-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home)?;
    ensure!(scaffold::find_checkout(&home).is_none(), "{} is inside a checkout", home.display());
    // The workspace's target folder: the Rust dependencies are built there
    // for wasm32-wasip2 already.
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().context("CARGO_TARGET_TMPDIR is <target>/tmp")?;
    let path = toolchain_path()?;

    for (lang, name, unit_tests_passed) in [
        (Lang::Rust, "sched-rust", "4 passed"),
        (Lang::Python, "sched-python", "3 passed"),
        (Lang::Js, "sched-js", "# pass 3"),
    ] {
        let project = scaffold::create(&Options::new(name).role(Role::Scheduler).lang(lang).dir(home.join(name)))?;
        let dir = &project.dir;
        let app = match lang {
            Lang::Rust => "src/lib.rs",
            Lang::Python => "app.py",
            Lang::Js => "app.js",
        };
        let source = std::fs::read_to_string(dir.join(app))?;
        ensure!(source.contains(&format!("\"{name}\"")), "{lang:?}: {app} does not name the scheduler {name}");

        let (component, build, tests) = if lang == Lang::Rust {
            let cargo = |args: &[&str]| {
                Command::new(env!("CARGO")).args(args).current_dir(dir).env("CARGO_TARGET_DIR", target).output()
            };
            let build = cargo(&["build", "--quiet", "--release", "--target", "wasm32-wasip2"])?;
            let component = target.join(project.component.strip_prefix("target")?);
            (component, build, cargo(&["test", "--quiet"])?)
        } else {
            let cache = tmp.join("scheduler-template-builds").join(format!("{lang:?}"));
            std::fs::create_dir_all(&cache)?;
            std::os::unix::fs::symlink(&cache, dir.join(".build"))?;
            let build = Command::new("sh").arg("build.sh").current_dir(dir).env("PATH", &path).output()?;
            let tests = if lang == Lang::Python {
                let tool = path.split(':').map(|d| Path::new(d).join("componentize-py")).find(|p| p.is_file());
                Command::new("python3")
                    .args(["-m", "pytest", "-q"])
                    .current_dir(dir)
                    .env("COMPONENTIZE_PY", tool.context("componentize-py is not in the toolchains")?)
                    .env("PYTHONDONTWRITEBYTECODE", "1")
                    .output()?
            } else {
                // What `npm install` makes of the `file:` dependency, without the network.
                std::fs::create_dir_all(dir.join("node_modules"))?;
                std::os::unix::fs::symlink("../capstan-sdk/guest-sdk/js", dir.join("node_modules/capstan-guest"))?;
                Command::new("node")
                    .args(["--import", "capstan-guest/testing/register", "--test", "test/app.test.js"])
                    .current_dir(dir)
                    .output()?
            };
            (dir.join(&project.component), build, tests)
        };
        ensure!(
            build.status.success() && component.is_file(),
            "{lang:?}: the project does not build:\n{}",
            report(&build)
        );
        let passed = tests.status.success();
        let tests = report(&tests);
        ensure!(
            passed && tests.contains(unit_tests_passed),
            "{lang:?}: expected {unit_tests_passed} unit tests:\n{tests}"
        );

        let cases = scenario::run_all(&component, &dir.join("scenarios")).await?;
        let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
        ensure!(names == ["most-free-cpu", "unschedulable-until-a-node-is-added"], "{lang:?}: cases {names:?}");
        for case in &cases {
            ensure!(case.passed(), "{lang:?}: scenario {}: {:#?}", case.name, case.mismatches);
        }
    }
    std::fs::remove_dir_all(&home)?;
    Ok(())
}
