//! Certificates of several names through the issuer: one attempt for all names, and the
//! decision, history, block and fault per certificate (keyed by its first name), never per name.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use holdfast_issuance::cert::testing::leaf_for;
use holdfast_issuance::hook::Hook;
use holdfast_issuance::issuer::{Hostname, Issuer, Outputs};
use holdfast_issuance::source::BoxFuture;
use holdfast_issuance::{
    CertStore, CertifiedPair, DeployConfig, ErrorClass, HistoryDb, IssuePolicy, IssueReason,
    ManualWallClock, Source, SourceError, Verdict, WallClock as _,
};

const DAY: Duration = Duration::from_secs(86400);

/// Issues a leaf for every name asked, except that a name listed in `refuse` fails the attempt
/// naming it (as an ACME authorization failure does). Records every call's names.
#[derive(Default)]
struct Names {
    calls: Mutex<Vec<Vec<String>>>,
    refuse: Mutex<Vec<String>>,
}

impl Source for Names {
    fn name(&self) -> &str {
        "names"
    }

    fn obtain<'a>(
        &'a self,
        names: &'a [String],
    ) -> BoxFuture<'a, Result<CertifiedPair, SourceError>> {
        self.calls.lock().unwrap().push(names.to_vec());
        let refused = names
            .iter()
            .find(|n| self.refuse.lock().unwrap().contains(n))
            .cloned();
        Box::pin(async move {
            if let Some(name) = refused {
                return Err(SourceError::new(
                    ErrorClass::Validation,
                    format!("authorization for {name} is Invalid"),
                ));
            }
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let (chain, key) = leaf_for(
                &names,
                SystemTime::now() - Duration::from_secs(60),
                90 * DAY,
            );
            CertifiedPair::parse_bundle_for(
                &names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>(),
                &format!("{key}{chain}"),
            )
            .map_err(|e| SourceError::new(ErrorClass::BadCertificate, e.to_string()))
        })
    }
}

fn issuer(dir: &Path, hosts: Vec<Hostname>, clock: &ManualWallClock) -> Issuer {
    Issuer::new(
        IssuePolicy::standard(5),
        hosts,
        HistoryDb::open(&dir.join("attempts.sqlite"), 50).unwrap(),
        CertStore::new(&dir.join("certs")).unwrap(),
        Arc::new(clock.clone()),
        Duration::from_secs(30),
    )
    .unwrap()
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

// r[verify issue.certificates]
// r[verify issue.dispatch]
#[tokio::test]
async fn a_two_name_certificate_is_one_attempt_one_history_and_one_block() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    source.refuse.lock().unwrap().push("www.a.example".into());
    let issuer = issuer(
        dir.path(),
        vec![
            Hostname::certificate(names(&["a.example", "www.a.example"]), source.clone()),
            Hostname::new("b.example", source.clone()),
        ],
        &clock,
    );
    let report = issuer.tick().await.unwrap();
    // One call per certificate, with every name of it.
    assert_eq!(
        *source.calls.lock().unwrap(),
        vec![
            names(&["a.example", "www.a.example"]),
            names(&["b.example"])
        ]
    );
    assert_eq!(report.issued, vec!["b.example".to_owned()]);
    assert_eq!(report.failed.len(), 1);
    let (key, err) = &report.failed[0];
    assert_eq!(key, "a.example");
    assert!(err.message.contains("www.a.example"), "{err}");
    // The history and the decision are the certificate's, under its first name only.
    issuer.with_history(|db| {
        assert_eq!(db.row_count_of("a.example").unwrap(), 1);
        assert_eq!(db.row_count_of("www.a.example").unwrap(), 0);
        assert_eq!(db.row_count_of("b.example").unwrap(), 1);
    });
    assert!(matches!(
        issuer.verdict("a.example").unwrap(),
        Verdict::Debounced { .. }
    ));
    assert!(issuer.verdict("www.a.example").is_err(), "not a key");
    assert!(matches!(
        issuer.verdict("b.example").unwrap(),
        Verdict::Valid { .. }
    ));
    // Failing on: blocked after six, one fault for the certificate, the other untouched.
    for _ in 0..5 {
        // To the end of the debounce, so each tick attempts again.
        let Verdict::Debounced { until, .. } = issuer.verdict("a.example").unwrap() else {
            panic!("debounced");
        };
        clock.advance(until.duration_since(clock.now()).unwrap());
        let report = issuer.tick().await.unwrap();
        assert_eq!(report.dispatched.len(), 1, "{report:?}");
    }
    assert!(matches!(
        issuer.verdict("a.example").unwrap(),
        Verdict::Blocked { .. }
    ));
    let faults: Vec<String> = issuer
        .fault_board()
        .of_module("issuance")
        .into_iter()
        .map(|f| f.subject.name)
        .collect();
    assert_eq!(faults, vec!["a.example".to_owned()]);
    assert_eq!(
        source.calls.lock().unwrap().len(),
        2 + 5,
        "one call per attempt"
    );
    let statuses = issuer.statuses().unwrap();
    assert_eq!(statuses.len(), 2, "one row per certificate: {statuses:?}");
    assert_eq!(statuses[0].hostname, "a.example");
    // Now heal the name: the next attempt issues one pair for both names.
    source.refuse.lock().unwrap().clear();
    issuer.force_retry("a.example").unwrap();
    issuer.trigger("a.example").unwrap();
    let report = issuer.tick().await.unwrap();
    assert_eq!(report.issued, vec!["a.example".to_owned()]);
    let pair = issuer.store().get("a.example").unwrap();
    assert!(pair.covers(&names(&["a.example", "www.a.example"])));
    assert!(
        issuer.store().get("www.a.example").is_none(),
        "one file per certificate"
    );
}

