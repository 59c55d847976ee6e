package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.safewrite.v1.MergePatch;
import dev.safewrite.v1.TransactProposal;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

@Tag("sidecar")
class TransactTest {

  /** Increments data.n of the fresh object in place. */
  private static Proposal increment(Fresh<ObjectNode> fresh) {
    ObjectNode data = fresh.object().withObjectProperty("data");
    data.put("n", Integer.toString(Integer.parseInt(data.get("n").asText()) + 1));
    return null;
  }

  @Test
  void inPlaceChangeIsWrittenAndCreatesWhenMissing() {
    ObjectRef ref = Sidecar.configMap("tx-create");
    List<Boolean> creating = new ArrayList<>();
    Result created =
        client()
            .transact(
                ref,
                fresh -> {
                  creating.add(fresh.creating());
                  return increment(fresh);
                },
                WriteConfig.builder().createIfMissing("{\"data\": {\"n\": \"0\"}}").build());
    assertEquals(Outcome.CREATED, created.outcome());
    assertEquals("1", data(created.object(), "n"));
    assertEquals(List.of(true), creating);

    Result updated = client().transact(ref, TransactTest::increment);
    assertEquals(Outcome.UPDATED, updated.outcome());
    assertEquals("2", data(updated.object(), "n"));
  }

  @Test
  void proposalsOfEveryKind() {
    ObjectRef ref = Sidecar.configMap("tx-kinds");
    Sidecar.create(ref, "{\"n\": \"1\"}");

    Result mutated =
        client()
            .transact(
                ref, fresh -> Proposal.mutation(Mutation.mergePatch("{\"data\": {\"m\": \"x\"}}")));
    assertEquals(Outcome.UPDATED, mutated.outcome());
    assertEquals("x", data(mutated.object(), "m"));

    Result whole =
        client()
            .transact(
                ref,
                fresh -> {
                  ObjectNode object = fresh.object().deepCopy();
                  object.withObjectProperty("data").put("w", "y");
                  return Proposal.object(object);
                });
    assertEquals("y", data(whole.object(), "w"));

    Result untouched = client().transact(ref, fresh -> null);
    assertEquals(Outcome.UNCHANGED, untouched.outcome());
    assertEquals(whole.resourceVersion(), untouched.resourceVersion());

    Result aborted = client().transact(ref, fresh -> Proposal.abort("nothing to do"));
    assertEquals(Outcome.ABORTED, aborted.outcome());
    assertEquals("1", data(aborted.object(), "n"));
    assertEquals(
        whole.resourceVersion(),
        Sidecar.read(ref).withObjectProperty("metadata").get("resourceVersion").asText());
  }

  @Test
  void functionExceptionAbortsAndIsRethrownAsItIs() {
    ObjectRef ref = Sidecar.configMap("tx-throw");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    IllegalStateException boom = new IllegalStateException("boom");
    IllegalStateException thrown =
        assertThrows(
            IllegalStateException.class,
            () ->
                client()
                    .transact(
                        ref,
                        fresh -> {
                          fresh.object().withObjectProperty("data").put("n", "100");
                          throw boom;
                        }));
    assertSame(boom, thrown);
    assertEquals("1", data(Sidecar.read(ref), "n"));
  }

  @Test
  void conflictBetweenFreshAndProposalIsRetriedOnTheNextFreshObject() {
    ObjectRef ref = Sidecar.configMap("tx-conflict");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    List<String> seen = new ArrayList<>();
    Result result =
        client()
            .transact(
                ref,
                fresh -> {
                  seen.add(fresh.attempt() + ":" + data(fresh.object(), "n"));
                  if (fresh.attempt() == 1) {
                    // Another writer changes the object after this attempt's read.
                    client()
                        .update(
                            ref,
                            Mutation.mergePatch("{\"data\": {\"n\": \"10\", \"other\": \"x\"}}"),
                            WriteConfig.builder().writeAlone(true).build());
                  }
                  return increment(fresh);
                });
    assertEquals(List.of("1:0", "2:10"), seen);
    assertEquals(Outcome.UPDATED, result.outcome());
    assertEquals(2, result.attempts());
    assertEquals("Conflict", result.attemptRecords().get(0).reason());
    assertEquals(409, result.attemptRecords().get(0).httpStatus());
    assertEquals("11", data(result.object(), "n"));
    assertEquals("x", data(result.object(), "other"));
  }

  @Test
  void requeuePolicyFailsAConflictAtOnce() {
    ObjectRef ref = Sidecar.configMap("tx-requeue");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    AtomicInteger calls = new AtomicInteger();
    ConflictException conflict =
        assertThrows(
            ConflictException.class,
            () ->
                client()
                    .transact(
                        ref,
                        fresh -> {
                          calls.incrementAndGet();
                          client()
                              .update(
                                  ref,
                                  Mutation.mergePatch("{\"data\": {\"n\": \"10\"}}"),
                                  WriteConfig.builder().writeAlone(true).build());
                          return increment(fresh);
                        },
                        WriteConfig.builder().retryPolicy(RetryPolicy.requeue()).build()));
    assertEquals(1, calls.get());
    assertEquals(ErrorKind.CONFLICT, conflict.kind());
    assertEquals("Conflict", conflict.reason());
    assertEquals(Reason.REASON_API_SERVER, conflict.writeFailureReason());
    assertTrue(conflict.isRetryable());
    assertEquals(1, conflict.attemptRecords().size());
    assertEquals("10", data(Sidecar.read(ref), "n"));
  }

