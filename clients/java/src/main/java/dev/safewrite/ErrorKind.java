package dev.safewrite;

/**
 * The class of a failed call, one per {@link SafewriteException} subclass, decided by the gRPC code
 * (and, for {@code UNKNOWN}, the reason) in one place.
 */
public enum ErrorKind {
  /**
   * ABORTED ({@link ConflictException}): conflicts outlasted the retry policy (or {@link
   * RetryPolicy#requeue()}), a strict resourceVersion precondition did not match, or server-side
   * apply met another manager's fields.
   */
  CONFLICT,
  /**
   * INVALID_ARGUMENT or OUT_OF_RANGE ({@link InvalidException}): a malformed or oversized request,
   * or an object the API server refused as invalid (422).
   */
  INVALID,
  /**
   * FAILED_PRECONDITION ({@link PreconditionFailedException}): a precondition was false, a JSON
   * Patch test failed or the mutation does not apply; or the call needs an RPC, a field or an enum
   * value the sidecar does not know ({@code REASON_UNKNOWN_FIELD}: refused before sending by this
   * client or by the sidecar); nothing was written.
   */
  PRECONDITION_FAILED,
  /** UNAVAILABLE ({@link UnavailableException}): unreachable, throttled, breaker open. */
  UNAVAILABLE,
  /** RESOURCE_EXHAUSTED ({@link ResourceExhaustedException}): the sidecar sheds load. */
  RESOURCE_EXHAUSTED,
  /** PERMISSION_DENIED ({@link PermissionDeniedException}): 403, or the sidecar's policy. */
  PERMISSION_DENIED,
  /** UNAUTHENTICATED ({@link UnauthenticatedException}): 401, or the sidecar's token. */
  UNAUTHENTICATED,
  /** NOT_FOUND ({@link NotFoundException}): no such object, or an unknown kind. */
  NOT_FOUND,
  /** DEADLINE_EXCEEDED ({@link DeadlineExceededException}): the call's deadline passed. */
  DEADLINE_EXCEEDED,
  /** CANCELLED ({@link CancelledException}): the call was cancelled. */
  CANCELLED,
  /**
   * UNKNOWN with reason WRITE_OUTCOME_UNKNOWN ({@link OutcomeUnknownException}): a write was sent
   * but its answer was lost; it may or may not have been applied.
   */
  OUTCOME_UNKNOWN,
  /** INTERNAL, DATA_LOSS, any other UNKNOWN ({@link InternalException}). */
  INTERNAL,
  /** UNIMPLEMENTED ({@link UnimplementedException}): the sidecar lacks this RPC. */
  UNIMPLEMENTED
}
