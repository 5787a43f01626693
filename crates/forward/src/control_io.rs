//! Running the control stream: a reader task that decodes frames and a writer task that sends
//! them, so a relay loop only deals in messages.

use std::time::Duration;

use quinn::{RecvStream, SendStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::classify::RelayError;
use crate::control::{FrameDecoder, FrameError, Message, encode};

/// Spawns the reader: every decoded message (or decoding error) arrives on the channel; the last
/// item before it closes is the error that ended the stream.
pub fn spawn_reader(mut recv: RecvStream) -> mpsc::Receiver<Result<Message, RelayError>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        let mut decoder = FrameDecoder::new();
        let mut buf = vec![0u8; 4096];
        loop {
            match recv.read(&mut buf).await {
                Ok(Some(n)) => decoder.push(&buf[..n]),
                Ok(None) => {
                    let _ = tx
                        .send(Err(RelayError::Control("finished by the peer".into())))
                        .await;
                    return;
                }
                // r[impl forward.auth.pacing+3]
                // The connection's loss keeps its kind: the node's own close (a stop) is not the
                // peer's doing, and authentication must tell the two apart.
                Err(quinn::ReadError::ConnectionLost(err)) => {
                    let _ = tx.send(Err(RelayError::Connection(err))).await;
                    return;
                }
                Err(err) => {
                    let _ = tx.send(Err(RelayError::Control(err.to_string()))).await;
                    return;
                }
            }
            while let Some(next) = decoder.next_message() {
                let framing_lost = matches!(next, Err(FrameError::TooLong(_)));
                if tx.send(next.map_err(RelayError::from)).await.is_err() || framing_lost {
                    return;
                }
            }
        }
    });
    rx
}

/// Writes one message.
pub async fn write(send: &mut SendStream, message: &Message) -> Result<(), RelayError> {
    send.write_all(&encode(message))
        .await
        .map_err(|err| RelayError::Control(err.to_string()))
}

/// Finishes the stream and waits (up to `linger`) until the peer has acknowledged all of it, so a
/// closing message is delivered before the connection is closed.
pub async fn finish(send: &mut SendStream, linger: Duration) {
    if send.finish().is_ok() {
        let _ = tokio::time::timeout(linger, send.stopped()).await;
    }
}

/// Spawns the writer: messages sent on the channel are written in order; once every sender is
/// gone the stream is finished (lingering up to `linger` for its acknowledgement).
pub fn spawn_writer(
    mut send: SendStream,
    linger: Duration,
) -> (mpsc::Sender<Message>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<Message>(256);
    let task = tokio::spawn(async move {
        while let Some(message) = rx.recv().await {
            if write(&mut send, &message).await.is_err() {
                // The stream is gone; the relay learns it from the connection itself.
                return;
            }
        }
        finish(&mut send, linger).await;
    });
    (tx, task)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use super::*;
    use crate::identity::{Identity, SERVER_NAME};

    /// A node and a peer on loopback, the peer's control stream open with `first` written on it,
    /// and the node's end of that stream accepted. Every handle is kept so nothing closes early.
    struct Opened {
        ours: quinn::Connection,
        recv: quinn::RecvStream,
        _node_send: quinn::SendStream,
        _peer: (
            quinn::Endpoint,
            quinn::Connection,
            quinn::SendStream,
            quinn::RecvStream,
        ),
        _node: quinn::Endpoint,
        _dir: tempfile::TempDir,
    }

    async fn opened(first: &[u8]) -> Opened {
        let dir = tempfile::tempdir().expect("tempdir");
        let identity = Identity::load_or_create(dir.path()).expect("identity");
        let config = crate::server::quinn_server_config(&identity, Duration::from_secs(15))
            .expect("server config");
        let node = quinn::Endpoint::server(config, ([127, 0, 0, 1], 0).into()).expect("node");
        let (client_config, _) =
            crate::client::quinn_client_config(identity.fingerprint(), Duration::from_secs(60))
                .expect("client config");
        let peer = quinn::Endpoint::client(([127, 0, 0, 1], 0).into()).expect("peer");
        let connecting = peer
            .connect_with(client_config, node.local_addr().expect("addr"), SERVER_NAME)
            .expect("connect");
        let incoming = node.accept().await.expect("incoming");
        let (ours, theirs) = tokio::join!(incoming, connecting);
        let (ours, theirs) = (ours.expect("accepted"), theirs.expect("connected"));
        let (mut send, peer_recv) = theirs.open_bi().await.expect("control stream");
        send.write_all(first).await.expect("written");
        let (node_send, recv) = ours.accept_bi().await.expect("accepted stream");
        Opened {
            ours,
            recv,
            _node_send: node_send,
            _peer: (peer, theirs, send, peer_recv),
            _node: node,
            _dir: dir,
        }
    }

    // The node's own close of a connection whose control stream is open is not the peer's doing:
    // the reader hands it on as the connection error it is (LocallyClosed), not as a string, so
    // authentication does not charge it to the source.
    // r[verify forward.auth.pacing+3]
    #[tokio::test]
    async fn the_node_s_own_close_reaches_the_reader_as_its_connection_error() {
        // Half a length prefix: the stream is open, no message is whole.
        let opened = opened(&[0, 0]).await;
        let mut reader = spawn_reader(opened.recv);
        opened.ours.close(0u32.into(), b"stopping");
        let last = reader.recv().await.expect("the reader's last item");
        assert!(
            matches!(
                last,
                Err(RelayError::Connection(
                    quinn::ConnectionError::LocallyClosed
                ))
            ),
            "{last:?}"
        );
    }

    // A length above the frame limit loses the stream's framing: the reader hands on that one
    // error and ends, rather than repeating it (authentication and the relay treat it as the end
    // of the peer's control stream).
    // r[verify forward.auth.pacing+3]
    #[tokio::test]
    async fn a_frame_too_long_is_handed_on_once_and_the_reader_ends() {
        let too_long = u32::try_from(crate::control::MAX_FRAME + 1).expect("small");
        let opened = opened(&too_long.to_be_bytes()).await;
        let mut reader = spawn_reader(opened.recv);
        let first = reader.recv().await.expect("the framing error");
        assert!(
            matches!(first, Err(RelayError::Frame(FrameError::TooLong(_)))),
            "{first:?}"
        );
        let next = tokio::time::timeout(Duration::from_secs(5), reader.recv())
            .await
            .expect("the reader ends");
        assert!(next.is_none(), "{next:?}");
    }
}
