//! holdfast-test-runner: `cargo xtask test`, the real-service test run.
//!
//! It starts the services the suites need, each under `target/holdfast-services/<service>/` with
//! its own loopback ports, data directory, socket and log (`redis`, `etcd`, `challtestsrv` and
//! `pebble`, `knot` and the DNS-01 `pebble` that resolves through it, `registry`, `dockerd`), waits
//! until each answers, seeds the registry with a tiny image,
//! exports their addresses to the tests (the `HOLDFAST_TEST_*` variables that
//! `holdfast-test-support` reads), runs the workspace's tests with nextest and the doctests, stops
//! every service (also on failure and Ctrl-C), and ends with the test-backed spec gate, which it
//! runs itself through spec-engine.
//! `--no-run` only builds what that run would (CI's one build, shared with the package).
//!
//! xtask keeps the command line: it turns its flags into [`Options`], calls [`run`] and turns the
//! [`Outcome`] into its exit code. The services, packages and processes are holdfast-harness
//! (`xtask/harness`), which the drain demo shares; this crate is apart from it because it alone
//! needs the spec engine, which the drain demo and the benchmark drivers must not build.
//!
//! Layout: this file (the run: requirements, services, the steps and how the run ends) and
//! `suite` (the test runs, the gate and their counts) and `evidence` (the run's evidence record,
//! written by the run, never by a reader).

// A layout rule: which crates this one depends on, judged by the layout test; the item it names
// has nothing to mutate, so its proof names it as unprovable rather than judging `run`'s logic.
// i[impl harness.layout]
pub mod evidence;
mod suite;

pub use suite::{Judged, judge};

// The services, packages and processes live in holdfast-harness (xtask/harness), shared with the
// drain demo.
use holdfast_harness::{
    docker, etcd, knot, layout, output, packages, pebble, process, redis, registry, root,
};
// The variables the tests read are holdfast-test-support's names, never spelt again here.
use holdfast_test_support::services;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use layout::ServiceDir;
use process::Supervisor;

/// What `cargo xtask test` was asked to do (its flags, without the command line).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Install missing Debian packages first (apt-get; needs root). Implied when `CI=true`.
    pub install: bool,
    /// Start the services, print their environment (also written to
    /// `target/holdfast-services/env`), and keep them running until Ctrl-C instead of running
    /// tests.
    pub services_only: bool,
    /// After the tests and doctests pass, run `XTASK prove --ci` with this xtask while the
    /// services are still up (CI's mutation proof). The path is found at start-up: building the
    /// tests can rebuild xtask in place.
    pub prove_ci: Option<PathBuf>,
    /// Build the tests the same arguments would run, with the same features, and stop.
    pub no_run: bool,
    /// Install what a run needs and lacks (Debian packages, cargo-nextest, cargo-mutants), then
    /// stop: nothing is built, started or run. CI starts it early, in the background.
    pub install_only: bool,
    /// Arguments for `cargo nextest run` (a filter, `--no-capture`, `-p PACKAGE`, ...).
    pub test_args: Vec<String>,
}

/// How a run ended, for the caller's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything asked for passed (or, with `services_only`, the services ran until Ctrl-C).
    Passed,
    /// The tests, the doctests, the gate or the proof failed.
    Failed,
    /// A Ctrl-C or SIGTERM came before the gate judged the run.
    Interrupted,
}

