//! `/v1/forwards`: the forward server's endpoint, its pin, and every active forward with its
//! stats.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::state::NodeState;

// i[impl node.forward.list]
/// `GET /v1/forwards`.
pub fn list(node: &NodeState) -> Response {
    let view = node.forward.with(|server| {
        serde_json::json!({
            "listen": server.local_addr().ok().map(|a| a.to_string()),
            "fingerprint": server.fingerprint().to_string(),
            "forwards": server.forwards(),
            "unattributed": server.unattributed(),
        })
    });
    match view {
        Ok(view) => Json(view).into_response(),
        Err(true) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "the forward module is not running now (see `holdfast modules`)\n",
        )
            .into_response(),
        Err(false) => (
            StatusCode::NOT_FOUND,
            "forwards are not configured on this node (no [forward] section)\n",
        )
            .into_response(),
    }
}
