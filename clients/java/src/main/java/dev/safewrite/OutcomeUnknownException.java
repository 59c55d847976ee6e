package dev.safewrite;

/**
 * UNKNOWN with reason {@code WRITE_OUTCOME_UNKNOWN}: the sidecar sent a write but its answer was
 * lost, or the call's deadline passed before it came, so it may or may not have been applied, and
 * it was not retried (the call had no idempotency key). {@link #isRetryable()} is then false: read
 * the object to find out before deciding. A call with {@link
 * WriteConfig.Builder#idempotencyKey(String)} may simply be sent again with the same key (should
 * one end here, {@link #isRetryable()} is true).
 */
public final class OutcomeUnknownException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  OutcomeUnknownException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.OUTCOME_UNKNOWN;
  }
}
