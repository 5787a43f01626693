//! `cargo xtask bench retry` — runs holdfast-retry's benches and writes `target/bench/retry.json`.
//!
//! Three bench binaries of the `holdfast-retry` package run in turn:
//! - `gate` (criterion): median cost of an eligibility check and of recording a failure on a keyed
//!   gate with 1,000,000 failing keys, against governor 0.10's keyed `check_key` on the same keys
//!   (and the same on 10,000 keys, a cache-resident working set);
//! - `memory`: bytes per failing key (counting allocator), and what reclaiming 1,000,000 idle keys
//!   costs inside an ordinary call;
//! - `herd`: the contention simulation per jitter strategy.
//!
//! The summary records the targets from the issue and whether this run met them; it does not fail
//! on a missed target (numbers on a shared 2-core machine are noisy), it reports it.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The retry suite's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct Args {
    /// Criterion warm-up time per benchmark, in seconds.
    #[arg(long, default_value_t = 1)]
    pub warm_up_secs: u64,
    /// Criterion measurement time per benchmark, in seconds.
    #[arg(long, default_value_t = 3)]
    pub measurement_secs: u64,
    /// Number of failing keys in the gate benches.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
}

const CHECK_TARGET_NS: f64 = 40.0;
const SPEEDUP_TARGET: f64 = 1.5;
const BYTES_PER_KEY_TARGET: f64 = 64.0;

/// Runs the three benches with `cargo()` in `root`, reads criterion's estimates under `target`,
/// writes the summary and prints it.
pub fn run(
    cargo: &dyn Fn() -> Command,
    root: &Path,
    target: &Path,
    args: &Args,
) -> anyhow::Result<ExitCode> {
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    eprintln!("bench: gate (criterion), {} keys", args.keys);
    let status = cargo()
        .current_dir(root)
        .env("HOLDFAST_BENCH_KEYS", args.keys.to_string())
        .args(["bench", "-p", "holdfast-retry", "--bench", "gate", "--"])
        .args(["--warm-up-time", &args.warm_up_secs.to_string()])
        .args(["--measurement-time", &args.measurement_secs.to_string()])
        .status()
        .context("running cargo bench --bench gate")?;
    if !status.success() {
        bail!("cargo bench --bench gate failed: {status}");
    }
    let criterion = target.join("criterion");
    let mut gate = serde_json::Map::new();
    for group in ["check", "check-10k"] {
        for bench in [
            "holdfast-keyed",
            "holdfast-keyed-clock-per-call",
            "holdfast-shared",
            "hashbrown-get-floor",
            "governor-keyed",
        ] {
            gate.insert(
                format!("{group}/{bench}"),
                estimates(&criterion, group, bench)?,
            );
        }
    }
    gate.insert(
        "fail/holdfast-keyed".into(),
        estimates(&criterion, "fail", "holdfast-keyed")?,
    );

    eprintln!("bench: memory");
    let memory = result_line(cargo(), root, "memory", args.keys)?;
    eprintln!("bench: herd");
    let herd = result_line(cargo(), root, "herd", args.keys)?;

    let median = |id: &str| {
        gate.get(id)
            .and_then(|v| v["median_ns"].as_f64())
            .unwrap_or(f64::NAN)
    };
    let check = median("check/holdfast-keyed");
    let governor = median("check/governor-keyed");
    let speedup = governor / check;
    let bytes = memory["keyed_bytes_per_key_beyond_key"]
        .as_f64()
        .unwrap_or(f64::NAN);
    let reclaimed = [
        "keyed_reclaim_steady_keys_left",
        "keyed_reclaim_after_quiet_keys_left",
        "shared_reclaim_steady_keys_left",
        "shared_reclaim_after_quiet_keys_left",
    ]
    .iter()
    .all(|field| memory[*field].as_u64() == Some(0));
    let targets = json!({
        "check_median_ns": {"target_max": CHECK_TARGET_NS, "measured": check, "met": check <= CHECK_TARGET_NS},
        "speedup_vs_governor_check_key": {"target_min": SPEEDUP_TARGET, "measured": speedup, "met": speedup >= SPEEDUP_TARGET},
        "bytes_per_failing_key_beyond_key": {"target_max": BYTES_PER_KEY_TARGET, "measured": bytes, "met": bytes <= BYTES_PER_KEY_TARGET},
        "idle_keys_reclaimed_by_an_ordinary_call": {"met": reclaimed},
    });
    let report = json!({
        "command": format!(
            "cargo xtask bench retry --warm-up-secs {} --measurement-secs {} --keys {}",
            args.warm_up_secs, args.measurement_secs, args.keys
        ),
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_before": load_before.trim(),
        },
        "keys": args.keys,
        "gate": gate,
        "memory": memory,
        "herd": herd,
        "targets": targets,
    });
    let out_dir = target.join("bench");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = out_dir.join("retry.json");
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;

    println!(
        "holdfast-retry benches ({} keys) -> {}",
        args.keys,
        out.display()
    );
    for (id, v) in &gate {
        println!(
            "  {id:<42} median {:>8.1} ns",
            v["median_ns"].as_f64().unwrap_or(f64::NAN)
        );
    }
    println!(
        "  memory per failing key beyond the key: {bytes:.1} B (governor: {} B/key total)",
        memory["governor_bytes_per_key"]
    );
    println!("  check vs governor: {speedup:.2}x");
    for gate in ["keyed", "shared"] {
        println!(
            "  reclaiming {} idle keys, {gate}: slowest ordinary call {} ms under steady traffic, {} ms after a quiet spell",
            args.keys,
            memory[format!("{gate}_reclaim_steady_slowest_call_ms")],
            memory[format!("{gate}_reclaim_after_quiet_slowest_call_ms")],
        );
    }
    for (name, t) in targets.as_object().into_iter().flatten() {
        println!(
            "  target {name}: {}",
            if t["met"] == true { "met" } else { "MISSED" }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Median and mean (ns) from criterion's estimates for `group/bench`.
fn estimates(criterion: &Path, group: &str, bench: &str) -> anyhow::Result<Value> {
    let path = criterion
        .join(group)
        .join(bench)
        .join("new")
        .join("estimates.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    Ok(json!({
        "median_ns": v["median"]["point_estimate"],
        "mean_ns": v["mean"]["point_estimate"],
        "median_ci95_ns": [v["median"]["confidence_interval"]["lower_bound"], v["median"]["confidence_interval"]["upper_bound"]],
    }))
}

