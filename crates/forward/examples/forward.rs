//! Run both ends by hand until the node binary wires them in.
//!
//! ```text
//! HOLDFAST_FORWARD_TOKEN=s3cret cargo run -p holdfast-forward --example forward -- \
//!     node 127.0.0.1:4433 /tmp/holdfast-forward 127.0.0.1:1024-65535
//! HOLDFAST_FORWARD_TOKEN=s3cret cargo run -p holdfast-forward --example forward -- \
//!     udp 127.0.0.1:5353 --to 127.0.0.1:5300 --node 127.0.0.1:4433 --pin sha256:… [--json]
//! ```
//!
//! The node prints its fingerprint (the pin) and stops on Ctrl-C; the client prints one line per
//! event (or one JSON object per event with `--json`) and its stats when stopped.

use std::time::Duration;

use holdfast_forward::client::{self, ClientConfig, ForwardSpec};
use holdfast_forward::{AllowList, Credential, ServerConfig};

type Error = Box<dyn std::error::Error>;

fn token() -> Result<Credential, Error> {
    let token = std::env::var("HOLDFAST_FORWARD_TOKEN")
        .map_err(|_| "set HOLDFAST_FORWARD_TOKEN to the credential")?;
    Ok(Credential::new(token))
}

fn flag(args: &[String], name: &str) -> Result<String, Error> {
    let at = args
        .iter()
        .position(|a| a == name)
        .ok_or_else(|| format!("missing {name}"))?;
    Ok(args
        .get(at + 1)
        .ok_or_else(|| format!("{name} needs a value"))?
        .clone())
}

async fn node(args: &[String]) -> Result<(), Error> {
    let [listen, dir, allow @ ..] = args else {
        return Err("usage: node LISTEN DIR ALLOW...".into());
    };
    let mut config = ServerConfig::new(listen.parse()?, dir);
    config.credentials = vec![token()?];
    config.allow = AllowList::parse(allow.iter().map(String::as_str))?;
    let server = holdfast_forward::start(config).await?;
    println!(
        "listening on {}, pin {}",
        server.local_addr()?,
        server.fingerprint()
    );
    tokio::signal::ctrl_c().await?;
    for forward in server.forwards() {
        println!("{}", serde_json::to_string(&forward)?);
    }
    server
        .stop(tokio::time::Instant::now() + Duration::from_secs(5))
        .await?;
    Ok(())
}

async fn udp(args: &[String]) -> Result<(), Error> {
    let local = args
        .first()
        .ok_or("usage: udp LOCAL --to TARGET --node ADDR --pin PIN")?;
    let mut config = ClientConfig::new(
        flag(args, "--node")?.parse()?,
        flag(args, "--pin")?.parse()?,
        token()?,
    );
    config.forwards = vec![ForwardSpec {
        local: local.parse()?,
        target: flag(args, "--to")?.parse()?,
    }];
    let json = args.iter().any(|a| a == "--json");
    let mut forwarding = client::spawn(config).await?;
    loop {
        tokio::select! {
            event = forwarding.next_event() => match event {
                Some(event) if json => println!("{}", serde_json::to_string(&event)?),
                Some(event) => println!("{event}"),
                None => break,
            },
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    for stats in forwarding.stats() {
        println!("{}", serde_json::to_string(&stats)?);
    }
    forwarding.stop().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("node") => node(&args[1..]).await,
        Some("udp") => udp(&args[1..]).await,
        _ => Err("usage: forward node LISTEN DIR ALLOW... | forward udp LOCAL --to TARGET --node ADDR --pin PIN [--json]".into()),
    }
}
