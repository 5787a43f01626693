//! holdfast-attack: the adversarial suite.
//!
//! It starts a real `holdfast run` with every listener on loopback (admin API, HTTP-01 responder,
//! forward QUIC, gateway WebSocket), then runs bounded floods against one edge at a time, each
//! from loopback addresses of its own, 127.0.0.2 and up (`plan`), while a real client on
//! 127.0.0.1 probes every edge (`probe`) and the node's descriptors and memory are sampled from
//! /proc and its runtime tasks from `/metrics` (`node`). After each flood it waits for the node to
//! settle back. The run is judged against the budgets of `docs/security.md` (`verdict`) and
//! written to `report.json` and `report.md` (`report`); it exits 1 when a budget broke, else 2
//! when it could not measure (the report is still written when only the runtime tasks could not
//! be read or a flood could not be launched). `cargo xtask attack` builds the node and runs it.
//!
//! Every flood stops by itself: its connections are counted, bounded and closed at its deadline.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;

mod answer;
mod flood;
mod latency;
mod node;
mod plan;
mod probe;
mod report;
mod verdict;

use plan::{Scale, floods};
use report::Verdict;
use verdict::{Budgets, FloodResult, Outcome, Resource};

/// Floods a real node from loopback and judges it against docs/security.md's budgets.
#[derive(Debug, Parser)]
#[command(name = "holdfast-attack")]
struct Args {
    /// The `holdfast` binary to attack.
    #[arg(long)]
    node_bin: PathBuf,
    /// The full floods, or the bounded ones CI runs.
    #[arg(long, value_enum, default_value = "full")]
    scale: ScaleArg,
    /// Seconds each flood runs once open (default: 20 at full scale, 5 for ci).
    #[arg(long)]
    duration: Option<u64>,
    /// Run only these floods (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Where the reports go.
    #[arg(long, default_value = "target/attack")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ScaleArg {
    Full,
    Ci,
}

