//! Human tables for the CLI, from the admin API's JSON.
//!
//! Everything in that JSON may come from a peer or a container (fault messages, log tails,
//! client addresses, names), so every piece of it is [`escape`]d before it reaches the terminal:
//! the only line breaks and control characters in the output are the layout's own.

use std::fmt::Write as _;

use serde_json::Value;

// i[impl node.cli.escape]
/// Whether `c` must not reach a terminal raw: a control character (C0, DEL, C1: escape
/// sequences, bell, carriage return, line breaks), a bidirectional-text override or isolate
/// (which reorders what is shown), or a Unicode line or paragraph separator.
fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
                | '\u{2028}'
                | '\u{2029}'
        )
}

// i[impl node.cli.escape]
/// `text` on one line, with every character [`must_escape`] says may not reach the terminal
/// written visibly: `\n`, `\r`, `\t`, `\x1b` (C0 and DEL), `\u{9b}` (the rest). A backslash is
/// left as it is (paths stay readable), so escaping twice changes nothing.
pub fn escape(text: &str) -> String {
    if !text.chars().any(must_escape) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if must_escape(c) && u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if must_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

// i[impl node.cli.output]
// i[impl node.cli.escape]
/// A plain table: a header row and left-aligned columns two spaces apart. Every cell is
/// [`escape`]d, so a cell is always one line.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| escape(cell)).collect())
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            // Every cell is padded to its column; the last one's padding goes with the trim.
            let width = widths.get(i).copied().unwrap_or(0);
            out.push_str(cell);
            out.push_str(&" ".repeat(width.saturating_sub(cell.chars().count()) + 2));
        }
        out.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| escape(h)).collect());
    for row in &rows {
        out.push_str(&line(row.clone()));
    }
    out
}

// i[impl node.cli.escape]
/// A JSON value as text for a table or a line, [`escape`]d.
fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => escape(s),
        other => other.to_string(),
    }
}

fn health(v: &Value) -> String {
    match v.get("reason") {
        Some(reason) => format!("{} ({})", s(&v["state"]), s(reason)),
        None => s(&v["state"]),
    }
}

/// `holdfast modules`.
pub fn modules(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let sup = &m["supervisor"];
            let supervisor = match sup["state"].as_str() {
                Some("waiting") => format!(
                    "waiting {:.0}s",
                    sup["next_start_in_secs"].as_f64().unwrap_or(0.0)
                ),
                Some("running") if sup["confirmed"] == Value::Bool(false) => {
                    "running (unconfirmed)".to_owned()
                }
                other => other.unwrap_or("-").to_owned(),
            };
            vec![
                s(&m["name"]),
                supervisor,
                health(&m["health"]),
                s(&m["starts"]),
                s(&m["restarts"]),
                s(&m["failures"]),
                if m["crash_loop"] == Value::Bool(true) {
                    "yes".into()
                } else {
                    "no".into()
                },
                s(&m["last_error"]),
            ]
        })
        .collect();
    table(
        &[
            "MODULE",
            "SUPERVISOR",
            "HEALTH",
            "STARTS",
            "RESTARTS",
            "FAILURES",
            "CRASH-LOOP",
            "LAST ERROR",
        ],
        &rows,
    )
}

