package dev.safewrite;

/**
 * UNAUTHENTICATED: the API server refused the sidecar's credentials (401), or the sidecar wants a
 * bearer token ({@code TOKEN_REQUIRED}, {@code TOKEN_INVALID}).
 */
public final class UnauthenticatedException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  UnauthenticatedException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.UNAUTHENTICATED;
  }
}
