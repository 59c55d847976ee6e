package dev.safewrite;

/**
 * UNAVAILABLE: the sidecar or the API server is unreachable or throttling, the circuit breaker is
 * open, or the retry budget is spent. Try again after {@link #retryDelay()}.
 */
public final class UnavailableException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  UnavailableException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.UNAVAILABLE;
  }
}
