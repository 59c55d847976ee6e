package dev.safewrite;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * One leadership: from a {@link LeadEvent.Leading} event to the next {@link LeadEvent.NotLeading}
 * (another holder, a lost renewal, a release) or the stream's end. A later leadership is another
 * term, with a higher epoch.
 *
 * <p>{@link #isLeading()} is what this client has heard: a term may already be over at the sidecar
 * (a lost renewal not yet reported) while it still says true. What a deposed leader writes is kept
 * out by the fence, not by this flag: write with {@link #fence()} ({@link
 * SafewriteClient#fenced(Fence)}) and the sidecar refuses what comes too late.
 */
public final class LeaderTerm {
  private final Fence fence;
  private final CountDownLatch ended = new CountDownLatch(1);

  LeaderTerm(Fence fence) {
    this.fence = fence;
  }

  /** The Lease and the epoch of this term, for fenced writes. */
  public Fence fence() {
    return fence;
  }

  /** The epoch of this term. */
  public long epoch() {
    return fence.epoch();
  }

  /**
   * True until this client hears that the term ended (a NOT_LEADING event, or the stream's end).
   */
  public boolean isLeading() {
    return ended.getCount() > 0;
  }

  /** Waits until the term ends. */
  public void awaitEnd() throws InterruptedException {
    ended.await();
  }

  /**
   * Waits until the term ends, at most {@code timeout}.
   *
   * @return true when it ended, false when the timeout passed first
   */
  public boolean awaitEnd(Duration timeout) throws InterruptedException {
    Objects.requireNonNull(timeout, "timeout");
    return ended.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
  }

  void end() {
    ended.countDown();
  }

  @Override
  public String toString() {
    return "LeaderTerm(" + fence + (isLeading() ? ", leading)" : ", ended)");
  }
}
