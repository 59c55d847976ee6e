package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.ResourceLock;

/**
 * Leadership through the sidecar: two replicas, each with a sidecar of its own (the harness's
 * peers, as two pods), campaign for one Lease; their writes are fenced.
 */
@Tag("sidecar")
@ResourceLock(Sidecar.PEERS)
class LeadTest {
  /** Short timings: lease 2 s > renew deadline 1.5 s > 1.2 x retry period 0.2 s. */
  private static LeadConfig fast(String lease) {
    return LeadConfig.builder(Sidecar.namespace(), lease)
        .leaseDuration(Duration.ofSeconds(2))
        .renewDeadline(Duration.ofMillis(1500))
        .retryPeriod(Duration.ofMillis(200))
        .build();
  }

  /** Waits until {@code done}, at most {@code timeout}; fails with {@code what} otherwise. */
  private static void await(Duration timeout, String what, BooleanSupplier done)
      throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (!done.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        fail("not within " + timeout + ": " + what);
      }
      Thread.sleep(20);
    }
  }

  /** The leadership's term once it leads, at most {@code timeout} from now. */
  private static LeaderTerm leading(Leadership leadership, Duration timeout) throws Exception {
    return leadership
        .awaitLeading(timeout)
        .orElseThrow(() -> new AssertionError("not leading within " + timeout + ": " + leadership));
  }

  private static List<LeadEvent> recorded(Leadership leadership) {
    List<LeadEvent> events = new CopyOnWriteArrayList<>();
    leadership.onEvent(events::add);
    return events;
  }

  /** Runs a replica on a thread of its own; its failure, if any, is kept in {@code failures}. */
  private static Thread start(
      CounterReplica replica, Leadership leadership, ObjectRef counter, List<Throwable> failures) {
    Thread thread =
        new Thread(
            () -> {
              try {
                replica.run(leadership, counter);
              } catch (Throwable failed) {
                failures.add(failed);
              }
            },
            "replica-" + leadership.config().name());
    thread.setDaemon(true);
    thread.start();
    return thread;
  }

  @Test
  void aPausedLeaderIsFencedAndTheCountStaysExact() throws Exception {
    long started = System.nanoTime();
    ObjectRef counter = Sidecar.configMap("lead-counter");
    Sidecar.create(counter, "{\"n\": \"0\"}");
    LeadConfig lease = fast(Sidecar.name("counter"));
    List<String> peers = Sidecar.peerAddresses();
    long pausedPid = Sidecar.peerPids().get(0);
    List<Throwable> failures = new CopyOnWriteArrayList<>();
    CounterReplica a = new CounterReplica();
    CounterReplica b = new CounterReplica();
    try (SafewriteClient clientA = Sidecar.peer(peers.get(0));
        SafewriteClient clientB = Sidecar.peer(peers.get(1));
        Leadership leadA = clientA.lead(lease)) {
      List<LeadEvent> eventsA = recorded(leadA);
      LeaderTerm termA = leading(leadA, Duration.ofSeconds(10));
      try (Leadership leadB = clientB.lead(lease)) {
        Thread threadA = start(a, leadA, counter, failures);
        Thread threadB = start(b, leadB, counter, failures);
        await(Duration.ofSeconds(10), "A's first writes", () -> a.acknowledged.get() >= 3);
        assertEquals(0, b.acknowledged.get(), "B wrote while A led");

        long ackedByAAtTakeover;
        LeaderTerm termB;
        Sidecar.signal(pausedPid, "STOP"); // A's pod is paused: its sidecar renews nothing
        try {
          long pausedAt = System.nanoTime();
          termB = leading(leadB, Duration.ofSeconds(10));
          assertTrue(
              Long.compareUnsigned(termB.epoch(), termA.epoch()) > 0,
              "B leads under " + termB.epoch() + ", A led under " + termA.epoch());
          ackedByAAtTakeover = a.acknowledged.get();
          await(Duration.ofSeconds(10), "B's writes", () -> b.acknowledged.get() >= 2);
          long left = TimeUnit.SECONDS.toNanos(4) - (System.nanoTime() - pausedAt);
          if (left > 0) {
            TimeUnit.NANOSECONDS.sleep(left);
          }
        } finally {
          Sidecar.signal(pausedPid, "CONT");
        }

        assertTrue(termA.awaitEnd(Duration.ofSeconds(10)), "A never heard it lost the Lease");
        await(
            Duration.ofSeconds(5),
            "A's listener told of the loss",
            () -> eventsA.stream().anyMatch(e -> !e.isLeading()));
        LeadEvent.NotLeading lost =
            eventsA.stream()
                .dropWhile(LeadEvent::isLeading)
                .filter(e -> e instanceof LeadEvent.NotLeading)
                .map(e -> (LeadEvent.NotLeading) e)
                .findFirst()
                .orElseThrow();
        assertTrue(
            Set.of(NotLeadingReason.LOST_RENEWAL, NotLeadingReason.OTHER_HOLDER)
                .contains(lost.reason()),
            "A: " + eventsA);
        // A write of A's in flight when it was paused may have landed before B's first write;
        // none A sent after that.
        assertTrue(
            a.acknowledged.get() - ackedByAAtTakeover <= 1,
            "A's writes acknowledged after B took over: "
                + (a.acknowledged.get() - ackedByAAtTakeover));
        assertTrue(
            a.refused.stream()
                .allMatch(r -> r == Reason.REASON_NOT_LEADER || r == Reason.REASON_FENCED),
            "A's refusals: " + a.refused);
        // Whatever A still believes, a write under its old fence never lands now.
        PreconditionFailedException late =
            assertThrows(
                PreconditionFailedException.class,
                () -> clientA.fenced(termA.fence()).update(counter, CounterReplica.INCREMENT));
        assertTrue(
            Set.of(Reason.REASON_NOT_LEADER, Reason.REASON_FENCED)
                .contains(late.writeFailureReason()),
            late.toString());
        assertFalse(late.isRetryable());
        long ackedByB = b.acknowledged.get();
        await(Duration.ofSeconds(10), "B writing on", () -> b.acknowledged.get() > ackedByB);

        a.stopped = true;
        b.stopped = true;
        leadA.close();
        leadB.close();
        threadA.join(15_000);
        threadB.join(15_000);
        assertFalse(threadA.isAlive() || threadB.isAlive(), "a replica did not stop");
      }
    }
    assertEquals(List.of(), failures);
    long n = Long.parseLong(Sidecar.data(Sidecar.read(counter), "n"));
    assertEquals(
        a.acknowledged.get() + b.acknowledged.get(),
        n,
        "n against A's " + a.acknowledged + " and B's " + b.acknowledged + " acknowledged");
    assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(60), "over a minute");
  }

  @Test
  void closingReleasesTheLeaseToTheNextCandidate() throws Exception {
    // A lease of 15 s: B can lead within 5 s only because A released it.
    LeadConfig lease =
        LeadConfig.builder(Sidecar.namespace(), Sidecar.name("release"))
            .leaseDuration(Duration.ofSeconds(15))
            .renewDeadline(Duration.ofSeconds(10))
            .retryPeriod(Duration.ofMillis(200))
            .build();
    List<String> peers = Sidecar.peerAddresses();
    try (SafewriteClient clientA = Sidecar.peer(peers.get(0));
        SafewriteClient clientB = Sidecar.peer(peers.get(1))) {
      Leadership leadA = clientA.lead(lease);
      LeaderTerm termA = leading(leadA, Duration.ofSeconds(10));
      String identityA = leadA.lastEvent().orElseThrow().identity();
      try (leadA;
          Leadership leadB = clientB.lead(lease)) {
        List<LeadEvent> eventsB = recorded(leadB);
        await(
            Duration.ofSeconds(10),
            "B seeing A hold the Lease",
            () ->
                eventsB.stream()
                    .anyMatch(
                        e ->
                            e instanceof LeadEvent.NotLeading n
                                && n.reason() == NotLeadingReason.OTHER_HOLDER
                                && n.holder().equals(identityA)));
        assertFalse(leadB.isLeading());

        long closed = System.nanoTime();
        leadA.close();
        assertTrue(termA.awaitEnd(Duration.ofSeconds(5)), "closing did not end A's term");
        LeaderTerm termB = leading(leadB, Duration.ofSeconds(5));
        long took = System.nanoTime() - closed;
        assertTrue(took < TimeUnit.SECONDS.toNanos(5), "B led after " + took / 1_000_000 + " ms");
        assertTrue(Long.compareUnsigned(termB.epoch(), termA.epoch()) > 0);
        assertEquals(
            NotLeadingReason.ENDED,
            ((LeadEvent.NotLeading) leadA.lastEvent().orElseThrow()).reason());
        assertTrue(leadA.isEnded());
        assertTrue(leadA.failure().isEmpty(), "closed, not failed: " + leadA.failure());
      }
    }
  }

  @Test
  void aBadLeaseNameIsRefusedNamingTheField() {
    InvalidException refused =
        assertThrows(
            InvalidException.class,
            () ->
                Sidecar.client()
                    .lead(LeadConfig.builder(Sidecar.namespace(), "Not_A_Name").build()));
    assertEquals(
        List.of("name"),
        refused.fieldViolations().stream().map(FieldViolation::field).toList(),
        refused.toString());
  }

  @Test
  void contradictoryDurationsAreRefusedNamingTheField() {
    InvalidException refused =
        assertThrows(
            InvalidException.class,
            () ->
                Sidecar.client()
                    .lead(
                        LeadConfig.builder(Sidecar.namespace(), Sidecar.name("contradiction"))
                            .leaseDuration(Duration.ofSeconds(2))
                            .renewDeadline(Duration.ofSeconds(3))
                            .build()));
    assertEquals(
        List.of("lease_duration"),
        refused.fieldViolations().stream().map(FieldViolation::field).toList(),
        refused.toString());
  }

  @Test
  void aFencedDeleteThroughASidecarNotLeadingIsRefused() throws Exception {
    ObjectRef ref = Sidecar.configMap("lead-delete");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    LeadConfig lease = fast(Sidecar.name("delete"));
    List<String> peers = Sidecar.peerAddresses();
    try (SafewriteClient clientA = Sidecar.peer(peers.get(0));
        SafewriteClient clientB = Sidecar.peer(peers.get(1));
        Leadership leadA = clientA.lead(lease)) {
      Fence fence = leading(leadA, Duration.ofSeconds(10)).fence();
      Leadership leadB = clientB.lead(lease); // B campaigns through its sidecar, and waits
      List<LeadEvent> eventsB = recorded(leadB);
      await(Duration.ofSeconds(10), "B campaigning", () -> !eventsB.isEmpty());
      assertFalse(leadB.isLeading());

      PreconditionFailedException refused =
          assertThrows(PreconditionFailedException.class, () -> clientB.fenced(fence).delete(ref));
      assertEquals(Reason.REASON_NOT_LEADER, refused.writeFailureReason(), refused.toString());
      assertEquals("0", Sidecar.data(Sidecar.read(ref), "n"), "kept");

      DeleteResult deleted = clientA.fenced(fence).delete(ref);
      assertEquals(DeleteOutcome.DELETED, deleted.outcome());
      leadB.close();
    }
  }
}
