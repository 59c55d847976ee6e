package dev.safewrite;

/** What a successful {@link SafewriteClient#delete} did. */
public enum DeleteOutcome {
  /** The API server accepted the delete and the object is gone (with dry run: would be). */
  DELETED,
  /**
   * The API server accepted the delete, but the object is only marked for deletion: it has
   * finalizers (or foreground propagation added one) and stays readable, with a deletionTimestamp,
   * until they are removed. {@link DeleteResult#deletionTimestamp()} says since when.
   */
  DELETING,
  /**
   * The object was not there: nothing was deleted by this call. Another writer may have deleted it,
   * or an earlier attempt of this call whose answer was lost. An answer, not an error.
   */
  GONE;

  static DeleteOutcome fromProto(dev.safewrite.v1.DeleteOutcome outcome) {
    return switch (outcome) {
      case DELETE_OUTCOME_DELETED -> DELETED;
      case DELETE_OUTCOME_DELETING -> DELETING;
      case DELETE_OUTCOME_GONE -> GONE;
      case DELETE_OUTCOME_UNSPECIFIED, UNRECOGNIZED ->
          throw new InternalException("the sidecar answered with no known outcome: " + outcome);
    };
  }
}
