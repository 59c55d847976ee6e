package dev.safewrite;

/**
 * Why a call failed, as the sidecar's WriteFailure detail says: this client's copy of the proto's
 * {@code Reason} enum ({@code proto/safewrite/v1/writer.proto}), value for value under the same
 * names, so that no generated type is part of the client's API. {@link
 * SafewriteException#writeFailureReason()} answers one; {@link Reasons} gives each value's retry
 * advice and ErrorInfo spelling, read from the proto.
 *
 * <p>{@link #UNRECOGNIZED} stands for a value newer than this client; its advice goes by the gRPC
 * code.
 */
public enum Reason {
  /** Never sent. */
  REASON_UNSPECIFIED,
  /**
   * The request is malformed or a field is out of bounds; google.rpc.BadRequest names the field.
   * Nothing was sent.
   */
  REASON_INVALID_REQUEST,
  /**
   * API discovery does not know target.api_version and target.kind (is the CRD installed?). Nothing
   * was sent.
   */
  REASON_UNKNOWN_KIND,
  /**
   * A precondition (uid, CEL, a JSON Patch test) is false on the fresh object; WriteFailure carries
   * it. Not retried.
   */
  REASON_PRECONDITION_FAILED,
  /** A CEL expression does not compile, fails to evaluate or exceeds its cost. */
  REASON_INVALID_CEL,
  /** Every CEL evaluation slot stayed busy until the deadline. Retry later. */
  REASON_CEL_BUSY,
  /**
   * The caller's deadline passed before the write was done, and no write is in doubt (a write whose
   * answer the deadline cut off is REASON_WRITE_OUTCOME_UNKNOWN).
   */
  REASON_DEADLINE_EXCEEDED,
  /**
   * The mutation cannot be applied to the fresh object (e.g. a JSON Patch path that does not
   * exist).
   */
  REASON_MUTATION_DOES_NOT_APPLY,
  /** The object's resourceVersion differs from Preconditions.resource_version. */
  REASON_RESOURCE_VERSION_MISMATCH,
  /** No connection to the API server could be made; nothing was written. */
  REASON_API_SERVER_UNREACHABLE,
  /**
   * A write was sent but its answer was lost; it may have been applied. Send an idempotency key to
   * make such writes retryable.
   */
  REASON_WRITE_OUTCOME_UNKNOWN,
  /** The sidecar's retry budget is spent; retries resume as first attempts succeed. */
  REASON_RETRY_BUDGET_EXHAUSTED,
  /**
   * The circuit breaker toward the API server is open; nothing was sent. RetryInfo says when to try
   * again.
   */
  REASON_CIRCUIT_OPEN,
  /** The sidecar's own rate limit toward the API server leaves no slot before the deadline. */
  REASON_RATE_LIMITED,
  /**
   * A Transact caller cancelled or sent a malformed message; nothing was written after that point.
   */
  REASON_TRANSACTION_CANCELLED,
  /** A Transact stream stayed silent longer than the sidecar's idle timeout. */
  REASON_TRANSACTION_IDLE,
  /**
   * The API server's answer could not be read; when it answered a write, that write may have been
   * applied.
   */
  REASON_BAD_ANSWER,
  /** The sidecar has as many RPCs in flight as it allows. Retry with backoff. */
  REASON_OVERLOADED,
  /** The request is larger than the sidecar accepts. */
  REASON_REQUEST_TOO_LARGE,
  /** The request message could not be decoded. */
  REASON_MALFORMED_REQUEST,
  /** The method does not exist on this sidecar. */
  REASON_UNIMPLEMENTED,
  /** The request message was not received completely. */
  REASON_REQUEST_NOT_READ,
  /** The sidecar's policy does not allow this write to this target. */
  REASON_POLICY_DENIED,
  /** The sidecar requires a bearer token and the call carried none. */
  REASON_TOKEN_REQUIRED,
  /** The call's bearer token is not the sidecar's. */
  REASON_TOKEN_INVALID,
  /** Server-side apply conflicts with fields owned by other managers; set force to take them. */
  REASON_FIELD_MANAGER_CONFLICT,
  /** The API server's answer decided the failure; ErrorInfo.reason carries its reason. */
  REASON_API_SERVER,
  /**
   * A finalizer cannot be added: the object is being deleted (it has a deletionTimestamp). Nothing
   * was written.
   */
  REASON_OBJECT_DELETING,
  /**
   * Another owner is already the object's controller; the message names it. Nothing was written.
   */
  REASON_ALREADY_OWNED,
  /**
   * Get's min_resource_version is newer than the API server has reached: its watch cache did not
   * catch up within its wait (about 3 s; HTTP 504, cause ResourceVersionTooLarge). Nothing was
   * read; UNAVAILABLE with RetryInfo carrying the server's retry delay.
   */
  REASON_RESOURCE_VERSION_TOO_LARGE,
  /**
   * A fenced write: the object records a later epoch of the fence's Lease than the caller's, so a
   * later leader has written it; the message names both epochs. Nothing was written.
   * FAILED_PRECONDITION.
   */
  REASON_FENCED,
  /**
   * A fenced write: this sidecar does not lead under the fence's Lease and epoch (it never did,
   * lost the renewal, or the caller's stream ended). Nothing was written. FAILED_PRECONDITION.
   */
  REASON_NOT_LEADER,
  /**
   * The request carries a field, an enum value or an RPC the sidecar does not know: the client is
   * newer than the sidecar. Refused before sending by this client, or by a sidecar of 0.2.0 or
   * newer; the message and the ErrorInfo metadata name it ({@code field}, {@code sidecar_version}).
   * Nothing was sent. FAILED_PRECONDITION; upgrade the sidecar (docs/compatibility.md), or leave
   * the feature unused.
   */
  REASON_UNKNOWN_FIELD,
  /** A value of a sidecar newer than this client. */
  UNRECOGNIZED;
}
