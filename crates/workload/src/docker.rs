//! The Docker Engine API calls the shell makes: one function per action, the container list,
//! and the event stream. No decisions are taken here.
//!
//! The endpoint is a `DOCKER_HOST`-style URL; the API version is negotiated on every connect, so a
//! daemon restarted (or upgraded) underneath is addressed in its own version.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, EventMessage, HostConfig, RestartPolicyNameEnum};
use bollard::query_parameters::{
    EventsOptions, InspectContainerOptions, ListContainersOptions, LogsOptions,
    RemoveContainerOptions, StopContainerOptions,
};
use futures_util::{Stream, StreamExt};

pub use crate::owner::label_filter;

use crate::reconciler::{
    ContainerEvent, ContainerSpec, Observed, SPEC_LABEL, StartError, WORKLOAD_LABEL,
};

/// The daemon could not be reached or refused a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DockerError(pub String);

impl From<bollard::errors::Error> for DockerError {
    fn from(e: bollard::errors::Error) -> Self {
        DockerError(e.to_string())
    }
}

/// Connects to `host` and negotiates the API version.
pub async fn connect(host: &str) -> Result<Docker, DockerError> {
    let docker = Docker::connect_with_host(host)?;
    Ok(docker.negotiate_version().await?)
}

fn not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Creates a container from `spec` and starts it; the daemon restarts nothing itself (restart
/// policy "no": holdfast paces restarts).
pub async fn start(docker: &Docker, spec: &ContainerSpec) -> Result<String, StartError> {
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: Some(spec.env.clone()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        host_config: Some(HostConfig {
            restart_policy: Some(bollard::models::RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = docker
        .create_container(None, body)
        .await
        .map_err(|e| StartError {
            container: None,
            message: format!("create: {e}"),
        })?;
    match docker.start_container(&created.id, None).await {
        Ok(()) => Ok(created.id),
        Err(e) => Err(StartError {
            container: Some(created.id),
            message: format!("start: {e}"),
        }),
    }
}

// r[impl workload.stop-timeout]
/// The daemon's stop timeout for `stop_timeout`, in the whole seconds its API takes, rounded up:
/// truncating would make 500 ms an immediate SIGKILL. Only a configured zero is zero.
fn stop_seconds(stop_timeout: Duration) -> i32 {
    let whole = stop_timeout.as_secs();
    let secs = if stop_timeout.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    };
    i32::try_from(secs).unwrap_or(i32::MAX)
}

/// Stops (SIGTERM, SIGKILL after `stop_timeout`) and removes a container; one already gone is
/// removed.
pub async fn remove(
    docker: &Docker,
    container: &str,
    stop_timeout: Duration,
) -> Result<(), DockerError> {
    let t = stop_seconds(stop_timeout);
    let stop = StopContainerOptions {
        signal: None,
        t: Some(t),
    };
    match docker.stop_container(container, Some(stop)).await {
        Ok(()) => {}
        Err(e) if not_found(&e) => return Ok(()),
        // 304 (already stopped) and others: the forced remove below settles it.
        Err(_) => {}
    }
    let options = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    match docker.remove_container(container, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Stops a container within `stop_timeout` and leaves it (for a stop on holdfast's exit).
pub async fn stop(
    docker: &Docker,
    container: &str,
    stop_timeout: Duration,
) -> Result<(), DockerError> {
    let t = stop_seconds(stop_timeout);
    let stop = StopContainerOptions {
        signal: None,
        t: Some(t),
    };
    match docker.stop_container(container, Some(stop)).await {
        Ok(()) => Ok(()),
        Err(e) if not_found(&e) => Ok(()),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 304, ..
        }) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The last `lines` lines of a container's output (stdout and stderr).
pub async fn log_tail(docker: &Docker, container: &str, lines: usize) -> Vec<String> {
    let options = LogsOptions {
        stdout: true,
        stderr: true,
        tail: lines.to_string(),
        ..Default::default()
    };
    let mut text = String::new();
    let mut stream = docker.logs(container, Some(options));
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(out) => text.push_str(&out.to_string()),
            // A log we cannot read leaves the fault without its tail, not without its exit.
            Err(_) => break,
        }
    }
    let all: Vec<String> = text.lines().map(str::to_owned).collect();
    let skip = all.len().saturating_sub(lines);
    all.into_iter().skip(skip).collect()
}

/// Every container labelled with [`WORKLOAD_LABEL`] (and `owner`'s label when given), running or
/// not; an exited one with its exit code and log tail.
pub async fn list(
    docker: &Docker,
    owner: Option<&str>,
    tail_lines: usize,
) -> Result<Vec<Observed>, DockerError> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([("label".to_owned(), label_filter(owner))])),
        ..Default::default()
    };
    let mut out = Vec::new();
    for c in docker.list_containers(Some(options)).await? {
        let (Some(id), Some(labels)) = (c.id, c.labels) else {
            continue;
        };
        let Some(workload) = labels.get(WORKLOAD_LABEL).cloned() else {
            continue;
        };
        let running = c.state == Some(bollard::models::ContainerSummaryStateEnum::RUNNING);
        let mut observed = Observed {
            id,
            workload,
            spec_hash: labels.get(SPEC_LABEL).cloned(),
            running,
            exit_code: None,
            log_tail: Vec::new(),
        };
        if !running {
            match docker
                .inspect_container(&observed.id, None::<InspectContainerOptions>)
                .await
            {
                Ok(inspect) => {
                    observed.exit_code = inspect.state.and_then(|s| s.exit_code);
                    observed.log_tail = log_tail(docker, &observed.id, tail_lines).await;
                }
                // Removed between the list and the inspect: it is gone.
                Err(e) if not_found(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        out.push(observed);
    }
    Ok(out)
}

/// The daemon's stream of `die` and `destroy` events of labelled containers, from `since`
/// (seconds since the epoch) on.
pub fn events_since(
    docker: &Docker,
    owner: Option<&str>,
    since: u64,
) -> impl Stream<Item = Result<EventMessage, DockerError>> + use<> {
    let options = EventsOptions {
        since: Some(since.to_string()),
        filters: Some(HashMap::from([
            ("type".to_owned(), vec!["container".to_owned()]),
            ("label".to_owned(), label_filter(owner)),
            (
                "event".to_owned(),
                vec!["die".to_owned(), "destroy".to_owned()],
            ),
        ])),
        until: None,
    };
    docker
        .events(Some(options))
        .map(|item| item.map_err(DockerError::from))
}

/// The event as the core takes it (before its log tail is fetched); `None` for anything else.
pub fn container_event(message: &EventMessage) -> Option<ContainerEvent> {
    let actor = message.actor.as_ref()?;
    let id = actor.id.clone()?;
    match message.action.as_deref()? {
        "die" => Some(ContainerEvent::Died {
            id,
            exit_code: actor
                .attributes
                .as_ref()
                .and_then(|a| a.get("exitCode"))
                .and_then(|c| c.parse().ok()),
            log_tail: Vec::new(),
        }),
        "destroy" => Some(ContainerEvent::Destroyed { id }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    // r[verify workload.stop-timeout]
    #[test]
    fn a_sub_second_stop_timeout_is_rounded_up_never_to_an_immediate_kill() {
        let ms = Duration::from_millis;
        assert_eq!(
            stop_seconds(Duration::ZERO),
            0,
            "0 is configured as an immediate kill"
        );
        assert_eq!(stop_seconds(Duration::from_nanos(1)), 1);
        assert_eq!(stop_seconds(ms(500)), 1);
        assert_eq!(stop_seconds(ms(999)), 1);
        assert_eq!(stop_seconds(ms(1000)), 1);
        assert_eq!(stop_seconds(ms(1001)), 2);
        assert_eq!(stop_seconds(ms(2500)), 3);
        assert_eq!(stop_seconds(Duration::from_secs(10)), 10);
        assert_eq!(stop_seconds(Duration::MAX), i32::MAX);
        assert_eq!(
            stop_seconds(Duration::from_secs(u64::from(i32::MAX.unsigned_abs())) + ms(1)),
            i32::MAX
        );
    }

    // r[verify workload.events]
    #[test]
    fn die_and_destroy_events_become_container_events() {
        let message = |action: &str, attrs: &[(&str, &str)]| EventMessage {
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("c1".to_owned()),
                attributes: Some(
                    attrs
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
            }),
            ..Default::default()
        };
        assert_eq!(
            container_event(&message("die", &[("exitCode", "137")])),
            Some(ContainerEvent::Died {
                id: "c1".into(),
                exit_code: Some(137),
                log_tail: vec![]
            })
        );
        assert_eq!(
            container_event(&message("destroy", &[])),
            Some(ContainerEvent::Destroyed { id: "c1".into() })
        );
        assert_eq!(container_event(&message("start", &[])), None);
    }
}
