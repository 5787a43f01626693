//! `/v1/gateway` and `/v1/gateway/push`: the gateway's replica, readiness, connections, counters
//! and last drain; and a push to a room or a user on this replica. `/v1/publish`: the same for
//! application backends, batched, with a key of its own that cannot drain or reload.

use axum::Json;
use axum::http::{HeaderMap, StatusCode, header};
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

// i[impl node.gateway.push+2]
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
    if let Err(message) = within_size(gateway.max_message_size(), [("text", &text)]) {
        return (StatusCode::BAD_REQUEST, message + "\n").into_response();
    }
    let delivery = match &to {
        To::Room(room) => gateway.push_room(room, &text).await,
        To::User(user) => gateway.push_user(user, &text).await,
    };
    Json(delivery).into_response()
}

// i[impl node.gateway.publish]
/// Every text within the gateway's message size limit, or which one is not (nothing is pushed
/// then).
fn within_size<'a>(
    limit: usize,
    texts: impl IntoIterator<Item = (&'a str, &'a String)>,
) -> Result<(), String> {
    for (name, text) in texts {
        if text.len() > limit {
            return Err(format!(
                "invalid push request: {name} is {} bytes, over gateway.max_message_size ({limit})",
                text.len()
            ));
        }
    }
    Ok(())
}

/// The most messages one `/v1/publish` call may carry.
pub const MAX_PUBLISH_BATCH: usize = 1000;

/// `POST /v1/publish`'s body.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishBody {
    messages: Vec<PushBody>,
}

/// One published message's outcome.
#[derive(Debug, serde::Serialize)]
struct Published {
    #[serde(skip_serializing_if = "Option::is_none")]
    room: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(flatten)]
    delivery: holdfast_gateway::Delivery,
}

fn parse_batch(body: &[u8]) -> Result<Vec<(To, String)>, String> {
    let b: PublishBody =
        serde_json::from_slice(body).map_err(|e| format!("invalid publish request: {e}"))?;
    if b.messages.is_empty() || b.messages.len() > MAX_PUBLISH_BATCH {
        return Err(format!(
            "invalid publish request: give 1 to {MAX_PUBLISH_BATCH} messages"
        ));
    }
    b.messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| match (m.room, m.user) {
            (Some(room), None) if !room.is_empty() => Ok((To::Room(room), m.text)),
            (None, Some(user)) if !user.is_empty() => Ok((To::User(user), m.text)),
            _ => Err(format!(
                "invalid publish request: messages[{i}] must name exactly one non-empty \"room\" or \"user\""
            )),
        })
        .collect()
}

// i[impl node.gateway.publish]
/// `POST /v1/publish`: over the Unix socket (`local`) as is, over TCP with the gateway's publish
/// key only (never the admin token); publishes each message in order and answers each delivery.
pub async fn publish(node: &NodeState, local: bool, headers: &HeaderMap, body: &[u8]) -> Response {
    let gateway = match node.gateway.current() {
        Ok(gateway) => gateway,
        Err(why) => return unavailable(why),
    };
    if !local {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match (
            gateway.publish_key_matches(presented.unwrap_or("")),
            presented,
        ) {
            (None, _) => {
                return (
                    StatusCode::FORBIDDEN,
                    "publishing over TCP needs gateway.publish_token_file (set, and readable when the gateway started: see the log)\n",
                )
                    .into_response();
            }
            (Some(true), Some(_)) => {}
            (Some(_), _) => {
                return (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Bearer")],
                    "missing or wrong publish token\n",
                )
                    .into_response();
            }
        }
    }
    let batch = match parse_batch(body) {
        Ok(batch) => batch,
        Err(message) => return (StatusCode::BAD_REQUEST, message + "\n").into_response(),
    };
    let names: Vec<String> = (0..batch.len())
        .map(|i| format!("messages[{i}].text"))
        .collect();
    let texts = names
        .iter()
        .map(String::as_str)
        .zip(batch.iter().map(|(_, t)| t));
    if let Err(message) = within_size(gateway.max_message_size(), texts) {
        return (StatusCode::BAD_REQUEST, message + "\n").into_response();
    }
    let mut results = Vec::with_capacity(batch.len());
    for (to, text) in batch {
        results.push(match to {
            To::Room(room) => Published {
                delivery: gateway.push_room(&room, &text).await,
                room: Some(room),
                user: None,
            },
            To::User(user) => Published {
                delivery: gateway.push_user(&user, &text).await,
                room: None,
                user: Some(user),
            },
        });
    }
    Json(serde_json::json!({ "results": results })).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    // i[verify node.gateway.publish]
    #[test]
    fn a_text_over_the_message_size_limit_is_named_and_refused() {
        let (ok, big) = ("1234".to_owned(), "12345".to_owned());
        assert_eq!(within_size(4, [("text", &ok)]), Ok(()));
        let err = within_size(4, [("messages[0].text", &ok), ("messages[1].text", &big)]);
        assert_eq!(
            err,
            Err("invalid push request: messages[1].text is 5 bytes, over gateway.max_message_size (4)".to_owned())
        );
    }

    // i[verify node.gateway.publish]
    #[test]
    fn a_batch_holds_one_to_a_thousand_messages_each_to_one_room_or_user() {
        let ok =
            parse_batch(br#"{"messages":[{"room":"lobby","text":"a"},{"user":"ann","text":"b"}]}"#)
                .unwrap();
        assert!(matches!(&ok[..], [(To::Room(r), a), (To::User(u), b)]
            if r == "lobby" && a == "a" && u == "ann" && b == "b"));
        let many = serde_json::json!({"messages": vec![serde_json::json!({"room": "r", "text": "t"}); MAX_PUBLISH_BATCH + 1]});
        for bad in [
            br#"{"messages":[]}"#.to_vec(),
            br#"{"messages":[{"room":"a","user":"b","text":"x"}]}"#.to_vec(),
            br#"{"messages":[{"room":"a","text":"x"},{"room":"","text":"x"}]}"#.to_vec(),
            br#"{"messages":[{"room":"a"}]}"#.to_vec(),
            br#"{"messages":[],"extra":1}"#.to_vec(),
            br#"{"room":"a","text":"x"}"#.to_vec(),
            many.to_string().into_bytes(),
        ] {
            assert!(
                parse_batch(&bad).is_err(),
                "{}",
                String::from_utf8_lossy(&bad)
            );
        }
    }

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
