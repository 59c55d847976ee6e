package dev.safewrite;

/** Why the caller does not lead: the reason of a {@link LeadEvent.NotLeading} event. */
public enum NotLeadingReason {
  /**
   * Another holder holds the Lease and it has not expired ({@link LeadEvent#holder()} names it).
   * Sent when the caller stops leading because someone else took the Lease, and whenever the holder
   * a waiting caller sees changes.
   */
  OTHER_HOLDER,
  /**
   * No renewal succeeded within the renew deadline (the API server was unreachable, too slow, or
   * the sidecar was paused): stop acting as the leader. The campaign goes on, and a later {@link
   * LeadEvent.Leading} comes with a new epoch.
   */
  LOST_RENEWAL,
  /**
   * The sidecar released the Lease on its own: it is shutting down. The stream ends after it
   * ({@link #ENDED} follows).
   */
  RELEASED,
  /**
   * The client's own last event: the stream is over, because {@link Leadership#close()} closed it,
   * the sidecar ended it after {@link #RELEASED}, or it failed ({@link Leadership#failure()} says
   * how, e.g. {@link UnavailableException} when the sidecar went away). Always the last event, sent
   * once; no later campaign follows on this {@link Leadership}.
   */
  ENDED,
  /** A reason newer than this client: the caller does not lead all the same. */
  UNKNOWN;

  static NotLeadingReason fromProto(dev.safewrite.v1.NotLeadingReason reason) {
    return switch (reason) {
      case NOT_LEADING_REASON_OTHER_HOLDER -> OTHER_HOLDER;
      case NOT_LEADING_REASON_LOST_RENEWAL -> LOST_RENEWAL;
      case NOT_LEADING_REASON_RELEASED -> RELEASED;
      case NOT_LEADING_REASON_UNSPECIFIED, UNRECOGNIZED -> UNKNOWN;
    };
  }
}
