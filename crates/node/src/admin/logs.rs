//! `GET /v1/workloads/{name}/logs`: a workload's container output (stdout and stderr), read from
//! the daemon through bollard, one line per line with control characters escaped as the CLI's
//! tables escape them; streamed while the container writes with `follow=true`.

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use futures_util::StreamExt as _;

use super::Api;

/// The most lines `tail` may ask for (and the default when it is not given: the last 100).
pub const MAX_TAIL: u64 = 10_000;
/// The lines shown without `tail`.
pub const DEFAULT_TAIL: u64 = 100;

/// The query: `tail=N`, `since=SECONDS` (how far back), `follow=true`.
#[derive(Debug, Default, serde::Deserialize)]
pub struct LogsQuery {
    /// The last N lines (default 100, at most 10,000).
    pub tail: Option<u64>,
    /// Only lines written in the last SECONDS.
    pub since: Option<u64>,
    /// Keep the answer open and stream new lines.
    #[serde(default)]
    pub follow: bool,
}

// i[impl node.workloads.logs]
/// One chunk of the daemon's log stream as lines for the operator: split at newlines, each
/// escaped (so a container cannot move the operator's cursor or fake a line), each ending in
/// `\n`. A partial last line is kept in `pending` until its newline arrives.
pub fn lines(pending: &mut String, chunk: &LogOutput) -> String {
    let bytes = match chunk {
        LogOutput::StdOut { message }
        | LogOutput::StdErr { message }
        | LogOutput::Console { message } => message,
        LogOutput::StdIn { .. } => return String::new(),
    };
    pending.push_str(&String::from_utf8_lossy(bytes));
    let mut out = String::new();
    while let Some(end) = pending.find('\n') {
        let line: String = pending.drain(..=end).collect();
        out.push_str(&crate::render::escape(line.trim_end_matches(['\n', '\r'])));
        out.push('\n');
    }
    out
}

