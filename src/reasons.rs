//! The ErrorInfo reasons safewrite's answers carry: a leaf, so that the metrics (which
//! bound their `reason` label by it) and the service (which chooses them) both read it
//! without importing each other.

/// Every ErrorInfo reason safewrite sends: its own (chosen in this module and in
/// `auth`), the Kubernetes Status reasons it passes on, and `HTTP_<code>` for the
/// answers without a reason that it classifies. Any other reason (an answer of an odd
/// proxy) is counted as `other` in the metrics.
pub const REASONS: &[&str] = &[
    // safewrite's own
    "INVALID_REQUEST",
    "UNKNOWN_KIND",
    "PRECONDITION_FAILED",
    "INVALID_CEL",
    "CEL_BUSY",
    "DEADLINE_EXCEEDED",
    "MUTATION_DOES_NOT_APPLY",
    "RESOURCE_VERSION_MISMATCH",
    "API_SERVER_UNREACHABLE",
    "WRITE_OUTCOME_UNKNOWN",
    "RETRY_BUDGET_EXHAUSTED",
    "CIRCUIT_OPEN",
    "RATE_LIMITED",
    "TRANSACTION_CANCELLED",
    "TRANSACTION_IDLE",
    "BAD_ANSWER",
    "OVERLOADED",
    "REQUEST_TOO_LARGE",
    "MALFORMED_REQUEST",
    "UNIMPLEMENTED",
    "REQUEST_NOT_READ",
    "POLICY_DENIED",
    "TOKEN_REQUIRED",
    "TOKEN_INVALID",
    "FIELD_MANAGER_CONFLICT",
    // the API server's Status reasons (metav1.StatusReason)
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
    // answers without a reason
    "HTTP_400",
    "HTTP_401",
    "HTTP_403",
    "HTTP_404",
    "HTTP_409",
    "HTTP_422",
    "HTTP_429",
    "HTTP_500",
    "HTTP_502",
    "HTTP_503",
    "HTTP_504",
];