/// Runs `cargo xtask test` on the workspace at or above the current directory. Once per
/// process: it installs the process's Ctrl-C and SIGTERM handler, and a second call fails there.
/// Options that cannot go together (see [`Options`]) are refused before anything starts.
pub fn run(args: Options) -> anyhow::Result<Outcome> {
    check_options(&args)?;
    let workspace = root::find(None).map_err(|message| anyhow::anyhow!("test: {message}"))?;
    // Which tree is built and tested, before anything else: a shared target dir must never make
    // this checkout test another one.
    output::print(&root::banner(&workspace));
    let target = root::target_dir(&workspace);
    let services_root = target.join("holdfast-services");
    let run_started = Instant::now();
    ctrlc::set_handler(|| on_interrupt(&process::INTERRUPTED))
        .context("installing the Ctrl-C handler")?;

    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    if args.install_only {
        return install_only();
    }
    if args.no_run {
        return build_only(
            &workspace,
            install_allowed(args.install, ci),
            &args.test_args,
        );
    }
    let busybox = ensure_requirements(install_allowed(args.install, ci))?;
    let ready_after = run_started.elapsed();

    // One run per target directory: a second one would wipe the first one's services.
    let _lock = lock_services(&services_root)?;

    // A run that was killed outright (SIGKILL) could not clean up; do it now.
    process::sweep_processes(&services_root, process::SERVICE_PROGRAMS);
    process::unmount_under(&services_root);

    let services_started = Instant::now();
    let mut supervisor = Supervisor::new(services_root.clone());
    let mut env = match start_services(&mut supervisor, &services_root, &busybox) {
        Ok(env) => env,
        Err(err) => {
            let logs = supervisor.logs();
            supervisor.stop_all();
            let _ = print_logs(&mut std::io::stderr(), &logs);
            return Err(err);
        }
    };
    let services_took = services_started.elapsed();
    // test-support's ledger, in this run's target dir; spec-check's input.
    let ledger = target.join(services::LEDGER_FILE);
    // nextest's store is `<workspace>/target/nextest` whatever CARGO_TARGET_DIR says (pinned in
    // .config/nextest.toml).
    let junit = workspace.join("target/nextest/ci/junit.xml");
    env.push((services::SERVICES_VAR.into(), "1".into()));
    env.push((
        services::SKIP_LEDGER_VAR.into(),
        ledger.display().to_string(),
    ));
    if let Err(err) = exports_agree(&env) {
        supervisor.stop_all();
        return Err(err);
    }
    write_env_file(&services_root, &env)?;
    eprintln!(
        "xtask test: services up in {:.1}s; environment in {}",
        services_took.as_secs_f64(),
        services_root.join("env").display()
    );

    if args.services_only {
        for (key, value) in &env {
            println!("export {key}={value}");
        }
        eprintln!("xtask test: services running; Ctrl-C stops them");
        while !process::interrupted() {
            std::thread::sleep(Duration::from_millis(200));
        }
        supervisor.stop_all();
        return Ok(Outcome::Passed);
    }

    // Skips are per run: the ledger must describe this run only.
    let _ = std::fs::remove_file(&ledger);
    // The tree the tests are built from, read before the build: the run's evidence record is of it.
    let before = evidence::tree_before(&workspace);
    let tests_started = Instant::now();
    // `root::cargo()`: the cargo that runs xtask; the suite runs it as a plain cargo
    // (`i[bench.no-rebuild+2]`).
    let nextest = suite::nextest(root::cargo(), &workspace, &junit, &env, &args.test_args)?;
    // The interrupt flag is sticky: once set, every later step is skipped.
    let doctests = if process::interrupted() {
        None
    } else {
        Some(suite::doctests(root::cargo(), &workspace, &env)?)
    };
    let tests_took = tests_started.elapsed();
    // The gate judges this run's results against the tree they ran on, so it runs before the
    // proof: cargo-mutants mutates in place and writes each file back, same content but a newer
    // mtime, which the gate's results-outdated check would take for an edit after the tests.
    let packages = suite::packages_named(&args.test_args);
    let gate = if process::interrupted() {
        None
    } else {
        // Recorded whatever the gate says, before it judges: the gate reads this run's record.
        evidence::record_run(before.as_ref(), &junit);
        Some(suite::judge_and_print(
            &workspace, &junit, &ledger, &packages,
        ))
    };
    let proof = match &args.prove_ci {
        Some(xtask) if !process::interrupted() => Some(prove_ci(
            std::process::Command::new(xtask),
            &workspace,
            &env,
            nextest.success(),
            doctests.as_ref(),
        )?),
        _ => None,
    };
    let logs = supervisor.logs();
    supervisor.stop_all();
    let (doc_status, doc_counts) = doctests.unzip();
    let found = Findings {
        nextest: nextest.success(),
        doctests: doc_status.map(|s| s.success()),
        gate,
        proof,
    };
    let Ending::Finished {
        ok,
        print_logs: logs_wanted,
    } = ending(process::interrupted(), &found)
    else {
        let _ = print_logs(&mut std::io::stderr(), &logs);
        return Ok(Outcome::Interrupted);
    };
    // The gate's own JUnit reader: the closing line and the gate count the same test cases.
    let counts = suite::junit_counts(&junit) + doc_counts.unwrap_or_default();
    if logs_wanted {
        let _ = print_logs(&mut std::io::stderr(), &logs);
    }
    if let Some(proof) = proof {
        eprintln!("xtask test: prove --ci {}", proof.said());
    }
    eprintln!(
        "xtask test: nextest {}, doctests {}, spec-check {}; setup {:.1}s, services {:.1}s, tests {:.1}s, total {:.1}s",
        verdict(found.nextest),
        verdict(found.doctests == Some(true)),
        verdict(found.gate == Some(true)),
        ready_after.as_secs_f64(),
        services_took.as_secs_f64(),
        tests_took.as_secs_f64(),
        run_started.elapsed().as_secs_f64(),
    );
    eprintln!("xtask test: {} skipped or ignored", counts.skipped);
    // The closing line CI reads, alone on its line.
    println!("{} passed, {} failed", counts.passed, counts.failed);
    Ok(if ok { Outcome::Passed } else { Outcome::Failed })
}

