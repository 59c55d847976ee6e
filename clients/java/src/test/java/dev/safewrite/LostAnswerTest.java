package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.grpc.Status;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Writes whose answer is lost after the API server committed them, against the real sidecar at
 * SAFEWRITE_LOSSY_ADDR: tests/harness/with-sidecar.sh puts a fault proxy between it and the API
 * server that resets every write's stream once the API server has answered. Objects are created and
 * read through the normal sidecar, and each call through the lossy one writes an object that
 * sidecar has not touched before: its first write to an object reads it live, so the change it
 * sends is valid and is committed.
 */
@Tag("sidecar")
class LostAnswerTest {
  private static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");

  private static SafewriteClient lossy;

  @BeforeAll
  static void dial() {
    lossy =
        SafewriteClient.builder()
            .address(Sidecar.env("SAFEWRITE_LOSSY_ADDR"))
            .defaultTimeout(Duration.ofSeconds(30))
            .build();
  }

  @AfterAll
  static void close() {
    if (lossy != null) {
      lossy.close();
    }
  }

  private static Proposal bump(Fresh<ObjectNode> fresh) {
    ObjectNode data = fresh.object().withObjectProperty("data");
    data.put("n", Integer.toString(Integer.parseInt(data.get("n").asText()) + 1));
    return null;
  }

  /** The error of a call without a key whose write's answer was lost. */
  private static void assertLostUnkeyed(OutcomeUnknownException e) {
    assertEquals(ErrorKind.OUTCOME_UNKNOWN, e.kind());
    assertEquals(Status.Code.UNKNOWN, e.code());
    assertEquals("WRITE_OUTCOME_UNKNOWN", e.reason());
    assertEquals(Reason.REASON_WRITE_OUTCOME_UNKNOWN, e.writeFailureReason());
    // The change may have been applied: the same call sent again could apply it twice.
    assertFalse(e.isRetryable());
    assertTrue(e.getMessage().contains("idempotency"), e.getMessage());
    assertEquals(1, e.attemptRecords().size(), e.attemptRecords().toString());
    assertEquals(0, e.attemptRecords().get(0).httpStatus());
  }

  @Test
  void lostAnswerWithoutKeyIsNotRetryableAndWasApplied() {
    ObjectRef ref = Sidecar.configMap("lost");
    Sidecar.create(ref, "{\"n\": \"0\"}");

    assertLostUnkeyed(
        assertThrows(OutcomeUnknownException.class, () -> lossy.update(ref, INCREMENT)));
    // The API server committed the increment; only its answer was lost.
    assertEquals("1", data(Sidecar.read(ref), "n"));

    ObjectRef transacted = Sidecar.configMap("lost-tx");
    Sidecar.create(transacted, "{\"n\": \"0\"}");
    assertLostUnkeyed(
        assertThrows(
            OutcomeUnknownException.class, () -> lossy.transact(transacted, LostAnswerTest::bump)));
    assertEquals("1", data(Sidecar.read(transacted), "n"));
  }

  @Test
  void lostAnswerWithKeyIsFoundOnTheObject() {
    ObjectRef ref = Sidecar.configMap("lost-key");
    Sidecar.create(ref, "{\"n\": \"0\"}");

    // The sidecar retries the lost write itself: its next read finds the key on the object, so
    // the call succeeds as already applied, and the change was made once.
    String key = "k-" + ref.name();
    Result result = lossy.update(ref, INCREMENT, WriteConfig.builder().idempotencyKey(key).build());
    assertEquals(Outcome.UPDATED, result.outcome());
    assertTrue(result.alreadyApplied());
    assertEquals("1", data(result.object(), "n"));
    assertEquals(2, result.attempts(), result.attemptRecords().toString());
    assertEquals(0, result.attemptRecords().get(0).httpStatus());
    assertEquals("1", data(Sidecar.read(ref), "n"));
    // The same change with the same key, through the normal sidecar: made once.
    Result again =
        client().update(ref, INCREMENT, WriteConfig.builder().idempotencyKey(key).build());
    assertTrue(again.alreadyApplied());
    assertEquals("1", data(again.object(), "n"));

    AtomicInteger calls = new AtomicInteger();
    ObjectRef other = Sidecar.configMap("lost-key-tx");
    Sidecar.create(other, "{\"n\": \"0\"}");
    Result transacted =
        lossy.transact(
            other,
            fresh -> {
              calls.incrementAndGet();
              return bump(fresh);
            },
            WriteConfig.builder().idempotencyKey(key + "-t").build());
    assertEquals(Outcome.UPDATED, transacted.outcome());
    assertTrue(transacted.alreadyApplied());
    assertEquals(1, calls.get(), "the retry found the key and did not call the function again");
    assertEquals("1", data(Sidecar.read(other), "n"));
  }
}
