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
