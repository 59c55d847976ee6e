//! "Is this a fault?", decided once. A fault is an outcome that says the API server (or
//! the path to it) is unwell: a transport failure, a request that got no answer in
//! time, or an answer of 429 (throttled), 500, 502, 503 or 504. Answers about the
//! request itself (409, 422, 404, 403, 401, 400...) are not faults, and neither is a
//! request the sidecar refused itself (rate limit, open breaker, a write too late to send): it never reached the
//! server. The circuit breaker counts faults, the metrics and spans label them, and the
//! engine's retry decision (`classify::classify_error`) asks the same function.

use std::error::Error as StdError;

use tower::BoxError;

use super::answer::{Answer, RequestError};

/// Whether an outcome is a fault: `Ok` with the HTTP code of an answer, or the error of
/// a request that got none.
pub fn is_fault(outcome: Result<u16, &RequestError>) -> bool {
    match outcome {
        Ok(code) => matches!(code, 429 | 500 | 502..=504),
        Err(error) => match error {
            RequestError::Connect(_)
            | RequestError::Transport(_)
            | RequestError::Timeout { .. } => true,
            RequestError::TooLate { .. }
            | RequestError::RateLimited(_)
            | RequestError::CircuitOpen(_)
            | RequestError::Decode(_) => false,
        },
    }
}

/// [`is_fault`] of an answer or a request error, as the engine holds them.
pub fn is_fault_answer(result: &Result<Answer, RequestError>) -> bool {
    is_fault(result.as_ref().map(|answer| answer.code))
}

/// [`is_fault`] of a result inside the stack (a response or a boxed stack error).
pub fn is_fault_response<B>(result: &Result<http::Response<B>, BoxError>) -> bool {
    match result {
        Ok(response) => is_fault(Ok(response.status().as_u16())),
        // An error that holds no `RequestError` failed before sending: a connect failure.
        Err(error) => {
            let error: &(dyn StdError + 'static) = error.as_ref();
            RequestError::find(error).is_none_or(|error| is_fault(Err(error)))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::answer::{CircuitOpen, WouldExceedDeadline};

    #[test]
    fn answers_about_the_request_are_not_faults() {
        for code in [200, 201, 400, 401, 403, 404, 405, 409, 410, 413, 415, 422] {
            assert!(!is_fault(Ok(code)), "{code}");
        }
        for code in [429, 500, 502, 503, 504] {
            assert!(is_fault(Ok(code)), "{code}");
        }
    }

    #[test]
    fn no_answer_is_a_fault_unless_the_sidecar_refused_itself() {
        let faults = [
            RequestError::Connect(BoxError::from("refused").into()),
            RequestError::Transport(BoxError::from("reset").into()),
            RequestError::Timeout {
                after: Duration::from_secs(1),
                sent: true,
            },
            RequestError::Timeout {
                after: Duration::from_secs(1),
                sent: false,
            },
        ];
        for error in &faults {
            assert!(is_fault(Err(error)), "{error:?}");
        }
        let refusals = [
            RequestError::RateLimited(WouldExceedDeadline {
                wait: Duration::from_secs(1),
            }),
            RequestError::CircuitOpen(CircuitOpen {
                retry_after: Duration::from_secs(1),
            }),
            RequestError::Decode(serde_json::from_str::<u8>("not JSON").unwrap_err().into()),
            RequestError::TooLate {
                left: Duration::from_millis(3),
                needed: Duration::from_millis(9),
            },
        ];
        for error in &refusals {
            assert!(!is_fault(Err(error)), "{error:?}");
        }
    }

    #[test]
    fn stack_results_are_judged_the_same_way() {
        let answer = |code| Ok(http::Response::builder().status(code).body(()).unwrap());
        assert!(is_fault_response(&answer(503)));
        assert!(!is_fault_response(&answer(409)));
        let open: BoxError = RequestError::CircuitOpen(CircuitOpen {
            retry_after: Duration::from_secs(1),
        })
        .into();
        assert!(!is_fault_response::<()>(&Err(open)));
        let timeout: BoxError = RequestError::Timeout {
            after: Duration::from_secs(1),
            sent: true,
        }
        .into();
        assert!(is_fault_response::<()>(&Err(timeout)));
    }
}
