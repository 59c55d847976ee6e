package dev.safewrite;

/**
 * What happens to a deleted object's dependents ({@code DeleteOptions.propagationPolicy}); unset,
 * the API server's default for the kind (usually background).
 */
public enum PropagationPolicy {
  /** The object is deleted at once; the garbage collector deletes its dependents after. */
  BACKGROUND,
  /**
   * The object is kept, being deleted ({@link DeleteOutcome#DELETING}), until its blocking
   * dependents are deleted.
   */
  FOREGROUND,
  /** The object is deleted; its dependents are kept, their owner references to it removed. */
  ORPHAN;

  dev.safewrite.v1.PropagationPolicy toProto() {
    return switch (this) {
      case BACKGROUND -> dev.safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_BACKGROUND;
      case FOREGROUND -> dev.safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_FOREGROUND;
      case ORPHAN -> dev.safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN;
    };
  }
}
