package dev.safewrite;

/**
 * CANCELLED: the call was cancelled (its {@link io.grpc.Context} was cancelled, or the thread
 * interrupted).
 */
public final class CancelledException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  CancelledException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.CANCELLED;
  }
}
