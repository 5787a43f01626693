//! `examples/web-with-db.toml` run for real: the node loads the example's two workloads, pulls
//! their image from the harness's registry, starts the store, then the web server once the store
//! is healthy, on the node's network; the web server answers a request it can only answer by
//! reading the store (skipped loudly without dockerd and the registry).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    CommitContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptions,
    PushImageOptionsBuilder, RemoveContainerOptions, RemoveImageOptionsBuilder,
    WaitContainerOptions,
};
use futures_util::TryStreamExt;
use holdfast_test_support::services;
use nix::sys::signal::Signal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/web-with-db.toml"
);

/// The image the example names, `busybox:1.36`, made from the harness's seeded busybox (which
/// holds only `/bin/busybox` and `/bin/sh`) with every applet installed, as the real image has
/// them (the example's health checks exec `wget` directly), and pushed to the harness's registry
/// under a tag of this run's own. The local copy is removed, so the node really pulls it.
async fn push_busybox_with_applets(docker: &Docker, registry: &services::Registry, tag: &str) {
    let options = CreateContainerOptionsBuilder::new()
        .name(&format!("hf-example-applets-{tag}"))
        .build();
    let body = bollard::models::ContainerCreateBody {
        image: Some(registry.image.clone()),
        entrypoint: Some(vec!["/bin/busybox".into()]),
        cmd: Some(vec!["--install".into(), "-s".into(), "/bin".into()]),
        ..Default::default()
    };
    let id = docker
        .create_container(Some(options), body)
        .await
        .unwrap()
        .id;
    docker.start_container(&id, None).await.unwrap();
    docker
        .wait_container(&id, None::<WaitContainerOptions>)
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let repo = format!("{}/holdfast/busybox-example", registry.addr);
    let commit = CommitContainerOptionsBuilder::new()
        .container(&id)
        .repo(&repo)
        .tag(tag)
        .build();
    // The seeded image's entrypoint and command, not the install's.
    let config = bollard::models::ContainerConfig {
        entrypoint: Some(vec![]),
        cmd: Some(vec!["sh".into()]),
        ..Default::default()
    };
    docker.commit_container(commit, config).await.unwrap();
    let remove = RemoveContainerOptions {
        force: true,
        ..Default::default()
    };
    docker.remove_container(&id, Some(remove)).await.unwrap();
    let push = PushImageOptionsBuilder::default().tag(tag).build();
    docker
        .push_image(
            &repo,
            Some(push),
            Some(bollard::auth::DockerCredentials::default()),
        )
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    let force = RemoveImageOptionsBuilder::default().force(true).build();
    docker
        .remove_image(&format!("{repo}:{tag}"), Some(force), None)
        .await
        .unwrap();
}

/// The example's `[[workload]]` tables as the node's config text, changed only where a shared
/// daemon needs it: the image (from the harness's registry), the store's volume and the web's
/// host port (this run's own). Everything else is as the README shows it.
fn example_workloads(image: &str, volume: &str, port: u16) -> String {
    let text = std::fs::read_to_string(EXAMPLE).unwrap();
    let mut example: toml::Table = text.parse().unwrap();
    let mut workloads = example.remove("workload").unwrap();
    for w in workloads.as_array_mut().unwrap() {
        let w = w.as_table_mut().unwrap();
        assert_eq!(w["image"].as_str(), Some("busybox:1.36"), "{w:?}");
        w.insert("image".into(), image.into());
        if let Some(volumes) = w.get_mut("volumes") {
            let [v] = &mut volumes.as_array_mut().unwrap()[..] else {
                panic!("{volumes:?}")
            };
            let rest = v.as_str().unwrap().split_once(':').unwrap().1.to_owned();
            *v = format!("{volume}:{rest}").into();
        }
        if let Some(ports) = w.get_mut("ports") {
            let [p] = &mut ports.as_array_mut().unwrap()[..] else {
                panic!("{ports:?}")
            };
            let (_, container) = p.as_str().unwrap().rsplit_once(':').unwrap();
            *p = format!("127.0.0.1:{port}:{container}").into();
        }
    }
    let mut out = toml::Table::new();
    out.insert("workload".into(), workloads);
    toml::to_string(&out).unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One plain HTTP/1.0 GET; the whole response.
async fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::other("no answer within 5 s"))??;
    Ok(String::from_utf8_lossy(&response).into_owned())
}

/// What a run puts on the shared daemon: its containers (by owner label, and the image build's
/// by name), its network, volume and image. Removed when dropped, so a run that fails or panics
/// half-way (the node killed by its own drop, containers still running) leaves nothing behind.
struct Leftovers {
    host: String,
    owner: String,
    volume: String,
    image: String,
    applets: String,
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let host = std::mem::take(&mut self.host);
        let owner = std::mem::take(&mut self.owner);
        let volume = std::mem::take(&mut self.volume);
        let image = std::mem::take(&mut self.image);
        let applets = std::mem::take(&mut self.applets);
        // A runtime of its own on a thread of its own: the test's runtime may be the one
        // unwinding, and blocking inside it is not allowed.
        let cleaning = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(docker) = Docker::connect_with_host(&host) else {
                    return;
                };
                let Ok(docker) = docker.negotiate_version().await else {
                    return;
                };
                let remove = || RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                };
                let options = ListContainersOptions {
                    all: true,
                    filters: Some(HashMap::from([(
                        "label".to_owned(),
                        vec![format!("holdfast.owner={owner}")],
                    )])),
                    ..Default::default()
                };
                for c in docker
                    .list_containers(Some(options))
                    .await
                    .unwrap_or_default()
                {
                    if let Some(id) = c.id {
                        let _ = docker.remove_container(&id, Some(remove())).await;
                    }
                }
                let _ = docker.remove_container(&applets, Some(remove())).await;
                let network = format!("holdfast-{owner}");
                let options = bollard::query_parameters::ListNetworksOptions {
                    filters: Some(HashMap::from([("name".to_owned(), vec![network.clone()])])),
                };
                for n in docker
                    .list_networks(Some(options))
                    .await
                    .unwrap_or_default()
                {
                    if let Some(id) = n.id.filter(|_| n.name.as_deref() == Some(&network)) {
                        let _ = docker.remove_network(&id).await;
                    }
                }
                let _ = docker
                    .remove_volume(
                        &volume,
                        None::<bollard::query_parameters::RemoveVolumeOptions>,
                    )
                    .await;
                let force = RemoveImageOptionsBuilder::default().force(true).build();
                let _ = docker.remove_image(&image, Some(force), None).await;
            });
        });
        let _ = cleaning.join();
    }
}

