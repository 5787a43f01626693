//! `GET /v1/workloads/{name}/logs`: a workload's container output (stdout and stderr), read from
//! the daemon through bollard, one line per line with control characters escaped as the CLI's
//! tables escape them; streamed while the container writes with `follow=true`.

use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bollard::container::LogOutput;
use bollard::query_parameters::{InspectContainerOptions, LogsOptionsBuilder};
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

/// The longest partial line held for its newline: past it, what has come is shown as a line
/// (a progress bar redrawn with `\r`, or binary output, cannot grow the node's memory).
pub const MAX_LINE: usize = 16 * 1024;

// i[impl node.workloads.logs+2]
/// The daemon's log stream as lines for the operator: split at newlines, each escaped (so a
/// container cannot move the operator's cursor or fake a line), each ending in `\n`. Each
/// stream (stdout, stderr) keeps its own partial last line until its newline arrives, as bytes
/// (a UTF-8 character split across chunks is decoded whole).
#[derive(Debug, Default)]
pub struct Lines {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Lines {
    /// The complete lines `chunk` finishes.
    pub fn push(&mut self, chunk: &LogOutput) -> String {
        let (pending, bytes) = match chunk {
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (&mut self.stdout, message)
            }
            LogOutput::StdErr { message } => (&mut self.stderr, message),
            LogOutput::StdIn { .. } => return String::new(),
        };
        pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|&b| b == b'\n') {
            line(&mut out, &pending[start..start + end]);
            start += end + 1;
        }
        pending.drain(..start);
        while pending.len() >= MAX_LINE {
            let rest = pending.split_off(MAX_LINE);
            line(&mut out, pending);
            *pending = rest;
        }
        out
    }

    /// The rest of a stream that ended without a final newline.
    pub fn flush(&mut self) -> String {
        let mut out = String::new();
        for pending in [&mut self.stdout, &mut self.stderr] {
            if !pending.is_empty() {
                line(&mut out, pending);
                pending.clear();
            }
        }
        out
    }
}

/// How the node's own lines in a log answer begin (the follow's marker); a container line that
/// begins so is written with a `\` before it, so a container cannot fake one.
const NODE_LINE: &str = "--- holdfast:";

// i[impl node.workloads.logs+2]
fn line(out: &mut String, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let text = crate::render::escape(text.trim_end_matches('\r'));
    if text.starts_with(NODE_LINE) {
        out.push('\\');
    }
    out.push_str(&text);
    out.push('\n');
}

fn text(status: StatusCode, message: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message,
    )
        .into_response()
}

/// Followed logs open at once on the node (each also holds an admin connection, which its
/// listener's caps bound); one more is a 503.
pub const MAX_FOLLOWS: usize = 32;

static FOLLOWS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_FOLLOWS);