/// The rest of a stream that ended without a final newline.
fn flush(pending: &mut String) -> String {
    if pending.is_empty() {
        return String::new();
    }
    let line = std::mem::take(pending);
    format!("{}\n", crate::render::escape(&line))
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

// i[impl node.workloads.logs]
/// The handler. An unknown workload is a 404 naming the configured ones; a workload with no
/// container now is a 404 saying so; a daemon that cannot be reached is a 503.
pub(super) async fn logs(
    State(api): State<Api>,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
) -> Response {
    let target = api.node.workload.with(|w| {
        let known = w.handle.status().iter().any(|s| s.name == name);
        let names: Vec<String> = w.handle.status().into_iter().map(|s| s.name).collect();
        (known, names, w.host.clone(), w.owner.clone())
    });
    let (host, owner) = match target {
        Ok((true, _, host, owner)) => (host, owner),
        Ok((false, names, _, _)) => {
            let configured = if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            };
            return text(
                StatusCode::NOT_FOUND,
                format!(
                    "no workload named {} (configured: {configured})\n",
                    crate::render::escape(&name)
                ),
            );
        }
        Err(_) => {
            return text(
                StatusCode::NOT_FOUND,
                format!(
                    "no workload named {}: the workload module is not running\n",
                    crate::render::escape(&name)
                ),
            );
        }
    };
    let docker = match holdfast_workload::docker::connect(&host).await {
        Ok(docker) => docker,
        Err(e) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot reach the Docker daemon at {host}: {e}\n"),
            );
        }
    };
    let container = holdfast_workload::container_name(&name, owner.as_deref());
    let tail = query.tail.unwrap_or(DEFAULT_TAIL).min(MAX_TAIL);
    let mut options = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .follow(query.follow)
        .tail(&tail.to_string());
    if let Some(since) = query.since {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let from = i32::try_from(now.saturating_sub(since)).unwrap_or(i32::MAX);
        options = options.since(from);
    }
    let mut stream = docker.logs(&container, Some(options.build()));
    // The first answer tells a missing container from a log: look at it before answering.
    let first = stream.next().await;
    let mut pending = String::new();
    let head = match first {
        None => String::new(),
        Some(Ok(chunk)) => lines(&mut pending, &chunk),
        Some(Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        })) => {
            return text(
                StatusCode::NOT_FOUND,
                format!(
                    "workload {} has no container now (see `holdfast workloads`)\n",
                    crate::render::escape(&name)
                ),
            );
        }
        Some(Err(e)) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("the daemon did not give the logs: {e}\n"),
            );
        }
    };
    let rest = futures_util::stream::unfold(
        (stream, pending, false),
        |(mut stream, mut pending, done)| async move {
            if done {
                return None;
            }
            match stream.next().await {
                Some(Ok(chunk)) => {
                    let out = lines(&mut pending, &chunk);
                    Some((Ok::<_, std::io::Error>(out), (stream, pending, false)))
                }
                // The stream's end (or a daemon error mid-stream) ends the answer.
                Some(Err(_)) | None => {
                    let out = flush(&mut pending);
                    Some((Ok(out), (stream, pending, true)))
                }
            }
        },
    );
    let body = futures_util::stream::once(async move { Ok::<_, std::io::Error>(head) }).chain(rest);
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Bytes;

    // i[verify node.workloads.logs]
    #[test]
    fn lines_are_split_escaped_and_a_partial_one_waits_for_its_newline() {
        let mut pending = String::new();
        let out = |m: &str| LogOutput::StdOut {
            message: Bytes::from(m.to_owned()),
        };
        assert_eq!(lines(&mut pending, &out("hello\nwor")), "hello\n");
        assert_eq!(pending, "wor");
        let err = LogOutput::StdErr {
            message: Bytes::from_static(b"ld\r\n\x1b[2Jfake\tline\x07\n"),
        };
        assert_eq!(
            lines(&mut pending, &err),
            "world\n\\x1b[2Jfake\\tline\\x07\n"
        );
        assert_eq!(lines(&mut pending, &out("no newline")), "");
        assert_eq!(flush(&mut pending), "no newline\n");
        assert_eq!(flush(&mut pending), "");
    }

    async fn answer(api: &Api, name: &str) -> (StatusCode, String) {
        let response = logs(
            State(api.clone()),
            Path(name.to_owned()),
            Query(LogsQuery::default()),
        )
        .await;
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    // i[verify node.workloads.logs]
    #[tokio::test]
    async fn an_unknown_workload_is_a_404_that_names_the_configured_ones_escaped() {
        use crate::metrics::Metrics;
        use crate::module::Module as _;
        use holdfast_lifecycle::FaultBoard;
        let node = crate::state::NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        // No workload module: no workload of any name.
        let (status, body) = answer(&api, "web").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("no workload named web"), "{body}");

        let dir = tempfile::tempdir().unwrap();
        let module = crate::modules::workload::WorkloadModule {
            workloads: vec![holdfast_workload::WorkloadConfig::new("web", "busybox:1")],
            docker_host: Some(format!("unix://{}", dir.path().join("none.sock").display())),
            seed: 7,
            stop_on_exit: false,
            owner: None,
            tick: std::time::Duration::from_millis(50),
            pull_enabled: true,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while node
            .workload
            .with(|r| r.handle.status().is_empty())
            .unwrap_or(true)
        {
            assert!(tokio::time::Instant::now() < deadline, "never published");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let (status, body) = answer(&api, "nope\x1b[2J").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body, "no workload named nope\\x1b[2J (configured: web)\n");
        // Known, but the daemon is not there: said so, not a 404.
        let (status, body) = answer(&api, "web").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("cannot reach the Docker daemon"), "{body}");
        let request = holdfast_lifecycle::StopRequest {
            deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(2),
            reason: holdfast_lifecycle::StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
    }

    // i[verify node.workloads.logs]
    #[tokio::test]
    async fn a_workloads_echoed_line_is_in_its_logs_and_followed() {
        use crate::metrics::Metrics;
        use crate::module::Module as _;
        use futures_util::TryStreamExt as _;
        use holdfast_lifecycle::FaultBoard;
        let Some(docker) = holdfast_test_support::services::docker() else {
            return;
        };
        let Some(registry) = holdfast_test_support::services::registry() else {
            return;
        };
        // The image present (the pull module is not part of this test).
        let daemon = bollard::Docker::connect_with_host(&docker.host).unwrap();
        let (image, tag) = registry.image.rsplit_once(':').unwrap();
        daemon
            .create_image(
                Some(
                    bollard::query_parameters::CreateImageOptionsBuilder::default()
                        .from_image(image)
                        .tag(tag)
                        .build(),
                ),
                None,
                None,
            )
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        let node = crate::state::NodeState::new("n", FaultBoard::new(), Metrics::new());
        let api = Api {
            node: node.clone(),
            token: None,
        };
        let owner = format!("logs-{}", std::process::id());
        let mut echo = holdfast_workload::WorkloadConfig::new("echo", registry.image.clone());
        echo.command = vec![
            "sh".into(),
            "-c".into(),
            "echo hello-from-holdfast; printf 'bell\\a\\n' >&2; sleep 2; echo later; sleep 3600"
                .into(),
        ];
        let module = crate::modules::workload::WorkloadModule {
            workloads: vec![echo],
            docker_host: Some(docker.host.clone()),
            seed: 7,
            stop_on_exit: true,
            owner: Some(owner),
            tick: std::time::Duration::from_millis(100),
            pull_enabled: false,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        let body = loop {
            let (status, body) = answer(&api, "echo").await;
            if status == StatusCode::OK && body.contains("hello-from-holdfast") {
                break body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never logged: {status} {body}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert!(body.contains("hello-from-holdfast\n"), "{body}");
        assert!(body.contains("bell\\x07\n"), "stderr, escaped: {body}");
        // Followed: a line written after the call began arrives on the open answer.
        let response = logs(
            State(api.clone()),
            Path("echo".to_owned()),
            Query(LogsQuery {
                tail: Some(1),
                since: None,
                follow: true,
            }),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let mut stream = response.into_body().into_data_stream();
        let mut seen = String::new();
        let followed = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            while let Some(Ok(chunk)) = stream.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen.contains("later\n") {
                    return;
                }
            }
        })
        .await;
        assert!(followed.is_ok() && seen.contains("later\n"), "{seen}");
        let request = holdfast_lifecycle::StopRequest {
            deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(15),
            reason: holdfast_lifecycle::StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
    }
}
