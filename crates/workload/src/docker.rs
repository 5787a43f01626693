//! The Docker Engine API calls the shell makes: one function per action, the container list,
//! and the event stream. No decisions are taken here.
//!
//! The endpoint is a `DOCKER_HOST`-style URL; the API version is negotiated on every connect, so a
//! daemon restarted (or upgraded) underneath is addressed in its own version.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, EventMessage, HealthConfig, HealthStatusEnum,
    HostConfig, HostConfigLogConfig, Mount, MountType, NetworkCreateRequest, NetworkingConfig,
    PortBinding, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, EventsOptions, InspectContainerOptions,
    KillContainerOptionsBuilder, ListContainersOptions, LogsOptions, RemoveContainerOptions,
    StopContainerOptions,
};
use futures_util::{Stream, StreamExt};

pub use crate::owner::label_filter;

use crate::reconciler::{
    ContainerEvent, ContainerSpec, Observed, SPEC_LABEL, StartCause, StartError, Started,
    WORKLOAD_LABEL,
};
use crate::shape::VolumeSource;
use crate::state::HealthStatus;

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

// r[impl workload.shape+2]
// r[impl workload.shape.ports]
// r[impl workload.shape.volumes]
// r[impl workload.shape.log]
/// The Engine API's create body for `spec`; the daemon restarts nothing itself (restart policy
/// "no": holdfast paces restarts). Unset keys stay unset, leaving the daemon's defaults.
pub fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    let shape = &spec.shape;
    let mut port_bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for p in &shape.ports {
        port_bindings
            .entry(p.container_key())
            .or_default()
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: p.host_ip.map(|ip| ip.to_string()),
                host_port: Some(p.host_port.to_string()),
            });
    }
    let mut exposed: Vec<String> = port_bindings.keys().cloned().collect();
    exposed.sort();
    let mounts: Vec<Mount> = shape
        .volumes
        .iter()
        .map(|v| {
            let (typ, source) = match &v.source {
                VolumeSource::Bind(path) => (MountType::BIND, path),
                VolumeSource::Named(name) => (MountType::VOLUME, name),
            };
            Mount {
                target: Some(v.target.clone()),
                source: Some(source.clone()),
                typ: Some(typ),
                read_only: Some(v.read_only),
                ..Default::default()
            }
        })
        .collect();
    let some_vec = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: Some(spec.env.clone()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        user: shape.user.clone(),
        working_dir: shape.workdir.clone(),
        exposed_ports: (!exposed.is_empty()).then_some(exposed),
        host_config: Some(HostConfig {
            restart_policy: Some(bollard::models::RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            port_bindings: (!port_bindings.is_empty()).then_some(port_bindings),
            mounts: (!mounts.is_empty()).then_some(mounts),
            network_mode: shape.network.clone(),
            memory: shape.memory.and_then(|m| i64::try_from(m.0).ok()),
            nano_cpus: shape.cpus.and_then(|c| i64::try_from(c.0).ok()),
            pids_limit: shape.pids_limit,
            readonly_rootfs: shape.read_only.then_some(true),
            cap_add: some_vec(&shape.cap_add),
            cap_drop: some_vec(&shape.cap_drop),
            init: shape.init.then_some(true),
            log_config: Some(HostConfigLogConfig {
                typ: Some(shape.log.driver.clone()),
                config: Some(shape.log.effective_options().into_iter().collect()),
            }),
            ..Default::default()
        }),
        healthcheck: shape.health.as_ref().map(health_config),
        networking_config: shape
            .network
            .as_ref()
            .filter(|n| user_defined(n))
            .map(|network| NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network.clone(),
                    EndpointSettings {
                        aliases: Some(vec![spec.workload.clone()]),
                        ..Default::default()
                    },
                )])),
            }),
        ..Default::default()
    }
}

// r[impl workload.network.create]
/// `body` joining its network by `network_id` as well as by name: two networks may share the
/// name for a moment, which the daemon refuses to join by name alone. Not part of the spec, so
/// an adopted container is compared without it.
fn pinned(mut body: ContainerCreateBody, network_id: Option<&str>) -> ContainerCreateBody {
    let endpoints = body
        .networking_config
        .as_mut()
        .and_then(|n| n.endpoints_config.as_mut());
    if let (Some(endpoints), Some(id)) = (endpoints, network_id) {
        for endpoint in endpoints.values_mut() {
            endpoint.network_id = Some(id.to_owned());
        }
    }
    body
}

/// The label a network the node created carries (`holdfast.network=node`).
pub const NETWORK_LABEL: &str = "holdfast.network";

