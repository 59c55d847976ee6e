package dev.safewrite;

/**
 * NOT_FOUND: the object does not exist (see {@link WriteConfig.Builder#createIfMissing(String)}),
 * or its kind is unknown to the API server (reason {@code UNKNOWN_KIND}).
 */
public final class NotFoundException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  NotFoundException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.NOT_FOUND;
  }
}