/// How often each edge is probed during a flood.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// How often the node's process is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// How long the node may take to return to its baseline after a flood.
const SETTLE: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("holdfast-attack: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(Verdict::Held) => ExitCode::SUCCESS,
        Ok(Verdict::Broken) => ExitCode::from(1),
        Ok(Verdict::Unmeasured) => ExitCode::from(2),
        Err(e) => {
            eprintln!("holdfast-attack: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs the suite and writes its report; how it ended.
async fn run(args: Args) -> anyhow::Result<Verdict> {
    raise_descriptor_limit();
    let (scale, default_secs) = match args.scale {
        ScaleArg::Full => (Scale::Full, 20),
        ScaleArg::Ci => (Scale::Ci, 5),
    };
    let duration = Duration::from_secs(args.duration.unwrap_or(default_secs));
    let mut plan = floods(scale, duration);
    for name in &args.only {
        anyhow::ensure!(
            plan.iter().any(|f| f.name == name),
            "no flood named {name:?}; the floods are {}",
            plan::names().join(", ")
        );
    }
    if !args.only.is_empty() {
        plan.retain(|f| args.only.iter().any(|n| n == f.name));
    }
    let dir = tempfile::tempdir().context("a directory for the node")?;
    let mut node = node::Node::start(&args.node_bin, dir.path())?;
    eprintln!(
        "attack: node {} ready (pid {}, log {})",
        args.node_bin.display(),
        node.pid(),
        node.log().display()
    );
    let prober = Arc::new(probe::Prober::new(node.edges.clone())?);
    // The baseline is a node in service: every edge has served a real client for a while, so
    // what a first exchange allocates once (buffers, TLS sessions, worker stacks) is not
    // mistaken for what a flood left behind.
    warm_up(prober.clone()).await;
    let budgets = Budgets::default();
    let mut results = Vec::new();
    for (i, flood) in plan.iter().enumerate() {
        eprintln!(
            "attack: [{}/{}] {} on {} for {:?} from {} to {}",
            i + 1,
            plan.len(),
            flood.name,
            flood.edge.name(),
            flood.duration,
            flood.first_source,
            flood.source(usize::from(flood.sources).saturating_sub(1))
        );
        let pid = node.pid();
        let admin = node.edges.admin;
        let baseline = settled_sample(pid, admin).await?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let sampler = tokio::spawn(peak(pid, admin, stop_rx.clone()));
        let watcher = tokio::spawn(probe::watch(prober.clone(), PROBE_EVERY, stop_rx));
        let deadline = tokio::time::Instant::now() + duration;
        let attackers = flood::run(flood, &node.edges, deadline).await;
        let _ = stop_tx.send(true);
        let peak = sampler
            .await
            .unwrap_or((baseline.0, baseline.1, baseline.2.ok()));
        let samples = watcher.await.unwrap_or_default();
        let after = settle(pid, admin, baseline, &budgets).await?;
        let latency: BTreeMap<_, _> = samples
            .iter()
            .map(|(edge, s)| (*edge, latency::summarise(s)))
            .collect();
        eprintln!(
            "attack:   attackers {attackers:?}; fds {} → {} → {}; rss {} → {} → {} KiB; \
             tasks {:?} → {:?} → {:?}",
            baseline.0, peak.0, after.0, baseline.1, peak.1, after.1, baseline.2, peak.2, after.2
        );
        results.push(FloodResult {
            name: flood.name.to_owned(),
            edge: flood.edge,
            sources: flood.sources,
            ends_all: flood.attack.ends_all(),
            authenticated: flood.attack.authenticated(),
            unvalidated: matches!(flood.attack, plan::Attack::QuicUnvalidated { .. }),
            attackers,
            latency,
            fds: Resource {
                baseline: baseline.0,
                peak: peak.0.max(baseline.0),
                after: after.0,
            },
            rss_kib: Resource {
                baseline: baseline.1,
                peak: peak.1.max(baseline.1),
                after: after.1,
            },
            // Read before and after, or not measured at all (an older node, or no answer).
            tasks: match (baseline.2, after.2) {
                (Ok(before), Ok(after)) => Some(Resource {
                    baseline: before,
                    peak: peak.2.unwrap_or(before).max(before),
                    after,
                }),
                _ => None,
            },
            tasks_unread: baseline.2.err().or(after.2.err()),
        });
    }
    let outcome = Outcome {
        floods: results,
        node_alive: node.alive(),
        panics: node.panics(),
    };
    let violations = verdict::judge(&outcome, &budgets);
    let report = report::Report {
        command: format!(
            "holdfast-attack --scale {} --duration {} (node {})",
            match scale {
                Scale::Full => "full",
                Scale::Ci => "ci",
            },
            duration.as_secs(),
            args.node_bin.display()
        ),
        plan,
        budgets,
        outcome,
        violations,
    };
    std::fs::create_dir_all(&args.out)?;
    std::fs::write(args.out.join("report.json"), report.json())?;
    let md = report.markdown();
    std::fs::write(args.out.join("report.md"), &md)?;
    println!("{md}");
    eprintln!("attack: reports in {}", args.out.display());
    let unlaunched = report.outcome.unlaunched();
    if !unlaunched.is_empty() {
        eprintln!(
            "holdfast-attack: could not launch {} (no attempt was made: the attackers' client \
             config, the captured Initials or their source addresses failed)",
            unlaunched.join(", ")
        );
    }
    for f in report.outcome.floods.iter().filter(|f| f.tasks.is_none()) {
        eprintln!(
            "holdfast-attack: could not measure the node's runtime tasks during {} ({}); the \
             report has every other figure",
            f.name,
            f.tasks_unread.map_or("not read", verdict::TasksUnread::why)
        );
    }
    Ok(report.verdict())
}

/// How long every edge is probed before the first baseline.
const WARM_UP: Duration = Duration::from_secs(3);

async fn warm_up(prober: Arc<probe::Prober>) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(probe::watch(prober, PROBE_EVERY, stop_rx));
    tokio::time::sleep(WARM_UP).await;
    let _ = stop_tx.send(true);
    let _ = watcher.await;
}

/// The attackers hold thousands of sockets: the soft descriptor limit goes up to the hard one.
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource as Limit, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Limit::RLIMIT_NOFILE) {
        let _ = setrlimit(Limit::RLIMIT_NOFILE, hard, hard);
    }
}

