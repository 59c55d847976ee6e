package dev.safewrite;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * A failed safewrite call: the gRPC status and its decoded rich details. Each {@link ErrorKind} has
 * its own subclass ({@link ConflictException}, {@link InvalidException}, ...), so catch the ones
 * you handle:
 *
 * <pre>{@code
 * try {
 *   client.update(ref, mutation);
 * } catch (ConflictException e) {
 *   requeue();
 * } catch (SafewriteException e) {
 *   if (e.isRetryable()) requeueAfter(e.retryDelay().orElse(Duration.ofSeconds(1)));
 *   else throw e;
 * }
 * }</pre>
 */
public abstract class SafewriteException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The google.rpc.ErrorInfo domain of every error the sidecar returns. */
  public static final String DOMAIN = "safewrite.dev";

  private final transient ErrorDetails details;

  SafewriteException(ErrorDetails details) {
    super(headline(details), details.status.getCause());
    this.details = details;
  }

  /**
   * Decodes the failure of a gRPC call to the sidecar (a {@code StatusRuntimeException}, or
   * anything {@link Status#fromThrowable} understands) into its {@link SafewriteException}; a
   * {@code SafewriteException} is returned as it is.
   */
  public static SafewriteException from(Throwable failure) {
    return Errors.decode(failure, false);
  }

  /** The class of this failure; each class has its own subclass. */
  public abstract ErrorKind kind();

  /** The gRPC status code. */
  public Status.Code code() {
    return details.status.getCode();
  }

  /** The gRPC status, with its description and cause. */
  public Status status() {
    return details.status;
  }

  /** The sidecar's message: what happened and what to do. */
  public String description() {
    String description = details.status.getDescription();
    return description == null ? "" : ownOptions(description);
  }

  /** The sidecar's advice names the proto's field; the caller sets this client's option. */
  private static String ownOptions(String description) {
    return description.replace("options.create_if_missing_json", "createIfMissing");
  }

  /**
   * The google.rpc.ErrorInfo reason: a safewrite reason such as {@code PRECONDITION_FAILED} or
   * {@code CIRCUIT_OPEN}, or, when the API server's answer decided the failure, its Status reason
   * ({@code Conflict}, {@code Invalid}, {@code Forbidden}, ...). Empty when the status carried no
   * ErrorInfo (the sidecar was not reached, or the error was found on this side).
   */
  public String reason() {
    return details.reason;
  }

  /** The ErrorInfo domain ({@link #DOMAIN}), or empty. */
  public String domain() {
    return details.domain;
  }

  /** The ErrorInfo metadata, e.g. {@code attempts} and {@code http_status}. */
  public Map<String, String> errorMetadata() {
    return details.metadata;
  }

  /**
   * Why the write failed, as the proto's enum (the WriteFailure detail's reason): {@code
   * REASON_API_SERVER} when the API server's answer decided it (see {@link #reason()} for its
   * Status reason), {@code REASON_UNSPECIFIED} when the status carried no details.
   */
  public Reason writeFailureReason() {
    return details.writeFailureReason;
  }

  /** The fields at fault (google.rpc.BadRequest), in order; empty when none were named. */
  public List<FieldViolation> fieldViolations() {
    return details.fieldViolations;
  }

  /** How long to wait before trying again (google.rpc.RetryInfo), when the status said. */
  public Optional<Duration> retryDelay() {
    return Optional.ofNullable(details.retryDelay);
  }

  /** The attempts made before the failure; empty when no request reached the API server. */
  public List<AttemptRecord> attemptRecords() {
    return details.attemptRecords;
  }

  /** The number of attempts made before the failure. */
  public int attempts() {
    return details.attempts;
  }

  /**
   * For {@link PreconditionFailedException}: the object the check failed on, as JSON, so the caller
   * can decide without another read: as read, or, when the call was committed together with others,
   * as it stood at this call's turn (after the changes of the calls before it); empty otherwise.
   */
  public String currentObjectJson() {
    return details.currentObjectJson;
  }

  /** {@link #currentObjectJson()} as a Jackson tree, parsed anew on every call. */
  public Optional<ObjectNode> currentObject() {
    if (details.currentObjectJson.isEmpty()) {
      return Optional.empty();
    }
    return Optional.of(Json.object(details.currentObjectJson));
  }

  /**
   * {@link #currentObjectJson()} as an instance of {@code type} (your fabric8 class), read by
   * Jackson anew on every call.
   *
   * @throws IllegalArgumentException when Jackson cannot read the object as {@code type}
   */
  public <T> Optional<T> currentObject(Class<T> type) {
    return currentObject().map(object -> Json.as(object, type));
  }

  /** The W3C trace id of the sidecar's span of the call; empty when tracing is off. */
  public String traceId() {
    return details.traceId;
  }

  /**
   * What the proto advises after this failure: {@link Reasons#advice} of {@link
   * #writeFailureReason()} and {@link #code()}, one of {@code RETRY_LATER}, {@code
   * RETRY_WITH_IDEMPOTENCY_KEY} (a write may have been applied) and {@code RETRY_NEVER}.
   */
  public Retry retryAdvice() {
    return Reasons.advice(details.writeFailureReason, code());
  }

  /**
   * Whether the same call, sent again, may succeed and is safe to send, as {@link #retryAdvice()}
   * says: {@code RETRY_LATER} yes (after {@link #retryDelay()} when given, else with backoff);
   * {@code RETRY_WITH_IDEMPOTENCY_KEY} only when this call carried an idempotency key, since
   * without one a second call could apply the change twice (read the object before deciding), or
   * was a {@link SafewriteClient#get}, which writes nothing; {@code RETRY_NEVER} no. The sidecar's
   * own reasons decide by themselves; the API server's answers and failures without safewrite
   * details (the sidecar was not reached, the caller's own deadline passed) go by the gRPC code:
   * UNAVAILABLE, RESOURCE_EXHAUSTED, ABORTED (conflicts outlasted the retry policy) and INTERNAL
   * yes; CANCELLED, UNKNOWN and DEADLINE_EXCEEDED (the call ended while a write may have been in
   * flight) only with a key; any other code no.
   */
  public boolean isRetryable() {
    return switch (retryAdvice()) {
      case RETRY_LATER -> true;
      case RETRY_WITH_IDEMPOTENCY_KEY -> details.resendSafe;
      default -> false;
    };
  }

  private static String headline(ErrorDetails details) {
    StringBuilder text = new StringBuilder("safewrite: ").append(details.status.getCode());
    if (!details.reason.isEmpty()) {
      text.append(" (").append(details.reason).append(')');
    }
    String description = details.status.getDescription();
    if (description != null && !description.isEmpty()) {
      text.append(": ").append(ownOptions(description));
    }
    return text.toString();
  }
}
