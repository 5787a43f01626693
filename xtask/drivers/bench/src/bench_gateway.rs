//! `cargo xtask bench gateway [--connections N]` — the gateway's benchmark (issue 11).
//!
//! Builds holdfast-gateway's `gateway_bench` example in release and runs it: a holdfast gateway
//! and a bare tokio-tungstenite broadcast server, each in its own process, with a fleet of N
//! clients (a process each) on each. It measures resident memory per idle authenticated
//! connection, broadcast frames/s delivered (gateway beside the bare server, alternating trials in
//! the same run), and two drains (all clients reading; a tenth never reading). This module turns
//! the example's raw `RESULT` line into the summary: the figures, the targets from the issue and
//! whether this run met them. A missed target is reported, not failed (a shared 2-core machine is
//! noisy); a run that could not measure at all is an error.

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// Resident memory per idle authenticated connection, at most (bytes).
const BYTES_PER_CONNECTION_TARGET: f64 = 10.0 * 1024.0;
/// The gateway's broadcast rate as a share of the bare server's, at least.
const BROADCAST_RATIO_TARGET: f64 = 0.9;
/// Reading clients that receive the drain's close frame, at least.
const CLOSE_SHARE_TARGET: f64 = 0.999;
/// The drain's cap (the gateway's default), milliseconds.
const DRAIN_CAP_MS: f64 = 5000.0;

/// Builds the example with `cargo` (`$CARGO`; a stand-in in tests) in `root`, runs it from
/// `target`, and reports.
// i[impl bench.gateway+2]
pub fn run(
    mut cargo: Command,
    root: &Path,
    target: &Path,
    connections: usize,
) -> anyhow::Result<ExitCode> {
    let nofile = raise_nofile(connections)?;
    eprintln!("bench: RLIMIT_NOFILE {nofile}");
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("bench: building holdfast-gateway's gateway_bench example (release)");
    let status = cargo
        .current_dir(root)
        .args(["build", "--release", "-p", "holdfast-gateway"])
        .args(["--example", "gateway_bench"])
        .status()
        .context("running cargo build --example gateway_bench")?;
    if !status.success() {
        bail!("cargo build --example gateway_bench failed: {status}");
    }
    let exe = target
        .join("release")
        .join("examples")
        .join("gateway_bench");
    eprintln!("bench: gateway, {connections} connections per fleet");
    let output = Command::new(&exe)
        .args(["run", "--connections", &connections.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    if !output.status.success() {
        bail!("{} failed: {}", exe.display(), output.status);
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .context("no RESULT line from gateway_bench")?;
    let raw: Value = serde_json::from_str(line).context("parsing gateway_bench's RESULT line")?;
    let machine = json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "loadavg_before": load_before.trim(),
    });
    let command = format!("cargo xtask bench gateway --connections {connections}");
    let summary = summarize(&raw, &command, machine);
    let out_dir = target.join("bench");
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let out = out_dir.join("gateway.json");
    std::fs::write(&out, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("writing {}", out.display()))?;
    print!("{}", table(&summary));
    println!("  -> {}", out.display());
    Ok(ExitCode::SUCCESS)
}

/// Descriptors each of the bench's processes needs beyond its N connections.
const SPARE_DESCRIPTORS: u64 = 64;

/// Raises the descriptor limit to what `connections` need in each process (the bench's
/// processes inherit it), or says what the hard limit allows and how to raise it.
// i[impl bench.gateway.limits]
fn raise_nofile(connections: usize) -> anyhow::Result<u64> {
    Ok(holdfast_harness::limits::raise_nofile(
        connections as u64 + SPARE_DESCRIPTORS,
        "--connections",
        |hard| hard.saturating_sub(SPARE_DESCRIPTORS),
    )?)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[mid]
    } else {
        (xs[mid - 1] + xs[mid]) / 2.0
    }
}

/// Median delivered rate and server CPU per frame over one server's broadcast trials.
fn broadcast_figures(server: &Value) -> Value {
    let trials = server["trials"].as_array().cloned().unwrap_or_default();
    let rates = trials.iter().map(|t| num(&t["frames_per_sec"])).collect();
    let cpu_ns: Vec<f64> = trials
        .iter()
        .map(|t| num(&t["server_cpu_ms"]) * 1e6 / num(&t["frames"]))
        .collect();
    let push_ms = trials.iter().map(|t| num(&t["push_ms"])).collect();
    json!({
        "median_frames_per_sec": median(rates),
        "median_server_cpu_ns_per_frame": median(cpu_ns),
        "median_push_ms": median(push_ms),
        "trials": trials.len(),
        "slow_consumers": server["slow_consumers"],
        "frames_short": server["frames_short"],
    })
}

