package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.google.protobuf.Any;
import com.google.protobuf.util.JsonFormat;
import com.google.rpc.ErrorInfo;
import dev.safewrite.v1.PatchStatusRequest;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.WriteFailure;
import dev.safewrite.v1.WriteResult;
import io.fabric8.kubernetes.api.model.Condition;
import io.fabric8.kubernetes.api.model.ConditionBuilder;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.ConfigMapBuilder;
import io.fabric8.kubernetes.api.model.OwnerReference;
import io.fabric8.kubernetes.api.model.OwnerReferenceBuilder;
import io.grpc.Status;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Conditions, finalizers, owner references and keyed list entries: the messages the fabric8-typed
 * mutations make, what they refuse before sending, the GONE outcome and the reasons these changes
 * fail with; and, against the sidecar, each of them written to a real object.
 */
class ListChangesTest {
  private static final ObjectRef WIDGET =
      ObjectRef.of("test.safewrite.dev/v1", "Widget", "default", "gear");

  private static Condition ready() {
    return new ConditionBuilder()
        .withType("Ready")
        .withStatus("True")
        .withReason("Reconciled")
        .build();
  }

  /** The mutation as proto3 JSON, as the conformance cases spell it. */
  private static dev.safewrite.v1.Mutation mutation(String json) throws Exception {
    dev.safewrite.v1.Mutation.Builder mutation = dev.safewrite.v1.Mutation.newBuilder();
    JsonFormat.parser().merge(json, mutation);
    return mutation.build();
  }

  private static ConfigMap configMap(String name, String uid) {
    return new ConfigMapBuilder()
        .withNewMetadata()
        .withNamespace("default")
        .withName(name)
        .withUid(uid)
        .endMetadata()
        .build();
  }