/// The container of `workload` under `owner`, inspected, if there is one.
async fn container_of(
    docker: &Docker,
    owner: &str,
    workload: &str,
) -> Option<bollard::models::ContainerInspectResponse> {
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![
                format!("holdfast.owner={owner}"),
                format!("holdfast.workload={workload}"),
            ],
        )])),
        ..Default::default()
    };
    let id = docker
        .list_containers(Some(options))
        .await
        .ok()?
        .into_iter()
        .next()?
        .id?;
    docker
        .inspect_container(
            &id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
}

/// A daemon timestamp (RFC 3339 in UTC, Go's, the fraction's trailing zeros cut) in a form that
/// sorts as time does: the fraction padded to nanoseconds.
fn instant_key(stamp: &str) -> String {
    let stamp = stamp.trim_end_matches('Z');
    let (secs, fraction) = stamp.split_once('.').unwrap_or((stamp, ""));
    format!("{secs}.{fraction:0<9}")
}

// i[verify node.workloads.shape+2]
// r[verify workload.depends-on]
// r[verify workload.network+3]
#[tokio::test]
async fn the_web_with_db_example_serves_the_stores_greeting_through_the_web() {
    let (Some(daemon), Some(registry)) = (services::docker(), services::registry()) else {
        return;
    };
    let docker = Docker::connect_with_host(&daemon.host)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let run = format!(
        "{}-{:x}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let image = format!("{}/holdfast/busybox-example:{run}", registry.addr);
    let owner = format!("example-{run}");
    let volume = format!("holdfast-demo-store-{run}");
    // Declared before the node, so dropped after it: the node is gone when this cleans up.
    let _leftovers = Leftovers {
        host: daemon.host.clone(),
        owner: owner.clone(),
        volume: volume.clone(),
        image: image.clone(),
        applets: format!("hf-example-applets-{run}"),
    };
    push_busybox_with_applets(&docker, &registry, &run).await;
    let port = free_port();
    let extra = format!(
        "[workloads]\nowner = \"{owner}\"\n\n{}",
        example_workloads(&image, &volume, port)
    );

    let started = Instant::now();
    let node = common::start_in(
        tempfile::tempdir().unwrap(),
        &extra,
        "15s",
        Some(&daemon.host),
    );
    node.until_ready().await;
    // The greeting exists only in the store's volume: the web answers it only by fetching it from
    // `store` by name over the node's network.
    let deadline = started + Duration::from_secs(120);
    // When web's container first shows: its creation time, and the ends of the store's passing
    // health probes then (depends_on: web is created only once store is healthy).
    let mut web_created: Option<(String, Vec<String>)> = None;
    let answer = loop {
        if web_created.is_none() {
            if let Some(web) = container_of(&docker, &owner, "web").await {
                let store = container_of(&docker, &owner, "store").await;
                let passed = store
                    .and_then(|s| s.state)
                    .and_then(|s| s.health)
                    .and_then(|h| h.log)
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|probe| probe.exit_code == Some(0))
                    .filter_map(|probe| probe.end)
                    .collect();
                web_created = Some((web.created.unwrap_or_default(), passed));
            }
        }
        if let Ok(response) = http_get(port, "/cgi-bin/greeting").await {
            if response.starts_with("HTTP/1.") && response.contains("hello from the store") {
                break response;
            }
        }
        if Instant::now() > deadline {
            let status = node.get("/v1/status").await.unwrap_or_default();
            panic!("no greeting through the web within 120 s: {status}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    eprintln!(
        "[timeline web-with-db] +{:>6} ms  first good answer from web (node started, image \
         pulled, store healthy, web started): {:?}",
        started.elapsed().as_millis(),
        answer.lines().last().unwrap_or_default()
    );
    // web was created after a probe of store had passed, not at once with it.
    let (created, passed) = web_created.expect("web's container was seen");
    assert!(
        passed
            .iter()
            .any(|end| instant_key(end) <= instant_key(&created)),
        "web created at {created}, store's passing probes then ended at {passed:?}"
    );
    // Both containers are the node's, named for this owner, on its network. web can answer
    // before the node has taken in that its start returned (the daemon's start and the node's
    // record of it are two steps), so the status is read until it says so, within the deadline.
    loop {
        let status: serde_json::Value =
            serde_json::from_str(&node.get("/v1/status").await.unwrap()).unwrap();
        let states: Vec<_> = status["workloads"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| (w["name"].clone(), w["run"]["state"].clone()))
            .collect();
        if states.iter().all(|(_, s)| s == "running") && states.len() == 2 {
            break;
        }
        assert!(
            states
                .iter()
                .all(|(_, s)| s == "running" || s == "starting")
                && states.len() == 2,
            "{status:#}"
        );
        assert!(
            Instant::now() <= deadline,
            "not both running by the deadline: {status:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(30));
    assert_eq!(code, 0);
    // `_leftovers` removes this run's containers, network, volume and image.
}