// r[verify issue.certificates]
#[tokio::test]
async fn a_stored_certificate_lacking_a_configured_name_is_issued_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let one = issuer(
        dir.path(),
        vec![Hostname::new("a.example", source.clone())],
        &clock,
    );
    assert_eq!(one.tick().await.unwrap().issued.len(), 1);
    assert!(matches!(
        one.verdict("a.example").unwrap(),
        Verdict::Valid { .. }
    ));
    drop(one);
    // The list grew: the stored certificate does not name the new name.
    let two = issuer(
        dir.path(),
        vec![Hostname::certificate(
            names(&["a.example", "www.a.example"]),
            source.clone(),
        )],
        &clock,
    );
    assert_eq!(
        two.verdict("a.example").unwrap(),
        Verdict::Issue(IssueReason::Missing)
    );
    assert_eq!(two.tick().await.unwrap().issued.len(), 1);
    assert_eq!(
        source.calls.lock().unwrap().last().unwrap(),
        &names(&["a.example", "www.a.example"])
    );
    assert!(matches!(
        two.verdict("a.example").unwrap(),
        Verdict::Valid { .. }
    ));
}

// r[verify issue.deploy]
#[tokio::test]
async fn a_new_certificate_is_deployed_and_a_failed_deploy_is_one_fault_until_it_succeeds() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let deploy_dir = dir.path().join("deployed");
    // In the way: a file where the shared directory must be.
    std::fs::write(&deploy_dir, b"not a directory").unwrap();
    let config: DeployConfig = serde_json::from_value(serde_json::json!({
        "dir": deploy_dir, "mode": "0640",
    }))
    .unwrap();
    let outputs = HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: Some(config.target("a.example", true).unwrap()),
            ..Outputs::default()
        },
    )]);
    let issuer = issuer(
        dir.path(),
        vec![Hostname::certificate(
            names(&["a.example", "www.a.example"]),
            source.clone(),
        )],
        &clock,
    )
    .with_outputs(outputs);
    let deploy_faults = |issuer: &Issuer| -> Vec<(String, String)> {
        issuer
            .fault_board()
            .of_module("issuance")
            .into_iter()
            .map(|f| (f.subject.name, f.kind.to_string()))
            .collect()
    };
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    // Issued and stored; the deploy failed: one fault, the certificate in use all the same.
    assert!(issuer.store().get("a.example").is_some());
    assert_eq!(
        deploy_faults(&issuer),
        vec![("a.example/deploy".to_owned(), "deploy".to_owned())]
    );
    issuer.tick().await.unwrap();
    assert_eq!(deploy_faults(&issuer).len(), 1, "still one fault");
    // The way cleared: the next tick deploys, with the asked modes, and clears the fault.
    std::fs::remove_file(&deploy_dir).unwrap();
    let report = issuer.tick().await.unwrap();
    assert!(report.dispatched.is_empty(), "no new attempt: {report:?}");
    assert!(deploy_faults(&issuer).is_empty());
    let key = deploy_dir.join("a.example/key.pem");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&key), 0o640);
    assert_eq!(mode(&deploy_dir.join("a.example/fullchain.pem")), 0o644);
    let pair = issuer.store().get("a.example").unwrap();
    assert_eq!(std::fs::read_to_string(&key).unwrap(), pair.key_pem);
}