/// `holdfast workloads`.
pub fn workloads(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| {
            vec![
                s(&w["name"]),
                s(&w["image"]),
                with_health(run_state(&w["run"]), &w["run"]["health"]),
                s(&w["image_state"]),
                s(&w["detail"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no workloads configured\n".to_owned();
    }
    table(
        &["WORKLOAD", "IMAGE", "STATE", "IMAGE STATE", "DETAIL"],
        &rows,
    )
}

// r[impl node.workload.health]
/// The state's phrase with the container's health after it, as `docker ps` writes it.
fn with_health(phrase: String, health: &Value) -> String {
    match health.as_str() {
        Some("starting") => format!("{phrase} (health: starting)"),
        Some(h) => format!("{phrase} ({h})"),
        None => phrase,
    }
}

// i[impl node.workloads.state+2]
/// What the workload module says of one workload, in a phrase.
fn run_state(run: &Value) -> String {
    let secs = |key: &str| span(run[key].as_u64().unwrap_or(0));
    let exit = || match run["exit_code"].as_i64() {
        Some(code) => format!(", exit code {code}"),
        None => String::new(),
    };
    let failures = run["failures"].as_u64().unwrap_or(0);
    match run["state"].as_str() {
        None => "-".to_owned(),
        Some("running") => format!("running for {}", secs("running_for_secs")),
        Some("starting") => format!("starting (attempt {})", s(&run["attempt"])),
        Some("restarting") => format!(
            "restarting in {} after attempt {failures}{}",
            secs("in_secs"),
            exit()
        ),
        Some("crash_looping") => format!(
            "crash-looping: restarting in {} after attempt {failures}{}",
            secs("in_secs"),
            exit()
        ),
        Some("waiting_for_image") => "waiting for image".to_owned(),
        Some("waiting_for_dependencies") => {
            let names: Vec<String> = run["waiting_on"]
                .as_array()
                .into_iter()
                .flatten()
                .map(s)
                .collect();
            format!("waiting for dependencies: {}", names.join(", "))
        }
        Some("stopped_by_policy") => format!("stopped by policy{}", exit()),
        Some(other) => other.replace('_', " "),
    }
}

// i[impl node.cli.escape]
/// `holdfast faults`. A message of several lines (a crash loop's log tail) has its first line
/// in the table and the rest in a block under it, a line each, indented: its line structure
/// kept, everything else in each line [`escape`]d.
pub fn faults(v: &Value) -> String {
    let mut blocks = String::new();
    let rows: Vec<Vec<String>> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let message = f["message"].as_str().map(str::lines);
            let first = match message.clone() {
                Some(mut lines) => escape(lines.next().unwrap_or_default()),
                None => s(&f["message"]),
            };
            let rest: Vec<&str> = message.into_iter().flatten().skip(1).collect();
            if !rest.is_empty() {
                let _ = writeln!(
                    blocks,
                    "\n{} {}:",
                    s(&f["subject"]["module"]),
                    s(&f["subject"]["name"])
                );
                for line in rest {
                    let _ = writeln!(blocks, "    {}", escape(line));
                }
            }
            vec![
                s(&f["subject"]["module"]),
                s(&f["subject"]["name"]),
                s(&f["kind"]),
                s(&f["failures"]),
                first,
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no open faults\n".to_owned();
    }
    table(&["MODULE", "SUBJECT", "KIND", "FAILURES", "MESSAGE"], &rows) + &blocks
}

/// `holdfast status`.
pub fn status(v: &Value) -> String {
    let gateway = if v["gateway"].is_object() {
        gateway_line(&v["gateway"])
    } else {
        String::new()
    };
    // r[impl node.reload.generation]
    let config = if v["config"].is_object() {
        format!(
            "  config generation {} (loaded {})",
            s(&v["config"]["generation"]),
            s(&v["config"]["loaded_at"])
        )
    } else {
        String::new()
    };
    format!(
        "node {}  phase {}  up {}s{config}\n{gateway}\n{}\n{}\n{}",
        s(&v["node_id"]),
        s(&v["phase"]),
        s(&v["uptime_secs"]),
        modules(&v["modules"]),
        workloads(&v["workloads"]),
        faults(&v["faults"]),
    )
}

// i[impl node.gateway.status]
/// The gateway in one line: replica, address, state, connections, message counters, drops.
pub fn gateway_line(g: &Value) -> String {
    let state = if g["draining"] == Value::Bool(true) {
        "draining"
    } else if g["ready"] == Value::Bool(true) {
        "ready"
    } else {
        "not ready"
    };
    format!(
        "gateway {} at {}  {state}  connections {} ({} authenticated)  messages in {} out {}  slow-consumer drops {}\n",
        s(&g["replica"]["id"]),
        s(&g["replica"]["address"]),
        s(&g["connections"]),
        s(&g["authenticated"]),
        s(&g["messages_in"]),
        s(&g["messages_out"]),
        s(&g["slow_consumer_drops"]),
    )
}

// i[impl node.gateway.cli+2]
/// `holdfast gateway`: the status line, and the last drain when there was one.
pub fn gateway(g: &Value) -> String {
    let mut out = gateway_line(g);
    let d = &g["last_drain"];
    if d.is_object() {
        out.push_str(&format!(
            "last drain: close code {}, {} connections, {} close frames sent, {} closed in time, {} force-closed, took {} ms of {} ms\n",
            s(&d["code"]),
            s(&d["connections"]),
            s(&d["close_frames_sent"]),
            s(&d["closed_in_time"]),
            s(&d["force_closed"]),
            s(&d["took_ms"]),
            s(&d["cap_ms"]),
        ));
        let steps: Vec<String> = d["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|st| format!("{} {} ms", s(&st["step"]), s(&st["took_ms"])))
            .collect();
        if !steps.is_empty() {
            out.push_str(&format!("  steps: {}\n", steps.join(", ")));
        }
        for problem in d["problems"].as_array().into_iter().flatten() {
            out.push_str(&format!("  problem: {}\n", s(problem)));
        }
    }
    out
}

// i[impl node.cli.reload]
/// `holdfast reload`: the generation now, each module's change, and what needs a restart.
pub fn reload(v: &Value) -> String {
    let mut out = format!(
        "reloaded: config generation {} in {} ms\n",
        s(&v["generation"]),
        s(&v["took_ms"])
    );
    let rows: Vec<Vec<String>> = v["modules"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, change)| vec![escape(name), s(change)])
        .collect();
    if !rows.is_empty() {
        out.push_str(&table(&["MODULE", "CHANGE"], &rows));
    }
    for (name, error) in v["failed"].as_object().into_iter().flatten() {
        out.push_str(&format!(
            "{} failed to start: {} (its supervisor retries it)\n",
            escape(name),
            escape(&s(error))
        ));
    }
    for section in v["needs_restart"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "[{}] changed: not applied, needs a restart of the node\n",
            s(section)
        ));
    }
    out
}

/// `holdfast gateway push`: what the push reached (here, and whether it went to the other
/// replicas).
pub fn delivery(to: &str, v: &Value) -> String {
    let forwarded = match v["forwarded"].as_str() {
        Some("published") => "; handed to the other replicas",
        Some("failed") => "; NOT handed to the other replicas (the bus failed)",
        _ => "",
    };
    format!(
        "pushed to {}: queued for {} connections, {} slow consumers disconnected{forwarded}\n",
        escape(to),
        s(&v["queued"]),
        s(&v["slow_consumers"]),
    )
}

/// "3d 4h", "12m 5s", "40s": a wait an operator reads at a glance.
pub fn span(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// The not-after cell of `holdfast certs`: the date and the days left, or that it has passed.
// i[impl node.certs.expiry]
fn not_after(c: &Value) -> String {
    let date = s(&c["not_after_text"]);
    match c["expires_in_days"].as_i64() {
        Some(days) if days < 0 => format!("{date} (expired)"),
        Some(days) => format!("{date} ({days} d)"),
        None => date,
    }
}

// i[impl node.certs.names]
/// `holdfast certs`.
pub fn certs(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let wait = c["next_in_secs"].as_u64().map(span);
            let next = match (c["state"].as_str(), wait) {
                (Some("valid"), Some(w)) => format!("renew in {w}"),
                (Some("due"), _) => "now".to_owned(),
                (Some("issuing"), _) => "in flight".to_owned(),
                (Some("blocked"), Some(w)) => {
                    format!(
                        "block ends in {w}, or: holdfast certs retry {}",
                        s(&c["hostname"])
                    )
                }
                (_, Some(w)) => format!("attempt in {w}"),
                (_, None) => "-".to_owned(),
            };
            let also: Vec<String> = c["also"].as_array().into_iter().flatten().map(s).collect();
            let hostname = if also.is_empty() {
                s(&c["hostname"])
            } else {
                format!("{} (+ {})", s(&c["hostname"]), also.join(", "))
            };
            vec![
                hostname,
                s(&c["source"]),
                s(&c["state"]),
                not_after(c),
                next,
                s(&c["failures"]),
                s(&c["last_error"]),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no hostnames configured\n".to_owned();
    }
    table(
        &[
            "HOSTNAME",
            "SOURCE",
            "STATE",
            "NOT AFTER",
            "NEXT",
            "FAILURES",
            "LAST ERROR",
        ],
        &rows,
    )
}

// i[impl node.forward.list]
/// `holdfast forwards`.
pub fn forwards(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["forwards"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| {
            let st = &f["stats"];
            let d = &st["dropped"];
            let dropped: u64 = [
                "oversize",
                "malformed",
                "unknown_forward",
                "flow_limit",
                "error",
            ]
            .iter()
            .map(|k| d[*k].as_u64().unwrap_or(0))
            .sum();
            vec![
                format!("{}/{}", s(&f["connection"]), s(&f["forward"])),
                s(&f["client"]),
                s(&f["target"]),
                s(&f["flows"]),
                format!(
                    "{} ({} B)",
                    s(&st["to_target_datagrams"]),
                    s(&st["to_target_bytes"])
                ),
                format!(
                    "{} ({} B)",
                    s(&st["from_target_datagrams"]),
                    s(&st["from_target_bytes"])
                ),
                dropped.to_string(),
                s(&st["transient_errors"]),
                s(&st["last_error"]),
            ]
        })
        .collect();
    let head = format!(
        "listening on {}  pin {}\n",
        s(&v["listen"]),
        s(&v["fingerprint"])
    );
    if rows.is_empty() {
        return head + "no active forwards\n";
    }
    head + &table(
        &[
            "FORWARD",
            "CLIENT",
            "TARGET",
            "FLOWS",
            "TO TARGET",
            "FROM TARGET",
            "DROPPED",
            "TRANSIENT",
            "LAST ERROR",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify node.certs.names]
    #[test]
    fn a_certificate_of_several_names_is_one_row_naming_them_all() {
        let v = serde_json::json!([
            {
                "hostname": "app.example", "also": ["www.app.example", "api.app.example"],
                "source": "acme", "state": "due", "failures": 0,
            },
            { "hostname": "b.example", "source": "local", "state": "due", "failures": 0 },
        ]);
        let out = certs(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 3, "{out}");
        assert!(
            lines[1].starts_with("app.example (+ www.app.example, api.app.example)"),
            "{out}"
        );
        assert!(lines[2].starts_with("b.example "), "{out}");
    }
}
