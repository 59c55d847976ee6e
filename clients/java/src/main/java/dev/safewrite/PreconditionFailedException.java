package dev.safewrite;

/**
 * FAILED_PRECONDITION: a precondition was false, a JSON Patch {@code test} failed, or the mutation
 * does not apply to the object; nothing was written, and {@link #currentObject()} holds the object
 * as it is now.
 */
public final class PreconditionFailedException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  PreconditionFailedException(ErrorDetails details) {
    super(details);
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.PRECONDITION_FAILED;
  }
}
