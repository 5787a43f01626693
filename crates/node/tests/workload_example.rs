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

// i[verify node.workloads.shape]
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
    push_busybox_with_applets(&docker, &registry, &run).await;
    let image = format!("{}/holdfast/busybox-example:{run}", registry.addr);
    let owner = format!("example-{run}");
    let volume = format!("holdfast-demo-store-{run}");
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
    let answer = loop {
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
    // Both containers are the node's, named for this owner, on its network.
    let status: serde_json::Value =
        serde_json::from_str(&node.get("/v1/status").await.unwrap()).unwrap();
    let states: Vec<_> = status["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["name"].clone(), w["run"]["state"].clone()))
        .collect();
    assert!(
        states.iter().all(|(_, s)| s == "running") && states.len() == 2,
        "{status:#}"
    );

    node.signal(Signal::SIGTERM);
    let (code, _, _) = node.wait(Duration::from_secs(30));
    assert_eq!(code, 0);
    // Leave the daemon as we found it: this run's containers, network, volume and image.
    let options = ListContainersOptions {
        all: true,
        filters: Some(HashMap::from([(
            "label".to_owned(),
            vec![format!("holdfast.owner={owner}")],
        )])),
        ..Default::default()
    };
    for c in docker.list_containers(Some(options)).await.unwrap() {
        let remove = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        let _ = docker.remove_container(&c.id.unwrap(), Some(remove)).await;
    }
    let _ = docker.remove_network(&format!("holdfast-{owner}")).await;
    let _ = docker
        .remove_volume(
            &volume,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await;
    let force = RemoveImageOptionsBuilder::default().force(true).build();
    let _ = docker.remove_image(&image, Some(force), None).await;
}
