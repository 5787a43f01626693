//! One DNS exchange over UDP: the request sent, the first response with its id returned with its
//! bytes (a TSIG signature covers them), for the rfc2136 provider and the propagation check.

use std::net::SocketAddr;

use hickory_proto::op::{Message, MessageType};

/// An answer, parsed, with the bytes its signature covers.
pub(crate) struct Answer {
    pub(crate) message: Message,
    pub(crate) bytes: Vec<u8>,
}

/// Sends `request` to `server` over UDP and returns the first response with its `id`.
pub(crate) async fn exchange(
    server: SocketAddr,
    request: &[u8],
    id: u16,
) -> std::io::Result<Answer> {
    let local: SocketAddr = if server.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = tokio::net::UdpSocket::bind(local).await?;
    socket.connect(server).await?;
    socket.send(request).await?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).await?;
        // Anything else on the socket (a stray or forged datagram) is not the answer.
        match Message::from_vec(&buf[..n]) {
            Ok(message)
                if message.metadata.id == id
                    && message.metadata.message_type == MessageType::Response =>
            {
                return Ok(Answer {
                    message,
                    bytes: buf[..n].to_vec(),
                });
            }
            _ => continue,
        }
    }
}