/// Refuses options that cannot go together rather than ignoring one of them: `no_run` builds
/// only, so it runs no services and no proof; `services_only` runs no tests, so no proof either;
/// `install_only` does none of the three.
// i[impl harness.install.only]
fn check_options(args: &Options) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        (args.no_run, "--no-run"),
        (args.services_only, "--services-only"),
        (args.prove_ci.is_some(), "--prove-ci"),
        (args.install_only, "--install-only"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    if given.len() > 1 {
        bail!(
            "test: {}: these options cannot go together",
            given.join(" with ")
        );
    }
    Ok(())
}

/// `cargo xtask test --install-only`: what [`ensure_requirements`] installs, with installing
/// allowed, and nothing else.
fn install_only() -> anyhow::Result<Outcome> {
    install_only_with(ensure_requirements)
}

/// [`install_only`] with the requirements' check (a test hands it a stand-in).
// i[impl harness.install.only]
fn install_only_with(
    ensure: impl FnOnce(bool) -> anyhow::Result<PathBuf>,
) -> anyhow::Result<Outcome> {
    ensure(true)?;
    output::print("xtask test: everything a test run needs is installed\n");
    Ok(Outcome::Passed)
}

/// The Ctrl-C / SIGTERM handler: says so and sets `flag`, which every wait loop and every step of
/// the run checks, so the run winds down and stops its services.
// i[impl harness.services.stop]
fn on_interrupt(flag: &AtomicBool) {
    eprintln!("\nxtask test: interrupted; stopping the services");
    flag.store(true, Ordering::SeqCst);
}

/// Whether missing packages may be installed: with `--install`, or in CI.
// i[impl harness.install+2]
fn install_allowed(flag: bool, ci: bool) -> bool {
    flag || ci
}

/// What the run's steps found; `None`: the step did not run.
#[derive(Debug, Clone, Copy)]
struct Findings {
    nextest: bool,
    doctests: Option<bool>,
    gate: Option<bool>,
    proof: Option<Proof>,
}

/// How `--prove-ci`'s proof went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proof {
    Passed,
    Failed,
    /// Skipped because the tests or doctests failed.
    NotRun,
}

impl Proof {
    /// The closing line's word for it.
    fn said(self) -> &'static str {
        match self {
            Proof::Passed => verdict(true),
            Proof::Failed => verdict(false),
            Proof::NotRun => "NOT RUN (the tests failed)",
        }
    }
}

/// How a run ends once its services are stopped.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// A Ctrl-C or SIGTERM came before the gate judged the run: exit 130, with the logs.
    Interrupted,
    /// The run got to its end: whether it passed, and whether the logs are worth printing.
    Finished { ok: bool, print_logs: bool },
}

/// The run passes only if the tests, the doctests, the gate and (when asked for) the proof all
/// passed; the services' logs are printed when the tests or doctests failed.
// i[impl harness.results+3]
// i[impl harness.logs]
fn ending(stopped: bool, found: &Findings) -> Ending {
    let (false, Some(gate)) = (stopped, found.gate) else {
        return Ending::Interrupted;
    };
    let doctests = found.doctests == Some(true);
    Ending::Finished {
        ok: found.nextest
            && doctests
            && gate
            && !matches!(found.proof, Some(Proof::Failed | Proof::NotRun)),
        print_logs: !found.nextest || !doctests,
    }
}