/// An executable shell script at `dir/name`.
fn script(dir: &Path, name: &str, body: &str) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

// r[verify issue.on-renew]
#[tokio::test]
async fn a_hook_that_fails_three_times_is_paced_and_one_fault_then_clears() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let runs = dir.path().join("runs");
    let seen = dir.path().join("seen");
    // Fails on its first three runs, then records what it was told and succeeds.
    let hook = script(
        dir.path(),
        "reload.sh",
        &format!(
            "echo run >> {runs}\n\
             if [ $(wc -l < {runs}) -le 3 ]; then echo 'reload refused' >&2; exit 1; fi\n\
             echo \"$HOLDFAST_CERT_NAMES $HOLDFAST_KEY_PATH $1\" > {seen}",
            runs = runs.display(),
            seen = seen.display()
        ),
    );
    let deploy: DeployConfig =
        serde_json::from_value(serde_json::json!({ "dir": dir.path().join("out") })).unwrap();
    let outputs = HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: Some(deploy.target("a.example", true).unwrap()),
            on_renew: Some(Hook {
                argv: vec![hook, "--graceful".into()],
                timeout: Duration::from_secs(10),
            }),
        },
    )]);
    let issuer = issuer(
        dir.path(),
        vec![Hostname::certificate(
            names(&["a.example", "www.a.example"]),
            source.clone(),
        )],
        &clock,
    )
    .with_outputs(outputs);
    let count = || {
        std::fs::read_to_string(&runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let hook_faults = |issuer: &Issuer| {
        issuer
            .fault_board()
            .of_module("issuance")
            .into_iter()
            .filter(|f| f.subject.name == "a.example/on_renew")
            .collect::<Vec<_>>()
    };
    // Issued: deployed, then the hook ran and failed. One fault, saying why.
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    assert!(dir.path().join("out/a.example/key.pem").exists());
    assert_eq!(count(), 1);
    let faults = hook_faults(&issuer);
    assert_eq!(faults.len(), 1);
    assert_eq!(faults[0].kind, "on_renew");
    assert!(
        faults[0].message.contains("reload refused"),
        "{}",
        faults[0].message
    );
    // Paced: ticks before the wait is over do not run it again.
    let mut waits = Vec::new();
    for failures in 1..=3u32 {
        let before = clock.now();
        issuer.tick().await.unwrap();
        clock.advance(Duration::from_secs(10));
        issuer.tick().await.unwrap();
        assert_eq!(count(), failures as usize, "ran again before its wait");
        // Step to the run: the wait doubles (30 s, 60 s, ...) within its jitter.
        let mut waited = Duration::from_secs(10);
        while count() == failures as usize {
            clock.advance(Duration::from_secs(1));
            waited += Duration::from_secs(1);
            issuer.tick().await.unwrap();
            assert!(waited < Duration::from_secs(3600), "never ran again");
        }
        waits.push(clock.now().duration_since(before).unwrap());
        let faults = hook_faults(&issuer);
        assert!(faults.len() <= 1, "one fault: {faults:?}");
    }
    assert!(waits[0] >= Duration::from_secs(30), "{waits:?}");
    assert!(waits[1] > waits[0] && waits[2] > waits[1], "{waits:?}");
    // The fourth run succeeded: the fault is cleared, and the hook was told the files.
    assert_eq!(count(), 4);
    assert!(hook_faults(&issuer).is_empty());
    let told = std::fs::read_to_string(&seen).unwrap();
    let key = dir.path().join("out/a.example/key.pem");
    assert_eq!(
        told.trim(),
        format!("a.example,www.a.example {} --graceful", key.display())
    );
    // Nothing more owed: later ticks do not run it.
    clock.advance(Duration::from_secs(7200));
    issuer.tick().await.unwrap();
    assert_eq!(count(), 4);
}

// r[verify issue.on-renew]
#[tokio::test]
async fn without_a_deploy_a_hook_is_told_the_bundle_and_no_cert_path_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let seen = dir.path().join("seen");
    let hook = script(
        dir.path(),
        "reload.sh",
        &format!("env | grep ^HOLDFAST_ | sort > {}", seen.display()),
    );
    let outputs = HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: None,
            on_renew: Some(Hook {
                argv: vec![hook],
                timeout: Duration::from_secs(10),
            }),
        },
    )]);
    let issuer = issuer(
        dir.path(),
        vec![Hostname::new("a.example", source.clone())],
        &clock,
    )
    .with_outputs(outputs);
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    let seen = std::fs::read_to_string(&seen).unwrap();
    let vars: Vec<&str> = seen.lines().map(|l| l.split('=').next().unwrap()).collect();
    assert_eq!(
        vars,
        [
            "HOLDFAST_BUNDLE_PATH",
            "HOLDFAST_CERT_NAME",
            "HOLDFAST_CERT_NAMES",
            "HOLDFAST_KEY_PATH"
        ],
        "{seen}"
    );
    let value = |key: &str| {
        seen.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap()
            .to_owned()
    };
    assert_eq!(value("HOLDFAST_BUNDLE_PATH"), value("HOLDFAST_KEY_PATH"));
    let bundle = std::fs::read_to_string(value("HOLDFAST_BUNDLE_PATH")).unwrap();
    assert!(bundle.contains("PRIVATE KEY") && bundle.contains("BEGIN CERTIFICATE"));
}

