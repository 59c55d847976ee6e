package dev.safewrite;

/**
 * ABORTED: conflicts outlasted the retry policy (or {@link RetryPolicy#requeue()}), a strict
 * resourceVersion precondition did not match (reason {@code RESOURCE_VERSION_MISMATCH}), or
 * server-side apply met another manager's fields (reason {@code FIELD_MANAGER_CONFLICT}). Read the
 * object again, or requeue.
 */
public final class ConflictException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  ConflictException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.CONFLICT;
  }
}
