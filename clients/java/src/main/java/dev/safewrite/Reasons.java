package dev.safewrite;

import dev.safewrite.v1.Reason;
import java.util.Optional;

/**
 * The proto's {@link Reason} values: their ErrorInfo spelling and whether a failure with each may
 * be retried. Every value is classified here; a value added to the proto breaks the build until it
 * is.
 */
public final class Reasons {
  private static final String PREFIX = "REASON_";

  private Reasons() {}

  /** Whether a failure with a given {@link Reason} may succeed when sent again later. */
  public enum Retryability {
    /** Yes, later (after {@link SafewriteException#retryDelay()} when given). */
    RETRY,
    /** No: the request itself, the object or the caller's rights must change first. */
    DO_NOT_RETRY,
    /** Only a call that carried an idempotency key may be sent again. */
    RETRY_WITH_IDEMPOTENCY_KEY,
    /** The API server's answer decided it: see the gRPC code. */
    BY_CODE
  }

  /** The retryability of a failure with this reason. */
  public static Retryability retryability(Reason reason) {
    return switch (reason) {
      case REASON_CEL_BUSY,
          REASON_DEADLINE_EXCEEDED,
          REASON_API_SERVER_UNREACHABLE,
          REASON_RETRY_BUDGET_EXHAUSTED,
          REASON_CIRCUIT_OPEN,
          REASON_RATE_LIMITED,
          REASON_TRANSACTION_IDLE,
          REASON_OVERLOADED,
          REASON_REQUEST_NOT_READ ->
          Retryability.RETRY;
      case REASON_INVALID_REQUEST,
          REASON_UNKNOWN_KIND,
          REASON_PRECONDITION_FAILED,
          REASON_INVALID_CEL,
          REASON_MUTATION_DOES_NOT_APPLY,
          REASON_RESOURCE_VERSION_MISMATCH,
          REASON_TRANSACTION_CANCELLED,
          REASON_BAD_ANSWER,
          REASON_REQUEST_TOO_LARGE,
          REASON_MALFORMED_REQUEST,
          REASON_UNIMPLEMENTED,
          REASON_POLICY_DENIED,
          REASON_TOKEN_REQUIRED,
          REASON_TOKEN_INVALID,
          REASON_FIELD_MANAGER_CONFLICT ->
          Retryability.DO_NOT_RETRY;
      case REASON_WRITE_OUTCOME_UNKNOWN -> Retryability.RETRY_WITH_IDEMPOTENCY_KEY;
      // No details (the sidecar was not reached) or a value newer than this client.
      case REASON_API_SERVER, REASON_UNSPECIFIED, UNRECOGNIZED -> Retryability.BY_CODE;
    };
  }

  /**
   * The ErrorInfo spelling of a reason: its name without {@code REASON_}, e.g. {@code
   * CIRCUIT_OPEN}. {@code REASON_API_SERVER} has none of its own (ErrorInfo then carries the API
   * server's Status reason) and answers {@code API_SERVER}.
   */
  public static String errorInfoReason(Reason reason) {
    if (reason == Reason.UNRECOGNIZED) {
      throw new IllegalArgumentException("UNRECOGNIZED has no ErrorInfo reason");
    }
    return reason.name().substring(PREFIX.length());
  }

  /**
   * The {@link Reason} an ErrorInfo reason spells, if it is a safewrite one; empty for the API
   * server's Status reasons ({@code Conflict}, {@code NotFound}, ...).
   */
  public static Optional<Reason> fromErrorInfoReason(String errorInfoReason) {
    if (errorInfoReason == null || errorInfoReason.isEmpty()) {
      return Optional.empty();
    }
    try {
      Reason reason = Reason.valueOf(PREFIX + errorInfoReason);
      return reason == Reason.REASON_UNSPECIFIED ? Optional.empty() : Optional.of(reason);
    } catch (IllegalArgumentException unknown) {
      return Optional.empty();
    }
  }
}
