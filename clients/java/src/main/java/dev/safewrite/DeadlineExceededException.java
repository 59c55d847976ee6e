package dev.safewrite;

/**
 * DEADLINE_EXCEEDED: the call's deadline (its timeout, or the {@link io.grpc.Context}'s) passed;
 * {@link #attemptRecords()} has the attempts made. When the sidecar answers it (reason {@code
 * DEADLINE_EXCEEDED}) no write is in doubt and the call may be sent again later; a deadline that
 * cut a write's answer off is an {@link OutcomeUnknownException} instead. Without an answer from
 * the sidecar (the caller's deadline passed first) a write may have been in flight: then the same
 * call may be sent again only with an idempotency key (see {@link #isRetryable()}).
 */
public final class DeadlineExceededException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  DeadlineExceededException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.DEADLINE_EXCEEDED;
  }
}