// r[verify issue.on-renew]
#[tokio::test]
async fn a_hook_owed_before_a_restart_runs_after_it_and_a_succeeded_one_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let runs = dir.path().join("runs");
    let fail = dir.path().join("fail");
    std::fs::write(&fail, "").unwrap();
    // Fails while `fail` exists.
    let hook = script(
        dir.path(),
        "reload.sh",
        &format!(
            "echo run >> {}\n[ -e {} ] && exit 1\nexit 0",
            runs.display(),
            fail.display()
        ),
    );
    let outputs = || {
        HashMap::from([(
            "a.example".to_owned(),
            Outputs {
                deploy: None,
                on_renew: Some(Hook {
                    argv: vec![hook.clone()],
                    timeout: Duration::from_secs(10),
                }),
            },
        )])
    };
    let count = || {
        std::fs::read_to_string(&runs)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let start = || {
        issuer(
            dir.path(),
            vec![Hostname::new("a.example", source.clone())],
            &clock,
        )
        .with_outputs(outputs())
    };
    let first = start();
    assert_eq!(first.tick().await.unwrap().issued.len(), 1);
    assert_eq!(count(), 1);
    drop(first);
    // Restarted while the hook is owed: it runs again, and succeeds.
    std::fs::remove_file(&fail).unwrap();
    let second = start();
    clock.advance(Duration::from_secs(60));
    assert!(second.tick().await.unwrap().issued.is_empty());
    assert_eq!(count(), 2, "the owed hook did not run after the restart");
    drop(second);
    // Restarted after it succeeded: nothing is owed.
    let third = start();
    for _ in 0..3 {
        clock.advance(Duration::from_secs(3600));
        third.tick().await.unwrap();
    }
    assert_eq!(
        count(),
        2,
        "a hook that succeeded ran again after a restart"
    );
}

// r[verify issue.on-renew]
#[tokio::test]
async fn overlapping_ticks_run_a_hook_once_and_deploy_once_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let runs = dir.path().join("runs");
    let hook = script(
        dir.path(),
        "reload.sh",
        &format!("echo run >> {}\nsleep 1", runs.display()),
    );
    let deploy: DeployConfig =
        serde_json::from_value(serde_json::json!({ "dir": dir.path().join("out") })).unwrap();
    let outputs = HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: Some(deploy.target("a.example", true).unwrap()),
            on_renew: Some(Hook {
                argv: vec![hook],
                timeout: Duration::from_secs(10),
            }),
        },
    )]);
    let issuer = issuer(
        dir.path(),
        vec![Hostname::new("a.example", source.clone())],
        &clock,
    )
    .with_outputs(outputs);
    let (a, b) = tokio::join!(issuer.tick(), issuer.tick());
    a.unwrap();
    b.unwrap();
    let count = std::fs::read_to_string(&runs)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let faults = issuer.fault_board().of_module("issuance");
    assert_eq!(
        count, 1,
        "the hook ran once per overlapping tick; {faults:?}"
    );
    let faults = issuer.fault_board().of_module("issuance");
    assert!(faults.is_empty(), "{faults:?}");
}

