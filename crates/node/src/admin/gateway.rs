//! `/v1/gateway` and `/v1/gateway/push`: the gateway's replica, readiness, connections, counters
//! and last drain; and a push to a room or a user on this replica.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::modules::gateway::Unavailable;
use crate::state::NodeState;

fn unavailable(why: Unavailable) -> Response {
    match why {
        Unavailable::Down => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the gateway module is not running now (see `holdfast modules`)\n",
        )
            .into_response(),
        Unavailable::NotConfigured => (
            StatusCode::NOT_FOUND,
            "the gateway is not configured on this node (no [gateway] section)\n",
        )
            .into_response(),
    }
}

// i[impl node.gateway.show+2]
/// `GET /v1/gateway`.
pub fn show(node: &NodeState) -> Response {
    match node.gateway.status() {
        Ok(status) => Json(status).into_response(),
        Err(why) => unavailable(why),
    }
}

/// `POST /v1/gateway/push`'s body: a room or a user, and the text.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PushBody {
    #[serde(default)]
    room: Option<String>,
    #[serde(default)]
    user: Option<String>,
    text: String,
}

/// Where a push goes.
enum To {
    Room(String),
    User(String),
}

fn parse(body: &[u8]) -> Result<(To, String), String> {
    let b: PushBody =
        serde_json::from_slice(body).map_err(|e| format!("invalid push request: {e}"))?;
    let to = match (b.room, b.user) {
        (Some(room), None) if !room.is_empty() => To::Room(room),
        (None, Some(user)) if !user.is_empty() => To::User(user),
        _ => {
            return Err(
                "invalid push request: give exactly one non-empty \"room\" or \"user\"".to_owned(),
            );
        }
    };
    Ok((to, b.text))
}

// i[impl node.gateway.push]
/// `POST /v1/gateway/push` (the caller is already allowed to mutate): queues the text for every
/// connection in the room, or of the user — here and, in a cluster, through the bus on the other
/// replicas — and answers the delivery.
pub async fn push(node: &NodeState, body: &[u8]) -> Response {
    let (to, text) = match parse(body) {
        Ok(parsed) => parsed,
        Err(message) => return (StatusCode::BAD_REQUEST, message + "\n").into_response(),
    };
    let gateway = match node.gateway.current() {
        Ok(gateway) => gateway,
        Err(why) => return unavailable(why),
    };
    let delivery = match &to {
        To::Room(room) => gateway.push_room(room, &text).await,
        To::User(user) => gateway.push_user(user, &text).await,
    };
    Json(delivery).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_push_names_exactly_one_room_or_user() {
        assert!(matches!(
            parse(br#"{"room":"lobby","text":"hi"}"#),
            Ok((To::Room(r), t)) if r == "lobby" && t == "hi"
        ));
        assert!(matches!(
            parse(br#"{"user":"ann","text":"hi"}"#),
            Ok((To::User(u), _)) if u == "ann"
        ));
        for bad in [
            &br#"{"room":"a","user":"b","text":"x"}"#[..],
            br#"{"text":"x"}"#,
            br#"{"room":"","text":"x"}"#,
            br#"{"room":"a"}"#,
            br#"{"room":"a","text":"x","extra":1}"#,
            b"not json",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
