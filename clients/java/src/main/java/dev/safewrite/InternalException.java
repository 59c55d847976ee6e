package dev.safewrite;

import io.grpc.Status;

/**
 * INTERNAL, DATA_LOSS or any other UNKNOWN: the API server failed internally (e.g. a failing
 * admission webhook), an answer was not understood, or the sidecar broke the protocol.
 */
public final class InternalException extends SafewriteException {
  private static final long serialVersionUID = 1L;

  InternalException(ErrorDetails details) {
    super(details);
  }

  /** An internal error found on this side. */
  InternalException(String message) {
    super(ErrorDetails.local(Status.INTERNAL.withDescription(message)));
  }

  @Override
  public ErrorKind kind() {
    return ErrorKind.INTERNAL;
  }
}