// r[impl workload.network+3]
/// Whether `network` is one a container can have aliases on: not the default bridge, the host's
/// network, none, or another container's.
fn user_defined(network: &str) -> bool {
    !matches!(network, "bridge" | "default" | "host" | "none") && !network.starts_with("container:")
}

// r[impl workload.network+3]
/// Makes sure the node's network (`node_network`) exists when `spec` joins it (see
/// [`create_node_network`]), and says its id then, for [`start`] to join it by. Other networks
/// are the operator's.
pub async fn ensure_network(
    docker: &Docker,
    spec: &ContainerSpec,
    node_network: &str,
) -> Result<Option<String>, StartError> {
    if spec.shape.network.as_deref() != Some(node_network) {
        return Ok(None);
    }
    // Within one process the starts take turns, so they never race each other; two processes
    // racing are settled by `create_node_network` itself.
    static CREATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one_at_a_time = CREATING.lock().await;
    create_node_network(docker, node_network).await.map(Some)
}

// r[impl workload.network.create]
/// [`ensure_network`], then [`start`] on the network it settled on; when the create fails because
/// that network went meanwhile (a slower peer removed it), settles again and starts once more.
pub async fn ensure_network_and_start(
    docker: &Docker,
    spec: &ContainerSpec,
    node_network: &str,
) -> Result<Started, StartError> {
    let network_id = ensure_network(docker, spec, node_network).await?;
    let first = start(docker, spec, network_id.as_deref()).await;
    let Some(id) = network_id else {
        return first;
    };
    match first {
        Err(e) if e.container.is_none() && network_gone(docker, &id).await => {
            tracing::info!(
                network = node_network,
                id,
                "the node's network went before the container was created: settling again"
            );
            let network_id = ensure_network(docker, spec, node_network).await?;
            start(docker, spec, network_id.as_deref()).await
        }
        other => other,
    }
}

async fn network_gone(docker: &Docker, id: &str) -> bool {
    docker
        .inspect_network(id, None::<bollard::query_parameters::InspectNetworkOptions>)
        .await
        .is_err_and(|e| not_found(&e))
}

/// How many times [`create_node_network`] lists the networks before giving up, the pause
/// while another creator removes its duplicate (or after a create refused as a conflict), and
/// how many pauses a start waits before it takes a newer one for one its creator went on with
/// (or left behind).
const SETTLE_ROUNDS: u32 = 100;
const SETTLE_PAUSE: Duration = Duration::from_millis(100);
const SETTLE_PATIENCE: u32 = 10;

fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

// r[impl workload.network.create]
/// Leaves exactly one node network named `name` (a bridge labelled [`NETWORK_LABEL`]), creating
/// it when there is none, safely while another process does the same, and returns its id: a
/// container joins by it, since for a moment two networks may share the name. A create the
/// daemon refuses as a conflict is re-read, and a duplicate the daemon accepted (dockerd before
/// 25 does) is removed by whichever creator made the newer one, or by the oldest's creator when
/// the newer one stays, or by any start once a duplicate stayed longer than its patience and no
/// container is on it. Someone else's network of the name is an error.
pub async fn create_node_network(docker: &Docker, name: &str) -> Result<String, StartError> {
    use crate::network::{Settle, settle};
    let failed = |message: String| StartError {
        cause: StartCause::Failed,
        container: None,
        message: format!("network {name}: {message}"),
    };
    // What this start created and did not hand on is given back before it fails.
    let give_back = async |mine: Option<String>| {
        if let Some(id) = mine {
            let _ = docker.remove_network(&id).await;
        }
    };
    let mut mine: Option<String> = None;
    let mut found = Vec::new();
    let mut waited = 0;
    for _ in 0..SETTLE_ROUNDS {
        found = match networks_named(docker, name).await {
            Ok(found) => found,
            Err(e) => {
                give_back(mine).await;
                return Err(failed(e.to_string()));
            }
        };
        match settle(&found, mine.as_deref(), waited >= SETTLE_PATIENCE) {
            Settle::Use(id) => return Ok(id),
            Settle::Create => {
                let request = NetworkCreateRequest {
                    name: name.to_owned(),
                    driver: Some("bridge".to_owned()),
                    labels: Some(HashMap::from([(
                        NETWORK_LABEL.to_owned(),
                        "node".to_owned(),
                    )])),
                    ..Default::default()
                };
                match docker.create_network(request).await {
                    Ok(created) => {
                        tracing::info!(
                            network = name,
                            id = created.id,
                            "created the node's network"
                        );
                        mine = Some(created.id);
                    }
                    // Created meanwhile by another process: read again what it is, after a
                    // pause, so a name the daemon keeps refusing is not asked for in a spin.
                    Err(e) if status_of(&e) == Some(409) => {
                        tokio::time::sleep(SETTLE_PAUSE).await;
                    }
                    Err(e) => return Err(failed(e.to_string())),
                }
            }
            Settle::Remove(id) => {
                tracing::info!(
                    network = name,
                    id,
                    "removing the node's network created twice"
                );
                match docker.remove_network(&id).await {
                    Ok(()) => {}
                    Err(e) if not_found(&e) => {}
                    // A container is on it already (one that joined it by id): it stays, and
                    // this start is no longer its creator; the other duplicates give way.
                    Err(e) if status_of(&e) == Some(403) => {}
                    Err(e) => return Err(failed(format!("removing the duplicate {id}: {e}"))),
                }
                mine = None;
                waited = 0;
            }
            Settle::Prune(ids) => {
                if !prune(docker, name, &ids).await {
                    break;
                }
                waited = 0;
            }
            Settle::Wait => {
                waited += 1;
                tokio::time::sleep(SETTLE_PAUSE).await;
            }
            Settle::Foreign { id, driver } => {
                give_back(mine).await;
                // r[impl workload.network.foreign]
                return Err(StartError {
                    cause: StartCause::ForeignNetwork,
                    ..failed(format!(
                        "a network of this name exists ({id}, driver {driver}) that is not the \
                         node's (a bridge labelled {NETWORK_LABEL}=node): someone else's; remove \
                         or rename it"
                    ))
                });
            }
        }
    }
    let ids: Vec<&str> = found.iter().map(|f| f.id.as_str()).collect();
    Err(failed(format!(
        "{} networks of this name ({}) did not settle to one; remove all but one",
        ids.len(),
        ids.join(", ")
    )))
}