/// `--prove-ci`: `xtask prove --ci` with the services' environment (`HOLDFAST_TEST_SERVICES=1`,
/// so a test whose service is missing panics rather than skipping). Not run when the tests failed:
/// a failing suite fails the build already, and cargo-mutants' baseline would only fail too.
/// Whether it passed. `xtask` runs [`Options::prove_ci`]'s xtask (a stand-in in tests).
// i[impl ci.prove+2]
fn prove_ci(
    mut xtask: std::process::Command,
    workspace: &Path,
    env: &[(String, String)],
    tests_ok: bool,
    doctests: Option<&(std::process::ExitStatus, suite::Counts)>,
) -> anyhow::Result<Proof> {
    if !tests_ok || !doctests.is_some_and(|(status, _)| status.success()) {
        eprintln!("xtask test: prove --ci NOT RUN: the tests failed");
        return Ok(Proof::NotRun);
    }
    eprintln!("xtask test: prove --ci, with the services up");
    let status = xtask
        .args(["prove", "--ci"])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(workspace)
        .status()
        .context("running xtask prove --ci")?;
    Ok(if status.success() {
        Proof::Passed
    } else {
        Proof::Failed
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok { "passed" } else { "FAILED" }
}

/// Takes the services directory's lock for this run (released when the process ends, however).
fn lock_services(root: &Path) -> anyhow::Result<nix::fcntl::Flock<std::fs::File>> {
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let path = root.join("lock");
    let file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(
        |(_, errno)| {
            anyhow::anyhow!(
                "another `cargo xtask test` is using {} ({errno}); wait for it or stop it",
                root.display()
            )
        },
    )
}

// i[impl harness.build-once]
/// `cargo xtask test --no-run`: the suite's build alone; it needs nextest and what the build
/// scripts run (protoc), not the services' programs.
fn build_only(workspace: &Path, install: bool, test_args: &[String]) -> anyhow::Result<Outcome> {
    ensure_build_requirements(install, &packages::search_path(), packages::install)?;
    ensure_nextest(install)?;
    let status = suite::build(root::cargo(), workspace, test_args)?;
    if !status.success() {
        bail!("xtask test --no-run: building the tests failed ({status})");
    }
    Ok(Outcome::Passed)
}

/// cargo-nextest, installed when missing and allowed.
fn ensure_nextest(install: bool) -> anyhow::Result<()> {
    if !packages::has_nextest() {
        if !install {
            bail!(
                "cargo-nextest is missing: run `cargo install --locked cargo-nextest` (or pass --install)"
            );
        }
        packages::install_nextest()?;
    }
    Ok(())
}

/// The building programs on `path` missing, installed with `apt` when allowed (a test hands it a
/// stand-in).
fn ensure_build_requirements(
    install: bool,
    path: &str,
    apt: impl FnOnce(&[&str]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let missing = packages::missing_to_build(path);
    if missing.is_empty() {
        return Ok(());
    }
    if !install {
        bail!("{}", packages::missing_error(&missing));
    }
    apt(&packages::packages_for(&missing))?;
    let still = packages::missing_to_build(path);
    if !still.is_empty() {
        bail!(
            "still missing after installing: {}",
            packages::missing_error(&still)
        );
    }
    Ok(())
}

/// Checks every program is present, installing the missing ones when allowed; returns the static
/// busybox to seed the image with.
fn ensure_requirements(install: bool) -> anyhow::Result<PathBuf> {
    let path = packages::search_path();
    let missing = packages::missing(&path);
    if !missing.is_empty() {
        if !install {
            bail!("{}", packages::missing_error(&missing));
        }
        packages::install(&packages::packages_for(&missing))?;
        let still = packages::missing(&path);
        if !still.is_empty() {
            bail!(
                "still missing after installing: {}",
                packages::missing_error(&still)
            );
        }
    }
    ensure_nextest(install)?;
    if !packages::has_mutants() {
        if !install {
            bail!(
                "cargo-mutants is missing: run `cargo install --locked cargo-mutants` (or pass --install)"
            );
        }
        packages::install_cargo_tool("cargo-mutants")?;
    }
    packages::locate("busybox", &path).context("no statically linked busybox")
}

/// Starts every service in dependency order; returns the variables to export.
fn start_services(
    supervisor: &mut Supervisor,
    root: &Path,
    busybox: &Path,
) -> anyhow::Result<Vec<(String, String)>> {
    let ports = layout::free_ports(16)?;
    let mut env: Vec<(&'static str, String)> = Vec::new();
    env.extend(redis::start(
        supervisor,
        &ServiceDir::fresh(root, "redis")?,
        ports[0],
    )?);
    env.extend(etcd::start(
        supervisor,
        &ServiceDir::fresh(root, "etcd")?,
        ports[1],
        ports[2],
    )?);
    let pebble_dir = ServiceDir::fresh(root, "pebble")?;
    env.extend(pebble::start(
        supervisor,
        &ServiceDir::fresh(root, "challtestsrv")?,
        &pebble_dir,
        pebble::Ports {
            acme: ports[3],
            management: ports[4],
            http01: ports[5],
            tls_alpn01: ports[6],
            dns: ports[7],
            challtestsrv: ports[8],
        },
    )?);
    env.extend(knot::start(
        supervisor,
        &ServiceDir::fresh(root, "knot")?,
        ports[10],
    )?);
    // A second pebble that validates DNS-01 against knot (the first resolves every name to
    // 127.0.0.1 through challtestsrv, which HTTP-01 tests need).
    env.extend(pebble::start_dns01(
        supervisor,
        &pebble_dir,
        &ServiceDir::fresh(root, "pebble-dns01")?,
        [ports[11], ports[12], ports[13], ports[14]],
        layout::loopback(ports[10]),
    )?);
    let registry_dir = ServiceDir::fresh(root, "registry")?;
    env.extend(registry::start(supervisor, &registry_dir, ports[9])?);
    let docker_env = docker::start(supervisor, &ServiceDir::fresh(root, "dockerd")?)?;
    let docker_host = docker_env[0].1.clone();
    env.extend(docker_env);
    let image = registry::seed(
        &registry_dir,
        &docker_host,
        &format!("127.0.0.1:{}", ports[9]),
        busybox,
    )?;
    env.push((services::IMAGE_VAR, image));
    // i[impl harness.services.auth-registry]
    let auth_dir = ServiceDir::fresh(root, "auth-registry")?;
    let password = registry::fresh_password();
    let login = registry::Login {
        username: registry::AUTH_USER,
        password: &password,
    };
    env.extend(registry::start_authenticated(
        supervisor, &auth_dir, ports[15], login,
    )?);
    let auth_image = registry::seed_as(
        &auth_dir,
        &docker_host,
        &format!("127.0.0.1:{}", ports[15]),
        busybox,
        Some(login),
    )?;
    env.push((services::AUTH_IMAGE_VAR, auth_image));
    Ok(env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// Whether the run's environment is the one holdfast-test-support reads: every variable it
/// exports is read there ([`services::VARIABLES`]), and every one read there is exported. A
/// difference is a bug of the harness, found before any test runs rather than as skips.
// i[impl harness.variables]
fn exports_agree(env: &[(String, String)]) -> anyhow::Result<()> {
    use std::collections::BTreeSet;
    let exported: BTreeSet<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
    let read: BTreeSet<&str> = services::VARIABLES.iter().copied().collect();
    let unread: Vec<&str> = exported.difference(&read).copied().collect();
    let missing: Vec<&str> = read.difference(&exported).copied().collect();
    if !unread.is_empty() || !missing.is_empty() || exported.len() != env.len() {
        bail!(
            "the services' environment is not the one holdfast-test-support reads: exported but \
             not read: [{}]; read but not exported: [{}]; {} exported twice",
            unread.join(", "),
            missing.join(", "),
            env.len() - exported.len()
        );
    }
    Ok(())
}

/// `target/holdfast-services/env`: `export KEY=VALUE` lines, for running one test by hand.
fn write_env_file(root: &Path, env: &[(String, String)]) -> anyhow::Result<()> {
    let text: String = env
        .iter()
        .map(|(k, v)| format!("export {k}='{v}'\n"))
        .collect();
    std::fs::write(root.join("env"), text).context("writing the environment file")
}

/// Prints (to `out`: stderr in a run) where each service's log is, and the tail of each.
// i[impl harness.logs]
fn print_logs(out: &mut impl std::io::Write, logs: &[(String, PathBuf)]) -> std::io::Result<()> {
    if logs.is_empty() {
        return Ok(());
    }
    writeln!(out, "xtask test: service logs:")?;
    for (name, path) in logs {
        writeln!(out, "  {name}: {}", path.display())?;
    }
    for (name, path) in logs {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(5)..];
        if !tail.is_empty() {
            writeln!(out, "--- last lines of {name} ({}):", path.display())?;
            for line in tail {
                writeln!(out, "    {line}")?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {

    use std::os::unix::process::ExitStatusExt as _;
    use std::process::ExitStatus;

    use super::*;

    // i[verify harness.build-once]
    #[test]
    fn the_build_alone_installs_protoc_when_it_is_missing_and_allowed() {
        let empty = tempfile::tempdir().expect("tempdir");
        let path = empty.path().to_str().expect("utf-8");
        let mut asked = Vec::new();
        let err = ensure_build_requirements(true, path, |packages| {
            asked = packages.iter().map(|p| p.to_string()).collect();
            Ok(())
        })
        .expect_err("a stand-in installs nothing");
        assert_eq!(asked, ["protobuf-compiler", "libprotobuf-dev"]);
        assert!(err.to_string().contains("still missing"), "{err}");
        let err = ensure_build_requirements(false, path, |_| panic!("not allowed to install"))
            .expect_err("protoc is missing");
        assert!(err.to_string().contains("protobuf-compiler"), "{err}");
    }

    /// A stand-in for xtask that notes its call in its working directory (`called`: its arguments
    /// and `HOLDFAST_TEST_SERVICES`) and exits with `exit`.
    fn xtask(dir: &Path, exit: u8) -> std::process::Command {
        holdfast_harness::stand_in::script(
            dir,
            "xtask.sh",
            &format!(
                "echo \"$* services=${}\" > called\nexit {exit}\n",
                services::SERVICES_VAR
            ),
        )
    }

    /// `--prove-ci` after tests that passed (`tests_ok`) and doctests that ended with exit code
    /// `doctests` (`None`: not run).
    fn prove_after(
        dir: &Path,
        exit: u8,
        tests_ok: bool,
        doctests: Option<i32>,
    ) -> anyhow::Result<Proof> {
        let env = [(services::SERVICES_VAR.to_owned(), "1".to_owned())];
        // A wait status has the exit code in its second byte.
        let doctests =
            doctests.map(|code| (ExitStatus::from_raw(code << 8), suite::Counts::default()));
        prove_ci(xtask(dir, exit), dir, &env, tests_ok, doctests.as_ref())
    }

    // i[verify ci.prove+2]
    #[test]
    fn prove_ci_runs_prove_with_the_services_env_and_returns_its_verdict() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(
            prove_after(dir.path(), 0, true, Some(0)).expect("run"),
            Proof::Passed
        );
        let called = std::fs::read_to_string(dir.path().join("called")).expect("called");
        assert_eq!(called.trim(), "prove --ci services=1", "in the workspace");
        assert_eq!(
            prove_after(dir.path(), 1, true, Some(0)).expect("run"),
            Proof::Failed
        );
    }

    // i[verify ci.prove+2]
    #[test]
    fn prove_ci_is_not_run_after_failed_tests_or_doctests() {
        for (tests_ok, doctests) in [
            (false, Some(0)),
            (true, Some(1)),
            (true, None),
            (false, None),
        ] {
            let dir = tempfile::tempdir().expect("tempdir");
            let proved = prove_after(dir.path(), 0, tests_ok, doctests).expect("no run, no error");
            let case = format!("tests passed: {tests_ok}, doctests: {doctests:?}");
            assert_eq!(proved, Proof::NotRun, "a failed build: {case}");
            assert!(!dir.path().join("called").exists(), "not run: {case}");
        }
        // The closing line says which, and a proof not run fails the run as a failed one does.
        assert_eq!(Proof::NotRun.said(), "NOT RUN (the tests failed)");
        assert_eq!(Proof::Failed.said(), "FAILED");
        assert_eq!(Proof::Passed.said(), "passed");
        // Even beside tests that passed (it cannot be, but the verdict must not rest on it).
        let not_run = Findings {
            nextest: true,
            doctests: Some(true),
            gate: Some(true),
            proof: Some(Proof::NotRun),
        };
        assert!(matches!(
            ending(false, &not_run),
            Ending::Finished { ok: false, .. }
        ));
    }

    /// Every variable a run exports, by who exports it: each service module's `EXPORTS`, the images
    /// `start_services` seeds, and what `run` adds (the harness flag and the ledger). A unit test
    /// holds it equal to test-support's [`services::VARIABLES`], so a difference fails the build's
    /// tests rather than a run a minute into starting its services.
    const EXPORTED: [&[&str]; 11] = [
        &redis::EXPORTS,
        &etcd::EXPORTS,
        &pebble::EXPORTS,
        &knot::EXPORTS,
        &pebble::DNS01_EXPORTS,
        &registry::EXPORTS,
        &docker::EXPORTS,
        &[services::IMAGE_VAR],
        &registry::AUTH_EXPORTS,
        &[services::AUTH_IMAGE_VAR],
        &[services::SERVICES_VAR, services::SKIP_LEDGER_VAR],
    ];

    // i[verify harness.variables]
    #[test]
    fn the_services_modules_export_exactly_what_test_support_reads() {
        let exported: Vec<&str> = EXPORTED.concat();
        exports_agree(
            &exported
                .iter()
                .map(|n| ((*n).to_owned(), String::new()))
                .collect::<Vec<_>>(),
        )
        .expect("the services' names are test-support's");
    }

    // i[verify harness.variables]
    #[test]
    fn a_run_exports_exactly_what_test_support_reads() {
        let env = |names: &[&str]| -> Vec<(String, String)> {
            names
                .iter()
                .map(|n| ((*n).to_owned(), "v".to_owned()))
                .collect()
        };
        exports_agree(&env(services::VARIABLES)).expect("test-support's own names");
        let mut more = services::VARIABLES.to_vec();
        more.push("HOLDFAST_TEST_UNREAD");
        let err = exports_agree(&env(&more)).expect_err("an unread variable");
        assert!(err.to_string().contains("HOLDFAST_TEST_UNREAD"), "{err}");
        let fewer = &services::VARIABLES[1..];
        let err = exports_agree(&env(fewer)).expect_err("a variable read but not exported");
        assert!(err.to_string().contains(services::VARIABLES[0]), "{err}");
        let mut twice = services::VARIABLES.to_vec();
        twice.push(services::REDIS_VAR);
        exports_agree(&env(&twice)).expect_err("a variable exported twice");
    }

    // spec-engine cannot depend on test-support (it would build tokio), so it repeats the
    // ledger's file name; this crate depends on both and ties them together.
    // i[verify harness.variables]
    #[test]
    fn spec_engine_s_default_ledger_is_the_one_test_support_writes() {
        assert_eq!(
            spec_engine::trace::results::DEFAULT_SKIPS,
            format!("target/{}", services::LEDGER_FILE)
        );
    }

    // i[verify harness.install.only]
    #[test]
    fn options_that_cannot_go_together_are_refused() {
        let with = |[no_run, services_only, prove, install_only]: [bool; 4]| Options {
            no_run,
            services_only,
            prove_ci: prove.then(|| PathBuf::from("xtask")),
            install_only,
            ..Options::default()
        };
        // Every pair of the four clashes, and the error names both.
        let flags = [
            "--no-run",
            "--services-only",
            "--prove-ci",
            "--install-only",
        ];
        for a in 0..4 {
            for b in a + 1..4 {
                let mut on = [false; 4];
                on[a] = true;
                on[b] = true;
                let err = check_options(&with(on)).expect_err("a clash");
                let text = err.to_string();
                assert!(text.contains("cannot go together"), "{text}");
                assert!(
                    text.contains(&format!("{} with {}", flags[a], flags[b])),
                    "{text}"
                );
            }
        }
        check_options(&with([false; 4])).expect("no option");
        for alone in 0..4 {
            let mut on = [false; 4];
            on[alone] = true;
            check_options(&with(on)).expect("one option alone");
        }
    }

    // i[verify harness.install.only]
    #[test]
    fn install_only_ensures_the_requirements_with_installing_allowed_and_fails_with_them() {
        let mut asked = Vec::new();
        let outcome = install_only_with(|install| {
            asked.push(install);
            Ok(PathBuf::from("/bin/busybox"))
        })
        .expect("installed");
        assert_eq!(outcome, Outcome::Passed);
        assert_eq!(asked, [true]);
        let err = install_only_with(|_| bail!("apt-get install failed: exit status: 100"))
            .expect_err("a failed install fails the command");
        assert!(err.to_string().contains("apt-get install failed"), "{err}");
    }

    // i[verify harness.services.stop]
    #[test]
    fn an_interrupt_sets_the_flag_the_run_winds_down_on() {
        let flag = AtomicBool::new(false);
        on_interrupt(&flag);
        assert!(flag.load(Ordering::SeqCst));
    }

    // i[verify harness.install+2]
    #[test]
    fn packages_are_installed_with_install_or_in_ci_only() {
        assert!(!install_allowed(false, false));
        assert!(install_allowed(true, false));
        assert!(install_allowed(false, true));
        assert!(install_allowed(true, true));
    }

    /// Findings of a run whose every step ran and passed.
    const ALL_PASSED: Findings = Findings {
        nextest: true,
        doctests: Some(true),
        gate: Some(true),
        proof: None,
    };

    // i[verify harness.services.stop]
    #[test]
    fn a_run_stopped_before_the_gate_ends_interrupted() {
        assert_eq!(ending(true, &ALL_PASSED), Ending::Interrupted);
        let no_gate = Findings {
            gate: None,
            ..ALL_PASSED
        };
        assert_eq!(ending(false, &no_gate), Ending::Interrupted);
        assert_eq!(ending(true, &no_gate), Ending::Interrupted);
    }

    // i[verify harness.results+3]
    // i[verify harness.logs]
    #[test]
    fn a_run_passes_only_if_every_step_passed_and_logs_follow_failed_tests() {
        let passed = |found: Findings| ending(false, &found);
        let finished = |ok, print_logs| Ending::Finished { ok, print_logs };
        assert_eq!(passed(ALL_PASSED), finished(true, false));
        let cases = [
            (
                Findings {
                    nextest: false,
                    ..ALL_PASSED
                },
                finished(false, true),
            ),
            (
                Findings {
                    doctests: Some(false),
                    ..ALL_PASSED
                },
                finished(false, true),
            ),
            (
                Findings {
                    doctests: None,
                    ..ALL_PASSED
                },
                finished(false, true),
            ),
            (
                Findings {
                    gate: Some(false),
                    ..ALL_PASSED
                },
                finished(false, false),
            ),
            (
                Findings {
                    proof: Some(Proof::Failed),
                    ..ALL_PASSED
                },
                finished(false, false),
            ),
            (
                Findings {
                    proof: Some(Proof::Passed),
                    ..ALL_PASSED
                },
                finished(true, false),
            ),
        ];
        for (found, expected) in cases {
            assert_eq!(passed(found), expected, "{found:?}");
        }
    }

    // i[verify harness.logs]
    #[test]
    fn the_logs_are_named_with_the_last_lines_of_each() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (redis, etcd) = (dir.path().join("redis.log"), dir.path().join("etcd.log"));
        let lines: String = (1..=7).map(|n| format!("line {n}\n")).collect();
        std::fs::write(&redis, lines).expect("redis log");
        // A service that said nothing: named, with no empty tail.
        std::fs::write(&etcd, "").expect("etcd log");
        let logs = [
            ("redis".to_owned(), redis.clone()),
            ("etcd".to_owned(), etcd.clone()),
        ];
        let mut out = Vec::new();
        print_logs(&mut out, &logs).expect("printed");
        let (redis, etcd) = (redis.display(), etcd.display());
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            format!(
                "xtask test: service logs:\n  redis: {redis}\n  etcd: {etcd}\n\
                 --- last lines of redis ({redis}):\n    line 3\n    line 4\n    line 5\n    line 6\n    line 7\n"
            )
        );
        let mut out = Vec::new();
        print_logs(&mut out, &[]).expect("printed");
        assert!(out.is_empty(), "no services, no logs");
    }
}
