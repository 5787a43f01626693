//! A tag that moves in a real registry (re-tagged through the registry's own API), noticed by the
//! digest check and pulled again through a real dockerd; left alone without the check.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{PushImageOptionsBuilder, RemoveImageOptionsBuilder};
use futures_util::TryStreamExt as _;
use holdfast_pull::{
    Actuator, DaemonEndpoint, DockerFetcher, ImageState, PullConfig, RegistryAuth, TagCheck,
};
use holdfast_test_support::services;

const MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Imports an image holding `content` as `repo:tag`, pushes it, and removes the local copy.
async fn push(docker: &Docker, repo: &str, tag: &str, content: &[u8]) {
    common::import(docker, repo, tag, content).await;
    let pushed = docker
        .push_image(
            repo,
            Some(PushImageOptionsBuilder::default().tag(tag).build()),
            Some(bollard::auth::DockerCredentials::default()),
        )
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
    assert!(!pushed.is_empty());
    remove(docker, &format!("{repo}:{tag}")).await;
}

async fn remove(docker: &Docker, reference: &str) {
    let options = RemoveImageOptionsBuilder::default().force(true).build();
    let _ = docker.remove_image(reference, Some(options), None).await;
}

/// One HTTP/1.0 exchange with the registry; the status and body.
fn http(addr: SocketAddr, request: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let head_end = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(answer.len(), |i| i + 4);
    let status = String::from_utf8_lossy(&answer[..head_end])
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, answer[head_end..].to_vec())
}

/// Points `path:to` at the manifest of `path:from`, through the registry's API (what a CI
/// pushing a new build under the same tag does).
fn retag(addr: SocketAddr, path: &str, from: &str, to: &str) {
    let (status, manifest) = http(
        addr,
        format!(
            "GET /v2/{path}/manifests/{from} HTTP/1.0\r\nHost: {addr}\r\nAccept: {MANIFEST}\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&manifest));
    let mut put = format!(
        "PUT /v2/{path}/manifests/{to} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: {MANIFEST}\r\nContent-Length: {}\r\n\r\n",
        manifest.len()
    )
    .into_bytes();
    put.extend_from_slice(&manifest);
    let (status, body) = http(addr, &put);
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
}

fn actuator(docker_host: &str) -> (Actuator<DockerFetcher>, DockerFetcher) {
    let config = PullConfig::new(7);
    let fetcher = DockerFetcher::with_auth(
        DaemonEndpoint::from_docker_host(Some(docker_host)),
        config.stall_timeout(),
        RegistryAuth::default().with_docker_config("/nonexistent/holdfast/config.json"),
    );
    (Actuator::new(fetcher.clone(), config).unwrap(), fetcher)
}

async fn settle(act: &mut Actuator<DockerFetcher>, image: &str) -> ImageState {
    let now = Instant::now();
    act.ensure(image, now);
    act.settle(now).await;
    act.ensure(image, now)
}

// r[verify actuate.image.tag-moved]
#[tokio::test]
async fn a_tag_pushed_again_is_noticed_and_pulled_under_digest_and_left_alone_otherwise() {
    let Some(docker_service) = services::docker() else {
        return;
    };
    let Some(registry) = services::registry() else {
        return;
    };
    let docker = Docker::connect_with_host(&docker_service.host).unwrap();
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let path = format!("holdfast/moving-{nonce:x}");
    let repo = format!("{}/{path}", registry.addr);
    let image = format!("{repo}:latest");
    push(&docker, &repo, "latest", b"one").await;
    push(&docker, &repo, "two", b"two").await;

    let (mut act, fetcher) = actuator(&docker_service.host);
    assert_eq!(settle(&mut act, &image).await, ImageState::Present);
    assert_eq!(
        fetcher.check_tag(image.clone()).await,
        Ok(TagCheck::Unchanged)
    );

    retag(registry.addr, &path, "two", "latest");
    let moved = fetcher.check_tag(image.clone()).await.unwrap();
    let TagCheck::Moved { remote } = moved else {
        panic!("the tag moved: {moved:?}");
    };

    // Without following it (pull_policy "missing"), the present image is left alone.
    let (mut still, _) = actuator(&docker_service.host);
    assert_eq!(settle(&mut still, &image).await, ImageState::Present);
    let before = docker.inspect_image(&image).await.unwrap();
    assert!(
        !before
            .repo_digests
            .unwrap_or_default()
            .iter()
            .any(|d| d.ends_with(&remote))
    );

    // Following it: pulled again through the actuator, and the local image is the new one.
    fetcher.pull_again(&image);
    act.invalidate(&image);
    assert_eq!(settle(&mut act, &image).await, ImageState::Present);
    assert!(!fetcher.pulls_again(&image));
    let after = docker.inspect_image(&image).await.unwrap();
    assert!(
        after
            .repo_digests
            .unwrap_or_default()
            .iter()
            .any(|d| d.ends_with(&remote)),
        "the new content is local"
    );
    assert_eq!(
        fetcher.check_tag(image.clone()).await,
        Ok(TagCheck::Unchanged)
    );
    remove(&docker, &image).await;
}