// i[impl node.workloads.logs+2]
/// The handler. Container output often holds secrets: over TCP it needs the bearer token, as a
/// mutating call does. An unknown workload is a 404 naming the configured ones; a workload with
/// no container now is a 404 saying so; a daemon that cannot be reached is a 503. The answer's
/// head goes out before the first line (a quiet container is followed too), and a followed
/// answer is exempt from its connection's age limit while it is open.
pub(super) async fn logs(
    State(api): State<Api>,
    Extension(transport): Extension<super::Transport>,
    streams: Option<Extension<super::Streams>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(query): Query<LogsQuery>,
) -> Response {
    if let Some(refused) = super::refusal(&api, transport, &headers) {
        return refused;
    }
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
    // Whether the container exists is asked apart, so the answer's head does not wait for a
    // first line that a quiet container may never write.
    let run = match docker
        .inspect_container(&container, None::<InspectContainerOptions>)
        .await
    {
        Ok(inspect) => Run::of(&inspect),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => {
            return text(
                StatusCode::NOT_FOUND,
                format!(
                    "workload {} has no container now (see `holdfast workloads`)\n",
                    crate::render::escape(&name)
                ),
            );
        }
        Err(e) => {
            return text(
                StatusCode::BAD_GATEWAY,
                format!("the daemon did not give the logs: {e}\n"),
            );
        }
    };
    let permit = if query.follow {
        match FOLLOWS.try_acquire() {
            Ok(permit) => Some(permit),
            Err(_) => {
                return text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("{MAX_FOLLOWS} followed logs are open already; try again later\n"),
                );
            }
        }
    } else {
        None
    };
    // Held by the body: while it is open, its connection is not closed for its age.
    let held = streams
        .filter(|_| query.follow)
        .map(|Extension(streams)| streams.hold());
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
    let stream = docker.logs(&container, Some(options.build())).boxed();
    let follow = query.follow.then(|| {
        Next::new(
            api.clone(),
            docker.clone(),
            name.clone(),
            container.clone(),
            run,
        )
    });
    let body = futures_util::stream::unfold(
        (stream, Lines::default(), follow, false, (permit, held)),
        |(mut stream, mut pending, mut follow, done, holds)| async move {
            if done {
                return None;
            }
            match stream.next().await {
                Some(Ok(chunk)) => {
                    let out = pending.push(&chunk);
                    Some((
                        Ok::<_, std::io::Error>(out),
                        (stream, pending, follow, false, holds),
                    ))
                }
                None => {
                    let mut out = pending.flush();
                    // Followed: the container ended; wait for the workload's next one.
                    let next = match follow.as_mut() {
                        Some(next) => next.wait().await,
                        None => None,
                    };
                    match next {
                        Some((marker, next_stream)) => {
                            out.push_str(&marker);
                            Some((Ok(out), (next_stream, pending, follow, false, holds)))
                        }
                        None => Some((Ok(out), (stream, pending, follow, true, holds))),
                    }
                }
                // A daemon error mid-stream ends the answer in an error, never as a complete
                // log: the client sees a broken body and says so.
                Some(Err(e)) => Some((
                    Err(std::io::Error::other(format!(
                        "the daemon's log stream failed: {e}"
                    ))),
                    (stream, pending, follow, true, holds),
                )),
            }
        },
    );
    (
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        Body::from_stream(body),
    )
        .into_response()
}

type LogStream =
    futures_util::stream::BoxStream<'static, Result<LogOutput, bollard::errors::Error>>;

/// One run of a container: its id and when it started (a container restarted in place keeps
/// its id and starts again).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Run {
    id: String,
    started_at: Option<String>,
}

impl Run {
    fn of(inspect: &bollard::models::ContainerInspectResponse) -> Run {
        Run {
            id: inspect.id.clone().unwrap_or_default(),
            started_at: inspect.state.as_ref().and_then(|s| s.started_at.clone()),
        }
    }
}

/// How often a followed workload whose container ended is looked at for its next one.
const NEXT_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// What a followed answer needs to go on with the workload's next container.
struct Next {
    api: Api,
    docker: bollard::Docker,
    workload: String,
    container: String,
    run: Run,
    /// Paces the asks while the daemon does not answer ([`daemon_pacing`]).
    daemon: holdfast_retry::KeyedGate<()>,
}

// i[impl node.workloads.logs-backoff]
/// The asks of a daemon that does not answer a follow waiting for the next container: from 1 s
/// doubling to 30 s, jittered, as the workload module reconnects its event stream. Each call (each
/// follow) has its own jitter seed, so followers of one daemon that went down do not come back
/// in lockstep.
fn daemon_pacing() -> holdfast_retry::Policy {
    static FOLLOWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let follow = FOLLOWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    holdfast_retry::Policy::builder()
        .base(std::time::Duration::from_secs(1))
        .cap(std::time::Duration::from_secs(30))
        .seed_from(&(std::process::id(), follow))
        .build()
        .unwrap_or_default()
}