// r[verify issue.live-certificates]
#[tokio::test]
async fn certificates_replaced_live_keep_the_others_state_and_drop_the_removed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    source.refuse.lock().unwrap().push("b.example".into());
    let issuer = issuer(
        dir.path(),
        vec![
            Hostname::new("a.example", source.clone()),
            Hostname::new("b.example", source.clone()),
        ],
        &clock,
    );
    let report = issuer.tick().await.unwrap();
    assert_eq!(report.issued, vec!["a.example".to_owned()]);
    assert_eq!(report.failed.len(), 1);
    // `b` keeps failing until it is blocked: one fault.
    while !matches!(
        issuer.verdict("b.example").unwrap(),
        Verdict::Blocked { .. }
    ) {
        let Verdict::Debounced { until, .. } = issuer.verdict("b.example").unwrap() else {
            panic!("debounced");
        };
        clock.advance(until.duration_since(clock.now()).unwrap());
        issuer.tick().await.unwrap();
    }
    let calls = source.calls.lock().unwrap().len();
    let faults = |issuer: &Issuer| -> Vec<String> {
        let mut names: Vec<String> = issuer
            .fault_board()
            .of_module("issuance")
            .into_iter()
            .map(|f| f.subject.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(faults(&issuer), ["b.example"]);

    // `b` goes, `c` comes, `a` stays.
    issuer.replace_hosts(
        vec![
            Hostname::new("a.example", source.clone()),
            Hostname::new("c.example", source.clone()),
        ],
        HashMap::new(),
    );
    let listed: Vec<String> = issuer
        .statuses()
        .unwrap()
        .into_iter()
        .map(|s| s.hostname)
        .collect();
    assert_eq!(listed, ["a.example", "c.example"]);
    assert!(issuer.verdict("b.example").is_err(), "no longer decided");
    assert!(issuer.trigger("b.example").is_err());
    assert!(
        faults(&issuer).is_empty(),
        "the removed one's fault is cleared"
    );
    // The next tick decides `c` (issued) and leaves `a` as it was: valid, not issued again.
    let report = issuer.tick().await.unwrap();
    assert_eq!(report.issued, vec!["c.example".to_owned()]);
    assert_eq!(report.dispatched.len(), 1, "{report:?}");
    assert_eq!(source.calls.lock().unwrap().len(), calls + 1);
    assert!(matches!(
        issuer.verdict("a.example").unwrap(),
        Verdict::Valid { .. }
    ));
    issuer.with_history(|db| {
        assert_eq!(db.row_count_of("a.example").unwrap(), 1, "a's history kept");
    });

    // `b` comes back: its history (and block) were kept, so it is still blocked, not retried.
    issuer.replace_hosts(
        vec![
            Hostname::new("a.example", source.clone()),
            Hostname::new("b.example", source.clone()),
            Hostname::new("c.example", source.clone()),
        ],
        HashMap::new(),
    );
    assert!(matches!(
        issuer.verdict("b.example").unwrap(),
        Verdict::Blocked { .. }
    ));
    assert_eq!(faults(&issuer), ["b.example"]);
    let report = issuer.tick().await.unwrap();
    assert!(report.dispatched.is_empty(), "{report:?}");
}

/// One certificate, `a.example`, deployed to `dir/sub` with the key's `mode`.
fn deployed_to(dir: &Path, sub: &str, mode: &str) -> HashMap<String, Outputs> {
    let deploy: DeployConfig =
        serde_json::from_value(serde_json::json!({ "dir": dir.join(sub), "mode": mode })).unwrap();
    HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: Some(deploy.target("a.example", false).unwrap()),
            on_renew: None,
        },
    )])
}

// r[verify issue.live-certificates]
#[tokio::test]
async fn a_kept_certificates_changed_deploy_taken_live_is_written_at_the_next_tick() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let hosts = || vec![Hostname::new("a.example", source.clone())];
    let issuer =
        issuer(dir.path(), hosts(), &clock).with_outputs(deployed_to(dir.path(), "one", "0640"));
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);
    assert!(dir.path().join("one/key.pem").exists());
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.path().join("one/key.pem")), 0o640);

    // Another directory: written there, without issuing again.
    issuer.replace_hosts(hosts(), deployed_to(dir.path(), "two", "0640"));
    clock.advance(Duration::from_secs(120));
    assert!(issuer.tick().await.unwrap().issued.is_empty());
    assert!(
        dir.path().join("two/key.pem").exists(),
        "the new deploy dir was never written"
    );
    // The same directory with a tighter key mode: the key is written again with it.
    issuer.replace_hosts(hosts(), deployed_to(dir.path(), "two", "0600"));
    clock.advance(Duration::from_secs(120));
    assert!(issuer.tick().await.unwrap().issued.is_empty());
    assert_eq!(
        mode(&dir.path().join("two/key.pem")),
        0o600,
        "the key kept its old mode"
    );
    assert_eq!(source.calls.lock().unwrap().len(), 1);
    assert!(issuer.fault_board().of_module("issuance").is_empty());
}