/// The node's descriptors, resident memory (KiB) and runtime tasks at one moment; for the tasks,
/// why not when they could not be read.
type Sample = (u64, u64, Result<u64, verdict::TasksUnread>);

/// The median of three samples 200 ms apart, so a probe's own socket does not set the baseline;
/// an error when the descriptors or memory could not be read at all (the suite could not
/// measure: never a zero that would pass or break a budget by itself). Tasks never read are
/// none: the run goes on, shows them as not measured and exits 2.
async fn settled_sample(pid: u32, admin: std::net::SocketAddr) -> anyhow::Result<Sample> {
    let mut fds = Vec::new();
    let mut rss = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..3 {
        if let Some((f, r)) = node::sample(pid) {
            fds.push(f);
            rss.push(r);
        }
        tasks.push(node::tasks(admin).await);
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    let read = |values: Vec<u64>, what: &str| {
        median(values).with_context(|| {
            format!("could not read the node's {what} (pid {pid}, admin {admin}) in 3 tries")
        })
    };
    Ok((
        read(fds, "open descriptors")?,
        read(rss, "resident memory")?,
        tasks_of(tasks),
    ))
}

/// The median of the task counts read; when none was, why: the series absent if `/metrics`
/// answered once without it, else no answer.
fn tasks_of(reads: Vec<Result<u64, verdict::TasksUnread>>) -> Result<u64, verdict::TasksUnread> {
    let absent = reads.contains(&Err(verdict::TasksUnread::Absent));
    median(reads.into_iter().filter_map(Result::ok).collect()).ok_or(if absent {
        verdict::TasksUnread::Absent
    } else {
        verdict::TasksUnread::NoAnswer
    })
}

fn median(mut values: Vec<u64>) -> Option<u64> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

/// The highest descriptors, memory and tasks (none when never read) seen until `stop`.
async fn peak(
    pid: u32,
    admin: std::net::SocketAddr,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> (u64, u64, Option<u64>) {
    let mut high = (0, 0, None::<u64>);
    loop {
        if let Some((f, r)) = node::sample(pid) {
            high = (high.0.max(f), high.1.max(r), high.2);
        }
        if let Ok(t) = node::tasks(admin).await {
            high.2 = Some(high.2.map_or(t, |h| h.max(t)));
        }
        tokio::select! {
            () = tokio::time::sleep(SAMPLE_EVERY) => {}
            _ = stop.changed() => return high,
        }
    }
}

/// Waits (up to `SETTLE`) until the node is back within the settle budget; the last sample.
async fn settle(
    pid: u32,
    admin: std::net::SocketAddr,
    baseline: Sample,
    budgets: &Budgets,
) -> anyhow::Result<Sample> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut last = baseline;
    let (fds, rss) = budgets.settle_limits(baseline.0, baseline.1);
    let tasks = baseline.2.map(|t| budgets.settle_tasks_limit(t)).ok();
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        last = settled_sample(pid, admin).await?;
        // Tasks not measured do not hold the settle up.
        let tasks_back = match (last.2, tasks) {
            (Ok(now), Some(limit)) => now <= limit,
            _ => true,
        };
        if last.0 <= fds && last.1 <= rss && tasks_back {
            break;
        }
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_never_read_has_no_median_rather_than_zero() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![30, 10, 20]), Some(20));
    }

    #[test]
    fn tasks_never_read_say_whether_metrics_answered_without_them_or_not_at_all() {
        use verdict::TasksUnread::{Absent, NoAnswer};
        assert_eq!(tasks_of(vec![Err(NoAnswer), Ok(7), Err(Absent)]), Ok(7));
        assert_eq!(tasks_of(vec![Err(NoAnswer), Err(Absent)]), Err(Absent));
        assert_eq!(tasks_of(vec![Err(NoAnswer), Err(NoAnswer)]), Err(NoAnswer));
        assert_eq!(tasks_of(vec![]), Err(NoAnswer));
    }
}
