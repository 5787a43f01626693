//! Allow-lists per credential: a token reaches only its own targets.
#![allow(clippy::expect_used, clippy::unwrap_used)]

mod common;

use common::*;
use holdfast_forward::client::{self, ClientEvent};
use holdfast_forward::control::Refusal;
use holdfast_forward::{AllowList, Credential};

const SCOPED: &str = "scoped-token-5b1e-0c77-a2d9-3f40";

/// Waits for the answers to both forwards of a client: which were opened, which refused.
async fn answers(client: &mut client::Forwarding) -> (Vec<u32>, Vec<u32>) {
    let (mut opened, mut refused) = (Vec::new(), Vec::new());
    while opened.len() + refused.len() < 2 {
        match expect(client, "an answer", |e| {
            matches!(e, ClientEvent::Opened { .. } | ClientEvent::Refused { .. })
        })
        .await
        {
            ClientEvent::Opened { forward, .. } => opened.push(forward),
            ClientEvent::Refused {
                forward, refusal, ..
            } => {
                assert_eq!(refusal, Refusal::NotAllowed);
                refused.push(forward);
            }
            _ => unreachable!(),
        }
    }
    (opened, refused)
}

// r[verify forward.allow.credential]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_with_its_own_allow_list_reaches_only_its_targets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (global, own) = (echo().await, echo().await);
    let mut config = server_config(dir.path(), loopback());
    config.allow = AllowList::parse([global.addr.to_string().as_str()]).expect("allow-list");
    config.scoped = vec![(
        Credential::new(SCOPED),
        AllowList::parse([own.addr.to_string().as_str()]).expect("allow-list"),
    )];
    let server = holdfast_forward::start(config)
        .await
        .expect("server starts");

    // The token with its own list: only its target opens.
    let mut scoped = client_config(&server, &[global.addr, own.addr]);
    scoped.credential = Credential::new(SCOPED);
    let mut scoped = client::spawn(scoped).await.expect("client");
    assert_eq!(answers(&mut scoped).await, (vec![2], vec![1]));

    // A token without one: the node's list, and not the other token's.
    let mut plain = client::spawn(client_config(&server, &[global.addr, own.addr]))
        .await
        .expect("client");
    assert_eq!(answers(&mut plain).await, (vec![1], vec![2]));

    let mut targets: Vec<_> = server.forwards().iter().map(|f| f.target).collect();
    targets.sort();
    let mut want = vec![global.addr, own.addr];
    want.sort();
    assert_eq!(targets, want);
    assert_eq!(server.refused_targets(), 2);
}
