package dev.safewrite;

/**
 * UNKNOWN with reason {@code WRITE_OUTCOME_UNKNOWN}: the sidecar sent a write but its answer was
 * lost, so it may or may not have been applied, and it was not retried (the call had no idempotency
 * key). Read the object to find out; a call with {@link WriteOption#idempotencyKey(String)} may
 * simply be sent again.
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
