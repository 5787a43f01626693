//! RESP (the Redis protocol), just enough for a command and its reply.

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::TcpStream;

use crate::Error;

/// Sends one command (as a RESP array of bulk strings) and returns its reply rendered as text:
/// `+OK` for a simple string, the bytes for a bulk string, `(nil)` for a null, `:N` for an
/// integer; an error reply is an `Err`.
pub async fn resp_command(
    stream: &mut BufReader<TcpStream>,
    args: &[&[u8]],
) -> Result<String, Error> {
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg);
        request.extend_from_slice(b"\r\n");
    }
    stream.get_mut().write_all(&request).await?;
    let mut line = String::new();
    stream.read_line(&mut line).await?;
    let line = line.trim_end_matches("\r\n");
    match line.as_bytes().first() {
        Some(b'+') | Some(b':') => Ok(line.to_owned()),
        Some(b'-') => Err(format!("redis error: {}", &line[1..]).into()),
        Some(b'$') => {
            let len: i64 = line[1..].parse()?;
            if len < 0 {
                return Ok("(nil)".into());
            }
            let mut data = vec![0u8; len as usize + 2];
            stream.read_exact(&mut data).await?;
            data.truncate(len as usize);
            Ok(String::from_utf8(data)?)
        }
        _ => Err(format!("unexpected reply {line:?}").into()),
    }
}
