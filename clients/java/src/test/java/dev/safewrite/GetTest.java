package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.safewrite.v1.GetRequest;
import dev.safewrite.v1.GetResponse;
import io.grpc.Status;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Read your own writes: the request {@code get} sends, and what the sidecar answers after the
 * caller's own write and after another sidecar's.
 */
class GetTest {
  private static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");

  private static final ObjectRef REF = ObjectRef.of("v1", "ConfigMap", "default", "read");

  private static Result written(String resourceVersion) {
    return new Result(Outcome.UPDATED, "{}", resourceVersion, 1, List.of(), "", false);
  }

  @Test
  void sendsTheTargetAndTheMinimumItIsGiven() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    assertThrows(UnavailableException.class, () -> client.get(REF));
    assertThrows(UnavailableException.class, () -> client.get(REF, written("41")));
    assertThrows(UnavailableException.class, () -> client.get(REF, "42"));
    assertEquals(
        List.of(
            GetRequest.newBuilder().setTarget(REF.toProto()).build(),
            GetRequest.newBuilder().setTarget(REF.toProto()).setMinResourceVersion("41").build(),
            GetRequest.newBuilder().setTarget(REF.toProto()).setMinResourceVersion("42").build()),
        channel.sent);
    assertThrows(NullPointerException.class, () -> client.get(REF, (Result) null));
    assertThrows(NullPointerException.class, () -> client.get(REF, (String) null));
    assertThrows(NullPointerException.class, () -> client.get(null, "1"));
  }

  @Test
  void aGetWhoseAnswerWasLostMaySimplyBeSentAgain() {
    RecordingChannel lost =
        new RecordingChannel(Status.DEADLINE_EXCEEDED.withDescription("lost").asRuntimeException());
    try (SafewriteClient client = SafewriteClient.forChannel(lost)) {
      DeadlineExceededException read =
          assertThrows(DeadlineExceededException.class, () -> client.get(REF));
      assertTrue(read.isRetryable(), "a get writes nothing");
      DeadlineExceededException write =
          assertThrows(DeadlineExceededException.class, () -> client.update(REF, INCREMENT));
      assertFalse(write.isRetryable(), "a write without a key may have been applied");
    }
  }

  @Test
  void answerConverts() {
    GetResult got =
        GetResult.fromProto(
            GetResponse.newBuilder()
                .setObjectJson("{\"data\": {\"n\": \"9007199254740993\"}}")
                .setResourceVersion("7")
                .setRemembered(true)
                .setTraceId("abc")
                .build());
    assertEquals("9007199254740993", data(got.object(), "n"));
    assertEquals(new GetResult(got.objectJson(), "7", true, "abc"), got);
    got.object().remove("data");
    assertEquals("9007199254740993", data(got.object(), "n"), "each object() is a new tree");
  }

  /** The README's example of "Read your own writes", then the same object read live. */
  @Test
  @Tag("sidecar")
  void readsItsOwnWriteFromTheRememberedCopy() {
    ObjectRef ref = Sidecar.configMap("get-own");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    SafewriteClient client = client();

    Result written = client.update(ref, Mutation.mergePatch("{\"data\": {\"phase\": \"Ready\"}}"));
    GetResult read = client.get(ref, written);
    String phase = read.object().path("data").path("phase").asText(); // "Ready"

    assertEquals("Ready", phase);
    assertTrue(read.remembered(), "the sidecar wrote it: no request needed");
    assertEquals(written.resourceVersion(), read.resourceVersion());
    assertFalse(read.traceId().isEmpty());

    GetResult live = client.get(ref);
    assertFalse(live.remembered(), "without a minimum a get reads live");
    assertEquals(written.resourceVersion(), live.resourceVersion());
    assertEquals("Ready", data(live.object(), "phase"));
  }

  @Test
  @Tag("sidecar")
  void aMinimumPastTheRememberedCopyReadsLive() {
    ObjectRef ref = Sidecar.configMap("get-newer");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    Result mine = client().update(ref, INCREMENT);
    // Another writer, through a sidecar of its own: this one's copy is now behind.
    Result theirs;
    try (SafewriteClient other =
        SafewriteClient.builder()
            .address(Sidecar.env("SAFEWRITE_TOKEN_ADDR"))
            .token(Sidecar.env("SAFEWRITE_TOKEN"))
            .defaultTimeout(Duration.ofSeconds(30))
            .build()) {
      theirs = other.update(ref, INCREMENT);
    }
    assertEquals("2", data(theirs.object(), "n"));

    GetResult atLeastTheirs = client().get(ref, theirs);
    assertFalse(atLeastTheirs.remembered(), "the remembered copy is older than the minimum");
    assertEquals(theirs.resourceVersion(), atLeastTheirs.resourceVersion());
    assertEquals("2", data(atLeastTheirs.object(), "n"));

    // At least my own write: the copy of it qualifies, newer writes notwithstanding.
    GetResult atLeastMine = client().get(ref, mine.resourceVersion());
    int n = Integer.parseInt(data(atLeastMine.object(), "n"));
    assertTrue(n >= 1, "never older than my write: n = " + n);
  }

  @Test
  @Tag("sidecar")
  void failuresAreTheWritesExceptions() {
    ObjectRef missing = Sidecar.configMap("get-missing");
    NotFoundException notFound = assertThrows(NotFoundException.class, () -> client().get(missing));
    assertEquals(Reason.REASON_API_SERVER, notFound.writeFailureReason());
    assertFalse(notFound.isRetryable());

    ObjectRef secret = ObjectRef.of("v1", "Secret", Sidecar.namespace(), missing.name());
    PermissionDeniedException denied =
        assertThrows(PermissionDeniedException.class, () -> client().get(secret));
    assertEquals("POLICY_DENIED", denied.reason());

    InvalidException hostile =
        assertThrows(InvalidException.class, () -> client().get(missing, "1&watch=true"));
    assertEquals(
        List.of("min_resource_version"),
        hostile.fieldViolations().stream().map(FieldViolation::field).toList());
  }
}
