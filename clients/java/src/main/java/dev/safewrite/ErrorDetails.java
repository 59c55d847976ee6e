package dev.safewrite;

import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import java.util.Map;

/** What a failed call's status carried, decoded; the state of a {@link SafewriteException}. */
final class ErrorDetails {
  Status status;
  String reason = "";
  String domain = "";
  Map<String, String> metadata = Map.of();
  Reason writeFailureReason = Reason.REASON_UNSPECIFIED;
  List<FieldViolation> fieldViolations = List.of();
  Duration retryDelay;
  List<AttemptRecord> attemptRecords = List.of();
  String currentObjectJson = "";
  String traceId = "";
  int attempts;

  /** The call can be sent again without applying a change twice: keyed, or a read. */
  boolean resendSafe;

  /** An error found on this side, before or without an answer from the sidecar. */
  static ErrorDetails local(Status status) {
    ErrorDetails details = new ErrorDetails();
    details.status = status;
    return details;
  }
}