/// Of the node networks `ids` (oldest first) left behind by other starts, keeps one (the oldest
/// a container is on, else the oldest) and removes the others no container is on; whether any
/// went. None going means more than one has a container: only the operator can settle that.
async fn prune(docker: &Docker, name: &str, ids: &[String]) -> bool {
    let mut in_use = Vec::new();
    for id in ids {
        let inspected = docker
            .inspect_network(id, None::<bollard::query_parameters::InspectNetworkOptions>)
            .await;
        in_use.push(match inspected {
            Ok(n) => n.containers.as_ref().is_some_and(|c| !c.is_empty()),
            // Gone already: something else settled it.
            Err(e) if not_found(&e) => return true,
            // Unknown: never removed.
            Err(_) => true,
        });
    }
    let keep = in_use.iter().position(|used| *used).unwrap_or(0);
    let mut removed = false;
    for (i, id) in ids.iter().enumerate() {
        if i == keep || in_use[i] {
            continue;
        }
        tracing::info!(network = name, id, "removing a node network left twice");
        match docker.remove_network(id).await {
            Ok(()) => removed = true,
            Err(e) if not_found(&e) => removed = true,
            Err(_) => {}
        }
    }
    removed
}

/// Every network named exactly `name` (the daemon's `name` filter also matches parts of names).
async fn networks_named(
    docker: &Docker,
    name: &str,
) -> Result<Vec<crate::network::Found>, bollard::errors::Error> {
    let options = bollard::query_parameters::ListNetworksOptions {
        filters: Some(HashMap::from([("name".to_owned(), vec![name.to_owned()])])),
    };
    Ok(docker
        .list_networks(Some(options))
        .await?
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .map(|n| crate::network::Found {
            id: n.id.unwrap_or_default(),
            created: n.created.unwrap_or_default(),
            driver: n.driver.unwrap_or_default(),
            labelled: n
                .labels
                .unwrap_or_default()
                .get(NETWORK_LABEL)
                .is_some_and(|v| v == "node"),
        })
        .collect())
}

// r[impl workload.health+2]
/// A `health` table as the Engine API's `HealthConfig` (durations in nanoseconds).
fn health_config(h: &crate::shape::HealthCheck) -> HealthConfig {
    let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let test = h.test();
    HealthConfig {
        test: (!test.is_empty()).then_some(test),
        interval: Some(nanos(h.interval)),
        timeout: Some(nanos(h.timeout)),
        start_period: Some(nanos(h.start_period)),
        retries: Some(i64::from(h.retries)),
        start_interval: None,
    }
}

