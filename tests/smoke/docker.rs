//! Smoke test: dockerd pulls the seeded image from the registry, directly and through a fault proxy.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step should panic.

use bollard::query_parameters::CreateImageOptionsBuilder;
use bollard::{API_DEFAULT_VERSION, Docker};
use futures_util::StreamExt as _;
use holdfast_e2e::{Target, http_request};
use holdfast_test_support::{FaultProxy, services};

const MANIFEST_V2: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// Pulls `image` through dockerd, failing on any error the stream reports.
async fn pull(docker: &Docker, image: &str) -> Result<(), bollard::errors::Error> {
    let options = CreateImageOptionsBuilder::new().from_image(image).build();
    let mut progress = docker.create_image(Some(options), None, None);
    while let Some(item) = progress.next().await {
        item?;
    }
    Ok(())
}

/// The digest the registry itself serves for the seeded tag.
async fn registry_digest(registry: &services::Registry) -> String {
    let (repository, tag) = registry.image_path.rsplit_once(':').unwrap();
    let target = Target::parse(&format!("http://{}", registry.addr)).unwrap();
    let path = format!("/v2/{repository}/manifests/{tag}");
    let accept = [("accept", MANIFEST_V2)];
    let response = http_request(&target, "HEAD", &path, &accept, None, None)
        .await
        .unwrap();
    assert_eq!(response.status, 200, "the registry does not serve {path}");
    response.headers["docker-content-digest"]
        .to_str()
        .unwrap()
        .to_owned()
}

// i[verify harness.services.docker]
// i[verify harness.services.registry]
// i[verify harness.registry.seed]
// i[verify harness.services.ready]
#[tokio::test]
async fn dockerd_pulls_the_seeded_image_from_the_registry() {
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::registry() else {
        return;
    };
    let client = Docker::connect_with_unix(&docker.host, 120, API_DEFAULT_VERSION).unwrap();
    assert_eq!(client.ping().await.unwrap(), "OK");

    pull(&client, &registry.image).await.unwrap();

    let digest = registry_digest(&registry).await;
    let inspect = client.inspect_image(&registry.image).await.unwrap();
    let repo_digests = inspect.repo_digests.unwrap_or_default();
    let repository = registry.image.rsplit_once(':').unwrap().0;
    assert!(
        repo_digests.contains(&format!("{repository}@{digest}")),
        "pulled image {repo_digests:?} is not the registry's {digest}"
    );
    // The seeded rootfs: a single layer holding busybox.
    assert_eq!(inspect.root_fs.unwrap().layers.unwrap_or_default().len(), 1);
}

// i[verify harness.fault-proxy.count]
#[tokio::test]
async fn a_pull_through_the_fault_proxy_is_counted() {
    let Some(docker) = services::docker() else {
        return;
    };
    let Some(registry) = services::registry() else {
        return;
    };
    let client = Docker::connect_with_unix(&docker.host, 120, API_DEFAULT_VERSION).unwrap();
    let proxy = FaultProxy::start(registry.addr).await.unwrap();
    // Docker treats every 127.0.0.0/8 registry as insecure, so the proxy's port works as is.
    let image = format!("{}/{}", proxy.addr(), registry.image_path);

    pull(&client, &image).await.unwrap();

    assert!(proxy.connections() >= 1);
    let (repository, tag) = registry.image_path.rsplit_once(':').unwrap();
    let manifest = format!("/v2/{repository}/manifests/{tag} HTTP/1.1");
    let requests = proxy.requests();
    assert!(
        requests.iter().any(|r| r.ends_with(&manifest)),
        "no manifest request for {tag} among {requests:?}"
    );
    let _ = client
        .remove_image(
            &image,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
}
