//! `cargo xtask bench forward [--quick] [--iperf] [--profile]` — runs holdfast-forward's relay bench (raw
//! quinn, then the same load through a forward to a UDP echo target and through a bare relay, the
//! floor under any forward, in one run), with `--iperf`
//! also a real client's load through a forward (`iperf`), and writes `target/bench/forward.json`
//! with the targets and whether this run met them. With `--profile` it writes
//! `target/bench/forward-profile.json` instead, judging no target.
//!
//! A missed target is reported, not failed: figures on a shared 2-core machine are noisy, so the
//! load average goes into the report beside them.

use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::iperf;

/// Throughput through the forward as a share of raw quinn's, at 64 bytes.
const SHARE_64: f64 = 0.60;
/// The same at 1162 bytes.
const SHARE_1162: f64 = 0.75;
/// The forward's p99 round trip minus raw quinn's (a difference of percentiles), at half the
/// forward's maximum rate, in µs.
const ADDED_P99_US: f64 = 200.0;

/// The report's `targets` in `--profile` mode: with each side on a runtime of its own, the
/// throughput and latency are not the measurement (`i[bench.forward.profile]`).
const NOT_JUDGED: &str = "not judged: --profile runs each side on a runtime of its own";

/// What `--iperf` measures once the relay bench is done (see [`crate::iperf::run`]).
pub type Iperf<'a> = &'a dyn Fn() -> anyhow::Result<Value>;

/// How the relay bench runs.
#[derive(Clone, Copy, Default)]
pub struct Mode {
    /// The bounded CI run.
    pub quick: bool,
    /// Each side's cost per datagram, each side on a runtime of its own (`i[bench.forward.profile]`).
    pub profile: bool,
}

// i[impl bench.forward.shared-build+2]
/// The packages every build of this suite names: holdfast-gateway's bench builds with `-p
/// holdfast-gateway`, and cargo unifies dependency features over the named packages, so naming it
/// here too lets this suite reuse most of that build's dependencies instead of compiling them
/// again.
pub const PACKAGES: [&str; 4] = ["-p", "holdfast-gateway", "-p", "holdfast-forward"];

