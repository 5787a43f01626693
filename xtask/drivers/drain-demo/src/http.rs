//! A one-request HTTP/1.0 client over any byte stream: the node's admin socket and etcd's JSON
//! gateway are all the demo talks to, and HTTP/1.0 makes both close after answering (no chunked
//! bodies, no keep-alive to manage).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};

/// Longest a single request may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one request and returns (status, body).
pub async fn exchange(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let request = request_text(method, path, body);
    let work = async {
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(TIMEOUT, work)
        .await
        .context("no answer in time")??;
    parse_response(&response)
}

fn request_text(method: &str, path: &str, body: Option<&str>) -> String {
    match body {
        Some(body) => format!(
            "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ),
        None => format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\n\r\n"),
    }
}

fn parse_response(response: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let Some(status) = head.split(' ').nth(1).and_then(|s| s.parse().ok()) else {
        bail!(
            "not an HTTP response: {:?}",
            head.lines().next().unwrap_or("")
        );
    };
    Ok((status, body.to_owned()))
}

/// One request on a Unix socket (the node's admin API).
pub async fn unix(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .with_context(|| format!("connecting to {}", socket.display()))?;
    exchange(stream, method, path, body).await
}

/// One request over TCP (etcd's JSON gateway).
pub async fn tcp(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let stream = tokio::time::timeout(TIMEOUT, tokio::net::TcpStream::connect(addr))
        .await
        .context("connect timed out")?
        .with_context(|| format!("connecting to {addr}"))?;
    exchange(stream, method, path, body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_is_written_and_its_answer_parsed() {
        let (client, mut server) = tokio::io::duplex(4096);
        let answer = tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let n = server.read(&mut buf).await.unwrap();
            server
                .write_all(b"HTTP/1.0 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")
                .await
                .unwrap();
            String::from_utf8(buf[..n].to_vec()).unwrap()
        });
        let (status, body) = exchange(client, "POST", "/v1/x", Some(r#"{"a":1}"#))
            .await
            .unwrap();
        assert_eq!((status, body.as_str()), (202, "{}"));
        let sent = answer.await.unwrap();
        assert!(sent.starts_with("POST /v1/x HTTP/1.0\r\n"), "{sent}");
        assert!(sent.contains("Content-Length: 7\r\n"), "{sent}");
        assert!(sent.ends_with("\r\n\r\n{\"a\":1}"), "{sent}");
        assert!(parse_response(b"garbage").is_err());
    }
}
