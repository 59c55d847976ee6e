package dev.safewrite;

/**
 * INVALID_ARGUMENT or OUT_OF_RANGE: a malformed request (bad JSON, a CEL syntax error, a name that
 * breaks Kubernetes' rules, a request over the sidecar's size limit), or an object the API server
 * refused as invalid (422). {@link #fieldViolations()} names the fields. Nothing was written.
 */
public final class InvalidException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  InvalidException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.INVALID;
  }
}