// r[verify issue.live-certificates]
#[tokio::test]
async fn a_kept_certificate_gaining_a_deploy_and_a_hook_live_gets_both_at_the_next_tick() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let hosts = || vec![Hostname::new("a.example", source.clone())];
    let issuer = issuer(dir.path(), hosts(), &clock);
    assert_eq!(issuer.tick().await.unwrap().issued.len(), 1);

    // A deploy: written at the next tick.
    let mut outputs = deployed_to(dir.path(), "out", "0600");
    issuer.replace_hosts(hosts(), outputs.clone());
    clock.advance(Duration::from_secs(120));
    assert!(issuer.tick().await.unwrap().issued.is_empty());
    assert!(
        dir.path().join("out/key.pem").exists(),
        "the gained deploy was not written"
    );

    // A hook: run once at the next tick, told of the deployed files.
    let runs = dir.path().join("runs");
    let hook = script(
        dir.path(),
        "hook.sh",
        &format!("echo \"$HOLDFAST_KEY_PATH\" >> {}", runs.display()),
    );
    if let Some(out) = outputs.get_mut("a.example") {
        out.on_renew = Some(Hook {
            argv: vec![hook],
            timeout: Duration::from_secs(10),
        });
    }
    issuer.replace_hosts(hosts(), outputs.clone());
    for _ in 0..2 {
        clock.advance(Duration::from_secs(120));
        assert!(issuer.tick().await.unwrap().issued.is_empty());
    }
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(
        ran,
        format!("{}\n", dir.path().join("out/key.pem").display())
    );
    // The same outputs again: nothing owed, nothing run.
    issuer.replace_hosts(hosts(), outputs);
    clock.advance(Duration::from_secs(120));
    issuer.tick().await.unwrap();
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1);
    assert_eq!(source.calls.lock().unwrap().len(), 1);
    assert!(issuer.fault_board().of_module("issuance").is_empty());
}

/// Waits (10 s at most) until `path` exists.
async fn until_exists(path: &Path) {
    for _ in 0..1000 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{} never appeared", path.display());
}

// r[verify issue.live-certificates]
#[tokio::test]
async fn a_certificate_removed_while_its_hook_runs_leaves_no_fault_behind() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualWallClock::new(SystemTime::now());
    let source = Arc::new(Names::default());
    let (started, go) = (dir.path().join("started"), dir.path().join("go"));
    // The hook says it started, waits for the test's word, then fails.
    let hook = script(
        dir.path(),
        "held.sh",
        &format!(
            "touch {started}\nwhile [ ! -e {go} ]; do sleep 0.01; done\necho nope >&2\nexit 1",
            started = started.display(),
            go = go.display()
        ),
    );
    let outputs = HashMap::from([(
        "a.example".to_owned(),
        Outputs {
            deploy: None,
            on_renew: Some(Hook {
                argv: vec![hook],
                timeout: Duration::from_secs(10),
            }),
        },
    )]);
    let issuer = issuer(
        dir.path(),
        vec![
            Hostname::new("a.example", source.clone()),
            Hostname::new("b.example", source.clone()),
        ],
        &clock,
    )
    .with_outputs(outputs);
    let faults = |issuer: &Issuer| -> Vec<(String, String)> {
        issuer
            .fault_board()
            .of_module("issuance")
            .into_iter()
            .map(|f| (f.subject.name, f.kind))
            .collect()
    };
    // `a` is removed while its hook runs; the hook then fails.
    let (tick, ()) = tokio::join!(issuer.tick(), async {
        until_exists(&started).await;
        issuer.replace_hosts(
            vec![Hostname::new("b.example", source.clone())],
            HashMap::new(),
        );
        std::fs::write(&go, "").unwrap();
    });
    tick.unwrap();
    let listed: Vec<String> = issuer
        .statuses()
        .unwrap()
        .into_iter()
        .map(|s| s.hostname)
        .collect();
    assert_eq!(listed, ["b.example"]);
    assert!(faults(&issuer).is_empty(), "{:?}", faults(&issuer));
    // Nothing is owed to it either: later ticks run no hook and file nothing.
    std::fs::remove_file(&started).unwrap();
    clock.advance(Duration::from_secs(3600));
    issuer.tick().await.unwrap();
    assert!(
        !started.exists(),
        "the removed certificate's hook ran again"
    );
    assert!(faults(&issuer).is_empty(), "{:?}", faults(&issuer));
}
