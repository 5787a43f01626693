//! The node's own HTTP-01 responder: answers `/.well-known/acme-challenge/TOKEN` with the key
//! authorization of a challenge in progress, and 404 for anything else.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

const PREFIX: &str = "/.well-known/acme-challenge/";

/// Tokens being answered, shared with the ACME source.
#[derive(Debug, Clone, Default)]
pub struct Challenges(Arc<Mutex<HashMap<String, String>>>);

impl Challenges {
    /// Answers `token` with `key_authorization` until removed.
    pub fn insert(&self, token: &str, key_authorization: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(token.to_owned(), key_authorization.to_owned());
    }
    /// Stops answering `token`.
    pub fn remove(&self, token: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(token);
    }
    pub(crate) fn get(&self, token: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(token)
            .cloned()
    }
}

/// A running responder; stops when dropped or [`Http01Responder::stop`]ped.
#[derive(Debug)]
pub struct Http01Responder {
    addr: SocketAddr,
    challenges: Challenges,
    task: JoinHandle<()>,
}

impl Http01Responder {
    /// Binds `addr` and starts answering.
    // r[impl issue.acme.http01]
    pub async fn bind(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let challenges = Challenges::default();
        let served = challenges.clone();
        let task = tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    // One failed accept (EMFILE, a connection reset before accept) is transient:
                    // report, pause briefly, go on. The listener itself does not fail.
                    Err(err) => {
                        tracing::warn!(%err, "http-01 responder: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let served = served.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let answer = req
                            .uri()
                            .path()
                            .strip_prefix(PREFIX)
                            .and_then(|token| served.get(token));
                        async move {
                            let response = match answer {
                                Some(body) => hyper::Response::new(Full::new(Bytes::from(body))),
                                None => {
                                    let mut r = hyper::Response::new(Full::new(Bytes::new()));
                                    *r.status_mut() = hyper::StatusCode::NOT_FOUND;
                                    r
                                }
                            };
                            Ok::<_, Infallible>(response)
                        }
                    });
                    // One connection's error ends only that connection.
                    if let Err(err) = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(%err, "http-01 responder: connection ended");
                    }
                });
            }
        });
        Ok(Self {
            addr,
            challenges,
            task,
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The tokens it answers.
    pub fn challenges(&self) -> &Challenges {
        &self.challenges
    }

    /// Stops listening.
    pub fn stop(&self) {
        self.task.abort();
    }
}

impl Drop for Http01Responder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    // r[verify issue.acme.http01]
    #[tokio::test]
    async fn answers_known_tokens_only() {
        let r = Http01Responder::bind("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        r.challenges().insert("tok", "tok.thumb");
        let ok = get(r.addr(), "/.well-known/acme-challenge/tok").await;
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("tok.thumb"),
            "{ok}"
        );
        let missing = get(r.addr(), "/.well-known/acme-challenge/other").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        r.challenges().remove("tok");
        let gone = get(r.addr(), "/.well-known/acme-challenge/tok").await;
        assert!(gone.starts_with("HTTP/1.1 404"), "{gone}");
    }
}