impl Next {
    fn new(
        api: Api,
        docker: bollard::Docker,
        workload: String,
        container: String,
        run: Run,
    ) -> Next {
        Next {
            api,
            docker,
            workload,
            container,
            run,
            daemon: holdfast_retry::KeyedGate::new(daemon_pacing()),
        }
    }

    // i[impl node.workloads.logs+2]
    /// Waits until the workload runs a container other than the one followed (a new one under
    /// its name, or the same one started again) and answers the line that says so and its log
    /// stream: all of a new container's output, or what a restarted one wrote since the last
    /// stream ended. `None` once the workload is no longer configured (or its module stopped):
    /// the answer then ends. A daemon that does not answer meanwhile is asked again.
    async fn wait(&mut self) -> Option<(String, LogStream)> {
        let ended = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        loop {
            // i[impl node.workloads.logs-backoff]
            // Every NEXT_POLL while the daemon answers; on its gate's schedule while it does not.
            match self.daemon.state(&()).map(|s| s.next_attempt_at) {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => tokio::time::sleep(NEXT_POLL).await,
            }
            let known = self
                .api
                .node
                .workload
                .with(|w| w.handle.status().iter().any(|s| s.name == self.workload))
                .unwrap_or(false);
            if !known {
                return None;
            }
            let now = tokio::time::Instant::now().into_std();
            let Ok(token) = self.daemon.begin(&(), now) else {
                continue;
            };
            let inspect = self
                .docker
                .inspect_container(&self.container, None::<InspectContainerOptions>)
                .await;
            let now = tokio::time::Instant::now().into_std();
            let inspect = match inspect {
                Ok(inspect) => {
                    drop(token);
                    // Answered: back to the plain poll.
                    self.daemon.forget(&());
                    inspect
                }
                // The container is gone meanwhile: the daemon answered; its next one is awaited.
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => {
                    drop(token);
                    self.daemon.forget(&());
                    continue;
                }
                Err(_) => {
                    self.daemon.fail(token, now, None);
                    continue;
                }
            };
            let run = Run::of(&inspect);
            let state = inspect.state.as_ref();
            let running = state.and_then(|s| s.running).unwrap_or(false);
            // Not started yet: its run (and its start time) is still to come.
            let created = state.and_then(|s| s.status)
                == Some(bollard::models::ContainerStateStatusEnum::CREATED);
            if run == self.run || created || !running && run.id == self.run.id {
                continue;
            }
            let mut options = LogsOptionsBuilder::default()
                .stdout(true)
                .stderr(true)
                .follow(true);
            if run.id == self.run.id {
                options = options.since(i32::try_from(ended).unwrap_or(i32::MAX));
            }
            let stream = self.docker.logs(&run.id, Some(options.build())).boxed();
            let short: String = run.id.chars().take(12).collect();
            let marker = format!(
                "{NODE_LINE} workload {}: following its next container ({short}) ---\n",
                crate::render::escape(&self.workload)
            );
            self.run = run;
            return Some((marker, stream));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Bytes;

    // i[verify node.workloads.logs+2]
    #[test]
    fn lines_are_split_escaped_and_a_partial_one_waits_for_its_newline_on_its_own_stream() {
        let mut lines = Lines::default();
        let out = |m: &[u8]| LogOutput::StdOut {
            message: Bytes::from(m.to_vec()),
        };
        let err = |m: &[u8]| LogOutput::StdErr {
            message: Bytes::from(m.to_vec()),
        };
        assert_eq!(lines.push(&out(b"hello\nwor")), "hello\n");
        // stderr's text never joins stdout's partial line.
        assert_eq!(
            lines.push(&err(b"oops\r\n\x1b[2Jfake\tline\x07\n")),
            "oops\n\\x1b[2Jfake\\tline\\x07\n"
        );
        assert_eq!(lines.push(&out(b"ld\n")), "world\n");
        // A character split across chunks is decoded whole.
        let e_acute = "\u{e9}".as_bytes();
        assert_eq!(lines.push(&out(&e_acute[..1])), "");
        assert_eq!(
            lines.push(&out(&[&e_acute[1..], b"t\xc3\n"].concat())),
            "\u{e9}t\u{fffd}\n"
        );
        assert_eq!(lines.push(&out(b"no newline")), "");
        assert_eq!(lines.flush(), "no newline\n");
        assert_eq!(lines.flush(), "");
        // A line without an end is shown at the cap, and nothing past it is held.
        let long = vec![b'x'; MAX_LINE * 2 + 5];
        let shown = lines.push(&out(&long));
        assert_eq!(shown.len(), 2 * (MAX_LINE + 1));
        assert_eq!(lines.flush(), "xxxxx\n");
    }

    // i[verify node.workloads.logs+2]
    #[test]
    fn a_container_cannot_print_the_follow_marker() {
        let mut lines = Lines::default();
        let out = |m: &[u8]| LogOutput::StdOut {
            message: Bytes::from(m.to_vec()),
        };
        let marker =
            "--- holdfast: workload web: following its next container (0123456789ab) ---\n";
        let shown = lines.push(&out(marker.as_bytes()));
        assert_ne!(shown, marker);
        assert_eq!(shown, format!("\\{marker}"));
        // Nor as the rest of a line cut at the cap.
        let mut long = vec![b'x'; MAX_LINE];
        long.extend_from_slice(marker.as_bytes());
        let shown = lines.push(&out(&long));
        assert!(
            shown.lines().all(|l| !l.starts_with("--- holdfast:")),
            "{shown:?}"
        );
        // Any other line is as it was.
        assert_eq!(lines.push(&out(b"--- a rule ---\n")), "--- a rule ---\n");
    }

    async fn answer(api: &Api, name: &str) -> (StatusCode, String) {
        let response = logs(
            State(api.clone()),
            Extension(super::super::Transport::Unix),
            None,
            HeaderMap::new(),
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

    // i[verify node.workloads.logs+2]
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
            workloads: crate::modules::workload::desired(vec![
                holdfast_workload::WorkloadConfig::new("web", "busybox:1"),
            ]),
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

    // i[verify node.workloads.logs+2]
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
            workloads: crate::modules::workload::desired(vec![echo]),
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
            // The daemon copies stdout and stderr into the log separately, so one stream's line
            // can be there before the other's: wait for both.
            if status == StatusCode::OK
                && body.contains("hello-from-holdfast")
                && body.contains("bell")
            {
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
            Extension(super::super::Transport::Unix),
            None,
            HeaderMap::new(),
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

    // i[verify node.workloads.logs+2]
    #[tokio::test]
    async fn a_follow_goes_on_with_the_workloads_next_container_marked_by_a_line() {
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
        let owner = format!("logs-restart-{}", std::process::id());
        // Each container says which it is (its hostname is its short id), runs 2 s and exits.
        let mut again = holdfast_workload::WorkloadConfig::new("again", registry.image.clone());
        again.command = vec![
            "sh".into(),
            "-c".into(),
            "echo run-on-$(hostname); sleep 2".into(),
        ];
        again.min_run = std::time::Duration::from_secs(1);
        again.stop_timeout = std::time::Duration::from_secs(1);
        let module = crate::modules::workload::WorkloadModule {
            workloads: crate::modules::workload::desired(vec![again]),
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
        let response = loop {
            let response = logs(
                State(api.clone()),
                Extension(super::super::Transport::Unix),
                None,
                HeaderMap::new(),
                Path("again".to_owned()),
                Query(LogsQuery {
                    tail: None,
                    since: None,
                    follow: true,
                }),
            )
            .await;
            if response.status() == StatusCode::OK {
                break response;
            }
            assert!(tokio::time::Instant::now() < deadline, "never started");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        let mut stream = response.into_body().into_data_stream();
        let mut seen = String::new();
        let followed = tokio::time::timeout(std::time::Duration::from_secs(40), async {
            while let Some(Ok(chunk)) = stream.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if seen.matches("run-on-").count() >= 2 {
                    return;
                }
            }
        })
        .await;
        eprintln!("FOLLOW ACROSS A RESTART:\n{seen}");
        let runs: Vec<&str> = seen.lines().filter(|l| l.starts_with("run-on-")).collect();
        assert!(followed.is_ok() && runs.len() >= 2, "{seen}");
        assert_ne!(runs[0], runs[1], "{seen}");
        // Between the two runs, one line says the follow moved to the next container.
        let between = seen
            .split(runs[0])
            .nth(1)
            .and_then(|rest| rest.split(runs[1]).next())
            .unwrap_or_default();
        assert!(
            between.contains("holdfast: workload again: following its next container"),
            "{seen}"
        );
        let request = holdfast_lifecycle::StopRequest {
            deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(15),
            reason: holdfast_lifecycle::StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
    }

    // i[verify node.workloads.logs+2]
    #[tokio::test]
    async fn a_follow_goes_on_across_a_restart_in_place_without_repeating_a_line() {
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
        let owner = format!("logs-inplace-{}", std::process::id());
        // Each run says which it is, runs until stopped, and says so when stopped: that last line
        // is written in the second the run ends, which a whole-second `since` would repeat.
        let mut again = holdfast_workload::WorkloadConfig::new("again", registry.image.clone());
        again.command = vec![
            "sh".into(),
            "-c".into(),
            "trap 'echo bye-$R; exit 0' TERM; R=$RANDOM$RANDOM; echo run-$R; while :; do sleep 0.2; done".into(),
        ];
        again.min_run = std::time::Duration::from_secs(1);
        again.stop_timeout = std::time::Duration::from_secs(1);
        let module = crate::modules::workload::WorkloadModule {
            workloads: crate::modules::workload::desired(vec![again]),
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
        let response = loop {
            let response = logs(
                State(api.clone()),
                Extension(super::super::Transport::Unix),
                None,
                HeaderMap::new(),
                Path("again".to_owned()),
                Query(LogsQuery {
                    tail: None,
                    since: None,
                    follow: true,
                }),
            )
            .await;
            if response.status() == StatusCode::OK {
                break response;
            }
            assert!(tokio::time::Instant::now() < deadline, "never started");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        };
        let mut stream = response.into_body().into_data_stream();
        let mut seen = String::new();
        let owner = format!("logs-inplace-{}", std::process::id());
        let container = holdfast_workload::container_name("again", Some(&owner));
        let mut restarted = false;
        let followed = tokio::time::timeout(std::time::Duration::from_secs(40), async {
            while let Some(Ok(chunk)) = stream.next().await {
                seen.push_str(&String::from_utf8_lossy(&chunk));
                if !restarted && seen.contains("run-") {
                    // `docker restart`: the same container, started again.
                    restarted = true;
                    let options =
                        bollard::query_parameters::RestartContainerOptionsBuilder::default()
                            .t(5)
                            .build();
                    daemon
                        .restart_container(&container, Some(options))
                        .await
                        .unwrap();
                }
                if seen.matches("run-").count() >= 2 {
                    return;
                }
            }
        })
        .await;
        eprintln!("FOLLOW ACROSS A RESTART IN PLACE:\n{seen}");
        let runs: Vec<&str> = seen.lines().filter(|l| l.starts_with("run-")).collect();
        assert!(followed.is_ok() && runs.len() == 2, "{seen}");
        assert_ne!(runs[0], runs[1], "{seen}");
        // The first run's last line once, then the marker, then the second run: nothing repeated.
        let first = runs[0].trim_start_matches("run-");
        let bye = format!("bye-{first}");
        assert_eq!(seen.lines().filter(|l| *l == bye).count(), 1, "{seen}");
        let marker = seen
            .lines()
            .position(|l| l.contains("holdfast: workload again: following its next container"))
            .unwrap_or_else(|| panic!("no marker: {seen}"));
        let second = seen.lines().position(|l| l == runs[1]).unwrap();
        let bye_at = seen.lines().position(|l| l == bye).unwrap();
        assert!(bye_at < marker && marker < second, "{seen}");
        let request = holdfast_lifecycle::StopRequest {
            deadline: tokio::time::Instant::now() + std::time::Duration::from_secs(15),
            reason: holdfast_lifecycle::StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
    }

    // i[verify node.workloads.logs-backoff]
    #[test]
    fn each_follow_jitters_its_back_off_on_its_own_seed() {
        let (a, b) = (super::daemon_pacing(), super::daemon_pacing());
        assert_ne!(
            a.seed(),
            b.seed(),
            "two follows would come back in lockstep"
        );
    }

    // i[verify node.workloads.logs-backoff]
    #[tokio::test(start_paused = true)]
    async fn a_follow_waiting_on_a_daemon_that_is_down_asks_it_again_with_a_growing_back_off() {
        use crate::metrics::Metrics;
        use crate::module::Module as _;
        use holdfast_lifecycle::FaultBoard;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let node = crate::state::NodeState::new("n", FaultBoard::new(), Metrics::new());
        let module = crate::modules::workload::WorkloadModule {
            workloads: crate::modules::workload::desired(vec![
                holdfast_workload::WorkloadConfig::new("web", "busybox:1"),
            ]),
            docker_host: Some(format!("unix://{}", dir.path().join("none.sock").display())),
            seed: 7,
            stop_on_exit: false,
            owner: None,
            tick: Duration::from_millis(50),
            pull_enabled: true,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        while node
            .workload
            .with(|r| r.handle.status().is_empty())
            .unwrap_or(true)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // A daemon that is down: its socket takes each connection and drops it unanswered.
        let sock = dir.path().join("down.sock");
        let listener = tokio::net::UnixListener::bind(&sock).unwrap();
        let asks = Arc::new(AtomicUsize::new(0));
        let counting = Arc::clone(&asks);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counting.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        let docker = bollard::Docker::connect_with_unix(
            &sock.display().to_string(),
            5,
            bollard::API_DEFAULT_VERSION,
        )
        .unwrap();
        let mut next = Next::new(
            Api {
                node: node.clone(),
                token: None,
            },
            docker,
            "web".into(),
            "holdfast-web".into(),
            Run {
                id: "0123".into(),
                started_at: None,
            },
        );
        let waiting = tokio::spawn(async move { next.wait().await.is_some() });
        let t0 = tokio::time::Instant::now();
        tokio::time::sleep(Duration::from_secs(120)).await;
        let asked = asks.load(Ordering::SeqCst);
        // Every 250 ms would be 480 asks; the back-off (1 s doubling to 30 s, jittered) asks
        // about ten times in two minutes.
        assert!(
            (4..=14).contains(&asked),
            "{asked} asks in {:?}",
            t0.elapsed()
        );
        waiting.abort();
        let request = holdfast_lifecycle::StopRequest {
            deadline: tokio::time::Instant::now() + Duration::from_secs(2),
            reason: holdfast_lifecycle::StopReason::Shutdown,
        };
        started.stopper.stop(request).await.unwrap();
    }

    /// A Docker daemon on `socket` answering what the logs call asks: the container `quiet`
    /// runs and writes nothing, `chatty` writes a line every 200 ms, `gone` does not exist.
    fn fake_daemon(socket: &std::path::Path) {
        use std::time::Duration;
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::UnixListener::bind(socket).unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let Ok(n) = stream.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        seen.extend_from_slice(&buf[..n]);
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let line = text.lines().next().unwrap_or_default().to_owned();
                        seen.drain(..end + 4);
                        if line.contains("/logs") && !line.contains("gone") {
                            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.docker.raw-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
                            if stream.write_all(head.as_bytes()).await.is_err() {
                                return;
                            }
                            if line.contains("quiet") {
                                tokio::time::sleep(Duration::from_secs(3600)).await;
                                return;
                            }
                            if line.contains("broken") {
                                // One line, then a chunk the client cannot read.
                                let mut frame = vec![1u8, 0, 0, 0];
                                frame.extend_from_slice(&5u32.to_be_bytes());
                                frame.extend_from_slice(b"once\n");
                                let mut out = format!("{:x}\r\n", frame.len()).into_bytes();
                                out.extend_from_slice(&frame);
                                out.extend_from_slice(b"\r\nzz\r\n");
                                let _ = stream.write_all(&out).await;
                                return;
                            }
                            loop {
                                let payload = b"tick\n";
                                let mut frame = vec![1u8, 0, 0, 0];
                                frame.extend_from_slice(&5u32.to_be_bytes());
                                frame.extend_from_slice(payload);
                                let mut out = format!("{:x}\r\n", frame.len()).into_bytes();
                                out.extend_from_slice(&frame);
                                out.extend_from_slice(b"\r\n");
                                if stream.write_all(&out).await.is_err() {
                                    return;
                                }
                                tokio::time::sleep(Duration::from_millis(200)).await;
                            }
                        }
                        let (status, body) = if line.contains("/version") {
                            (
                                200,
                                r#"{"ApiVersion":"1.41","MinAPIVersion":"1.12"}"#.to_owned(),
                            )
                        } else if line.contains("/containers/json") {
                            (200, "[]".to_owned())
                        } else if line.contains("gone") {
                            (404, r#"{"message":"No such container"}"#.to_owned())
                        } else if line.contains("/json") {
                            (200, r#"{"Id":"0123","Name":"/c"}"#.to_owned())
                        } else {
                            (500, r#"{"message":"no"}"#.to_owned())
                        };
                        let response = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    }

    /// A node whose workload module knows `quiet`, `chatty` and `gone` on the fake daemon.
    async fn node_with_fake_daemon(
        dir: &std::path::Path,
    ) -> (crate::state::NodeState, crate::module::Started) {
        use crate::metrics::Metrics;
        use crate::module::Module as _;
        use holdfast_lifecycle::FaultBoard;
        let sock = dir.join("d.sock");
        fake_daemon(&sock);
        let node = crate::state::NodeState::new("n", FaultBoard::new(), Metrics::new());
        let module = crate::modules::workload::WorkloadModule {
            workloads: crate::modules::workload::desired(
                ["quiet", "chatty", "gone", "broken"]
                    .into_iter()
                    .map(|name| holdfast_workload::WorkloadConfig::new(name, "busybox:1"))
                    .collect(),
            ),
            docker_host: Some(format!("unix://{}", sock.display())),
            seed: 7,
            stop_on_exit: false,
            owner: None,
            tick: std::time::Duration::from_millis(50),
            pull_enabled: true,
            node: node.clone(),
        };
        let started = module.start().unwrap();
        while node
            .workload
            .with(|r| r.handle.status().is_empty())
            .unwrap_or(true)
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        (node, started)
    }

    // i[verify node.workloads.logs+2]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_follow_answers_at_once_when_quiet_and_outlives_the_request_timeout_and_connection_age()
     {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let (node, _started) = node_with_fake_daemon(dir.path()).await;
        let limits = super::super::AdminLimits {
            request_timeout: Duration::from_secs(1),
            max_connection_age: Duration::from_secs(2),
            ..Default::default()
        };
        let server = super::super::serve(
            node.clone(),
            super::super::AdminConfig {
                socket: Some(dir.path().join("admin.sock")),
                limits,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let target = super::super::client::Target::Unix(dir.path().join("admin.sock"));
        // A container that writes nothing: the answer stays open (no 408 at the request timeout).
        let quiet = tokio::time::timeout(
            Duration::from_secs(3),
            super::super::client::stream_get(
                &target,
                "/v1/workloads/quiet/logs?follow=true",
                None,
                |_| std::ops::ControlFlow::Continue(()),
            ),
        )
        .await;
        assert!(quiet.is_err(), "the quiet follow ended: {quiet:?}");
        // A chatty one is followed past the connection's age.
        let mut chunks = 0;
        let chatty = tokio::time::timeout(
            Duration::from_secs(4),
            super::super::client::stream_get(
                &target,
                "/v1/workloads/chatty/logs?follow=true",
                None,
                |_| {
                    chunks += 1;
                    std::ops::ControlFlow::Continue(())
                },
            ),
        )
        .await;
        assert!(chatty.is_err(), "the chatty follow ended: {chatty:?}");
        assert!(chunks >= 10, "{chunks} chunks in 4 s");
        // A workload without a container is still told apart before the answer begins.
        let gone = super::super::client::call(
            &target,
            hyper::Method::GET,
            "/v1/workloads/gone/logs",
            None,
        )
        .await;
        match gone {
            Err(super::super::client::ClientError::Refused { status, body, .. }) => {
                assert_eq!(status, 404);
                assert!(body.contains("has no container now"), "{body}");
            }
            other => panic!("{other:?}"),
        }
        // A daemon error in the middle: the answer ends broken, not as a complete log.
        let mut seen = Vec::new();
        let broken =
            super::super::client::stream_get(&target, "/v1/workloads/broken/logs", None, |chunk| {
                seen.extend_from_slice(chunk);
                std::ops::ControlFlow::Continue(())
            })
            .await;
        assert!(
            matches!(broken, Err(super::super::client::ClientError::Http { .. })),
            "{broken:?}"
        );
        assert_eq!(seen, b"once\n");
        server.shutdown(Duration::from_millis(100)).await;
    }

    // i[verify node.workloads.logs+2]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn logs_over_tcp_need_the_bearer_token() {
        use super::super::client::{ClientError, Target, call};
        let dir = tempfile::tempdir().unwrap();
        let (node, _started) = node_with_fake_daemon(dir.path()).await;
        let file = dir.path().join("token");
        std::fs::write(&file, "s3cret-token\n").unwrap();
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
        let token = super::super::token::read(&file).unwrap();
        let with_token = super::super::serve(
            node.clone(),
            super::super::AdminConfig {
                tcp: Some("127.0.0.1:0".parse().unwrap()),
                token: Some(token.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let target = Target::Tcp(with_token.tcp.unwrap());
        let path = "/v1/workloads/gone/logs";
        match call(&target, hyper::Method::GET, path, None).await {
            Err(ClientError::Refused { status, .. }) => assert_eq!(status, 401),
            other => panic!("{other:?}"),
        }
        // With it, the call goes through (to the 404 of a workload without a container).
        match call(&target, hyper::Method::GET, path, Some(&token)).await {
            Err(ClientError::Refused { status, .. }) => assert_eq!(status, 404),
            other => panic!("{other:?}"),
        }
        // No token configured: over TCP never.
        let without = super::super::serve(
            node.clone(),
            super::super::AdminConfig {
                tcp: Some("127.0.0.1:0".parse().unwrap()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        match call(
            &Target::Tcp(without.tcp.unwrap()),
            hyper::Method::GET,
            path,
            None,
        )
        .await
        {
            Err(ClientError::Refused { status, .. }) => assert_eq!(status, 403),
            other => panic!("{other:?}"),
        }
        with_token
            .shutdown(std::time::Duration::from_millis(100))
            .await;
        without
            .shutdown(std::time::Duration::from_millis(100))
            .await;
    }
}