/// Run a harness-less bench binary and parse the JSON on its `RESULT ` line.
fn result_line(mut cargo: Command, root: &Path, bench: &str, keys: u64) -> anyhow::Result<Value> {
    let output = cargo
        .current_dir(root)
        .env("HOLDFAST_BENCH_KEYS", keys.to_string())
        .args(["bench", "-p", "holdfast-retry", "--bench", bench])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running cargo bench --bench {bench}"))?;
    if !output.status.success() {
        bail!("cargo bench --bench {bench} failed: {}", output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .with_context(|| format!("no RESULT line from the {bench} bench"))?;
    serde_json::from_str(line).with_context(|| format!("parsing the {bench} bench's RESULT line"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn criterion_s_estimates_become_the_median_mean_and_interval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let at = dir.path().join("check/holdfast-keyed/new");
        std::fs::create_dir_all(&at).expect("mkdir");
        std::fs::write(
            at.join("estimates.json"),
            r#"{"median":{"point_estimate":21.5,"confidence_interval":{"lower_bound":21.0,"upper_bound":22.0}},"mean":{"point_estimate":23.0}}"#,
        )
        .expect("write");
        let v = estimates(dir.path(), "check", "holdfast-keyed").expect("read");
        assert_eq!(
            v,
            json!({"median_ns": 21.5, "mean_ns": 23.0, "median_ci95_ns": [21.0, 22.0]})
        );
        let err = estimates(dir.path(), "check", "governor-keyed").expect_err("no run");
        assert!(err.to_string().contains("governor-keyed"), "{err}");
    }

    #[test]
    fn a_harness_less_bench_is_read_by_its_result_line_and_one_without_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cargo = |text: &str| holdfast_harness::stand_in::script(dir.path(), "cargo.sh", text);
        let keys = cargo(
            "echo \"keys=$HOLDFAST_BENCH_KEYS args=$*\" >&2\necho noise\necho 'RESULT {\"herd\": 3}'",
        );
        let v = result_line(keys, dir.path(), "herd", 7).expect("read");
        assert_eq!(v, json!({"herd": 3}));
        let err = result_line(cargo("echo noise"), dir.path(), "herd", 7).expect_err("no line");
        assert!(err.to_string().contains("no RESULT line"), "{err}");
        let err = result_line(cargo("exit 3"), dir.path(), "herd", 7).expect_err("failed");
        assert!(err.to_string().contains("failed"), "{err}");
    }
}