  private static void refused(String expectedMessagePart, Executable build) {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, build);
    assertTrue(
        e.getMessage().contains(expectedMessagePart),
        "\"" + e.getMessage() + "\" does not say " + expectedMessagePart);
  }

  @Test
  void conditionsAreSentAsGiven() throws Exception {
    Condition full =
        new ConditionBuilder()
            .withType("example.com/Synced")
            .withStatus("False")
            .withReason("Broken")
            .withMessage("it broke")
            .withObservedGeneration(7L)
            .withLastTransitionTime("2026-01-01T01:00:00.5+01:00")
            .build();
    assertEquals(
        mutation(
            "{\"setCondition\": {\"conditions\": [{\"type\": \"Ready\", \"status\": \"True\","
                + " \"reason\": \"Reconciled\"}, {\"type\": \"example.com/Synced\", \"status\":"
                + " \"False\", \"reason\": \"Broken\", \"message\": \"it broke\","
                + " \"observedGeneration\": \"7\", \"lastTransitionTime\":"
                + " \"2026-01-01T00:00:00Z\"}]}}"),
        Mutation.setCondition(ready(), full).toProto());
    assertFalse(
        Mutation.setCondition(ready())
            .toProto()
            .getSetCondition()
            .getConditions(0)
            .hasObservedGeneration(),
        "no observedGeneration: the object's generation");
    assertEquals(
        mutation(
            "{\"setCondition\": {\"path\": \"status.mirror.conditions\", \"conditions\":"
                + " [{\"type\": \"Ready\", \"status\": \"True\", \"reason\": \"Reconciled\"}]}}"),
        Mutation.setConditionAt("status.mirror.conditions", List.of(ready())).toProto());
    assertEquals(
        mutation("{\"removeCondition\": {\"types\": [\"Ready\", \"Synced\"]}}"),
        Mutation.removeCondition("Ready", "Synced").toProto());
    assertEquals(
        mutation("{\"removeCondition\": {\"types\": [\"Ready\"], \"path\": \"status.c\"}}"),
        Mutation.removeConditionAt("status.c", List.of("Ready")).toProto());
  }

  @Test
  void malformedConditionsAreRefusedBeforeSending() {
    refused("at least one condition", () -> Mutation.setCondition());
    refused(
        "conditions[0].type is required",
        () -> Mutation.setCondition(new ConditionBuilder(ready()).withType(null).build()));
    refused(
        "conditions[0] (Ready).status is required",
        () -> Mutation.setCondition(new ConditionBuilder(ready()).withStatus("").build()));
    refused(
        "must be True, False or Unknown",
        () -> Mutation.setCondition(new ConditionBuilder(ready()).withStatus("Maybe").build()));
    refused(
        "conditions[0] (Ready).reason is required",
        () -> Mutation.setCondition(new ConditionBuilder(ready()).withReason(null).build()));
    refused(
        "not an RFC 3339 time",
        () ->
            Mutation.setCondition(
                new ConditionBuilder(ready()).withLastTransitionTime("yesterday").build()));
    refused(
        "conditions[1]: type Ready is given twice", () -> Mutation.setCondition(ready(), ready()));
    Condition severity = ready();
    severity.setAdditionalProperty("severity", "Info");
    refused("fields a condition does not have", () -> Mutation.setCondition(severity));
    assertThrows(NullPointerException.class, () -> Mutation.setCondition((Condition) null));
    refused("at least one of types", () -> Mutation.removeCondition());
    refused("types[1] is required", () -> Mutation.removeCondition("Ready", ""));
    refused("types[1]: Ready is given twice", () -> Mutation.removeCondition("Ready", "Ready"));
  }

  @Test
  void finalizersAreAddedAndRemoved() throws Exception {
    assertEquals(
        mutation("{\"finalizer\": {\"finalizer\": \"example.com/cleanup\"}}"),
        Mutation.addFinalizer("example.com/cleanup").toProto());
    assertEquals(
        mutation("{\"finalizer\": {\"finalizer\": \"example.com/cleanup\", \"remove\": true}}"),
        Mutation.removeFinalizer("example.com/cleanup").toProto());
    refused("finalizer is required", () -> Mutation.addFinalizer(""));
    refused("finalizer is required", () -> Mutation.removeFinalizer(null));
  }

  @Test
  void ownerReferencesComeFromTheOwner() throws Exception {
    ConfigMap owner = configMap("parent", "u-1");
    assertEquals(
        mutation(
            "{\"ownerReference\": {\"owner\": {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\","
                + " \"name\": \"parent\", \"uid\": \"u-1\"}}}"),
        Mutation.setOwnerReference(owner).toProto());
    assertEquals(
        mutation(
            "{\"ownerReference\": {\"owner\": {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\","
                + " \"name\": \"parent\", \"uid\": \"u-1\", \"controller\": true,"
                + " \"blockOwnerDeletion\": true}}}"),
        Mutation.setControllerReference(owner).toProto());
    // As controllerutil.RemoveOwnerReference: by group, kind and name, whatever the uid.
    assertEquals(
        mutation(
            "{\"ownerReference\": {\"owner\": {\"apiVersion\": \"v1\", \"kind\": \"ConfigMap\","
                + " \"name\": \"parent\"}, \"remove\": true}}"),
        Mutation.removeOwnerReference(owner).toProto());
    // A custom resource's apiVersion and kind come from its class when it leaves them unset; no
    // uid: the sidecar reads the owner.
    OperatorTest.Widget widget = new OperatorTest.Widget();
    widget.setMetadata(configMap("wheel", null).getMetadata());
    assertEquals(
        mutation(
            "{\"ownerReference\": {\"owner\": {\"apiVersion\": \"test.safewrite.dev/v1\","
                + " \"kind\": \"Widget\", \"name\": \"wheel\", \"controller\": true,"
                + " \"blockOwnerDeletion\": true}}}"),
        Mutation.setControllerReference(widget).toProto());

    OwnerReference reference =
        new OwnerReferenceBuilder()
            .withApiVersion("apps/v1")
            .withKind("Deployment")
            .withName("web")
            .withUid("u-2")
            .withController(true)
            .build();
    assertEquals(
        mutation(
            "{\"ownerReference\": {\"owner\": {\"apiVersion\": \"apps/v1\", \"kind\":"
                + " \"Deployment\", \"name\": \"web\", \"uid\": \"u-2\", \"controller\": true}}}"),
        Mutation.setOwnerReference(reference).toProto());
    assertEquals(
        mutation(
            "{\"ownerReference\": {\"owner\": {\"apiVersion\": \"apps/v1\", \"kind\":"
                + " \"Deployment\", \"name\": \"web\", \"uid\": \"u-2\", \"controller\": true},"
                + " \"remove\": true}}"),
        Mutation.removeOwnerReference(reference).toProto());

    refused("owner's metadata.name is required", () -> Mutation.setOwnerReference(new ConfigMap()));
    refused(
        "reference.kind is required",
        () ->
            Mutation.setOwnerReference(new OwnerReferenceBuilder(reference).withKind("").build()));
    refused(
        "reference.apiVersion is required",
        () ->
            Mutation.removeOwnerReference(
                new OwnerReferenceBuilder().withApiVersion("").withKind("Pod").build()));
    refused("fabric8's default", () -> Mutation.removeOwnerReference(new OwnerReference()));
  }

  @Test
  void listEntriesAreKeyed() throws Exception {
    ObjectNode entry =
        Json.object("{\"controllerName\": \"a\", \"x\": null, \"n\": 9007199254740993}");
    assertEquals(
        mutation(
            "{\"listEntry\": {\"path\": \"status.parents\", \"keys\": [\"controllerName\"],"
                + " \"entryJson\": \"{\\\"controllerName\\\":\\\"a\\\",\\\"x\\\":null,"
                + "\\\"n\\\":9007199254740993}\"}}"),
        Mutation.upsertListEntry("status.parents", List.of("controllerName"), entry).toProto());
    assertEquals(
        mutation(
            "{\"listEntry\": {\"path\": \"spec.routes\", \"keys\": [\"name\", \"port\"],"
                + " \"entryJson\": \"{\\\"name\\\": \\\"r\\\", \\\"port\\\": 80}\","
                + " \"remove\": true}}"),
        Mutation.removeListEntry(
                "spec.routes", List.of("name", "port"), "{\"name\": \"r\", \"port\": 80}")
            .toProto());

    refused("path is required", () -> Mutation.upsertListEntry("", List.of("k"), "{}"));
    refused("at least one of keys", () -> Mutation.upsertListEntry("spec.l", List.of(), entry));
    refused("keys[0] is required", () -> Mutation.removeListEntry("spec.l", List.of(""), "{}"));
    refused(
        "keys[1]: k is given twice",
        () -> Mutation.upsertListEntry("spec.l", List.of("k", "k"), "{}"));
    refused(
        "no key field x",
        () -> Mutation.upsertListEntry("spec.l", List.of("controllerName", "x"), entry));
  }

  @Test
  void theRequestCarriesTheMutationAsBuilt() {
    RecordingChannel channel = new RecordingChannel();
    Mutation conditions = Mutation.setCondition(ready());
    Mutation finalizer = Mutation.removeFinalizer("example.com/cleanup");
    try (SafewriteClient client = SafewriteClient.forChannel(channel)) {
      assertThrows(UnavailableException.class, () -> client.patchStatus(WIDGET, conditions));
      assertThrows(UnavailableException.class, () -> client.update(WIDGET, finalizer));
    }
    PatchStatusRequest status = (PatchStatusRequest) channel.sent.get(0);
    assertEquals(WIDGET.toProto(), status.getTarget());
    assertEquals(conditions.toProto(), status.getMutation());
    assertEquals(finalizer.toProto(), ((UpdateWithRetryRequest) channel.sent.get(1)).getMutation());
  }

  @Test
  void goneIsAnOutcomeWithoutAnObject() {
    Result gone =
        Result.fromProto(
            WriteResult.newBuilder()
                .setOutcome(dev.safewrite.v1.Outcome.OUTCOME_GONE)
                .setAttempts(1)
                .build());
    assertEquals(Outcome.GONE, gone.outcome());
    assertTrue(gone.gone());
    assertEquals("", gone.objectJson());
    IllegalStateException noObject = assertThrows(IllegalStateException.class, gone::object);
    assertTrue(noObject.getMessage().contains("GONE"), noObject.getMessage());

    Result deleted =
        Result.fromProto(
            WriteResult.newBuilder()
                .setOutcome(dev.safewrite.v1.Outcome.OUTCOME_GONE)
                .setObjectJson("{\"metadata\": {\"name\": \"gear\"}}")
                .build());
    assertTrue(deleted.gone());
    assertEquals("gear", deleted.object().withObjectProperty("metadata").get("name").asText());
    assertFalse(
        Result.fromProto(
                WriteResult.newBuilder()
                    .setOutcome(dev.safewrite.v1.Outcome.OUTCOME_UPDATED)
                    .setObjectJson("{}")
                    .build())
            .gone());
  }

  @Test
  void deletingOwnedAndFencedObjectsFailTheirPreconditionForGood() {
    for (Reason reason :
        List.of(
            Reason.REASON_OBJECT_DELETING,
            Reason.REASON_ALREADY_OWNED,
            Reason.REASON_FENCED,
            Reason.REASON_NOT_LEADER)) {
      com.google.rpc.Status status =
          com.google.rpc.Status.newBuilder()
              .setCode(Status.Code.FAILED_PRECONDITION.value())
              .setMessage("nothing was written")
              .addDetails(
                  Any.pack(
                      ErrorInfo.newBuilder()
                          .setDomain(SafewriteException.DOMAIN)
                          .setReason(Reasons.errorInfoReason(reason))
                          .build()))
              .addDetails(
                  Any.pack(
                      WriteFailure.newBuilder()
                          .setReason(Reasons.toProto(reason))
                          .setCurrentObjectJson("{\"metadata\": {}}")
                          .build()))
              .build();
      SafewriteException e =
          Errors.decode(StatusProto.toStatusRuntimeException(status), /* keyed= */ true);
      assertInstanceOf(PreconditionFailedException.class, e);
      assertEquals(reason, e.writeFailureReason());
      assertEquals(reason.name().substring("REASON_".length()), e.reason());
      assertFalse(e.isRetryable(), reason + " is not retried, not even with a key");
      assertTrue(e.currentObject().isPresent());
    }
  }

  // Against the sidecar.

  private static ArrayNode conditions(Result result) {
    return result.object().withObjectProperty("status").withArrayProperty("conditions");
  }

  @Test
  @Tag("sidecar")
  void conditionsAreSetOnceAndRemoved() {
    ObjectRef ref = Sidecar.widget("conditions");
    client()
        .update(
            ref,
            Mutation.mergePatch("{}"),
            WriteConfig.builder().createIfMissing("{\"spec\": {\"size\": 1}}").build());

    Result set = client().patchStatus(ref, Mutation.setCondition(ready()));
    assertEquals(Outcome.UPDATED, set.outcome());
    ObjectNode condition = (ObjectNode) conditions(set).get(0);
    assertEquals("Ready", condition.get("type").asText());
    assertEquals(1, condition.get("observedGeneration").asInt(), "the object's generation");
    assertTrue(
        condition.get("lastTransitionTime").asText().matches("\\d{4}-\\d\\d-\\d\\dT.*Z"),
        "the time of the write: " + condition);

    assertEquals(
        Outcome.UNCHANGED, client().patchStatus(ref, Mutation.setCondition(ready())).outcome());
    Result removed = client().patchStatus(ref, Mutation.removeCondition("Ready"));
    assertEquals(Outcome.UPDATED, removed.outcome());
    ObjectNode status = removed.object().withObjectProperty("status");
    assertTrue(
        status == null || !status.has("conditions") || conditions(removed).isEmpty(),
        "no Ready condition left: " + status);
  }

  @Test
  @Tag("sidecar")
  void lastFinalizerOfADeletedObjectIsGone() throws Exception {
    ObjectRef ref = Sidecar.configMap("finalized");
    Sidecar.create(ref, "{}");
    Result added = client().update(ref, Mutation.addFinalizer("test.safewrite.dev/cleanup"));
    assertEquals(Outcome.UPDATED, added.outcome());

    Sidecar.deleteConfigMap(ref);
    PreconditionFailedException deleting =
        assertThrows(
            PreconditionFailedException.class,
            () -> client().update(ref, Mutation.addFinalizer("test.safewrite.dev/other")));
    assertEquals(Reason.REASON_OBJECT_DELETING, deleting.writeFailureReason());
    assertFalse(deleting.isRetryable());

    Result removed = client().update(ref, Mutation.removeFinalizer("test.safewrite.dev/cleanup"));
    assertEquals(Outcome.GONE, removed.outcome(), "the API server deleted it");
    assertTrue(removed.gone());
    Result again = client().update(ref, Mutation.removeFinalizer("test.safewrite.dev/cleanup"));
    assertTrue(again.gone(), "a removal from a missing object");
    assertThrows(NotFoundException.class, () -> client().update(ref, Mutation.mergePatch("{}")));
  }

  @Test
  @Tag("sidecar")
  void ownerReferencesOfFabric8Owners() {
    ObjectRef first = Sidecar.configMap("owner");
    ObjectRef second = Sidecar.configMap("owner");
    ObjectRef owned = Sidecar.configMap("owned");
    String secondUid =
        Sidecar.create(second, "{}").object().withObjectProperty("metadata").get("uid").asText();
    Sidecar.create(first, "{}");
    Sidecar.create(owned, "{}");
    ConfigMap firstOwner = configMap(first.name(), null); // no uid: the sidecar reads it
    firstOwner.getMetadata().setNamespace(first.namespace());
    ConfigMap secondOwner = configMap(second.name(), secondUid);
    secondOwner.getMetadata().setNamespace(second.namespace());

    Result controlled = client().update(owned, Mutation.setControllerReference(firstOwner));
    assertEquals(Outcome.UPDATED, controlled.outcome());
    JsonNode reference =
        controlled
            .object()
            .withObjectProperty("metadata")
            .withArrayProperty("ownerReferences")
            .get(0);
    assertEquals(first.name(), reference.get("name").asText());
    assertFalse(reference.get("uid").asText().isEmpty(), "the uid read: " + reference);
    assertTrue(reference.get("controller").asBoolean());
    assertEquals(
        Outcome.UNCHANGED,
        client().update(owned, Mutation.setControllerReference(firstOwner)).outcome());

    PreconditionFailedException owned2 =
        assertThrows(
            PreconditionFailedException.class,
            () -> client().update(owned, Mutation.setControllerReference(secondOwner)));
    assertEquals(Reason.REASON_ALREADY_OWNED, owned2.writeFailureReason());
    assertTrue(
        owned2.description().contains(first.name()),
        "names the controller: " + owned2.description());

    client().update(owned, Mutation.setOwnerReference(secondOwner));
    Result removed = client().update(owned, Mutation.removeOwnerReference(firstOwner));
    ArrayNode left =
        removed.object().withObjectProperty("metadata").withArrayProperty("ownerReferences");
    assertEquals(1, left.size(), left.toString());
    assertEquals(secondUid, left.get(0).get("uid").asText());
  }

  @Test
  @Tag("sidecar")
  void keyedListEntriesAreUpsertedAndRemoved() {
    ObjectRef ref = Sidecar.widget("entries");
    client()
        .update(
            ref,
            Mutation.mergePatch("{}"),
            WriteConfig.builder()
                .createIfMissing(
                    "{\"spec\": {\"size\": 1, \"parents\": [{\"controllerName\": \"a\"}]}}")
                .build());
    ObjectNode b = Json.object("{\"controllerName\": \"b\"}");
    Mutation upsert = Mutation.upsertListEntry("spec.parents", List.of("controllerName"), b);
    assertEquals(Outcome.UPDATED, client().update(ref, upsert).outcome());
    assertEquals(Outcome.UNCHANGED, client().update(ref, upsert).outcome());
    Result removed =
        client()
            .update(
                ref,
                Mutation.removeListEntry(
                    "spec.parents", List.of("controllerName"), "{\"controllerName\": \"a\"}"),
                WriteConfig.builder().timeout(Duration.ofSeconds(10)).build());
    assertEquals(
        "[{\"controllerName\":\"b\"}]",
        removed.object().withObjectProperty("spec").withArrayProperty("parents").toString());
  }
}
