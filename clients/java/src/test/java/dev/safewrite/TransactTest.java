package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static dev.safewrite.Sidecar.data;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.gson.JsonObject;
import dev.safewrite.v1.MergePatch;
import dev.safewrite.v1.Reason;
import dev.safewrite.v1.TransactProposal;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

@Tag("sidecar")
class TransactTest {

  /** Increments data.n of the fresh object in place. */
  private static Proposal increment(Fresh fresh) {
    JsonObject data = fresh.object().getAsJsonObject("data");
    data.addProperty("n", Integer.toString(Integer.parseInt(data.get("n").getAsString()) + 1));
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
                WriteOption.createIfMissing("{\"data\": {\"n\": \"0\"}}"));
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
                  JsonObject object = fresh.object().deepCopy();
                  object.getAsJsonObject("data").addProperty("w", "y");
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
        Sidecar.read(ref).getAsJsonObject("metadata").get("resourceVersion").getAsString());
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
                          fresh.object().getAsJsonObject("data").addProperty("n", "100");
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
                            WriteOption.writeAlone());
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
                                  WriteOption.writeAlone());
                          return increment(fresh);
                        },
                        WriteOption.retryPolicy(RetryPolicy.requeue())));
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
    Result first = client().transact(ref, TransactTest::increment, WriteOption.idempotencyKey(key));
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
                WriteOption.idempotencyKey(key));
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
            WriteOption.createIfMissing("{\"spec\": {\"size\": 3}}"));
    Result result =
        client()
            .transactStatus(
                ref,
                fresh -> {
                  JsonObject object = fresh.object();
                  int size = object.getAsJsonObject("spec").get("size").getAsInt();
                  object.getAsJsonObject("spec").addProperty("size", 99);
                  JsonObject status = new JsonObject();
                  status.addProperty("capacity", size * 10);
                  object.add("status", status);
                  return null;
                });
    assertEquals(Outcome.UPDATED, result.outcome());
    assertEquals(30, result.object().getAsJsonObject("status").get("capacity").getAsInt());
    assertEquals(3, result.object().getAsJsonObject("spec").get("size").getAsInt());
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
}
