package dev.safewrite;

/**
 * One event of a {@link Leadership}: the caller leads ({@link Leading}, under a {@link Fence}), or
 * does not ({@link NotLeading}, with a reason). Renewals make no event.
 */
public sealed interface LeadEvent permits LeadEvent.Leading, LeadEvent.NotLeading {
  /** The Lease's holder as last read: the caller's identity when it leads; empty when unknown. */
  String holder();

  /** The identity the campaign runs under: the one given, or the one the sidecar made for it. */
  String identity();

  /** Whether this event says the caller leads. */
  default boolean isLeading() {
    return this instanceof Leading;
  }

  /**
   * The caller leads the Lease under {@code fence.epoch()}: a number that grows with every
   * acquisition of the Lease by anyone, so a later leadership always has a higher one.
   *
   * @param fence the Lease and the epoch of this leadership; pass it to writes ({@link
   *     SafewriteClient#fenced(Fence)}) so a successor can never be overwritten by them
   * @param holder the Lease's holder: the caller's identity
   * @param identity the identity the campaign runs under
   */
  record Leading(Fence fence, String holder, String identity) implements LeadEvent {
    /** The epoch of this leadership, {@code fence().epoch()}. */
    public long epoch() {
      return fence.epoch();
    }
  }

  /**
   * The caller does not lead (any more).
   *
   * @param reason why: another holder, a lost renewal, a release by the sidecar, or the stream's
   *     end
   * @param holder the holder as last read ({@link NotLeadingReason#OTHER_HOLDER}); empty when the
   *     Lease is free or was not read
   * @param identity the identity the campaign runs under; empty when the stream ended before any
   *     event
   */
  record NotLeading(NotLeadingReason reason, String holder, String identity) implements LeadEvent {}
}