/// One drain arm: the share of reading clients that received 1012, and the drain's times.
fn drain_figures(arm: &Value) -> Value {
    let reading = num(&arm["clients"]["reading"]);
    let closed = arm["clients"]["codes"]["1012"].as_u64().unwrap_or(0);
    let share = if reading > 0.0 {
        closed as f64 / reading
    } else {
        f64::NAN
    };
    json!({
        "arm": arm["arm"],
        "reading_clients": arm["clients"]["reading"],
        "silent_clients": arm["clients"]["silent"],
        "close_1012_received": closed,
        "close_share": share,
        "codes": arm["clients"]["codes"],
        "drain_ms": arm["report"]["took_ms"],
        "wall_ms": arm["wall_ms"],
        "cap_ms": arm["report"]["cap_ms"],
        "force_closed": arm["report"]["force_closed"],
        "closed_in_time": arm["report"]["closed_in_time"],
    })
}

/// The summary written to `target/bench/gateway.json`: the figures, the targets and whether this
/// run met them, and the example's raw result.
pub fn summarize(raw: &Value, command: &str, machine: Value) -> Value {
    let n = num(&raw["connections"]);
    let per_conn = |server: &str| {
        let m = &raw["memory"][server];
        (num(&m["rss_idle"]) - num(&m["rss_before"])) / n
    };
    let memory = json!({
        "gateway_bytes_per_idle_connection": per_conn("gateway"),
        "bare_bytes_per_idle_connection": per_conn("bare"),
    });
    let gateway = broadcast_figures(&raw["broadcast"]["gateway"]);
    let bare = broadcast_figures(&raw["broadcast"]["bare"]);
    let ratio = num(&gateway["median_frames_per_sec"]) / num(&bare["median_frames_per_sec"]);
    let drains: Vec<Value> = raw["drain"]
        .as_array()
        .map(|a| a.iter().map(drain_figures).collect())
        .unwrap_or_default();
    let bytes = num(&memory["gateway_bytes_per_idle_connection"]);
    let mut targets = serde_json::Map::new();
    targets.insert(
        "bytes_per_idle_connection".into(),
        json!({"target_max": BYTES_PER_CONNECTION_TARGET, "measured": bytes, "met": bytes <= BYTES_PER_CONNECTION_TARGET}),
    );
    targets.insert(
        "broadcast_vs_bare".into(),
        json!({"target_min": BROADCAST_RATIO_TARGET, "measured": ratio, "met": ratio >= BROADCAST_RATIO_TARGET}),
    );
    for d in &drains {
        let arm = d["arm"].as_str().unwrap_or("?");
        let share = num(&d["close_share"]);
        let ms = num(&d["drain_ms"]);
        targets.insert(
            format!("close_share_{arm}"),
            json!({"target_min": CLOSE_SHARE_TARGET, "measured": share, "met": share >= CLOSE_SHARE_TARGET}),
        );
        targets.insert(
            format!("drain_ms_{arm}"),
            json!({"target_max": DRAIN_CAP_MS, "measured": ms, "met": ms <= DRAIN_CAP_MS}),
        );
    }
    json!({
        "command": command,
        "machine": machine,
        "connections": raw["connections"],
        "memory": memory,
        "broadcast": {
            "gateway": gateway,
            "bare": bare,
            "gateway_vs_bare": ratio,
            "burst": raw["broadcast"]["burst"],
            "payload_bytes": raw["broadcast"]["payload_bytes"],
        },
        "drain": drains,
        "targets": targets,
        "raw": raw,
    })
}

