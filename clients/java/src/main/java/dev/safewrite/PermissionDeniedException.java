package dev.safewrite;

/**
 * PERMISSION_DENIED: the sidecar's identity may not do this (403, reason {@code Forbidden}), or the
 * sidecar's allow-list does not allow it (reason {@code POLICY_DENIED}).
 */
public final class PermissionDeniedException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  PermissionDeniedException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.PERMISSION_DENIED;
  }
}
