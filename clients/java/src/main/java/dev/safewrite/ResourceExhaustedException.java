package dev.safewrite;

/**
 * RESOURCE_EXHAUSTED: the sidecar is shedding load (reason {@code OVERLOADED}, {@code CEL_BUSY}) or
 * its rate limit would outlast the deadline ({@code RATE_LIMITED}). Try again after {@link
 * #retryDelay()}.
 */
public final class ResourceExhaustedException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  ResourceExhaustedException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.RESOURCE_EXHAUSTED;
  }
}
