package dev.safewrite;

/** What a successful call did. */
public enum Outcome {
  /** The object was changed and written. */
  UPDATED,
  /** The mutation left the object as it was: nothing was written. */
  UNCHANGED,
  /** The object did not exist and was created from the create-if-missing object. */
  CREATED,
  /** A transaction's function aborted: nothing was written. */
  ABORTED,
  /**
   * The object does not exist any more: a finalizer removal found it gone (nothing was written, and
   * the result has no object), or the write removed the last finalizer of an object being deleted,
   * so the API server deleted it (the result's object is the object as last written). Skip any
   * status write that would follow.
   */
  GONE;

  static Outcome fromProto(dev.safewrite.v1.Outcome outcome) {
    return switch (outcome) {
      case OUTCOME_UPDATED -> UPDATED;
      case OUTCOME_UNCHANGED -> UNCHANGED;
      case OUTCOME_CREATED -> CREATED;
      case OUTCOME_ABORTED -> ABORTED;
      case OUTCOME_GONE -> GONE;
      case OUTCOME_UNSPECIFIED, UNRECOGNIZED ->
          throw new InternalException("the sidecar answered with no known outcome: " + outcome);
    };
  }
}
