package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.DeleteResponse;
import java.time.Instant;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** Deletes, conditioned on the object they decided on: the request sent, and the real sidecar. */
class DeleteTest {
  private static final ObjectRef REF = ObjectRef.of("v1", "ConfigMap", "default", "gone");

  @Test
  void sendsTheTargetAndEveryOption() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    Fence fence = new Fence("default", "leader", 7);
    DeleteConfig config =
        DeleteConfig.builder()
            .uid("u-1")
            .resourceVersion("42")
            .preconditionCel("object.data.done == 'yes'")
            .propagationPolicy(PropagationPolicy.FOREGROUND)
            .dryRun(true)
            .retryPolicy(RetryPolicy.builder().maxAttempts(3).build())
            .fence(fence)
            .build();
    assertThrows(UnavailableException.class, () -> client.delete(REF));
    assertThrows(UnavailableException.class, () -> client.delete(REF, config));
    assertThrows(
        UnavailableException.class,
        () -> client.delete(REF, config.toBuilder().dryRun(false).build()));
    DeleteRequest all =
        DeleteRequest.newBuilder()
            .setTarget(REF.toProto())
            .setPreconditions(
                dev.safewrite.v1.Preconditions.newBuilder()
                    .setUid("u-1")
                    .setResourceVersion("42")
                    .setCel("object.data.done == 'yes'"))
            .setPropagationPolicy(dev.safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_FOREGROUND)
            .setDryRun(true)
            .setRetryPolicy(dev.safewrite.v1.RetryPolicy.newBuilder().setMaxAttempts(3))
            .setFence(fence.toProto())
            .build();
    assertEquals(
        List.of(
            DeleteRequest.newBuilder().setTarget(REF.toProto()).build(),
            all,
            all.toBuilder().setDryRun(false).build()),
        channel.sent);
  }

  @Test
  void aLostAnswerIsSafeToSendAgain() {
    RecordingChannel lost =
        new RecordingChannel(
            io.grpc.Status.DEADLINE_EXCEEDED.withDescription("lost").asRuntimeException());
    try (SafewriteClient client = SafewriteClient.forChannel(lost)) {
      DeadlineExceededException e =
          assertThrows(DeadlineExceededException.class, () -> client.delete(REF));
      assertTrue(e.isRetryable(), "a DELETE applied makes the next one answer GONE or DELETING");
    }
  }

  @Test
  void answerConverts() {
    DeleteResult deleting =
        DeleteResult.fromProto(
            DeleteResponse.newBuilder()
                .setOutcome(dev.safewrite.v1.DeleteOutcome.DELETE_OUTCOME_DELETING)
                .setObjectJson("{\"metadata\": {\"name\": \"gone\"}}")
                .setDeletionTimestamp("2026-11-28T12:00:00Z")
                .setAttempts(2)
                .setTraceId("abc")
                .build());
    assertEquals(DeleteOutcome.DELETING, deleting.outcome());
    assertEquals("gone", deleting.object().path("metadata").path("name").asText());
    assertEquals(Instant.parse("2026-11-28T12:00:00Z"), deleting.deletionTime().orElseThrow());
    assertEquals(2, deleting.attempts());
    assertFalse(deleting.gone());

    DeleteResult gone =
        DeleteResult.fromProto(
            DeleteResponse.newBuilder()
                .setOutcome(dev.safewrite.v1.DeleteOutcome.DELETE_OUTCOME_GONE)
                .setAttempts(1)
                .build());
    assertTrue(gone.gone());
    assertTrue(gone.deletionTime().isEmpty());
    assertThrows(IllegalStateException.class, gone::object);
    assertThrows(
        InternalException.class,
        () -> DeleteResult.fromProto(DeleteResponse.getDefaultInstance()),
        "an answer without an outcome");
  }

  @Test
  @Tag("sidecar")
  void deletesAnExistingObjectAndAMissingOneIsGone() {
    ObjectRef ref = Sidecar.configMap("delete");
    Sidecar.create(ref, "{\"n\": \"0\"}");

    DeleteResult deleted = client().delete(ref);
    assertEquals(DeleteOutcome.DELETED, deleted.outcome());
    assertTrue(deleted.attempts() >= 1);
    assertThrows(NotFoundException.class, () -> client().get(ref));

    DeleteResult again = client().delete(ref);
    assertEquals(DeleteOutcome.GONE, again.outcome(), "not there: an answer, not an error");
    assertTrue(again.gone());
  }

  @Test
  @Tag("sidecar")
  void anObjectWithAFinalizerIsOnlyMarkedDeleting() {
    ObjectRef ref = Sidecar.configMap("delete-finalized");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    client().update(ref, Mutation.addFinalizer("test.safewrite.dev/hold"));

    DeleteResult deleting = client().delete(ref);
    assertEquals(DeleteOutcome.DELETING, deleting.outcome());
    assertTrue(deleting.deletionTime().isPresent(), deleting.toString());
    assertEquals(
        deleting.deletionTimestamp(),
        deleting.object().path("metadata").path("deletionTimestamp").asText());

    assertTrue(client().update(ref, Mutation.removeFinalizer("test.safewrite.dev/hold")).gone());
    assertEquals(DeleteOutcome.GONE, client().delete(ref).outcome());
  }

  @Test
  @Tag("sidecar")
  void aUidThatIsNotTheObjectsDeletesNothing() {
    ObjectRef ref = Sidecar.configMap("delete-uid");
    Sidecar.create(ref, "{\"n\": \"0\"}");

    PreconditionFailedException refused =
        assertThrows(
            PreconditionFailedException.class,
            () -> client().delete(ref, DeleteConfig.builder().uid("not-its-uid").build()));
    assertEquals(Reason.REASON_PRECONDITION_FAILED, refused.writeFailureReason());
    assertFalse(refused.isRetryable());
    String uid = Sidecar.read(ref).path("metadata").path("uid").asText();
    assertFalse(uid.isEmpty(), "kept");

    assertEquals(
        DeleteOutcome.DELETED,
        client().delete(ref, DeleteConfig.builder().uid(uid).build()).outcome());
  }

  @Test
  @Tag("sidecar")
  void aFalseConditionFailsWithTheCurrentObject() {
    ObjectRef ref = Sidecar.configMap("delete-cel");
    Sidecar.create(ref, "{\"phase\": \"Running\"}");
    DeleteConfig whenDone =
        DeleteConfig.builder().preconditionCel("object.data.phase == 'Done'").build();

    PreconditionFailedException refused =
        assertThrows(PreconditionFailedException.class, () -> client().delete(ref, whenDone));
    assertEquals(Reason.REASON_PRECONDITION_FAILED, refused.writeFailureReason());
    assertEquals("Running", Sidecar.data(refused.currentObject().orElseThrow(), "phase"));
    assertEquals("Running", Sidecar.data(Sidecar.read(ref), "phase"), "kept");

    client().update(ref, Mutation.mergePatch("{\"data\": {\"phase\": \"Done\"}}"));
    assertEquals(DeleteOutcome.DELETED, client().delete(ref, whenDone).outcome());
  }

  @Test
  @Tag("sidecar")
  void aStaleResourceVersionIsAConflictNotRetried() {
    ObjectRef ref = Sidecar.configMap("delete-rv");
    Result created = Sidecar.create(ref, "{\"n\": \"0\"}");
    client().update(ref, Mutation.mergePatch("{\"data\": {\"n\": \"1\"}}"));

    ConflictException stale =
        assertThrows(
            ConflictException.class,
            () ->
                client()
                    .delete(
                        ref,
                        DeleteConfig.builder().resourceVersion(created.resourceVersion()).build()));
    assertEquals(Reason.REASON_RESOURCE_VERSION_MISMATCH, stale.writeFailureReason());
    assertEquals("1", Sidecar.data(Sidecar.read(ref), "n"), "kept");
  }
}
