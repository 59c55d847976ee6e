package dev.safewrite;

/**
 * The work a leader does, run by {@link Leadership#whileLeading(LeaderWork)} once per leadership
 * (term), on the thread that called it.
 */
@FunctionalInterface
public interface LeaderWork {
  /**
   * Does the leader's work for one term. Stop when {@link LeaderTerm#isLeading()} turns false (or
   * {@link LeaderTerm#awaitEnd()} returns): nothing is interrupted, so a write in flight gets its
   * definite answer, and a write made after the term ended is refused by the sidecar, never
   * applied. Returning while the term still leads stops {@code whileLeading} for good; returning
   * after it ended, or throwing a {@link PreconditionFailedException} with reason {@code
   * REASON_NOT_LEADER} or {@code REASON_FENCED}, waits for the next term.
   *
   * @param fenced a view of the client whose writes and deletes all carry {@code term.fence()}
   * @param term this leadership
   * @throws Exception anything, rethrown by {@code whileLeading}
   */
  void run(SafewriteClient fenced, LeaderTerm term) throws Exception;
}