// r[impl workload.name]
/// Creates a container from `spec` under its name and starts it; says whether the daemon runs a
/// health check for it (the workload's or the image's). `network_id` is the id of `spec`'s
/// network ([`ensure_network`]'s answer), joined by it rather than by its name.
pub async fn start(
    docker: &Docker,
    spec: &ContainerSpec,
    network_id: Option<&str>,
) -> Result<Started, StartError> {
    let options = CreateContainerOptionsBuilder::new()
        .name(&spec.name)
        .build();
    let created = docker
        .create_container(Some(options), pinned(create_body(spec), network_id))
        .await
        .map_err(|e| StartError {
            cause: StartCause::Failed,
            container: None,
            message: format!("create: {e}"),
        })?;
    match docker.start_container(&created.id, None).await {
        Ok(()) => {
            // A check the node makes is known here; the image's HEALTHCHECK only to the daemon:
            // ask it. A container gone already has no health to wait for; its exit is on the
            // event stream.
            let node_probe = spec
                .shape
                .health
                .as_ref()
                .is_some_and(|h| h.node_probe().is_some());
            let health_check = node_probe
                || docker
                    .inspect_container(&created.id, None::<InspectContainerOptions>)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                    .and_then(|s| s.health)
                    .and_then(|h| h.status)
                    .is_some_and(|s| {
                        !matches!(s, HealthStatusEnum::NONE | HealthStatusEnum::EMPTY)
                    });
            Ok(Started {
                container: created.id,
                health_check,
            })
        }
        Err(e) => Err(StartError {
            cause: StartCause::Failed,
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

// r[impl workload.certs.renew+2]
/// Sends `signal` (`SIGHUP`) to a container's main process, through the Engine API's kill.
pub async fn signal(docker: &Docker, container: &str, signal: &str) -> Result<(), DockerError> {
    let options = KillContainerOptionsBuilder::new().signal(signal).build();
    docker.kill_container(container, Some(options)).await?;
    Ok(())
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
            health: running
                .then(|| c.status.as_deref().and_then(listed_health))
                .flatten(),
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

// r[impl workload.health.gate]
/// A running container's health as the daemon's list writes it in its status ("Up 5 seconds
/// (healthy)", "(health: starting)", "(unhealthy)").
fn listed_health(status: &str) -> Option<HealthStatus> {
    if status.ends_with("(healthy)") {
        Some(HealthStatus::Healthy)
    } else if status.ends_with("(unhealthy)") {
        Some(HealthStatus::Unhealthy)
    } else if status.ends_with("(health: starting)") {
        Some(HealthStatus::Starting)
    } else {
        None
    }
}

/// The last probe's output of a container's health check, as lines (empty when unknown).
pub async fn health_output(docker: &Docker, container: &str) -> Vec<String> {
    docker
        .inspect_container(container, None::<InspectContainerOptions>)
        .await
        .ok()
        .and_then(|i| i.state)
        .and_then(|s| s.health)
        .and_then(|h| h.log)
        .and_then(|log| log.into_iter().last())
        .and_then(|r| r.output)
        .map(|out| out.lines().map(str::to_owned).collect())
        .unwrap_or_default()
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
                // `health_status` matches the daemon's "health_status: healthy" and the rest.
                vec![
                    "die".to_owned(),
                    "destroy".to_owned(),
                    "health_status".to_owned(),
                ],
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
        "health_status: healthy" => Some(ContainerEvent::Health {
            id,
            status: HealthStatus::Healthy,
            output: Vec::new(),
        }),
        "health_status: unhealthy" => Some(ContainerEvent::Health {
            id,
            status: HealthStatus::Unhealthy,
            output: Vec::new(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bollard::models::EventActor;

    pub(super) fn spec_of(w: &crate::WorkloadConfig, owner: Option<&str>) -> ContainerSpec {
        // Alone here: its dependencies (holdfast's own key) would hold it back.
        let w = crate::WorkloadConfig {
            depends_on: Vec::new(),
            ..w.clone()
        };
        let mut core = crate::Reconciler::new(
            crate::ModuleConfig {
                owner: owner.map(str::to_owned),
                ..crate::ModuleConfig::new(7)
            },
            holdfast_lifecycle::FaultBoard::new(),
        );
        core.set_desired(vec![w]);
        core.resync(vec![], std::time::Instant::now());
        let mut images = |_: &str, _: std::time::Instant| crate::ImagePresence::Present;
        match core.tick(std::time::Instant::now(), &mut images).pop() {
            Some(crate::Action::Start { spec, .. }) => *spec,
            other => panic!("{other:?}"),
        }
    }

    // r[verify workload.shape+2]
    // r[verify workload.shape.ports]
    // r[verify workload.shape.volumes]
    // r[verify workload.shape.log]
    // r[verify workload.name]
    #[test]
    fn a_full_workload_maps_onto_the_engine_apis_create_body() {
        let spec = spec_of(&crate::config::tests::full(), None);
        assert_eq!(spec.name, "holdfast-web");
        insta::with_settings!({sort_maps => true}, {
            insta::assert_json_snapshot!(create_body(&spec));
        });
    }

    // r[verify workload.network+3]
    #[test]
    fn with_an_owner_the_nodes_network_is_the_owners_own() {
        let mut w = crate::WorkloadConfig::new("db", "busybox");
        w.network = Some(crate::NODE_NETWORK.into());
        let spec = spec_of(&w, Some("a"));
        let mut config = crate::ModuleConfig::new(1);
        config.owner = Some("a".into());
        let (joined, joins) = config.on_node_network(spec.clone());
        assert!(joins);
        assert_eq!(joined.shape.network.as_deref(), Some("holdfast-a"));
        // The container's spec label is the config's: changing the daemon name replaces nothing.
        assert_eq!(joined.labels, spec.labels);
        config.owner = Some("b".into());
        assert_eq!(config.node_network_name(), "holdfast-b");
        config.owner = None;
        assert_eq!(config.node_network_name(), "holdfast");
        // An embedder's own name, and any other network, as written.
        config.owner = Some("a".into());
        config.node_network = "hf-test".into();
        assert_eq!(config.node_network_name(), "hf-test");
        let (other, joins) = config.on_node_network(spec);
        assert!(!joins);
        assert_eq!(other.shape.network.as_deref(), Some("holdfast"));
    }

    // r[verify workload.network.create]
    #[test]
    fn the_nodes_network_is_joined_by_the_settled_id_as_well_as_its_name() {
        let mut w = crate::WorkloadConfig::new("db", "busybox");
        w.network = Some("holdfast".into());
        let spec = spec_of(&w, None);
        let body = pinned(create_body(&spec), Some("abc123"));
        let endpoint = &body.networking_config.unwrap().endpoints_config.unwrap()["holdfast"];
        assert_eq!(endpoint.network_id.as_deref(), Some("abc123"));
        assert_eq!(endpoint.aliases, Some(vec!["db".to_owned()]));
        assert_eq!(
            body.host_config.unwrap().network_mode.as_deref(),
            Some("holdfast")
        );
        // The spec (and so an adopted container's comparison) does not carry it.
        assert_eq!(pinned(create_body(&spec), None), create_body(&spec));
    }

    // r[verify workload.network+3]
    #[test]
    fn on_a_user_defined_network_the_workload_name_is_an_alias() {
        let mut w = crate::WorkloadConfig::new("db", "busybox");
        w.network = Some(crate::NODE_NETWORK.into());
        let body = create_body(&spec_of(&w, None));
        let endpoints = body.networking_config.unwrap().endpoints_config.unwrap();
        assert_eq!(
            endpoints["holdfast"].aliases.as_deref(),
            Some(&["db".to_owned()][..])
        );
        assert_eq!(
            body.host_config.unwrap().network_mode.as_deref(),
            Some("holdfast")
        );
        for builtin in ["host", "none", "bridge", "container:abc"] {
            w.network = Some(builtin.into());
            assert_eq!(create_body(&spec_of(&w, None)).networking_config, None);
        }
    }

    // r[verify workload.shape+2]
    // r[verify workload.shape.log]
    #[test]
    fn unset_keys_leave_the_daemons_defaults_but_the_log_rotates() {
        let spec = spec_of(&crate::WorkloadConfig::new("web", "busybox"), Some("t 1"));
        assert_eq!(spec.name, "holdfast-t-1-web");
        let body = create_body(&spec);
        assert_eq!(body.exposed_ports, None);
        assert_eq!(body.user, None);
        assert_eq!(body.working_dir, None);
        let host = body.host_config.unwrap();
        assert_eq!(host.port_bindings, None);
        assert_eq!(host.mounts, None);
        assert_eq!(host.network_mode, None);
        assert_eq!(host.memory, None);
        assert_eq!(host.nano_cpus, None);
        assert_eq!(host.pids_limit, None);
        assert_eq!(host.readonly_rootfs, None);
        assert_eq!(host.cap_add, None);
        assert_eq!(host.init, None);
        let log = host.log_config.unwrap();
        assert_eq!(log.typ.as_deref(), Some("json-file"));
        let options = log.config.unwrap();
        assert_eq!(options.get("max-size").map(String::as_str), Some("10m"));
        assert_eq!(options.get("max-file").map(String::as_str), Some("3"));
    }

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

    // r[verify workload.health.gate]
    #[test]
    fn health_events_and_listed_health_become_verdicts() {
        let message = |action: &str| EventMessage {
            action: Some(action.to_owned()),
            actor: Some(EventActor {
                id: Some("c1".to_owned()),
                attributes: None,
            }),
            ..Default::default()
        };
        let verdict = |action: &str| match container_event(&message(action)) {
            Some(ContainerEvent::Health { status, .. }) => Some(status),
            _ => None,
        };
        assert_eq!(
            verdict("health_status: healthy"),
            Some(HealthStatus::Healthy)
        );
        assert_eq!(
            verdict("health_status: unhealthy"),
            Some(HealthStatus::Unhealthy)
        );
        assert_eq!(verdict("health_status: starting"), None);
        assert_eq!(
            listed_health("Up 5 seconds (healthy)"),
            Some(HealthStatus::Healthy)
        );
        assert_eq!(
            listed_health("Up 2 minutes (unhealthy)"),
            Some(HealthStatus::Unhealthy)
        );
        assert_eq!(
            listed_health("Up 1 second (health: starting)"),
            Some(HealthStatus::Starting)
        );
        assert_eq!(listed_health("Up 5 seconds"), None);
    }

    // r[verify workload.health+2]
    #[test]
    fn a_health_table_is_dockers_health_config_and_none_keeps_the_images() {
        let mut w = crate::WorkloadConfig::new("web", "busybox");
        assert_eq!(create_body(&spec_of(&w, None)).healthcheck, None);
        w.health = Some(crate::HealthCheck {
            shell: Some("nc -z 127.0.0.1 80".into()),
            ..Default::default()
        });
        let h = create_body(&spec_of(&w, None)).healthcheck.unwrap();
        assert_eq!(
            h.test,
            Some(vec![
                "CMD-SHELL".to_owned(),
                "nc -z 127.0.0.1 80".to_owned()
            ])
        );
        assert_eq!(h.interval, Some(30_000_000_000));
        assert_eq!(h.retries, Some(3));
        // Timings alone: the image's test with those timings.
        w.health = Some(crate::HealthCheck {
            retries: 5,
            ..Default::default()
        });
        let h = create_body(&spec_of(&w, None)).healthcheck.unwrap();
        assert_eq!(h.test, None);
        assert_eq!(h.retries, Some(5));
    }
}

/// `create_node_network` against a scripted daemon on a Unix socket, on tokio's paused clock:
/// the settle loop's timing and the daemon's refusals, which a real dockerd shows only by chance.
#[cfg(test)]
mod scripted_daemon {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::time::Instant;

    #[derive(Debug, Clone)]
    struct Net {
        id: String,
        created: String,
        containers: bool,
    }

    /// What the daemon holds and how it answers.
    #[derive(Default)]
    struct Daemon {
        nets: Vec<Net>,
        /// Creates answered 409 before one is accepted.
        conflicts: u32,
        /// Whether a container joins what this start creates at once (by its id, as another
        /// process's start may).
        joined: bool,
        /// A peer's duplicate, older than the create it comes with, that appears with the
        /// first accepted create; and when (after that create) its creator removes it, if ever.
        peer: Option<(Net, Option<Duration>)>,
        peer_seen_at: Option<Instant>,
        /// The first container create finds the network gone: a slow peer removed it.
        vanish_before_container: bool,
        containers_created: u32,
        created: u32,
        /// Every request: when, and its line.
        log: Vec<(Instant, String)>,
    }

    impl Daemon {
        fn answer(&mut self, method: &str, path: &str) -> (u16, String) {
            self.log.push((Instant::now(), format!("{method} {path}")));
            if let (Some((peer, Some(after))), Some(at)) = (&self.peer, self.peer_seen_at) {
                if at.elapsed() >= *after {
                    let id = peer.id.clone();
                    self.nets.retain(|n| n.id != id);
                    self.peer = None;
                }
            }
            let path = path.split('?').next().unwrap_or_default();
            let id = path.rsplit('/').next().unwrap_or_default().to_owned();
            match (method, path) {
                ("POST", "/containers/create") => {
                    if std::mem::take(&mut self.vanish_before_container) {
                        let gone = self.nets.pop().map(|n| n.id).unwrap_or_default();
                        return (404, format!(r#"{{"message":"network {gone} not found"}}"#));
                    }
                    self.containers_created += 1;
                    (201, r#"{"Id":"c1","Warnings":[]}"#.into())
                }
                ("POST", p) if p.starts_with("/containers/") => (204, String::new()),
                ("GET", p) if p.starts_with("/containers/") => {
                    (200, r#"{"Id":"c1","State":{"Status":"running"}}"#.into())
                }
                ("GET", "/networks") => {
                    let list: Vec<serde_json::Value> = self
                        .nets
                        .iter()
                        .map(|n| {
                            serde_json::json!({
                                "Name": "holdfast", "Id": n.id, "Created": n.created,
                                "Driver": "bridge", "Labels": { NETWORK_LABEL: "node" },
                            })
                        })
                        .collect();
                    (200, serde_json::Value::from(list).to_string())
                }
                ("POST", "/networks/create") => {
                    if self.conflicts > 0 {
                        self.conflicts -= 1;
                        return (409, r#"{"message":"network holdfast exists"}"#.into());
                    }
                    self.created += 1;
                    let id = format!("mine{}", self.created);
                    self.nets.push(Net {
                        id: id.clone(),
                        created: format!("2026-12-06T12:00:{:02}Z", 10 + self.created),
                        containers: self.joined,
                    });
                    if let Some((peer, _)) = &self.peer {
                        if self.peer_seen_at.is_none() {
                            self.nets.push(peer.clone());
                            self.peer_seen_at = Some(Instant::now());
                        }
                    }
                    (
                        201,
                        serde_json::json!({"Id": id, "Warning": ""}).to_string(),
                    )
                }
                ("GET", _) => match self.nets.iter().find(|n| n.id == id) {
                    Some(n) => {
                        let containers = if n.containers {
                            serde_json::json!({"c1": {"Name": "c1"}})
                        } else {
                            serde_json::json!({})
                        };
                        let body = serde_json::json!({"Id": n.id, "Containers": containers});
                        (200, body.to_string())
                    }
                    None => (404, r#"{"message":"no such network"}"#.into()),
                },
                ("DELETE", _) => {
                    if self.nets.iter().any(|n| n.id == id && n.containers) {
                        return (403, r#"{"message":"has active endpoints"}"#.into());
                    }
                    let before = self.nets.len();
                    self.nets.retain(|n| n.id != id);
                    if self.nets.len() == before {
                        (404, r#"{"message":"no such network"}"#.into())
                    } else {
                        (204, String::new())
                    }
                }
                _ => (500, r#"{"message":"unscripted"}"#.into()),
            }
        }
    }

    /// Serves `daemon` on a socket in `dir`; a client for it.
    fn serve(dir: &std::path::Path, daemon: Arc<Mutex<Daemon>>) -> Docker {
        let socket = dir.join("docker.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let daemon = Arc::clone(&daemon);
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    loop {
                        let text = String::from_utf8_lossy(&seen).into_owned();
                        let Some(end) = text.find("\r\n\r\n") else {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                            continue;
                        };
                        let head = text[..end].to_owned();
                        let length: usize = head
                            .lines()
                            .filter_map(|l| l.split_once(':'))
                            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                            .and_then(|(_, v)| v.trim().parse().ok())
                            .unwrap_or(0);
                        while seen.len() < end + 4 + length {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => seen.extend_from_slice(&buf[..n]),
                            }
                        }
                        seen.drain(..end + 4 + length);
                        let mut words = head.split(' ');
                        let method = words.next().unwrap_or_default().to_owned();
                        let path = words.next().unwrap_or_default();
                        // The versioned prefix, `/v1.xx`, off.
                        let path = match path.strip_prefix("/v") {
                            Some(rest) => rest.find('/').map_or(path, |i| &rest[i..]),
                            None => path,
                        };
                        let (status, body) = daemon.lock().unwrap().answer(&method, path);
                        let response = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
                             Content-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(response.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Docker::connect_with_unix(socket.to_str().unwrap(), 120, bollard::API_DEFAULT_VERSION)
            .unwrap()
    }

    fn net(id: &str, created: &str, containers: bool) -> Net {
        Net {
            id: id.into(),
            created: created.into(),
            containers,
        }
    }

    async fn run(daemon: Daemon) -> (Result<String, StartError>, Duration, Daemon) {
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(Mutex::new(daemon));
        let docker = serve(dir.path(), Arc::clone(&shared));
        let start = Instant::now();
        let result = create_node_network(&docker, "holdfast").await;
        let took = start.elapsed();
        let daemon = std::mem::take(&mut *shared.lock().unwrap());
        (result, took, daemon)
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn a_start_whose_settled_network_went_before_its_container_settles_again_once() {
        let dir = tempfile::tempdir().unwrap();
        let shared = Arc::new(Mutex::new(Daemon {
            vanish_before_container: true,
            ..Default::default()
        }));
        let docker = serve(dir.path(), Arc::clone(&shared));
        let mut w = crate::WorkloadConfig::new("db", "busybox");
        w.network = Some("holdfast".into());
        let spec = tests::spec_of(&w, None);
        let started = ensure_network_and_start(&docker, &spec, "holdfast").await;
        assert_eq!(started.map(|s| s.container), Ok("c1".to_owned()));
        let daemon = shared.lock().unwrap();
        assert_eq!((daemon.created, daemon.containers_created), (2, 1));
        assert_eq!(ids(&daemon), ["mine2"]);
    }

    fn ids(daemon: &Daemon) -> Vec<&str> {
        daemon.nets.iter().map(|n| n.id.as_str()).collect()
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn duplicates_a_stopped_creator_left_are_pruned_after_about_a_second() {
        let (result, took, daemon) = run(Daemon {
            nets: vec![
                net("new", "2026-12-06T12:00:02Z", false),
                net("old", "2026-12-06T12:00:01Z", false),
                net("used", "2026-12-06T12:00:03Z", true),
            ],
            ..Default::default()
        })
        .await;
        // The one a container is on is kept, whatever its age; no create.
        assert_eq!(result.unwrap(), "used");
        assert_eq!(ids(&daemon), ["used"]);
        assert_eq!(daemon.created, 0);
        assert!(
            took >= SETTLE_PAUSE * SETTLE_PATIENCE && took < SETTLE_PAUSE * (SETTLE_PATIENCE + 2),
            "{took:?}"
        );
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn duplicates_each_with_a_container_fail_the_start_naming_them() {
        let (result, took, daemon) = run(Daemon {
            nets: vec![
                net("a", "2026-12-06T12:00:01Z", true),
                net("b", "2026-12-06T12:00:02Z", true),
            ],
            ..Default::default()
        })
        .await;
        let message = result.unwrap_err().message;
        assert!(
            message.contains("a, b") || message.contains("b, a"),
            "{message}"
        );
        assert_eq!(ids(&daemon).len(), 2);
        assert!(took < SETTLE_PAUSE * (SETTLE_PATIENCE + 2), "{took:?}");
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn a_create_refused_as_a_conflict_is_read_again_after_a_pause() {
        // Refused three times while the list still shows none (another daemon's view lagging).
        let (result, took, daemon) = run(Daemon {
            conflicts: 3,
            ..Default::default()
        })
        .await;
        assert_eq!(result.unwrap(), "mine1");
        let creates: Vec<Instant> = daemon
            .log
            .iter()
            .filter(|(_, line)| line.starts_with("POST"))
            .map(|(at, _)| *at)
            .collect();
        assert_eq!(creates.len(), 4);
        for pair in creates.windows(2) {
            assert!(pair[1] - pair[0] >= SETTLE_PAUSE, "{:?}", daemon.log);
        }
        assert!(took >= SETTLE_PAUSE * 3, "{took:?}");
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn an_own_duplicate_a_container_joined_is_kept_and_the_peers_is_pruned() {
        // Ours is the newer, so ours is removed; but a container joined it by id meanwhile (403):
        // it stays, and the peer's, which nothing is on, is pruned once it stayed a second.
        let (result, _, daemon) = run(Daemon {
            joined: true,
            peer: Some((net("peer", "2026-12-06T12:00:00Z", false), None)),
            ..Default::default()
        })
        .await;
        assert_eq!(result.unwrap(), "mine1");
        assert_eq!(ids(&daemon), ["mine1"]);
        assert!(
            daemon
                .log
                .iter()
                .any(|(_, l)| l == "DELETE /networks/mine1"),
            "{:?}",
            daemon.log
        );
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn the_creator_of_the_oldest_waits_about_a_second_then_gives_way() {
        // Ours is the oldest; the peer's newer one stays (its creator went on with it).
        let (result, took, daemon) = run(Daemon {
            peer: Some((net("peer", "2026-12-06T12:00:59Z", false), None)),
            ..Default::default()
        })
        .await;
        assert_eq!(result.unwrap(), "peer");
        assert_eq!(ids(&daemon), ["peer"]);
        assert!(
            took >= SETTLE_PAUSE * SETTLE_PATIENCE && took < SETTLE_PAUSE * (SETTLE_PATIENCE + 2),
            "{took:?}"
        );
    }

    // r[verify workload.network.create]
    #[tokio::test(start_paused = true)]
    async fn a_slow_peer_removing_its_newer_one_after_ours_is_gone_leaves_one_created_again() {
        // The peer takes 1.5 s to remove its newer one: ours, the oldest, is removed first (our
        // patience ran out), then the peer's; the next round creates one again and uses it.
        let (result, _, daemon) = run(Daemon {
            peer: Some((
                net("peer", "2026-12-06T12:00:59Z", false),
                Some(Duration::from_millis(1500)),
            )),
            ..Default::default()
        })
        .await;
        let id = result.unwrap();
        assert_eq!(ids(&daemon), [id.as_str()]);
    }
}
