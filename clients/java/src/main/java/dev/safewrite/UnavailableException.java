package dev.safewrite;

/**
 * UNAVAILABLE: the sidecar or the API server is unreachable or throttling, the circuit breaker is
 * open, the retry budget is spent, or a get's minimum resourceVersion is one the API server has not
 * reached yet ({@code REASON_RESOURCE_VERSION_TOO_LARGE}). Try again after {@link #retryDelay()}.
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
