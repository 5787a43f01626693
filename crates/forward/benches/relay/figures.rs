//! The relay bench's arithmetic, apart from its sockets and runtimes so that it can be tested:
//! `tests/bench_figures.rs` includes this file (the bench, `harness = false`, has no tests of its
//! own). Percentiles of round trips, the tail's run-to-run spread, the profile's division per
//! datagram echoed, and the reading of `perf stat`'s per-thread counts.

use std::collections::HashMap;
use std::time::Duration;

/// The sides of the path, in the order the profile's table shows them.
pub const SIDES: [&str; 3] = ["app", "client", "node"];

/// The `p` quantile (0..=1) of `sorted` round trips, nearest rank, in µs; NaN without any.
pub fn percentile_us(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    // From whole nanoseconds, so a whole number of µs stays whole.
    sorted[i.min(sorted.len() - 1)].as_nanos() as f64 / 1e3
}

/// The spread of p50, p99 and p99.9 over several runs of one path at one rate.
#[derive(Debug, PartialEq)]
pub struct Spread {
    /// Per percentile (p50, p99, p99.9): [min, median, max] over the runs counted; NaN when none.
    pub us: [[f64; 3]; 3],
    /// The runs counted: those with echoes (a run without any has no percentiles).
    pub counted: usize,
}

/// Each run's p50, p99 and p99.9 → their spread. The median of an even count is the mean of
/// the two middle runs.
pub fn spread(runs: &[[f64; 3]]) -> Spread {
    let counted: Vec<&[f64; 3]> = runs
        .iter()
        .filter(|r| r.iter().all(|x| x.is_finite()))
        .collect();
    let us = [0, 1, 2].map(|p| {
        let mut v: Vec<f64> = counted.iter().map(|r| r[p]).collect();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => [f64::NAN; 3],
            n if n % 2 == 0 => [v[0], (v[n / 2 - 1] + v[n / 2]) / 2.0, v[n - 1]],
            n => [v[0], v[n / 2], v[n - 1]],
        }
    });
    Spread {
        us,
        counted: counted.len(),
    }
}

/// One side's counters at one moment: allocations, CPU ns, voluntary and involuntary context
/// switches. `None`: a thread's could not be read, so the side's sum is unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    pub allocs: u64,
    pub cpu_ns: Option<u64>,
    pub voluntary: Option<u64>,
    pub involuntary: Option<u64>,
}

/// One side's cost per datagram echoed over a phase; `None`: not measured.
#[derive(Debug, PartialEq)]
pub struct PerDatagram {
    pub side: &'static str,
    pub syscalls: Option<f64>,
    pub allocs: f64,
    pub voluntary: Option<f64>,
    pub involuntary: Option<f64>,
    pub cpu_us: Option<f64>,
}

/// What each side spent between `start` and `end` (and in `syscalls`, counted over the same
/// span), divided by the datagrams `echoed` in it (those received back, not those sent).
pub fn per_datagram(
    start: &[Counts; SIDES.len()],
    end: &[Counts; SIDES.len()],
    syscalls: &[Option<u64>; SIDES.len()],
    echoed: u64,
) -> Vec<PerDatagram> {
    let n = echoed.max(1) as f64;
    let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?) as f64 / n);
    SIDES
        .iter()
        .enumerate()
        .map(|(i, side)| {
            let (a, b) = (start[i], end[i]);
            PerDatagram {
                side,
                syscalls: syscalls[i].map(|s| s as f64 / n),
                allocs: b.allocs.saturating_sub(a.allocs) as f64 / n,
                voluntary: delta(a.voluntary, b.voluntary),
                involuntary: delta(a.involuntary, b.involuntary),
                cpu_us: delta(a.cpu_ns, b.cpu_ns).map(|ns| ns / 1e3),
            }
        })
        .collect()
}

/// Each side's system calls from `perf stat -x ';' --per-thread -e raw_syscalls:sys_enter`'s
/// output (`None` when perf did not run or wrote nothing), by the side of each thread in `sides`
/// (tid → side). Lines are `comm-tid;count;unit;event;…`; `#` lines are perf's header.
/// `<not counted>` is a counter that never ran (perf prints it when the time running is zero):
/// the thread was not scheduled in the span, so it made no system call. A side none of whose
/// threads has a line, or with a count perf could not take (`<not supported>`), is not measured.
pub fn perf_syscalls(output: Option<&str>, sides: &HashMap<i32, u8>) -> [Option<u64>; SIDES.len()] {
    let mut per_side = [Some(0u64); SIDES.len()];
    let mut seen = [false; SIDES.len()];
    let Some(text) = output else {
        return [None; SIDES.len()];
    };
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let mut fields = line.split(';');
        let (Some(thread), Some(count), _, Some(event)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if event != "raw_syscalls:sys_enter" {
            continue;
        }
        let Some(&side) = thread
            .rsplit_once('-')
            .and_then(|(_, t)| t.trim().parse::<i32>().ok())
            .and_then(|tid| sides.get(&tid))
        else {
            continue;
        };
        let side = usize::from(side);
        let Some(slot) = per_side.get_mut(side) else {
            continue;
        };
        seen[side] = true;
        *slot = match count.trim() {
            "<not counted>" => *slot,
            count => match count.parse::<u64>() {
                Ok(count) => slot.map(|sum| sum + count),
                Err(_) => None,
            },
        };
    }
    std::array::from_fn(|i| per_side[i].filter(|_| seen[i]))
}
