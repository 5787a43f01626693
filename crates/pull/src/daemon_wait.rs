//! Waiting for an answer only the daemon gives: no answer within the stall bound is a hung
//! daemon, which is the daemon being unreachable, not a stall of the image's attempt.
//!
//! Kept apart from [`client`](crate::client) so that the proof of the rules implemented there
//! mutates only their own code.

use std::future::Future;
use std::time::Duration;

use crate::classify::{PullError, PullErrorKind};
use crate::client::within;

// r[impl actuate.image.daemon.hung+2]
/// Like [`within`], for a request that only the daemon itself answers (the connect and version
/// negotiation, the image inspect; no registry is involved): no answer in time means the daemon
/// is hung, which is the daemon being unreachable, not a failure of the image's attempt, and the
/// error names the request (`what`) that went unanswered. An answer, an error included, is passed
/// on as it came.
pub async fn daemon_within<T>(
    bound: Duration,
    what: &str,
    answer: impl Future<Output = Result<T, PullError>>,
) -> Result<T, PullError> {
    match within(bound, what, answer).await {
        Err(err) if err.kind == PullErrorKind::Stalled => Err(PullError {
            kind: PullErrorKind::DaemonUnreachable,
            // Named here, not left to the stall's own text: bollard's request timeout (when it
            // ends the wait before the bound) does not say which request it was.
            message: format!(
                "the daemon accepts connections but does not answer {what}: {}",
                err.message
            ),
            ..err
        }),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn no_answer_in_time_is_a_hung_daemon_and_says_so() {
        let start = tokio::time::Instant::now();
        let err = daemon_within(
            Duration::from_secs(5),
            "the image inspect",
            std::future::pending::<Result<(), PullError>>(),
        )
        .await
        .expect_err("never answers");
        assert_eq!(err.kind, PullErrorKind::DaemonUnreachable);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert!(
            err.message.starts_with(
                "the daemon accepts connections but does not answer the image inspect: "
            ),
            "{err}"
        );
    }

    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn a_request_timeout_of_the_client_is_a_hung_daemon_naming_the_request() {
        // bollard's own request timeout (120 s) ends the wait first when the stall bound is
        // longer: still no answer, and the error still says which request went unanswered.
        let no_headers = PullError::new(
            PullErrorKind::Stalled,
            "the daemon sent no response headers within the request timeout",
        );
        let err = daemon_within(Duration::from_secs(300), "the image inspect", async {
            Err::<(), _>(no_headers)
        })
        .await
        .expect_err("no answer");
        assert_eq!(err.kind, PullErrorKind::DaemonUnreachable);
        assert!(
            err.message
                .starts_with("the daemon accepts connections but does not answer"),
            "{err}"
        );
        assert!(err.message.contains("the image inspect"), "{err}");
    }

    // r[verify actuate.image.daemon.hung+2]
    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_passed_on_as_it_came() {
        // The daemon answered, so it is not hung, even when the answer is an error.
        let answered = PullError::new(PullErrorKind::NotFound, "No such image: reg/app:1");
        let err = daemon_within(Duration::from_secs(5), "the image inspect", async {
            Err::<(), _>(answered.clone())
        })
        .await
        .expect_err("answered with an error");
        assert_eq!(err, answered);
        let ok = daemon_within(Duration::from_secs(5), "connect", async {
            Ok::<_, PullError>(7)
        })
        .await;
        assert_eq!(ok.ok(), Some(7));
    }
}
