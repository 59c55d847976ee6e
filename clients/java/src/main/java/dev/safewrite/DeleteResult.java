package dev.safewrite;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Instant;
import java.util.List;
import java.util.Optional;

/**
 * A successful {@link SafewriteClient#delete}.
 *
 * @param outcome what the call did: {@link DeleteOutcome#DELETED}, {@link DeleteOutcome#DELETING}
 *     or {@link DeleteOutcome#GONE}
 * @param objectJson the object as the API server answered the DELETE, as JSON (for {@code DELETING}
 *     with its deletionTimestamp); empty when it answered a Status instead, and for {@code GONE}
 * @param deletionTimestamp the object's {@code metadata.deletionTimestamp} (RFC 3339); empty when
 *     it has none
 * @param attempts the number of attempts made, the last included
 * @param attemptRecords one record per attempt, in order (the HTTP status of the DELETE, or of the
 *     read when the read was refused or found nothing)
 * @param traceId the W3C trace id of the sidecar's span of the call; empty when its tracing is off
 */
public record DeleteResult(
    DeleteOutcome outcome,
    String objectJson,
    String deletionTimestamp,
    int attempts,
    List<AttemptRecord> attemptRecords,
    String traceId) {

  /**
   * The object as the API server answered the DELETE, as a Jackson tree parsed anew on every call.
   *
   * @throws IllegalStateException when there is none ({@link #objectJson()} is empty)
   */
  public ObjectNode object() {
    if (objectJson.isEmpty()) {
      throw new IllegalStateException("no object: the delete answered " + outcome);
    }
    return Json.object(objectJson);
  }

  /**
   * {@link #object()} as an instance of {@code type}, read by Jackson.
   *
   * @throws IllegalStateException when there is none
   * @throws IllegalArgumentException when Jackson cannot read the object as {@code type}
   */
  public <T> T object(Class<T> type) {
    return Json.as(object(), type);
  }

  /** {@link #deletionTimestamp()} as an instant; empty when the object has none. */
  public Optional<Instant> deletionTime() {
    return deletionTimestamp.isEmpty()
        ? Optional.empty()
        : Optional.of(Instant.parse(deletionTimestamp));
  }

  /** True when the object was not there ({@link DeleteOutcome#GONE}). */
  public boolean gone() {
    return outcome == DeleteOutcome.GONE;
  }

  static DeleteResult fromProto(dev.safewrite.v1.DeleteResponse response) {
    return new DeleteResult(
        DeleteOutcome.fromProto(response.getOutcome()),
        response.getObjectJson(),
        response.getDeletionTimestamp(),
        response.getAttempts(),
        AttemptRecord.fromProto(response.getAttemptRecordsList()),
        response.getTraceId());
  }
}
