package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.util.UUID;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

@Tag("sidecar")
class WritesTest {
  private static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");

  @Test
  void createsThenUpdatesThenWritesNothingForNoChange() {
    ObjectRef ref = Sidecar.configMap("cycle");
    Result created =
        client()
            .update(
                ref,
                INCREMENT,
                WriteConfig.builder().createIfMissing("{\"data\": {\"n\": \"0\"}}").build());
    assertEquals(Outcome.CREATED, created.outcome());
    assertEquals("1", data(created.object(), "n"));
    assertFalse(created.resourceVersion().isEmpty());
    assertEquals(1, created.attempts());
    assertEquals(1, created.attemptRecords().get(0).number());

    Result updated = client().update(ref, INCREMENT);
    assertEquals(Outcome.UPDATED, updated.outcome());
    assertEquals("2", data(updated.object(), "n"));
    assertNotEquals(created.resourceVersion(), updated.resourceVersion());

    Result unchanged = client().update(ref, Mutation.mergePatch("{\"data\": {\"n\": \"2\"}}"));
    assertEquals(Outcome.UNCHANGED, unchanged.outcome());
    assertEquals(updated.resourceVersion(), unchanged.resourceVersion());
  }

  @Test
  void everyMutationKindApplies() {
    ObjectRef ref = Sidecar.configMap("kinds");
    Sidecar.create(ref, "{\"n\": \"1\"}");

    ObjectNode patch = Json.MAPPER.createObjectNode();
    ObjectNode data = Json.MAPPER.createObjectNode();
    data.put("merged", "yes");
    patch.set("data", data);
    assertEquals("yes", data(client().update(ref, Mutation.mergePatch(patch)).object(), "merged"));

    Result patched =
        client()
            .update(
                ref,
                Mutation.jsonPatch(
                    JsonPatchOp.test("/data/n", "1"),
                    JsonPatchOp.replace("/data/n", "5"),
                    JsonPatchOp.add("/data/added", TextNode.valueOf("x")),
                    JsonPatchOp.remove("/data/merged")));
    assertEquals("5", data(patched.object(), "n"));
    assertEquals("x", data(patched.object(), "added"));
    assertFalse(patched.object().withObjectProperty("data").has("merged"));

    String apply =
        "{\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\", \"metadata\": {\"name\": \""
            + ref.name()
            + "\"}, \"data\": {\"applied\": \"yes\"}}";
    Result applied =
        client()
            .update(
                ref,
                Mutation.apply(apply, false),
                WriteConfig.builder().fieldManager("java-test").build());
    assertEquals(Outcome.UPDATED, applied.outcome());
    assertEquals("yes", data(applied.object(), "applied"));
    assertEquals("5", data(applied.object(), "n"));
    // The same configuration again: the API server keeps the resourceVersion.
    Result again =
        client()
            .update(
                ref,
                Mutation.apply(apply, false),
                WriteConfig.builder().fieldManager("java-test").build());
    assertEquals(Outcome.UNCHANGED, again.outcome());
  }

  @Test
  void dryRunPersistsNothing() {
    ObjectRef ref = Sidecar.configMap("dry");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    Result dry =
        client()
            .update(
                ref,
                Mutation.mergePatch("{\"data\": {\"n\": \"9\"}}"),
                WriteConfig.builder().dryRun(true).build());
    assertEquals(Outcome.UPDATED, dry.outcome());
    assertEquals("9", data(dry.object(), "n"));
    assertEquals("0", data(Sidecar.read(ref), "n"));
  }

  @Test
  void idempotencyKeyAppliesAChangeOnce() {
    ObjectRef ref = Sidecar.configMap("keyed");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    String key = UUID.randomUUID().toString();
    Result first =
        client().update(ref, INCREMENT, WriteConfig.builder().idempotencyKey(key).build());
    assertEquals(Outcome.UPDATED, first.outcome());
    assertFalse(first.alreadyApplied());
    Result second =
        client()
            .update(
                ref, INCREMENT, WriteConfig.builder().idempotencyKey(key).writeAlone(true).build());
    assertEquals(Outcome.UPDATED, second.outcome());
    assertTrue(second.alreadyApplied());
    assertEquals("1", data(second.object(), "n"));
  }

  @Test
  void preconditionsThatHoldLetTheWriteThrough() {
    ObjectRef ref = Sidecar.configMap("holds");
    Result created = Sidecar.create(ref, "{\"n\": \"0\"}");
    String uid = created.object().withObjectProperty("metadata").get("uid").asText();
    Result updated =
        client()
            .update(
                ref,
                INCREMENT,
                WriteConfig.builder()
                    .uid(uid)
                    .resourceVersion(created.resourceVersion())
                    .preconditionCel("object.data.n == \"0\"")
                    .retryPolicy(
                        RetryPolicy.builder()
                            .maxAttempts(3)
                            .initialBackoff(java.time.Duration.ofMillis(5))
                            .maxBackoff(java.time.Duration.ofMillis(50))
                            .build())
                    .build());
    assertEquals(Outcome.UPDATED, updated.outcome());
    assertEquals("1", data(updated.object(), "n"));
  }

  @Test
  void patchStatusWritesOnlyStatus() {
    ObjectRef ref = Sidecar.widget("status");
    client()
        .update(
            ref,
            Mutation.mergePatch("{}"),
            WriteConfig.builder().createIfMissing("{\"spec\": {\"size\": 1}}").build());
    Result result =
        client()
            .patchStatus(
                ref,
                Mutation.mergePatch(
                    "{\"spec\": {\"size\": 2}, \"status\": {\"phase\": \"Ready\"}}"));
    assertEquals(Outcome.UPDATED, result.outcome());
    assertEquals(1, result.object().withObjectProperty("spec").get("size").asInt());
    assertEquals("Ready", result.object().withObjectProperty("status").get("phase").asText());
    // Update never writes status: a status-only change is UNCHANGED.
    Result mainOnly =
        client().update(ref, Mutation.mergePatch("{\"status\": {\"phase\": \"Gone\"}}"));
    assertEquals(Outcome.UNCHANGED, mainOnly.outcome());
  }
}
