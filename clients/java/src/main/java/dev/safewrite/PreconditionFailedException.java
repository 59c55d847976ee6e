package dev.safewrite;

/**
 * FAILED_PRECONDITION: a precondition was false, a JSON Patch {@code test} failed, or the mutation
 * does not apply to the object; nothing was written, and {@link #currentObject()} holds the object
 * as it is now. {@link #writeFailureReason()} says which, among them {@code REASON_OBJECT_DELETING}
 * (a finalizer cannot be added to an object being deleted), {@code REASON_ALREADY_OWNED} (another
 * owner is the object's controller, named by {@link #description()}), and, for a write with a
 * {@link WriteConfig.Builder#fence(String, String, long) fence}, {@code REASON_FENCED} (the object
 * records a later leader's epoch) and {@code REASON_NOT_LEADER} (the sidecar does not lead under
 * the fence's epoch); and {@code REASON_UNKNOWN_FIELD}: the call needs an RPC, a field or an enum
 * value the sidecar does not know (the client is newer), refused before sending by this client
 * ({@link #errorMetadata()} {@code refused_by=client}) or by the sidecar; see
 * docs/compatibility.md.
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