/// Runs the bench with `cargo` (`$CARGO`; a stand-in in tests) in `root` and reports; `iperf`,
/// when given, runs after the relay bench and its figures join the report.
// i[impl bench.forward+4]
// i[impl bench.forward.profile]
pub fn run(
    mut cargo: Command,
    root: &Path,
    target: &Path,
    mode: Mode,
    with_iperf: Option<Iperf<'_>>,
) -> anyhow::Result<ExitCode> {
    let Mode { quick, profile } = mode;
    let load_before = loadavg();
    let out_dir = target.join("bench");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    // A profiled run's figures are not the measurement: they go beside the last report, which
    // stays as it was.
    let out = out_dir.join(if profile {
        "forward-profile.json"
    } else {
        "forward.json"
    });
    eprintln!(
        "bench: forward relay ({}), load average {}",
        if quick { "quick" } else { "full" },
        load_before
    );
    let status = cargo
        .current_dir(root)
        .env("HOLDFAST_BENCH_OUT", &out)
        .env("HOLDFAST_BENCH_QUICK", if quick { "1" } else { "0" })
        .env("HOLDFAST_BENCH_PROFILE", if profile { "1" } else { "0" })
        .arg("bench")
        .args(PACKAGES)
        .args(["--bench", "relay"])
        .status()
        .context("running cargo bench -p holdfast-gateway -p holdfast-forward --bench relay")?;
    if !status.success() {
        bail!("cargo bench -p holdfast-gateway -p holdfast-forward --bench relay failed: {status}");
    }
    let text =
        std::fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let mut measured: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", out.display()))?;
    if let Some(measure) = with_iperf {
        measured["iperf"] = measure()?;
    }
    let targets = if profile {
        json!(NOT_JUDGED)
    } else {
        targets(&measured)
    };
    let report = json!({
        "command": format!(
            "cargo xtask bench forward{}{}{}",
            if quick { " --quick" } else { "" },
            if with_iperf.is_some() { " --iperf" } else { "" },
            if profile { " --profile" } else { "" }
        ),
        "machine": {
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            "loadavg_before": load_before,
            "loadavg_after": loadavg(),
        },
        "measured": measured,
        "targets": targets,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    print!("{}", summary(&report));
    println!("wrote {}", out.display());
    Ok(ExitCode::SUCCESS)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The targets against what the bench measured: each with its bound, the figure, and
/// whether it was met (a figure the bench did not produce is not met).
// i[impl bench.forward+4]
pub fn targets(measured: &Value) -> Value {
    let num = |v: &Value| v.as_f64().filter(|x| x.is_finite());
    let share = |size: &str, min: f64| {
        let got = num(&measured[format!("throughput_{size}")]["forward_over_raw"]);
        json!({"target_min": min, "measured": got, "met": got.is_some_and(|g| g >= min)})
    };
    let added = num(&measured["latency"]["forward_minus_raw"]["p99_us"]);
    let mut targets = json!({
        "forward_over_raw_64": share("64", SHARE_64),
        "forward_over_raw_1162": share("1162", SHARE_1162),
        "p99_forward_minus_raw_us_at_half_max_rate": {
            "target_max": ADDED_P99_US,
            "measured": added,
            "met": added.is_some_and(|a| a < ADDED_P99_US),
        },
    });
    if measured["iperf"].is_object() {
        let (direct, forward) = iperf::sessions_at(&measured["iperf"], iperf::JUDGED_MBIT);
        targets[IPERF_TARGET] = iperf::loss_target(direct, forward);
    }
    targets
}

/// The name of `--iperf`'s target in the report.
const IPERF_TARGET: &str = "iperf_loss_forward_at_1000_mbit";

/// The table and the verdicts, as printed.
// i[impl bench.forward+4]
// i[impl bench.forward.tail]
// i[impl bench.forward.floor]
pub fn summary(report: &Value) -> String {
    use std::fmt::Write as _;
    let m = &report["measured"];
    let f = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "holdfast-forward relay (load average {} before, {} after)",
        report["machine"]["loadavg_before"].as_str().unwrap_or("?"),
        report["machine"]["loadavg_after"].as_str().unwrap_or("?")
    );
    let _ = writeln!(
        out,
        "  {:<8} {:>6} {:>12} {:>9} {:>7}",
        "path", "bytes", "datagrams/s", "Mbit/s", "loss"
    );
    for size in ["64", "1162"] {
        let t = &m[format!("throughput_{size}")];
        for path in ["raw", "forward", "bare"] {
            let p = &t[path];
            // Reports from before the floor, and profiled ones, have no `bare`.
            if path == "bare" && p.is_null() {
                continue;
            }
            let _ = writeln!(
                out,
                "  {path:<8} {size:>6} {:>12.0} {:>9.1} {:>6.2}%",
                f(&p["datagrams_per_sec"]),
                f(&p["mbit_per_sec"]),
                f(&p["loss"]) * 100.0
            );
        }
    }
    let l = &m["latency"];
    let _ = writeln!(
        out,
        "  round trip at {:.0} datagrams/s (half the forward's maximum), p50/p99 µs: raw {:.0}/{:.0}, forward {:.0}/{:.0}, forward minus raw {:.0}/{:.0}",
        f(&l["rate_datagrams_per_sec"]),
        f(&l["raw"]["p50_us"]),
        f(&l["raw"]["p99_us"]),
        f(&l["forward"]["p50_us"]),
        f(&l["forward"]["p99_us"]),
        f(&l["forward_minus_raw"]["p50_us"]),
        f(&l["forward_minus_raw"]["p99_us"]),
    );
    if l["bare"].is_object() {
        let share = |size: &str, of: &str| f(&m[format!("throughput_{size}")][of]) * 100.0;
        let _ = writeln!(
            out,
            "  the floor (bare: a relay doing the least a forward can; one phase each, after the forward's): {:.0}% of raw at 64 bytes, {:.0}% at 1162; the forward {:.0}% and {:.0}% of it; p99 bare minus raw {:.0} µs, forward minus bare {:.0} µs",
            share("64", "bare_over_raw"),
            share("1162", "bare_over_raw"),
            share("64", "forward_over_bare"),
            share("1162", "forward_over_bare"),
            f(&l["bare_minus_raw"]["p99_us"]),
            f(&l["forward_minus_bare"]["p99_us"]),
        );
    }
    if let Some(rates) = m["latency_tail"]["rates"].as_array() {
        let runs = m["latency_tail"]["runs"].as_u64().unwrap_or(1);
        let _ = writeln!(
            out,
            "  round trips at fixed shares of the forward's maximum, {} bytes, µs{}:",
            m["latency_tail"]["bytes"],
            if runs > 1 {
                format!(
                    " (median of up to {runs} runs, those with echoes; p99 and p99.9 also min-max)"
                )
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "    {:>5} {:>12} {:<8} {:>7} {:>7} {:>7} {:>13} {:>13}",
            "share", "datagrams/s", "path", "p50", "p99", "p99.9", "p99 min-max", "p99.9 min-max"
        );
        for rate in rates {
            for path in ["raw", "forward"] {
                let s = &rate["spread"][path];
                let mid = |p: &str| f(&s[p][1]);
                // A range over one run (or a report from before runs were counted) says
                // nothing more than the median.
                let counted = s["runs_counted"].as_u64().unwrap_or(runs);
                let range = |p: &str| {
                    if counted > 1 {
                        format!("{:.0}-{:.0} ({counted})", f(&s[p][0]), f(&s[p][2]))
                    } else {
                        "-".to_owned()
                    }
                };
                let _ = writeln!(
                    out,
                    "    {:>4.0}% {:>12.0} {path:<8} {:>7.0} {:>7.0} {:>7.0} {:>13} {:>13}",
                    f(&rate["share"]) * 100.0,
                    f(&rate["rate_datagrams_per_sec"]),
                    mid("p50_us"),
                    mid("p99_us"),
                    mid("p999_us"),
                    range("p99_us"),
                    range("p999_us"),
                );
            }
        }
    }
    if m["iperf"].is_object() {
        let _ = writeln!(
            out,
            "  iperf 2, UDP, {} bytes, {} s a session:",
            m["iperf"]["datagram_bytes"], m["iperf"]["seconds"]
        );
        for rate in iperf::RATES_MBIT {
            let (direct, forward) = iperf::sessions_at(&m["iperf"], rate);
            let shown = |s: Option<iperf::Session>| {
                s.map_or_else(
                    || "not measured".to_owned(),
                    |s| {
                        format!(
                            "{:.0} Mbit/s, {:.2}% lost{}",
                            s.mbit_per_sec,
                            s.loss() * 100.0,
                            s.rcvbuf_drops_shown()
                        )
                    },
                )
            };
            let _ = writeln!(
                out,
                "    {rate:>5} Mbit/s offered: direct {}, forward {}",
                shown(direct),
                shown(forward)
            );
        }
    }
    if let Some(rows) = m["profile"].as_array() {
        let _ = writeln!(
            out,
            "  profile, per datagram echoed (CPU µs per datagram = CPU s per million datagrams):"
        );
        let _ = writeln!(
            out,
            "    {:<22} {:<8} {:<7} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "phase", "path", "side", "syscalls", "allocs", "vol-cs", "invol-cs", "cpu µs"
        );
        // A figure the bench could not take is null: shown as such, never as zero.
        let shown = |v: &Value| {
            v.as_f64()
                .map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3}"))
        };
        for r in rows {
            let _ = writeln!(
                out,
                "    {:<22} {:<8} {:<7} {:>9} {:>8} {:>8} {:>8} {:>8}",
                r["phase"].as_str().unwrap_or("?"),
                r["path"].as_str().unwrap_or("?"),
                r["side"].as_str().unwrap_or("?"),
                shown(&r["syscalls_per_datagram"]),
                shown(&r["allocs_per_datagram"]),
                shown(&r["voluntary_switches_per_datagram"]),
                shown(&r["involuntary_switches_per_datagram"]),
                shown(&r["cpu_us_per_datagram"]),
            );
        }
    }
    if let Some(why) = report["targets"].as_str() {
        let _ = writeln!(out, "  targets {why}");
    }
    for (name, t) in report["targets"].as_object().into_iter().flatten() {
        let iperf_target = name == IPERF_TARGET;
        let bound = match (t["target_min"].as_f64(), t["target_max"].as_f64()) {
            // Only the shares have a minimum.
            (Some(min), _) => format!(">= {:.0}%", min * 100.0),
            (_, Some(max)) if iperf_target => format!("<= {:.3}% (twice direct)", max * 100.0),
            (_, Some(max)) => format!("< {max:.0}"),
            _ if iperf_target => "<= twice direct".into(),
            _ => String::new(),
        };
        let got = match t["measured"].as_f64() {
            Some(v) if name.starts_with("forward_over_raw") => format!("{:.0}%", v * 100.0),
            Some(v) if iperf_target => format!("{:.3}%", v * 100.0),
            Some(v) => format!("{v:.0}"),
            None => "not measured".into(),
        };
        let _ = writeln!(
            out,
            "  target {name} {bound}: {got} {}",
            if t["met"] == true { "pass" } else { "MISS" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUICK: Mode = Mode {
        quick: true,
        profile: false,
    };

    fn measured(share_64: f64, share_1162: f64, added_p99: Value) -> Value {
        let throughput = |share: f64| {
            json!({
                "raw": {"datagrams_per_sec": 100000.0, "mbit_per_sec": 51.2, "loss": 0.0},
                "forward": {"datagrams_per_sec": 100000.0 * share, "mbit_per_sec": 51.2 * share, "loss": 0.001},
                "forward_over_raw": share,
            })
        };
        json!({
            "throughput_64": throughput(share_64),
            "throughput_1162": throughput(share_1162),
            "latency": {
                "rate_datagrams_per_sec": 50000.0,
                "raw": {"p50_us": 40.0, "p99_us": 90.0},
                "forward": {"p50_us": 70.0, "p99_us": 150.0},
                "forward_minus_raw": {"p50_us": 30.0, "p99_us": added_p99},
            },
        })
    }

    // i[verify bench.forward+4]
    #[test]
    fn each_target_passes_or_misses_by_its_bound() {
        let t = targets(&measured(0.6, 0.74, json!(199.0)));
        assert_eq!(t["forward_over_raw_64"]["met"], true, "60% is enough");
        assert_eq!(t["forward_over_raw_1162"]["met"], false, "74% is not 75%");
        assert_eq!(t["p99_forward_minus_raw_us_at_half_max_rate"]["met"], true);
        let t = targets(&measured(0.59, 0.75, json!(200.0)));
        assert_eq!(t["forward_over_raw_64"]["met"], false);
        assert_eq!(t["forward_over_raw_1162"]["met"], true);
        assert_eq!(
            t["p99_forward_minus_raw_us_at_half_max_rate"]["met"], false,
            "under 200, not at it"
        );
        // A figure the bench could not produce (no echo came back) is a miss, not a pass.
        let t = targets(&measured(0.6, 0.8, Value::Null));
        assert_eq!(t["p99_forward_minus_raw_us_at_half_max_rate"]["met"], false);
    }

    // i[verify bench.forward+4]
    #[test]
    fn the_summary_shows_the_table_the_load_and_a_verdict_per_target() {
        let m = measured(0.62, 0.69, json!(120.0));
        let report = json!({
            "machine": {"loadavg_before": "1.50 1.20 1.00", "loadavg_after": "1.90 1.30 1.05"},
            "targets": targets(&m),
            "measured": m,
        });
        insta::assert_snapshot!(summary(&report));
    }

    // i[verify bench.forward.floor]
    #[test]
    fn the_summary_shows_the_floor_beside_the_paths_when_the_report_has_it() {
        let mut m = measured(0.62, 0.69, json!(120.0));
        for (size, bare) in [("64", 0.65), ("1162", 0.7)] {
            let t = &mut m[format!("throughput_{size}")];
            t["bare"] = json!({"datagrams_per_sec": 100000.0 * bare, "mbit_per_sec": 51.2 * bare, "loss": 0.0});
            t["bare_over_raw"] = json!(bare);
            t["forward_over_bare"] = json!(t["forward_over_raw"].as_f64().unwrap() / bare);
        }
        m["latency"]["bare"] = json!({"p50_us": 60.0, "p99_us": 140.0});
        m["latency"]["bare_minus_raw"] = json!({"p50_us": 20.0, "p99_us": 50.0});
        m["latency"]["forward_minus_bare"] = json!({"p50_us": 10.0, "p99_us": 10.0});
        let report = json!({
            "machine": {"loadavg_before": "1.50 1.20 1.00", "loadavg_after": "1.90 1.30 1.05"},
            "targets": targets(&m),
            "measured": m,
        });
        let text = summary(&report);
        // A report without the floor is summarised without it.
        let old = measured(0.62, 0.69, json!(120.0));
        let old = json!({"machine": report["machine"], "targets": targets(&old), "measured": old});
        assert!(!summary(&old).contains("bare"), "{}", summary(&old));
        // The floor leaves the targets as they were.
        assert_eq!(
            report["targets"],
            targets(&measured(0.62, 0.69, json!(120.0)))
        );
        insta::assert_snapshot!(text);
    }

    /// A stand-in for cargo in `root`: it notes how it was called (in `root/called`: the cargo
    /// arguments, `HOLDFAST_BENCH_QUICK` and `HOLDFAST_BENCH_PROFILE`), then, as the relay bench does, writes the measured
    /// figures (`root/measured.json`) to `HOLDFAST_BENCH_OUT` and exits with `exit`.
    fn bench_stand_in(root: &Path, exit: u8) -> Command {
        holdfast_harness::stand_in::script(
            root,
            "cargo.sh",
            &format!(
                "echo \"$* quick=$HOLDFAST_BENCH_QUICK profile=$HOLDFAST_BENCH_PROFILE\" > called\n\
                 cp measured.json \"$HOLDFAST_BENCH_OUT\"\n\
                 exit {exit}\n"
            ),
        )
    }

    // i[verify bench.forward.shared-build+2]
    #[test]
    fn the_suite_s_packages_are_the_gateway_suite_s_selection_and_holdfast_forward() {
        // The gateway suite's own build, not a copy of its arguments: its stand-in cargo notes
        // them and fails, so the suite stops after building.
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let cargo =
            holdfast_harness::stand_in::script(root, "cargo.sh", "echo \"$*\" > built\nexit 1\n");
        crate::bench_gateway::run(cargo, root, &root.join("target"), 1)
            .expect_err("the stand-in's build fails");
        let built = std::fs::read_to_string(root.join("built")).expect("the gateway suite built");
        let words: Vec<&str> = built.split_whitespace().collect();
        let selection: Vec<&str> = words
            .windows(2)
            .filter(|w| w[0] == "-p")
            .flatten()
            .copied()
            .collect();
        assert!(
            !selection.is_empty(),
            "the gateway suite names its packages: {built}"
        );
        assert!(
            PACKAGES.starts_with(&selection),
            "{PACKAGES:?} starts with the gateway suite's {selection:?}"
        );
        assert_eq!(PACKAGES[selection.len()..], ["-p", "holdfast-forward"]);
    }

    // i[verify bench.forward+4]
    // i[verify bench.forward.shared-build+2]
    #[test]
    fn run_runs_the_relay_bench_and_writes_its_figures_with_the_verdicts() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let m = measured(0.62, 0.69, json!(120.0));
        std::fs::write(root.join("measured.json"), m.to_string()).expect("measured.json");
        let code = run(bench_stand_in(root, 0), root, &target, QUICK, None).expect("run");
        assert_eq!(code, ExitCode::SUCCESS);
        // Called in the checkout, for the relay bench, bounded.
        let called = std::fs::read_to_string(root.join("called")).expect("cargo was called");
        assert_eq!(
            called.trim(),
            "bench -p holdfast-gateway -p holdfast-forward --bench relay quick=1 profile=0"
        );
        let text = std::fs::read_to_string(target.join("bench/forward.json")).expect("report");
        let report: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(report["command"], "cargo xtask bench forward --quick");
        assert_eq!(report["measured"], m, "the bench's figures, as measured");
        assert_eq!(
            report["targets"],
            targets(&m),
            "and the verdict on each target"
        );
        assert!(report["machine"]["cpus"].as_u64() >= Some(1), "{report}");
        for load in ["loadavg_before", "loadavg_after"] {
            let fields = report["machine"][load]
                .as_str()
                .map(|l| l.split(' ').count());
            assert_eq!(fields, Some(3), "{load}: the 1, 5 and 15 minute averages");
        }
    }

    // i[verify bench.forward.profile]
    #[test]
    fn profile_runs_the_relay_bench_profiled_and_shows_each_sides_cost() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let mut m = measured(0.62, 0.69, json!(120.0));
        let row = |path: &str, side: &str, syscalls: Value, allocs: f64| {
            json!({
                "phase": "paced 64 B 50000/s", "path": path, "side": side,
                "syscalls_per_datagram": syscalls, "allocs_per_datagram": allocs,
                "voluntary_switches_per_datagram": 0.25,
                "involuntary_switches_per_datagram": 0.01,
                "cpu_us_per_datagram": 3.5,
            })
        };
        m["profile"] = json!([
            row("raw", "client", json!(0.5), 1.0),
            row("forward", "client", json!(1.25), 2.0),
            row("forward", "node", Value::Null, 3.0),
        ]);
        // A thread's CPU time that could not be read: not measured, not zero.
        m["profile"][2]["cpu_us_per_datagram"] = Value::Null;
        std::fs::write(root.join("measured.json"), m.to_string()).expect("measured.json");
        let mode = Mode {
            quick: true,
            profile: true,
        };
        // The last measurement's report, which a profiled run must leave as it was.
        std::fs::create_dir_all(target.join("bench")).expect("bench dir");
        std::fs::write(target.join("bench/forward.json"), "last run\n").expect("forward.json");
        let code = run(bench_stand_in(root, 0), root, &target, mode, None).expect("run");
        assert_eq!(code, ExitCode::SUCCESS);
        let called = std::fs::read_to_string(root.join("called")).expect("cargo was called");
        assert_eq!(
            called.trim(),
            "bench -p holdfast-gateway -p holdfast-forward --bench relay quick=1 profile=1"
        );
        assert_eq!(
            std::fs::read_to_string(target.join("bench/forward.json")).expect("forward.json"),
            "last run\n",
            "a profiled run's figures are not the measurement"
        );
        let text =
            std::fs::read_to_string(target.join("bench/forward-profile.json")).expect("report");
        let report: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            report["command"],
            "cargo xtask bench forward --quick --profile"
        );
        assert_eq!(report["measured"]["profile"], m["profile"]);
        // No target is judged on figures taken with each side on a runtime of its own.
        assert_eq!(report["targets"], NOT_JUDGED, "{report}");
        let printed = summary(&report);
        assert!(
            !printed.contains(" pass") && !printed.contains("MISS"),
            "{printed}"
        );
        assert!(printed.contains("targets not judged"), "{printed}");
        // The profile's table (the rest of the summary shows this machine's load); system calls
        // perf could not count are shown as such, not as zero.
        let shown = summary(&report)
            .lines()
            .skip_while(|l| !l.starts_with("  profile"))
            .take_while(|l| !l.starts_with("  target"))
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!(shown);
    }

    // i[verify bench.forward.tail]
    #[test]
    fn the_summary_shows_the_tail_at_each_share_raw_beside_forward_with_its_spread() {
        let mut m = measured(0.62, 0.69, json!(120.0));
        let spread = |base: f64, counted: u64| {
            json!({
                "runs_counted": counted,
                "p50_us": [base, base + 1.0, base + 2.0],
                "p99_us": [base * 2.0, base * 2.0 + 5.0, base * 2.0 + 30.0],
                "p999_us": [base * 4.0, base * 4.0 + 10.0, base * 4.0 + 200.0],
            })
        };
        let rates: Vec<Value> = [0.25, 0.5, 0.75]
            .iter()
            .map(|share| {
                json!({
                    "share": share,
                    "rate_datagrams_per_sec": 400000.0 * share,
                    "spread": {
                        "raw": spread(40.0 * (1.0 + share), 5),
                        // A run without echoes is not counted.
                        "forward": spread(70.0 * (1.0 + share), if *share == 0.75 { 4 } else { 5 }),
                    },
                })
            })
            .collect();
        m["latency_tail"] = json!({"bytes": 64, "runs": 5, "rates": rates});
        let report = json!({
            "machine": {"loadavg_before": "1.50 1.20 1.00", "loadavg_after": "1.90 1.30 1.05"},
            "targets": targets(&m),
            "measured": m,
        });
        let shown = summary(&report)
            .lines()
            .skip_while(|l| !l.starts_with("  round trips at fixed shares"))
            .take_while(|l| !l.starts_with("  target"))
            .collect::<Vec<_>>()
            .join("\n");
        insta::assert_snapshot!(shown);
    }

    fn iperf_report(forward_lost: u64) -> Value {
        let at = |mbit_per_sec, lost| iperf::Session {
            mbit_per_sec,
            lost,
            total: 100_000,
            // Another figure than `lost`, so that a summary showing one for the other is seen.
            rcvbuf_errors: Some(lost / 2 + 1),
        };
        iperf::report(
            &[
                (200, Some(at(199.5, 0)), Some(at(199.4, 0))),
                (1000, Some(at(990.0, 350)), Some(at(975.0, forward_lost))),
            ],
            2,
        )
    }

    // i[verify bench.forward.iperf]
    #[test]
    fn run_with_iperf_reports_its_sessions_beside_the_relay_figures_with_the_loss_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let m = measured(0.62, 0.69, json!(120.0));
        std::fs::write(root.join("measured.json"), m.to_string()).expect("measured.json");
        let sessions = iperf_report(701);
        let measure = || Ok(sessions.clone());
        let code = run(
            bench_stand_in(root, 0),
            root,
            &target,
            QUICK,
            Some(&measure),
        )
        .expect("run");
        assert_eq!(code, ExitCode::SUCCESS);
        let text = std::fs::read_to_string(target.join("bench/forward.json")).expect("report");
        let report: Value = serde_json::from_str(&text).expect("json");
        assert_eq!(
            report["command"],
            "cargo xtask bench forward --quick --iperf"
        );
        assert_eq!(report["measured"]["iperf"], sessions);
        assert_eq!(report["measured"]["throughput_64"], m["throughput_64"]);
        let t = &report["targets"][IPERF_TARGET];
        assert_eq!(
            t["met"], false,
            "7.01 per mille is more than twice 3.5: {t}"
        );
        assert_eq!(
            targets(&json!({"iperf": iperf_report(700)}))[IPERF_TARGET]["met"],
            true,
            "exactly twice"
        );
        // Without --iperf there is no such target.
        assert!(targets(&m).get(IPERF_TARGET).is_none());
    }

    // i[verify bench.forward.iperf]
    // i[verify bench.forward.iperf.rcvbuf]
    #[test]
    fn the_summary_shows_iperf_sessions_and_their_verdict() {
        let mut m = measured(0.62, 0.69, json!(120.0));
        m["iperf"] = iperf_report(701);
        let report = json!({
            "machine": {"loadavg_before": "1.50 1.20 1.00", "loadavg_after": "1.90 1.30 1.05"},
            "targets": targets(&m),
            "measured": m,
        });
        insta::assert_snapshot!(summary(&report));
    }

    // i[verify bench.forward.iperf]
    #[test]
    fn a_failed_iperf_run_fails_the_bench() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let m = measured(0.62, 0.69, json!(120.0));
        std::fs::write(root.join("measured.json"), m.to_string()).expect("measured.json");
        let measure = || Err(anyhow::anyhow!("--iperf needs iperf 2"));
        let err = run(
            bench_stand_in(root, 0),
            root,
            &target,
            QUICK,
            Some(&measure),
        )
        .expect_err("no iperf");
        assert!(err.to_string().contains("needs iperf 2"), "{err}");
    }

    // i[verify bench.forward+4]
    #[test]
    fn run_fails_when_the_relay_bench_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let m = measured(0.62, 0.69, json!(120.0));
        std::fs::write(root.join("measured.json"), m.to_string()).expect("measured.json");
        let err = run(
            bench_stand_in(root, 1),
            root,
            &target,
            Mode::default(),
            None,
        )
        .expect_err("a failed bench");
        assert!(err.to_string().contains("--bench relay failed"), "{err}");
        let called = std::fs::read_to_string(root.join("called")).expect("cargo was called");
        assert_eq!(
            called.trim(),
            "bench -p holdfast-gateway -p holdfast-forward --bench relay quick=0 profile=0"
        );
        // Figures a failed bench left behind are not reported as a run.
        let text = std::fs::read_to_string(target.join("bench/forward.json")).expect("figures");
        assert_eq!(serde_json::from_str::<Value>(&text).expect("json"), m);
    }
}
