package dev.safewrite;

/**
 * What a caller may do after a failure: whether the same call, sent again, may succeed and is safe.
 * This client's copy of the proto's {@code Retry} enum, under the same names; {@link
 * SafewriteException#retryAdvice()} answers one, {@link Reasons#retry(Reason)} gives a reason's.
 */
public enum Retry {
  /**
   * Only a different request can succeed: change the request, the object, the caller's rights or
   * the sidecar's configuration first.
   */
  RETRY_NEVER,
  /** The same call may succeed later: after the RetryInfo delay when there is one, else backoff. */
  RETRY_LATER,
  /**
   * A write may have been applied: the same call is safe again only when it carried an idempotency
   * key (then the sidecar applies the change at most once); without one, read the object before
   * deciding.
   */
  RETRY_WITH_IDEMPOTENCY_KEY,
  /** The gRPC code decides, as the proto's {@code retry_by_code} option on {@code Reason} says. */
  RETRY_BY_CODE
}