  @Test
  void idempotencyKeySkipsTheFunctionOnceApplied() {
    ObjectRef ref = Sidecar.configMap("tx-key");
    Sidecar.create(ref, "{\"n\": \"0\"}");
    String key = UUID.randomUUID().toString();
    Result first =
        client()
            .transact(
                ref, TransactTest::increment, WriteConfig.builder().idempotencyKey(key).build());
    assertFalse(first.alreadyApplied());
    AtomicInteger calls = new AtomicInteger();
    Result second =
        client()
            .transact(
                ref,
                fresh -> {
                  calls.incrementAndGet();
                  return increment(fresh);
                },
                WriteConfig.builder().idempotencyKey(key).build());
    assertTrue(second.alreadyApplied());
    assertEquals(0, calls.get());
    assertEquals("1", data(second.object(), "n"));
  }

  @Test
  void statusTransactionWritesOnlyStatus() {
    ObjectRef ref = Sidecar.widget("tx-status");
    client()
        .update(
            ref,
            Mutation.mergePatch("{}"),
            WriteConfig.builder().createIfMissing("{\"spec\": {\"size\": 3}}").build());
    Result result =
        client()
            .transactStatus(
                ref,
                fresh -> {
                  ObjectNode object = fresh.object();
                  int size = object.withObjectProperty("spec").get("size").asInt();
                  object.withObjectProperty("spec").put("size", 99);
                  ObjectNode status = Json.MAPPER.createObjectNode();
                  status.put("capacity", size * 10);
                  object.set("status", status);
                  return null;
                });
    assertEquals(Outcome.UPDATED, result.outcome());
    assertEquals(30, result.object().withObjectProperty("status").get("capacity").asInt());
    assertEquals(3, result.object().withObjectProperty("spec").get("size").asInt());
  }

  @Test
  void proposalForAnotherAttemptIsRefused() {
    ObjectRef ref = Sidecar.configMap("tx-stale");
    Sidecar.create(ref, "{\"n\": \"1\"}");
    TransactProposal stale =
        TransactProposal.newBuilder()
            .setAttempt(7)
            .setMutation(
                dev.safewrite.v1.Mutation.newBuilder()
                    .setMergePatch(
                        MergePatch.newBuilder().setPatchJson("{\"data\": {\"n\": \"2\"}}")))
            .build();
    InvalidException invalid =
        assertThrows(
            InvalidException.class, () -> client().transact(ref, fresh -> Proposal.of(stale)));
    assertEquals(Reason.REASON_INVALID_REQUEST, invalid.writeFailureReason());
    assertEquals("1", data(Sidecar.read(ref), "n"));
  }

  @Test
  void readmeTransactionLabelsTheObjectOnce() {
    ObjectRef ref = Sidecar.configMap("tx-readme");
    Sidecar.create(ref, "{}");
    TransactFunction<ObjectNode> label =
        fresh -> {
          ObjectNode labels = fresh.object().withObject("/metadata/labels");
          if (labels.has("owner")) {
            return Proposal.abort("already owned");
          }
          labels.put("owner", "me");
          return null;
        };
    WriteConfig bounded = WriteConfig.builder().timeout(Duration.ofSeconds(10)).build();
    Result result = client().transact(ref, label, bounded);
    assertEquals(Outcome.UPDATED, result.outcome());
    assertEquals("me", result.object().at("/metadata/labels/owner").asText());
    assertEquals(Outcome.ABORTED, client().transact(ref, label, bounded).outcome());
  }

  @Test
  void typedTransactionHandsTheFunctionItsClassAndKeepsWhatItLacks() {
    ObjectRef ref = Sidecar.widget("tx-typed");
    client()
        .update(
            ref,
            Mutation.mergePatch("{}"),
            WriteConfig.builder()
                .createIfMissing("{\"spec\": {\"size\": 3, \"color\": \"red\"}}")
                .build());
    client().patchStatus(ref, Mutation.mergePatch("{\"status\": {\"phase\": \"Pending\"}}"));

    List<Class<?>> handed = new ArrayList<>();
    Result status =
        client()
            .transactStatus(
                ref,
                OperatorTest.Widget.class,
                fresh -> {
                  OperatorTest.Widget widget = fresh.object();
                  handed.add(widget.getClass());
                  widget.getStatus().capacity = widget.getSpec().size * 10L;
                  return Proposal.object(widget);
                });
    assertEquals(List.of(OperatorTest.Widget.class), handed);
    assertEquals(Outcome.UPDATED, status.outcome());
    OperatorTest.Widget written = status.object(OperatorTest.Widget.class);
    assertEquals(30L, written.getStatus().capacity);
    assertEquals(
        "Pending",
        status.object().at("/status/phase").asText(),
        "a field the class does not have is kept");

    Result spec =
        client()
            .transact(
                ref,
                OperatorTest.Widget.class,
                fresh -> {
                  fresh.object().getSpec().size = 4;
                  return null;
                });
    assertEquals(Outcome.UPDATED, spec.outcome());
    assertEquals(4, spec.object().at("/spec/size").asInt());
    assertEquals("red", spec.object().at("/spec/color").asText());
    assertEquals(30, spec.object().at("/status/capacity").asInt());

    Result unchanged = client().transact(ref, OperatorTest.Widget.class, fresh -> null);
    assertEquals(Outcome.UNCHANGED, unchanged.outcome());
    Result untouched =
        client()
            .transact(
                ref,
                OperatorTest.Widget.class,
                fresh -> {
                  fresh.object();
                  return null;
                });
    assertEquals(Outcome.UNCHANGED, untouched.outcome(), "read and written back as it was");
  }
}
