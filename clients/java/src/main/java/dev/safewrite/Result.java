package dev.safewrite;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.List;

/**
 * A successful call.
 *
 * @param outcome what the call did
 * @param objectJson the object as this call left it, as JSON: as written by the write that carried
 *     its change (as read when unchanged, aborted or already applied). When the call was committed
 *     together with others ({@link AttemptRecord#batchSize()} above 1), the object right after this
 *     call's own change, in the batch's order, without the changes of the calls after it; an
 *     unchanged or already applied call gets the object as it stood at its turn. Empty when the
 *     call found the object {@link Outcome#GONE} and wrote nothing
 * @param resourceVersion the resourceVersion of {@code objectJson}: of the write that carried it,
 *     or of the read when it is the object as read
 * @param attempts the number of attempts made, the last included
 * @param attemptRecords one record per attempt, in order
 * @param traceId the W3C trace id of the sidecar's span of the call; empty when its tracing is off
 * @param alreadyApplied true when the call's idempotency key was already on the object: an earlier
 *     call made this change and nothing was written this time
 */
public record Result(
    Outcome outcome,
    String objectJson,
    String resourceVersion,
    int attempts,
    List<AttemptRecord> attemptRecords,
    String traceId,
    boolean alreadyApplied) {

  /**
   * The object as a Jackson tree, parsed anew on every call (change it freely).
   *
   * @throws IllegalStateException when there is none: the call found the object {@link
   *     Outcome#GONE}
   */
  public ObjectNode object() {
    if (objectJson.isEmpty()) {
      throw new IllegalStateException("no object: the call found it " + outcome);
    }
    return Json.object(objectJson);
  }

  /**
   * The object as an instance of {@code type}, read by Jackson anew on every call: your fabric8
   * class (such as a java-operator-sdk custom resource) or any class Jackson binds.
   *
   * @throws IllegalStateException when there is none: the call found the object {@link
   *     Outcome#GONE}
   * @throws IllegalArgumentException when Jackson cannot read the object as {@code type}
   */
  public <T> T object(Class<T> type) {
    return Json.as(object(), type);
  }

  /**
   * True when the object does not exist any more ({@link Outcome#GONE}): a finalizer removal found
   * it gone, or removed its last finalizer while it was being deleted, so the API server deleted
   * it. A controller skips the status write that would follow.
   */
  public boolean gone() {
    return outcome == Outcome.GONE;
  }

  static Result fromProto(dev.safewrite.v1.WriteResult result) {
    return new Result(
        Outcome.fromProto(result.getOutcome()),
        result.getObjectJson(),
        result.getResourceVersion(),
        result.getAttempts(),
        AttemptRecord.fromProto(result.getAttemptRecordsList()),
        result.getTraceId(),
        result.getAlreadyApplied());
  }
}
