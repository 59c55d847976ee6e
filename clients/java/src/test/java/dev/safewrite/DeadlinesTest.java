package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.grpc.Context;
import io.grpc.Deadline;
import java.time.Duration;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.parallel.ResourceLock;

/** Timing tests: they do not run beside the load of {@link LostUpdateTest}. */
@Tag("sidecar")
@ResourceLock(Sidecar.RATE_LIMIT)
class DeadlinesTest {
  private static final ScheduledExecutorService TIMER =
      Executors.newSingleThreadScheduledExecutor();

  @AfterAll
  static void stopTimer() {
    TIMER.shutdownNow();
  }

  private static Proposal slowIncrement(Fresh<ObjectNode> fresh, long sleepMillis) {
    try {
      Thread.sleep(sleepMillis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    fresh.object().withObjectProperty("data").put("n", "100");
    return null;
  }

  @Test
  void callTimeoutEndsATransactionWhoseFunctionIsSlow() {
    ObjectRef ref = Sidecar.configMap("slow");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    long started = System.nanoTime();
    DeadlineExceededException e =
        assertThrows(
            DeadlineExceededException.class,
            () ->
                client()
                    .transact(
                        ref,
                        fresh -> slowIncrement(fresh, 1500),
                        WriteConfig.builder().timeout(Duration.ofMillis(400)).build()));
    assertTrue(System.nanoTime() - started < TimeUnit.SECONDS.toNanos(10));
    assertEquals(ErrorKind.DEADLINE_EXCEEDED, e.kind());
    // The sidecar's answer says no write is in doubt (the function still ran): the same call may
    // be sent again later. When the caller's own deadline wins the race there is no answer, and
    // without an idempotency key the call may not be sent again blindly.
    assertEquals(!e.reason().isEmpty(), e.isRetryable(), e.getMessage());
    assertEquals("1", data(Sidecar.read(ref), "n"));
  }

  @Test
  void contextDeadlineBoundsTheCall() throws Exception {
    ObjectRef ref = Sidecar.configMap("ctx");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    Context.CancellableContext context =
        Context.current().withDeadline(Deadline.after(400, TimeUnit.MILLISECONDS), TIMER);
    try {
      assertThrows(
          DeadlineExceededException.class,
          () -> context.call(() -> client().transact(ref, fresh -> slowIncrement(fresh, 1500))));
    } finally {
      context.cancel(null);
    }
    assertEquals("1", data(Sidecar.read(ref), "n"));

    // An already-expired deadline fails a unary call before anything is written.
    Context.CancellableContext expired =
        Context.current().withDeadline(Deadline.after(1, TimeUnit.NANOSECONDS), TIMER);
    try {
      assertThrows(
          DeadlineExceededException.class,
          () ->
              expired.call(
                  () -> client().update(ref, Mutation.mergePatch("{\"data\": {\"n\": \"2\"}}"))));
    } finally {
      expired.cancel(null);
    }
    assertEquals("1", data(Sidecar.read(ref), "n"));
  }

  @Test
  void sidecarAnswersItsOwnDeadlineWithTheAttemptsSoFar() {
    // Every attempt loses to another writer, so only the deadline ends the loop. When the
    // deadline comes while the function runs, the caller's own bare DEADLINE_EXCEEDED can
    // win the race with the sidecar's answer, and when it cuts off the sidecar's write, the
    // answer is WRITE_OUTCOME_UNKNOWN; a few tries make the sidecar's DEADLINE_EXCEEDED sure.
    SafewriteException e = null;
    for (int round = 0; round < 4; round++) {
      ObjectRef ref = Sidecar.configMap("contended");
      Sidecar.create(ref, "{\"n\": \"0\"}");
      e =
          assertThrows(
              SafewriteException.class,
              () ->
                  client()
                      .transact(
                          ref,
                          fresh -> {
                            client()
                                .update(
                                    ref,
                                    Mutation.cel(
                                        "{\"data\": {\"n\": string(int(object.data.n) + 1)}}"),
                                    WriteConfig.builder().writeAlone(true).build());
                            return Proposal.mutation(
                                Mutation.mergePatch("{\"data\": {\"mine\": \"yes\"}}"));
                          },
                          WriteConfig.builder().timeout(Duration.ofSeconds(2)).build()));
      if (e instanceof OutcomeUnknownException) {
        assertFalse(e.isRetryable(), "a write in doubt, and no idempotency key");
        continue;
      }
      assertInstanceOf(DeadlineExceededException.class, e, e.getMessage());
      if (!e.reason().isEmpty()) {
        break;
      }
    }
    assertInstanceOf(DeadlineExceededException.class, e, e.getMessage());
    assertEquals("DEADLINE_EXCEEDED", e.reason(), e.getMessage());
    assertEquals(Reason.REASON_DEADLINE_EXCEEDED, e.writeFailureReason());
    assertTrue(e.isRetryable(), "no write is in doubt: the same call may be sent again later");
    assertTrue(e.attemptRecords().size() >= 2, e.attemptRecords().toString());
    assertEquals("Conflict", e.attemptRecords().get(0).reason());
    assertEquals(409, e.attemptRecords().get(0).httpStatus());
  }

  @Test
  void cancelledContextCancelsTheCallAndWritesNothing() throws Exception {
    ObjectRef ref = Sidecar.configMap("cancel");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    Context.CancellableContext context = Context.current().withCancellation();
    CancelledException e =
        assertThrows(
            CancelledException.class,
            () ->
                context.call(
                    () ->
                        client()
                            .transact(
                                ref,
                                fresh -> {
                                  context.cancel(null);
                                  return slowIncrement(fresh, 0);
                                })));
    assertEquals(ErrorKind.CANCELLED, e.kind());
    assertEquals("1", data(Sidecar.read(ref), "n"));
  }

  @Test
  void clientDefaultTimeoutBoundsCallsWithoutTheirOwn() {
    ObjectRef ref = Sidecar.configMap("default-timeout");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    try (SafewriteClient bounded =
        SafewriteClient.builder()
            .address(Sidecar.address())
            .defaultTimeout(Duration.ofMillis(400))
            .build()) {
      assertThrows(
          DeadlineExceededException.class,
          () -> bounded.transact(ref, fresh -> slowIncrement(fresh, 1500)));
      // A call's own timeout wins over the default.
      Result result =
          bounded.transact(
              ref,
              fresh -> slowIncrement(fresh, 600),
              WriteConfig.builder().timeout(Duration.ofSeconds(20)).build());
      assertEquals("100", data(result.object(), "n"));
    }
  }
}
