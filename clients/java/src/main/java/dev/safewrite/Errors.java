package dev.safewrite;

import com.google.protobuf.Any;
import com.google.protobuf.InvalidProtocolBufferException;
import com.google.protobuf.Message;
import com.google.rpc.BadRequest;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.safewrite.v1.WriteFailure;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Turns a failed call into its {@link SafewriteException}: the status details decoded, and the one
 * mapping from gRPC code to exception class.
 */
final class Errors {
  private static final String OUTCOME_UNKNOWN = "WRITE_OUTCOME_UNKNOWN";

  private Errors() {}

  /**
   * Decodes a gRPC call's failure. {@code resendSafe} says whether the call can be sent again
   * without applying a change twice: a write that carried an idempotency key, or a read (which
   * makes a lost answer retryable).
   */
  static SafewriteException decode(Throwable failure, boolean resendSafe) {
    if (failure instanceof SafewriteException already) {
      return already;
    }
    ErrorDetails details = ErrorDetails.local(Status.fromThrowable(failure));
    details.resendSafe = resendSafe;
    com.google.rpc.Status proto = StatusProto.fromThrowable(failure);
    if (proto != null) {
      for (Any detail : proto.getDetailsList()) {
        read(detail, details);
      }
    }
    if (details.writeFailureReason == Reason.REASON_UNSPECIFIED) {
      details.writeFailureReason = fromErrorInfo(details.reason);
    }
    details.attempts =
        Math.max(details.attemptRecords.size(), count(details.metadata.get("attempts")));
    return of(details);
  }

  /** The exception of a decoded status: the one place gRPC codes are mapped. */
  static SafewriteException of(ErrorDetails details) {
    return switch (details.status.getCode()) {
      case ABORTED -> new ConflictException(details);
      case INVALID_ARGUMENT, OUT_OF_RANGE -> new InvalidException(details);
      case FAILED_PRECONDITION -> new PreconditionFailedException(details);
      case UNAVAILABLE -> new UnavailableException(details);
      case RESOURCE_EXHAUSTED -> new ResourceExhaustedException(details);
      case PERMISSION_DENIED -> new PermissionDeniedException(details);
      case UNAUTHENTICATED -> new UnauthenticatedException(details);
      case NOT_FOUND -> new NotFoundException(details);
      case DEADLINE_EXCEEDED -> new DeadlineExceededException(details);
      case CANCELLED -> new CancelledException(details);
      case UNIMPLEMENTED -> new UnimplementedException(details);
      case UNKNOWN ->
          OUTCOME_UNKNOWN.equals(details.reason)
                  || details.writeFailureReason == Reason.REASON_WRITE_OUTCOME_UNKNOWN
              ? new OutcomeUnknownException(details)
              : new InternalException(details);
      case OK, INTERNAL, DATA_LOSS, ALREADY_EXISTS -> new InternalException(details);
    };
  }

  /** The reason of a sidecar that sends no WriteFailure.reason, from its ErrorInfo. */
  private static Reason fromErrorInfo(String errorInfoReason) {
    if (errorInfoReason.isEmpty()) {
      return Reason.REASON_UNSPECIFIED;
    }
    return Reasons.fromErrorInfoReason(errorInfoReason).orElse(Reason.REASON_API_SERVER);
  }

  private static int count(String text) {
    if (text == null) {
      return 0;
    }
    try {
      return Integer.parseInt(text);
    } catch (NumberFormatException notANumber) {
      return 0;
    }
  }

  private static void read(Any detail, ErrorDetails details) {
    try {
      if (is(detail, ErrorInfo.getDefaultInstance())) {
        ErrorInfo info = ErrorInfo.parseFrom(detail.getValue());
        details.reason = info.getReason();
        details.domain = info.getDomain();
        details.metadata = Map.copyOf(info.getMetadataMap());
      } else if (is(detail, BadRequest.getDefaultInstance())) {
        List<FieldViolation> violations = new ArrayList<>();
        for (BadRequest.FieldViolation v :
            BadRequest.parseFrom(detail.getValue()).getFieldViolationsList()) {
          violations.add(new FieldViolation(v.getField(), v.getDescription()));
        }
        details.fieldViolations = List.copyOf(violations);
      } else if (is(detail, RetryInfo.getDefaultInstance())) {
        com.google.protobuf.Duration delay = RetryInfo.parseFrom(detail.getValue()).getRetryDelay();
        details.retryDelay = Duration.ofSeconds(delay.getSeconds(), delay.getNanos());
      } else if (is(detail, WriteFailure.getDefaultInstance())) {
        WriteFailure failure = WriteFailure.parseFrom(detail.getValue());
        details.attemptRecords = AttemptRecord.fromProto(failure.getAttemptRecordsList());
        details.currentObjectJson = failure.getCurrentObjectJson();
        details.traceId = failure.getTraceId();
        details.writeFailureReason = Reasons.of(failure.getReason());
      }
    } catch (InvalidProtocolBufferException unreadable) {
      // A detail that does not decode is left out; the code and message still stand.
    }
  }

  /** Whether an Any holds this message type, whatever the type URL's prefix. */
  private static boolean is(Any detail, Message type) {
    String url = detail.getTypeUrl();
    String name = type.getDescriptorForType().getFullName();
    return url.equals(name) || url.endsWith("/" + name);
  }
}