/// The table `bench gateway` prints.
pub fn table(s: &Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let m = &s["memory"];
    let b = &s["broadcast"];
    let _ = writeln!(
        out,
        "holdfast-gateway bench: {} connections per fleet ({})",
        s["connections"],
        s["command"].as_str().unwrap_or_default()
    );
    let _ = writeln!(out, "  {:<44} {:>14} {:>14}", "", "gateway", "bare");
    let _ = writeln!(
        out,
        "  {:<44} {:>14.0} {:>14.0}",
        "resident bytes per idle connection",
        num(&m["gateway_bytes_per_idle_connection"]),
        num(&m["bare_bytes_per_idle_connection"])
    );
    let _ = writeln!(
        out,
        "  {:<44} {:>14.0} {:>14.0}",
        "broadcast frames/s delivered (median)",
        num(&b["gateway"]["median_frames_per_sec"]),
        num(&b["bare"]["median_frames_per_sec"])
    );
    let _ = writeln!(
        out,
        "  {:<44} {:>14.0} {:>14.0}",
        "server CPU ns per frame (median)",
        num(&b["gateway"]["median_server_cpu_ns_per_frame"]),
        num(&b["bare"]["median_server_cpu_ns_per_frame"])
    );
    let _ = writeln!(
        out,
        "  {:<44} {:>14.0} {:>14.0}",
        "ms per trial spent queueing pushes (median)",
        num(&b["gateway"]["median_push_ms"]),
        num(&b["bare"]["median_push_ms"])
    );
    let _ = writeln!(
        out,
        "  {:<44} {:>14.3}",
        "gateway / bare broadcast rate",
        num(&b["gateway_vs_bare"])
    );
    for d in s["drain"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  drain, {:<12} 1012 to {}/{} reading clients ({:.2} %), {} silent; {} ms (cap {} ms), {} force-closed",
            d["arm"].as_str().unwrap_or("?"),
            d["close_1012_received"],
            d["reading_clients"],
            100.0 * num(&d["close_share"]),
            d["silent_clients"],
            d["drain_ms"],
            d["cap_ms"],
            d["force_closed"],
        );
    }
    for (name, t) in s["targets"].as_object().into_iter().flatten() {
        let bound = if t.get("target_max").is_some() {
            format!("<= {}", t["target_max"])
        } else {
            format!(">= {}", t["target_min"])
        };
        let _ = writeln!(
            out,
            "  target {name:<34} {bound:<10} measured {:<12.4} {}",
            num(&t["measured"]),
            if t["met"] == true { "met" } else { "MISSED" }
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A raw result as the example prints it (two trials per server, two drain arms).
    fn sample() -> Value {
        json!({
            "connections": 1000,
            "nofile": 20000,
            "per_source": 200,
            "send_queue": 64,
            "read_buffer": 4096,
            "setup_secs": 0.5,
            "memory": {
                "gateway": {"rss_before": 4_000_000, "rss_idle": 14_240_000},
                "bare": {"rss_before": 3_000_000, "rss_idle": 10_000_000},
            },
            "broadcast": {
                "burst": 32, "rounds": 50, "payload_bytes": 61,
                "gateway": {"connections": 1000, "slow_consumers": 0, "frames_short": 0, "trials": [
                    {"frames": 1_600_000, "secs": 2.0, "frames_per_sec": 800_000.0, "server_cpu_ms": 1600, "push_ms": 500, "complete": true},
                    {"frames": 1_600_000, "secs": 1.6, "frames_per_sec": 1_000_000.0, "server_cpu_ms": 1200, "push_ms": 300, "complete": true},
                ]},
                "bare": {"connections": 1000, "slow_consumers": 0, "frames_short": 0, "trials": [
                    {"frames": 1_600_000, "secs": 1.6, "frames_per_sec": 1_000_000.0, "server_cpu_ms": 1000, "push_ms": 200, "complete": true},
                    {"frames": 1_600_000, "secs": 1.6, "frames_per_sec": 1_000_000.0, "server_cpu_ms": 1000, "push_ms": 200, "complete": true},
                ]},
            },
            "drain": [
                {"arm": "all_reading", "wall_ms": 130,
                 "clients": {"reading": 1000, "silent": 0, "ended": 1000, "codes": {"1012": 1000}},
                 "report": {"took_ms": 120, "cap_ms": 5000, "force_closed": 0, "closed_in_time": 1000}},
                {"arm": "silent_tenth", "wall_ms": 3520,
                 "clients": {"reading": 900, "silent": 100, "ended": 900, "codes": {"1012": 898, "none": 2}},
                 "report": {"took_ms": 3510, "cap_ms": 5000, "force_closed": 100, "closed_in_time": 900}},
            ],
            "wall_secs": 20.0,
        })
    }

    // i[verify bench.gateway+2]
    #[test]
    fn the_summary_derives_each_figure_and_target_from_the_raw_result() {
        let s = summarize(
            &sample(),
            "cargo xtask bench gateway --connections 1000",
            json!({"cpus": 2, "loadavg_before": "0.00 0.00 0.00 1/1 1"}),
        );
        // (14.24 MB - 4 MB) / 1000 connections.
        assert_eq!(
            s["memory"]["gateway_bytes_per_idle_connection"],
            json!(10240.0)
        );
        // Median of 0.8 M and 1 M frames/s against 1 M.
        assert_eq!(s["broadcast"]["gateway_vs_bare"], json!(0.9));
        assert_eq!(
            s["targets"]["close_share_silent_tenth"]["met"],
            json!(false)
        );
        assert_eq!(s["targets"]["drain_ms_silent_tenth"]["met"], json!(true));
        let mut shape = s.clone();
        shape["raw"] = json!("(the example's RESULT line)");
        insta::assert_json_snapshot!("bench_gateway_summary", shape);
        insta::assert_snapshot!("bench_gateway_table", table(&s));
    }

    /// A checkout at `root` with stand-ins for cargo and the example: cargo notes its arguments
    /// (`root/built`), "builds" the example into `root/target` and exits with `build_exit`; the
    /// example notes its arguments (`root/ran`), prints [`sample`] on its `RESULT` line after a
    /// line of progress, and exits with `run_exit`.
    fn stand_ins(root: &Path, build_exit: u8, run_exit: u8) -> Command {
        std::fs::write(
            root.join("example"),
            format!(
                "#!/bin/sh\necho \"$*\" > '{}'\necho 'trial 1 of 2'\necho 'RESULT {}'\nexit {run_exit}\n",
                root.join("ran").display(),
                sample()
            ),
        )
        .expect("the example's stand-in");
        // Copied into place by another process (cp), so no descriptor this process holds on it
        // can make running it fail with ETXTBSY.
        holdfast_harness::stand_in::script(
            root,
            "cargo.sh",
            &format!(
                "echo \"$*\" > built\n\
                 mkdir -p target/release/examples\n\
                 cp example target/release/examples/gateway_bench\n\
                 chmod +x target/release/examples/gateway_bench\n\
                 exit {build_exit}\n"
            ),
        )
    }

    // i[verify bench.gateway+2]
    #[test]
    fn run_builds_and_runs_the_example_and_writes_the_summary() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let code = run(stand_ins(root, 0, 0), root, &target, 1000).expect("run");
        assert_eq!(code, ExitCode::SUCCESS);
        let read = |name: &str| std::fs::read_to_string(root.join(name)).expect(name);
        assert_eq!(
            read("built").trim(),
            "build --release -p holdfast-gateway --example gateway_bench"
        );
        assert_eq!(read("ran").trim(), "run --connections 1000");
        let text = std::fs::read_to_string(target.join("bench/gateway.json")).expect("summary");
        let written: Value = serde_json::from_str(&text).expect("json");
        let machine = &written["machine"];
        assert!(machine["cpus"].as_u64() >= Some(1), "{machine}");
        assert!(machine["loadavg_before"].is_string(), "{machine}");
        // The summary of what the example printed (the machine's figures aside).
        let command = "cargo xtask bench gateway --connections 1000";
        assert_eq!(written, summarize(&sample(), command, machine.clone()));
    }

    // i[verify bench.gateway.limits]
    #[test]
    fn run_fails_before_building_when_the_descriptor_limit_cannot_be_raised() {
        use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
        if hard == RLIM_INFINITY || holdfast_harness::limits::may_raise_hard() {
            eprintln!("SKIP: this process may raise RLIMIT_NOFILE's hard limit ({hard})");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let connections = usize::try_from(hard).expect("hard limit") + 1;
        let err = run(stand_ins(root, 0, 0), root, &target, connections).expect_err("past hard");
        let text = err.to_string();
        assert!(text.contains(&format!("hard limit is {hard}")), "{text}");
        assert!(text.contains("CAP_SYS_RESOURCE"), "{text}");
        assert!(text.contains("ulimit -Hn"), "{text}");
        assert!(
            text.contains(&format!("--connections is at most {}", hard - 64)),
            "{text}"
        );
        assert!(!root.join("built").exists(), "nothing is built");
    }

    // i[verify bench.gateway+2]
    #[test]
    fn run_fails_when_the_build_or_the_example_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (root, target) = (dir.path(), dir.path().join("target"));
        let err = run(stand_ins(root, 1, 0), root, &target, 1000).expect_err("a failed build");
        assert!(err.to_string().contains("gateway_bench failed"), "{err}");
        assert!(!root.join("ran").exists(), "the example is not run");
        // A failed example fails the run even after printing a RESULT line.
        let err = run(stand_ins(root, 0, 1), root, &target, 1000).expect_err("a failed example");
        assert!(err.to_string().contains("gateway_bench failed"), "{err}");
        assert!(root.join("ran").exists(), "the example ran");
        assert!(
            !target.join("bench/gateway.json").exists(),
            "nothing measured"
        );
    }
}
