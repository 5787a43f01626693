//! The page itself: plain HTML with its style inline, no script and no external resource, so it
//! renders the same from a CI artifact, a mail attachment or a file on disk. Every number the page
//! shows also sits in a `data-*` attribute, so a test can compare them with `spec-check --json`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::spec_check::report::Outcome;
use crate::trace::Everything;
use crate::trace::rule_report::RuleReport;

use super::CrateCoverage;

const STYLE: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#1b1f24}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.25em .7em;text-align:left;vertical-align:top}
th{border-bottom:1px solid #bbb}.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{display:inline-block;width:12em;height:.8em;background:#eee;border-radius:3px;overflow:hidden;vertical-align:middle}
.bar span{display:block;height:100%;background:#2da44e}
.rule{border:1px solid #ddd;border-radius:6px;padding:.6em 1em;margin:.8em 0}
.rule.warn{border-color:#d4a72c;background:#fff8e1}.rule.bad{border-color:#cf222e;background:#ffebe9}
.marker{font-family:ui-monospace,monospace;font-weight:600}.muted{color:#57606a}
code,.site{font-family:ui-monospace,monospace;font-size:.92em}
.closed,.verified,.passed{color:#1a7f37}.open,.not-verified{color:#9a6700}.regressed,.failed{color:#cf222e}
.problems li{font-family:ui-monospace,monospace;font-size:.9em}
";

/// Escapes text for HTML content and attributes.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_esc(&mut out, text);
    out
}

/// Appends `text` to `out`, escaped as [`esc`] does, without a `String` of its own: the page
/// escapes every rule's text and sites, and the characters to escape are rare.
fn push_esc(out: &mut String, text: &str) {
    let mut from = 0;
    // The characters escaped are ASCII, so a byte index is always a character boundary.
    for (at, byte) in text.bytes().enumerate() {
        let entity = match byte {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            _ => continue,
        };
        out.push_str(&text[from..at]);
        out.push_str(entity);
        from = at + 1;
    }
    out.push_str(&text[from..]);
}

/// A link to `file:line` (as the report's sites write them) under `base`.
fn site_link(base: &str, at: &str) -> String {
    let mut out = String::new();
    push_site_link(&mut out, base, at);
    out
}

/// Appends [`site_link`]'s link to `out`.
fn push_site_link(out: &mut String, base: &str, at: &str) {
    let (file, line) = at.rsplit_once(':').unwrap_or((at, ""));
    out.push_str("<a class=\"site\" href=\"");
    push_esc(out, base);
    push_esc(out, file);
    if !line.is_empty() {
        out.push_str("#L");
        out.push_str(line);
    }
    out.push_str("\">");
    push_esc(out, at);
    out.push_str("</a>");
}

fn bar(part: usize, whole: usize) -> String {
    let percent = (part * 100).checked_div(whole).unwrap_or(0);
    format!(
        "<span class=\"bar\" title=\"{part} of {whole}\"><span style=\"width:{percent}%\"></span></span>"
    )
}

/// Whether every current verifying test of the rule was skipped (so nothing proved it).
fn only_skipped(rule: &RuleReport) -> bool {
    let current: Vec<_> = rule.verifies.iter().filter(|v| !v.stale).collect();
    !current.is_empty()
        && current.iter().all(|v| {
            v.result
                .as_deref()
                .is_some_and(|r| r.starts_with("skipped"))
        })
}

/// The spec debt: per crate, then every entry, largest first.
// i[impl spec-report.debt]
fn spec_debt(out: &mut String, debt: &[super::debt::Debt], base: &str) {
    let lines: usize = debt.iter().map(|d| d.size).sum();
    let _ = writeln!(
        out,
        "<h2>Spec debt</h2>\n<p class=\"muted\" id=\"debt\" data-count=\"{}\" data-lines=\"{lines}\">\
         Code of the crates' <code>src/</code> no rule's <code>impl</code> covers: public items, \
         functions of {} lines or more, and surviving mutants, largest first.</p>",
        debt.len(),
        super::debt::LONG_FN
    );
    if debt.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<table id=\"debt-crates\"><tr><th>crate</th><th class=\"num\">entries</th><th class=\"num\">lines</th></tr>"
    );
    for (name, count, size) in super::debt::per_crate(debt) {
        let _ = writeln!(
            out,
            "<tr class=\"debt-crate\" data-crate=\"{}\"><td>{}</td><td class=\"num\">{count}</td><td class=\"num\">{size}</td></tr>",
            esc(&name),
            esc(&name)
        );
    }
    let _ = writeln!(out, "</table>");
    let _ = writeln!(
        out,
        "<table id=\"debt-list\"><tr><th class=\"num\">lines</th><th>crate</th><th>where</th><th>item</th><th>why</th></tr>"
    );
    for entry in debt {
        let _ = writeln!(
            out,
            "<tr class=\"debt\"><td class=\"num\">{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td></tr>",
            entry.size,
            esc(&entry.krate),
            site_link(base, &format!("{}:{}", entry.file, entry.line)),
            esc(&entry.item),
            entry.why.name()
        );
    }
    let _ = writeln!(out, "</table>");
}

/// The whole page.
// i[impl spec-report.content]
pub fn page(
    outcome: &Outcome,
    everything: &Everything,
    crates: &BTreeMap<String, CrateCoverage>,
    debt: &[super::debt::Debt],
    base: &str,
) -> String {
    let test_backed = outcome.mode.test_backed;
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>holdfast spec report</title><style>{STYLE}</style></head><body>\n"
    );
    let _ = writeln!(out, "<h1>Spec report</h1>");
    let _ = writeln!(
        out,
        "<p class=\"muted\">root <code>{}</code> · {}</p>",
        esc(&outcome.root),
        esc(everything
            .results
            .as_deref()
            .unwrap_or("annotations only — no test results read"))
    );
    let problems = outcome.problems.len();
    let _ = writeln!(
        out,
        "<p id=\"verdict\" data-problems=\"{problems}\">{}</p>",
        if problems == 0 {
            "<strong class=\"verified\">spec-check: no problems</strong>".to_owned()
        } else {
            format!(
                "<strong class=\"regressed\">spec-check: {problems} problem{}</strong>",
                if problems == 1 { "" } else { "s" }
            )
        }
    );

    // Per spec.
    let _ = writeln!(
        out,
        "<h2>Coverage per spec</h2>\n<table id=\"specs\"><tr><th>spec</th><th class=\"num\">rules</th><th>implemented</th><th>verified</th>{}<th class=\"num\">stale</th><th class=\"num\">errors</th></tr>",
        if test_backed { "<th>tested</th>" } else { "" }
    );
    for spec in &outcome.specs {
        let _ = write!(
            out,
            "<tr class=\"spec\" data-spec=\"{}\" data-total=\"{}\" data-implemented=\"{}\" data-verified=\"{}\" data-stale=\"{}\" data-errors=\"{}\"{}>",
            esc(&spec.name),
            spec.total,
            spec.implemented,
            spec.verified,
            spec.stale,
            spec.errors,
            spec.tested
                .map(|t| format!(" data-tested=\"{t}\""))
                .unwrap_or_default()
        );
        let _ = write!(
            out,
            "<td>{}</td><td class=\"num\">{}</td><td>{} {}</td><td>{} {}</td>",
            esc(&spec.name),
            spec.total,
            bar(spec.implemented, spec.total),
            spec.implemented,
            bar(spec.verified, spec.total),
            spec.verified
        );
        if test_backed {
            let tested = spec.tested.unwrap_or(0);
            let _ = write!(out, "<td>{} {tested}</td>", bar(tested, spec.total));
        }
        let _ = writeln!(
            out,
            "<td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            spec.stale, spec.errors
        );
    }
    let _ = writeln!(out, "</table>");

    // Per crate.
    let _ = writeln!(
        out,
        "<h2>Coverage per crate</h2>\n<p class=\"muted\">Rules implemented in each crate, and how many of them are verified{}.</p>\n<table id=\"crates\"><tr><th>crate</th><th class=\"num\">rules</th><th>verified</th>{}</tr>",
        if test_backed { " and tested" } else { "" },
        if test_backed { "<th>tested</th>" } else { "" }
    );
    for (name, coverage) in crates {
        let _ = write!(
            out,
            "<tr class=\"crate\" data-crate=\"{}\" data-rules=\"{}\" data-verified=\"{}\" data-tested=\"{}\"><td>{}</td><td class=\"num\">{}</td><td>{} {}</td>",
            esc(name),
            coverage.rules,
            coverage.verified,
            coverage.tested,
            esc(name),
            coverage.rules,
            bar(coverage.verified, coverage.rules),
            coverage.verified
        );
        if test_backed {
            let _ = write!(
                out,
                "<td>{} {}</td>",
                bar(coverage.tested, coverage.rules),
                coverage.tested
            );
        }
        let _ = writeln!(out, "</tr>");
    }
    let _ = writeln!(out, "</table>");

    spec_debt(&mut out, debt, base);

    // Problems.
    if !outcome.problems.is_empty() {
        let _ = writeln!(out, "<h2>Problems</h2>\n<ul class=\"problems\">");
        for problem in &outcome.problems {
            let _ = writeln!(out, "<li>{}</li>", esc(&problem.to_string()));
        }
        let _ = writeln!(out, "</ul>");
    }

    // Highlights.
    let skipped: Vec<&RuleReport> = everything
        .rules
        .iter()
        .filter(|r| only_skipped(r))
        .collect();
    let _ = writeln!(
        out,
        "<h2>Verified only by skipped tests</h2>\n<p id=\"skipped-only\" data-count=\"{}\">{}</p>",
        skipped.len(),
        if skipped.is_empty() {
            if test_backed {
                "None.".to_owned()
            } else {
                "Not known without test results.".to_owned()
            }
        } else {
            skipped
                .iter()
                .map(|r| {
                    format!(
                        "<a class=\"marker\" href=\"#{}\">{}</a>",
                        esc(&r.rule),
                        esc(&r.rule)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    );

    let surviving: Vec<&RuleReport> = everything.rules.iter().filter(|r| r.survivors).collect();
    let _ = writeln!(
        out,
        "<h2>Rules with surviving mutants</h2>\n<p id=\"survivors\" data-count=\"{}\">{}</p>",
        surviving.len(),
        if surviving.is_empty() {
            "None recorded (<code>cargo xtask prove</code> writes target/prove/).".to_owned()
        } else {
            surviving
                .iter()
                .map(|r| {
                    format!(
                        "<a class=\"marker\" href=\"#{}\">{}</a>",
                        esc(&r.rule),
                        esc(&r.rule)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    );

    // Findings.
    let _ = writeln!(
        out,
        "<h2>Findings</h2>\n<table id=\"findings\"><tr><th>finding</th><th>verdict</th><th>why</th></tr>"
    );
    for (finding, verdict, reasons) in &everything.findings {
        let class = verdict.replace(' ', "-");
        let _ = writeln!(
            out,
            "<tr class=\"finding\" data-finding=\"{}\" data-verdict=\"{}\"><td><strong>{}</strong> {}</td><td class=\"{class}\">{}</td><td>{}</td></tr>",
            esc(&finding.id),
            esc(verdict),
            esc(&finding.id),
            esc(&finding.title),
            esc(verdict),
            reasons
                .iter()
                .map(|r| esc(r))
                .collect::<Vec<_>>()
                .join("<br>")
        );
    }
    let _ = writeln!(out, "</table>");

    // Rules: each one's block is written apart from the others', on the parse pool (at ten
    // times this workspace they are most of a 9 MB page), then joined in spec order.
    let _ = writeln!(out, "<h2>Rules</h2>");
    let blocks = crate::spec_check::pool::map(everything.rules.iter().collect(), |rule| {
        rule_block(rule, base)
    });
    for block in blocks {
        out.push_str(&block);
    }
    out.push_str("</body></html>\n");
    out
}

/// One rule's block: its text, sites, the findings it closes, why it is not verified, its proof.
// i[impl spec-report.content]
fn rule_block(rule: &RuleReport, base: &str) -> String {
    let mut out = String::with_capacity(1024);
    let class = match rule.verdict {
        _ if rule.survivors => "rule bad",
        // A verified rule has a current test that passed, so it is never skipped-only.
        "verified" => "rule",
        "regressed" => "rule bad",
        _ => "rule warn",
    };
    let marker = esc(&rule.rule);
    let verdict = esc(rule.verdict);
    let _ = writeln!(
        out,
        "<div class=\"{class}\" id=\"{marker}\" data-rule=\"{marker}\" data-verdict=\"{verdict}\">"
    );
    let _ = write!(out, "<div><span class=\"marker\">{marker}</span> ");
    push_site_link(&mut out, base, &rule.defined_at);
    let _ = writeln!(
        out,
        " <span class=\"{}\">{verdict}</span></div>",
        rule.verdict.replace(' ', "-")
    );
    out.push_str("<p>");
    push_esc(&mut out, &rule.text);
    out.push_str("</p>\n<table>\n");
    for site in &rule.impls {
        out.push_str("<tr><td>impl</td><td>");
        push_site_link(&mut out, base, &site.at);
        if site.stale {
            out.push_str(" (stale)");
        }
        out.push_str("</td><td><code>");
        push_esc(&mut out, site.item.as_deref().unwrap_or(""));
        out.push_str("</code></td><td></td></tr>\n");
    }
    for site in &rule.verifies {
        let result = site.result.as_deref().unwrap_or("");
        let class = result.split_whitespace().next().unwrap_or("");
        out.push_str("<tr><td>verify</td><td>");
        push_site_link(&mut out, base, &site.at);
        if site.stale {
            out.push_str(" (stale)");
        }
        out.push_str("</td><td><code>");
        push_esc(
            &mut out,
            site.test.as_deref().unwrap_or("(no test function follows)"),
        );
        out.push_str("</code></td><td class=\"");
        push_esc(&mut out, class);
        out.push_str("\">");
        push_esc(&mut out, result);
        out.push_str("</td></tr>\n");
    }
    out.push_str("</table>\n");
    if !rule.closes.is_empty() {
        let closes: Vec<String> = rule
            .closes
            .iter()
            .map(|f| format!("{} ({})", esc(&f.id), esc(&f.title)))
            .collect();
        let _ = writeln!(out, "<p class=\"muted\">closes {}</p>", closes.join(", "));
    }
    for reason in &rule.reasons {
        out.push_str("<p class=\"muted\">");
        push_esc(&mut out, reason);
        out.push_str("</p>\n");
    }
    let _ = writeln!(
        out,
        "<p class=\"muted\">proof: {}</p>",
        esc(&rule
            .proof
            .as_deref()
            .map_or("not run".to_owned(), |p| p.replacen(
                &format!("{}: ", rule.rule),
                "",
                1
            )))
        .replace('\n', "<br>")
    );
    out.push_str("</div>\n");
    out
}
