//! Image GC against a real dockerd (started by `cargo xtask test`), on a simulated disk: an
//! unused image is removed past the high-water mark, one a container uses and one a workload is
//! configured to use are not.

// Test helpers outside `#[test]` functions: clippy.toml's test allowance does not reach them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder, RemoveImageOptionsBuilder,
};
use holdfast_pull::{Disk, DiskUsage, GcPolicy, ImageGc, LocalImage, collect, remove_listed};
use holdfast_retry::Policy;
use holdfast_test_support::services;

/// Imports an image holding `content` as `reference` (`repo:latest`).
async fn import(docker: &Docker, repo: &str, content: &[u8]) -> String {
    common::import(docker, repo, "latest", content).await;
    format!("{repo}:latest")
}

/// A disk that is always full.
struct Full;

impl Disk for Full {
    fn usage(&self, _data_root: &Path) -> std::io::Result<DiskUsage> {
        Ok(DiskUsage {
            used: 1 << 40,
            total: 1 << 40,
        })
    }
}

// r[verify actuate.image.gc+4]
#[tokio::test]
async fn past_the_high_mark_an_unused_image_goes_and_one_in_use_or_configured_stays() {
    let Some(service) = services::docker() else {
        return;
    };
    let docker = Docker::connect_with_host(&service.host).unwrap();
    let nonce = std::process::id();
    let unused = import(&docker, &format!("holdfast-gc/unused-{nonce}"), b"unused").await;
    let used = import(&docker, &format!("holdfast-gc/used-{nonce}"), b"used").await;
    let wanted = import(&docker, &format!("holdfast-gc/wanted-{nonce}"), b"wanted").await;
    // Another test's image, imported while this one runs (tests share the daemon and run in
    // parallel): never this test's to remove.
    let other = import(&docker, &format!("holdfast-other/image-{nonce}"), b"other").await;
    // A container that was never started still uses its image.
    let name = format!("holdfast-gc-{nonce}");
    docker
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            ContainerCreateBody {
                image: Some(used.clone()),
                cmd: Some(vec!["/payload".to_owned()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();

    let retry = Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .seed(3)
        .build()
        .unwrap();
    // Only this test's images are considered: the daemon is shared with tests running at the
    // same time, whose images are neither configured here nor in use yet.
    let mut gc = ImageGc::new(GcPolicy::new(85, 80, Duration::ZERO).unwrap(), retry)
        .only_references(format!("holdfast-gc/*-{nonce}"));
    let configured = vec![wanted.clone()];
    let run = collect(&docker, &mut gc, &configured, &Full, Instant::now)
        .await
        .unwrap();

    eprintln!(
        "GC: usage {:?}, to free {} B, chosen {:?} ({} B)",
        run.usage,
        run.plan.to_free,
        run.plan.remove.iter().map(|i| &i.tags).collect::<Vec<_>>(),
        run.plan.freed
    );
    // Only the unused image was even tried (the daemon would refuse the one in use itself; the
    // decision must not lean on that), and it went.
    let tried: BTreeSet<String> = run
        .removals
        .iter()
        .flat_map(|r| r.image.tags.clone())
        .collect();
    assert_eq!(tried, BTreeSet::from([unused.clone()]), "{run:?}");
    assert!(run.removals.iter().all(|r| r.result.is_ok()), "{run:?}");
    assert!(docker.inspect_image(&unused).await.is_err());
    docker.inspect_image(&used).await.unwrap();
    docker.inspect_image(&wanted).await.unwrap();
    docker
        .inspect_image(&other)
        .await
        .expect("another test's image was removed");

    let rm = RemoveContainerOptionsBuilder::default().force(true).build();
    docker.remove_container(&name, Some(rm)).await.unwrap();
    for image in [used, wanted, other] {
        let options = RemoveImageOptionsBuilder::default().force(true).build();
        let _ = docker.remove_image(&image, Some(options), None).await;
    }
}

fn retry() -> Policy {
    Policy::builder()
        .base(Duration::from_secs(5))
        .cap(Duration::from_secs(300))
        .seed(3)
        .build()
        .unwrap()
}

// r[verify actuate.image.gc+4]
#[tokio::test]
async fn a_configured_reference_the_daemon_calls_invalid_does_not_stop_collection() {
    let Some(service) = services::docker() else {
        return;
    };
    let docker = Docker::connect_with_host(&service.host).unwrap();
    let nonce = std::process::id();
    let unused = import(
        &docker,
        &format!("holdfast-gc-invalid/x-{nonce}"),
        b"unused",
    )
    .await;
    let mut gc = ImageGc::new(GcPolicy::new(85, 80, Duration::ZERO).unwrap(), retry())
        .only_references(format!("holdfast-gc-invalid/x-{nonce}"));
    // The daemon answers 400 "invalid reference format": no local image can match it.
    let configured = vec!["Busybox:1.36".to_owned()];
    let run = collect(&docker, &mut gc, &configured, &Full, Instant::now).await;
    let run = run.expect("one invalid reference stopped collection");
    assert_eq!(run.removals.len(), 1, "{run:?}");
    assert!(docker.inspect_image(&unused).await.is_err());
}

// r[verify actuate.image.gc+4]
#[tokio::test]
async fn an_image_that_changed_since_the_listing_is_not_removed() {
    let Some(service) = services::docker() else {
        return;
    };
    let docker = Docker::connect_with_host(&service.host).unwrap();
    let nonce = std::process::id();
    let repo = format!("holdfast-gc-moved/x-{nonce}");
    let tag = import(&docker, &repo, b"first").await;
    let first = docker.inspect_image(&tag).await.unwrap().id.unwrap();
    let listed = LocalImage {
        id: first.clone(),
        tags: vec![tag.clone()],
        size: 5,
        created: 0,
    };
    // The tag moves to a new image after the listing: the new one was never seen, never unused
    // for the grace period.
    import(&docker, &repo, b"second").await;
    let second = docker.inspect_image(&tag).await.unwrap().id.unwrap();
    assert_ne!(first, second);
    let result = remove_listed(&docker, &listed, &BTreeSet::new()).await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(
        docker.inspect_image(&tag).await.unwrap().id.as_deref(),
        Some(second.as_str()),
        "the moved tag's new image was removed"
    );
    // A listed image that a workload is now configured to use stays too.
    let listed = LocalImage {
        id: second.clone(),
        tags: vec![tag.clone()],
        size: 6,
        created: 0,
    };
    let result = remove_listed(&docker, &listed, &BTreeSet::from([tag.clone()])).await;
    assert!(result.is_err(), "{result:?}");
    docker.inspect_image(&tag).await.unwrap();
    for image in [tag, first] {
        let options = RemoveImageOptionsBuilder::default().force(true).build();
        let _ = docker.remove_image(&image, Some(options), None).await;
    }
}
