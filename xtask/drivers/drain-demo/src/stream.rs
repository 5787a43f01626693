//! The room message stream: `{"seq":N}` pushed through replica B's admin API
//! (`POST /v1/gateway/push`) at a steady rate until the run stops it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::http;
use super::measures::Pushed;

/// What the stream sent.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Sent {
    /// The pushes the API accepted.
    pub accepted: Vec<Pushed>,
    /// Pushes it refused or that failed.
    pub errors: u64,
}

/// The push body for message `seq`.
pub fn body(room: &str, seq: u64) -> String {
    serde_json::json!({ "room": room, "text": format!("{{\"seq\":{seq}}}") }).to_string()
}

/// Pushes one message per `1/rate` seconds through the admin socket until `stop` turns true.
pub async fn run(
    t0: Instant,
    socket: PathBuf,
    room: String,
    rate_per_s: u32,
    first_seq: u64,
    mut stop: watch::Receiver<bool>,
) -> Sent {
    let mut sent = Sent::default();
    let period = Duration::from_secs_f64(1.0 / f64::from(rate_per_s.max(1)));
    let mut ticks = tokio::time::interval(period);
    // A slow push delays the next one rather than bursting to catch up: the rate stays steady.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = first_seq;
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = stop.wait_for(|s| *s) => return sent,
        }
        let sent_ms = super::schedule::at_ms(t0, Instant::now());
        match http::unix(&socket, "POST", "/v1/gateway/push", Some(&body(&room, seq))).await {
            Ok((status, _)) if (200..300).contains(&status) => sent.accepted.push(Pushed {
                seq,
                sent_ms,
                accepted_ms: super::schedule::at_ms(t0, Instant::now()),
            }),
            _ => sent.errors += 1,
        }
        seq += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_names_the_room_and_carries_the_sequence_number() {
        let v: serde_json::Value = serde_json::from_str(&body("demo", 7)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"room": "demo", "text": "{\"seq\":7}"})
        );
    }
}
