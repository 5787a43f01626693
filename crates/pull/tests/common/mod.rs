//! What the pull crate's dockerd suites share: a small image imported into the daemon.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::TryStreamExt as _;

/// A tar archive holding one file, as `docker import` takes it.
pub fn tar_with_file(name: &str, content: &[u8]) -> Vec<u8> {
    let mut header = tar::Header::new_ustar();
    header.set_size(content.len() as u64);
    header.set_mode(0o644);
    let mut archive = tar::Builder::new(Vec::new());
    archive.append_data(&mut header, name, content).unwrap();
    archive.into_inner().unwrap()
}

/// Imports an image whose one file holds `content`, as `repo:tag`.
pub async fn import(docker: &Docker, repo: &str, tag: &str, content: &[u8]) {
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .build();
    docker
        .create_image(
            Some(options),
            Some(bollard::body_full(tar_with_file("payload", content).into())),
            None,
        )
        .try_collect::<Vec<_>>()
        .await
        .unwrap();
}
