package dev.safewrite;

/** UNIMPLEMENTED: the sidecar does not implement this RPC (an older sidecar). */
public final class UnimplementedException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  UnimplementedException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.UNIMPLEMENTED;
  }
}
