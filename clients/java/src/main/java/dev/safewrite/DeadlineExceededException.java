package dev.safewrite;

/**
 * DEADLINE_EXCEEDED: the call's deadline (its timeout, or the {@link io.grpc.Context}'s) passed;
 * {@link #attemptRecords()} has the attempts made. With an idempotency key the same call may be
 * sent again.
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
