//! What the orchestrator reads about a child from /proc, and the descriptor limit in force (raised,
//! when it must be, by `cargo xtask bench gateway` before it starts this example).

/// The soft RLIMIT_NOFILE now.
pub fn nofile() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map(|(soft, _)| soft)
        .unwrap_or(0)
}

/// VmRSS of `pid` in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64, String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))
}

/// User plus system CPU time `pid` has used, in milliseconds.
pub fn cpu_ms(pid: u32) -> Result<u64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line (1-based), so 11 and 12 (0-based) after it.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let hz = clock_ticks();
    Ok((ticks(11) + ticks(12)) * 1000 / hz)
}

/// /proc reports CPU time in USER_HZ ticks, which Linux fixes at 100 per second.
fn clock_ticks() -> u64 {
    100
}
