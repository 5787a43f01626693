//! The relay bench's arithmetic (`benches/relay/figures.rs`): the bench itself runs without a
//! test harness, so its pure functions are tested here.

#[path = "../benches/relay/figures.rs"]
mod figures;

use std::collections::HashMap;
use std::time::Duration;

use figures::{Counts, PerDatagram, Spread, per_datagram, percentile_us, perf_syscalls, spread};

// i[verify bench.forward.tail]
#[test]
fn percentiles_are_nearest_rank_of_the_sorted_round_trips_in_microseconds() {
    let rtts: Vec<Duration> = (1..=1000).map(Duration::from_micros).collect();
    assert_eq!(percentile_us(&rtts, 0.5), 501.0);
    assert_eq!(percentile_us(&rtts, 0.99), 990.0);
    assert_eq!(percentile_us(&rtts, 0.999), 999.0);
    assert_eq!(percentile_us(&rtts, 1.0), 1000.0);
    assert_eq!(percentile_us(&rtts[..1], 0.999), 1.0);
    assert!(percentile_us(&[], 0.5).is_nan(), "no echo, no percentile");
}

// i[verify bench.forward.tail]
#[test]
fn the_spread_is_min_median_max_over_the_runs_with_echoes() {
    // Five runs, one without echoes: four counted, the median of an even count between the
    // middle two.
    let runs = [
        [40.0, 90.0, 300.0],
        [f64::NAN; 3],
        [42.0, 80.0, 200.0],
        [41.0, 100.0, 250.0],
        [45.0, 95.0, 900.0],
    ];
    assert_eq!(
        spread(&runs),
        Spread {
            us: [
                [40.0, 41.5, 45.0],
                [80.0, 92.5, 100.0],
                [200.0, 275.0, 900.0]
            ],
            counted: 4,
        }
    );
    // An odd count: the middle run.
    let s = spread(&runs[2..]);
    assert_eq!(s.us[1], [80.0, 95.0, 100.0]);
    assert_eq!(s.counted, 3);
    let none = spread(&[[f64::NAN; 3]]);
    assert_eq!(none.counted, 0);
    assert!(none.us.iter().flatten().all(|x| x.is_nan()));
}

fn counts(allocs: u64, cpu_ns: u64, voluntary: u64, involuntary: u64) -> Counts {
    Counts {
        allocs,
        cpu_ns: Some(cpu_ns),
        voluntary: Some(voluntary),
        involuntary: Some(involuntary),
    }
}

// i[verify bench.forward.profile]
#[test]
fn each_sides_cost_is_what_it_spent_over_the_datagrams_echoed() {
    let start = [
        counts(10, 1_000, 5, 1),
        counts(0, 0, 0, 0),
        counts(100, 0, 0, 0),
    ];
    let mut end = [
        counts(2_010, 4_001_000, 1_005, 201),
        counts(4_000, 2_000_000, 500, 0),
        counts(100, 0, 0, 0),
    ];
    // The node's CPU time could not be read at the end: not measured, not zero.
    end[2].cpu_ns = None;
    let rows = per_datagram(&start, &end, &[Some(3_000), None, Some(0)], 1_000);
    assert_eq!(
        rows,
        [
            PerDatagram {
                side: "app",
                syscalls: Some(3.0),
                allocs: 2.0,
                voluntary: Some(1.0),
                involuntary: Some(0.2),
                cpu_us: Some(4.0),
            },
            PerDatagram {
                side: "client",
                syscalls: None,
                allocs: 4.0,
                voluntary: Some(0.5),
                involuntary: Some(0.0),
                cpu_us: Some(2.0),
            },
            PerDatagram {
                side: "node",
                syscalls: Some(0.0),
                allocs: 0.0,
                voluntary: Some(0.0),
                involuntary: Some(0.0),
                cpu_us: None,
            },
        ]
    );
}

/// `perf stat -x ';' --per-thread -e raw_syscalls:sys_enter -p PID`'s output after a SIGINT
/// (it exits 130 then), as perf 6 writes it.
const PERF_OUTPUT: &str = "# started on Sun Dec  6 11:02:03 2026

python3-22608;20004;;raw_syscalls:sys_enter;1002345678;100.00;;
python3-22562;<not counted>;;raw_syscalls:sys_enter;0;0.00;;
app-22610;1500;;raw_syscalls:sys_enter;1002345678;100.00;;
client-22611;700;;raw_syscalls:sys_enter;1002345678;100.00;;
client-22612;300;;raw_syscalls:sys_enter;1002345678;100.00;;
node-22613;<not counted>;;raw_syscalls:sys_enter;0;0.00;;
node-22614;900;;raw_syscalls:sys_enter;1002345678;100.00;;
";

/// The same with a thread whose counter perf could not open.
const PERF_UNSUPPORTED: &str = "# started on Sun Dec  6 11:02:03 2026

app-22610;1500;;raw_syscalls:sys_enter;1002345678;100.00;;
client-22611;<not supported>;;raw_syscalls:sys_enter;0;0.00;;
client-22612;300;;raw_syscalls:sys_enter;1002345678;100.00;;
";

// i[verify bench.forward.profile]
#[test]
fn perf_output_is_summed_by_side_and_a_thread_that_never_ran_made_no_system_call() {
    let sides: HashMap<i32, u8> = [
        (22608, 0),
        (22610, 0),
        (22611, 1),
        (22612, 1),
        (22613, 2),
        (22614, 2),
    ]
    .into();
    assert_eq!(
        perf_syscalls(Some(PERF_OUTPUT), &sides),
        [Some(21_504), Some(1_000), Some(900)],
        "<not counted>: the counter never ran, as a thread asleep all along"
    );
    // A counter perf could not open leaves its side unknown.
    assert_eq!(
        perf_syscalls(Some(PERF_UNSUPPORTED), &sides),
        [Some(1_500), None, None]
    );
    // A thread of no side (22562) does not count; a side without a line is not measured.
    let only_app: HashMap<i32, u8> = [(22608, 0)].into();
    assert_eq!(
        perf_syscalls(Some(PERF_OUTPUT), &only_app),
        [Some(20_004), None, None]
    );
    // perf absent, or failed without counting (no permission to trace): nothing measured.
    assert_eq!(perf_syscalls(None, &sides), [None; 3]);
    let failed = "Error:\nNo permission to enable raw_syscalls:sys_enter event.\n";
    assert_eq!(perf_syscalls(Some(failed), &sides), [None; 3]);
}
