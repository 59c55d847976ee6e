package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
import com.google.rpc.RetryInfo;
import dev.safewrite.v1.CapabilitiesRequest;
import dev.safewrite.v1.CapabilitiesResponse;
import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.DeleteResponse;
import dev.safewrite.v1.LeadRequest;
import dev.safewrite.v1.TransactBegin;
import dev.safewrite.v1.TransactRequest;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.UpdateWithRetryResponse;
import dev.safewrite.v1.WriteFailure;
import dev.safewrite.v1.WriteOptions;
import dev.safewrite.v1.WriteResult;
import dev.safewrite.v1.WriterServiceGrpc;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientCall;
import io.grpc.Context;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Version skew without a sidecar: what a request needs (read from the proto's since options), and
 * the client over a fake sidecar whose Capabilities answer is made up (one that lacks the fence,
 * one older than 0.2.0, one whose Capabilities fails): the call it cannot serve is refused before
 * anything is sent, as the sidecar's own UNKNOWN_FIELD refusal comes, and Capabilities is asked
 * once; a call that needs a feature fails closed, nothing sent, while Capabilities fails.
 */
class SkewTest {
  private static final String FENCE = "safewrite.v1.WriteOptions.fence";
  private static final String DELETE = "safewrite.v1.WriterService/Delete";
  private static final ObjectRef REF = ObjectRef.of("v1", "ConfigMap", "ns", "cm");
  private static final WriteConfig FENCED = WriteConfig.builder().fence("ns", "leader", 3).build();

  private static List<String> needs(MethodDescriptor<?, ?> method, com.google.protobuf.Message m) {
    return Skew.features(method.getFullMethodName(), m).stream()
        .map(f -> f.name() + " " + f.since())
        .toList();
  }

  @Test
  void aRequestWithWhatTheFirstVersionHadNeedsNothing() {
    assertEquals(
        List.of(),
        needs(
            WriterServiceGrpc.getUpdateWithRetryMethod(),
            UpdateWithRetryRequest.newBuilder()
                .setOptions(WriteOptions.newBuilder().setFieldManager("m").setDryRun(true))
                .build()));
    assertFalse(Skew.mayHoldFeatures(CapabilitiesRequest.getDescriptor()));
    assertTrue(Skew.mayHoldFeatures(UpdateWithRetryRequest.getDescriptor()));
  }

  @Test
  void theFenceIsFoundInsideTheOptionsAndTheNewRpcsWhateverTheirRequest() {
    WriteOptions fenced =
        WriteOptions.newBuilder()
            .setFence(dev.safewrite.v1.Fence.newBuilder().setLeaseName("l").setEpoch(1))
            .build();
    assertEquals(
        List.of(FENCE + " 0.2.0"),
        needs(
            WriterServiceGrpc.getUpdateWithRetryMethod(),
            UpdateWithRetryRequest.newBuilder().setOptions(fenced).build()));
    assertEquals(
        List.of(FENCE + " 0.2.0"),
        needs(
            WriterServiceGrpc.getTransactMethod(),
            TransactRequest.newBuilder()
                .setBegin(TransactBegin.newBuilder().setOptions(fenced))
                .build()));
    assertEquals(
        List.of(DELETE + " 0.2.0"),
        needs(WriterServiceGrpc.getDeleteMethod(), DeleteRequest.getDefaultInstance()));
    assertEquals(
        List.of("safewrite.v1.WriterService/Lead 0.2.0"),
        needs(WriterServiceGrpc.getLeadMethod(), LeadRequest.getDefaultInstance()));
  }

  @Test
  void aTransactProposalCanHoldNoFeature() {
    // The check reads a stream's first message only (Transact's begin): extend it when this fails.
    assertFalse(Skew.mayHoldFeatures(dev.safewrite.v1.TransactProposal.getDescriptor()));
    assertTrue(
        Skew.mayHoldFeatures(TransactRequest.getDescriptor()), "through the begin's options");
  }

  @Test
  void aSidecarOlderThanTheFirstVersionWithCapabilitiesLacksEveryFeature() {
    List<Skew.Feature> fenced =
        Skew.features(
            WriterServiceGrpc.getUpdateWithRetryMethod().getFullMethodName(),
            UpdateWithRetryRequest.newBuilder()
                .setOptions(
                    WriteOptions.newBuilder()
                        .setFence(dev.safewrite.v1.Fence.newBuilder().setEpoch(1)))
                .build());
    assertEquals(FENCE, Skew.Known.OLDER.lacking(fenced).name());
    assertNull(Skew.Known.of(RecordingChannel.capabilities("0.2.0")).lacking(fenced));
    assertEquals(
        FENCE, Skew.Known.of(RecordingChannel.capabilities("0.2.0", FENCE)).lacking(fenced).name());
  }

  /**
   * A fake sidecar: Capabilities answers {@code answer} (or fails with {@code failure} and {@code
   * failureTrailers}), once {@code capabilitiesHeld} (when set) is released, UpdateWithRetry and
   * Delete answer GONE (or, for the name "refuse", the sidecar's own UNKNOWN_FIELD refusal); every
   * call is recorded by its method's name, and the others fail UNIMPLEMENTED, as an unserved method
   * does.
   */
  private static final class FakeSidecar extends Channel {
    volatile CapabilitiesResponse answer;
    volatile Status failure = Status.UNIMPLEMENTED;
    volatile Metadata failureTrailers = new Metadata();
    volatile CountDownLatch capabilitiesHeld;
    final List<String> calls = new CopyOnWriteArrayList<>();

    long count(String name) {
      return calls.stream().filter(name::equals).count();
    }

    @Override
    public <Q, R> ClientCall<Q, R> newCall(MethodDescriptor<Q, R> method, CallOptions options) {
      return new ClientCall<>() {
        private Listener<R> listener;
        private Q request;

        @Override
        public void start(Listener<R> listener, Metadata headers) {
          this.listener = listener;
          calls.add(method.getBareMethodName());
        }

        @Override
        public void request(int messages) {}

        @Override
        public void cancel(String message, Throwable cause) {}

        @Override
        public void sendMessage(Q message) {
          request = message;
        }

        @Override
        public void halfClose() {
          Object response = null;
          Status status = Status.OK;
          Metadata trailers = new Metadata();
          switch (method.getBareMethodName()) {
            case "Capabilities" -> {
              CountDownLatch held = capabilitiesHeld;
              if (held != null) {
                try {
                  held.await();
                } catch (InterruptedException interrupted) {
                  Thread.currentThread().interrupt();
                }
              }
              if (answer != null) {
                response = answer;
              } else {
                status = failure;
                trailers = failureTrailers;
              }
            }
            case "UpdateWithRetry" -> {
              if (((UpdateWithRetryRequest) request).getTarget().getName().equals("refuse")) {
                StatusRuntimeException refused = sidecarRefusal();
                status = refused.getStatus();
                trailers = refused.getTrailers();
              } else {
                response =
                    UpdateWithRetryResponse.newBuilder()
                        .setResult(
                            WriteResult.newBuilder()
                                .setOutcome(dev.safewrite.v1.Outcome.OUTCOME_GONE)
                                .setAttempts(1))
                        .build();
              }
            }
            case "Delete" ->
                response =
                    DeleteResponse.newBuilder()
                        .setOutcome(dev.safewrite.v1.DeleteOutcome.DELETE_OUTCOME_GONE)
                        .setAttempts(1)
                        .build();
            default -> status = Status.UNIMPLEMENTED;
          }
          listener.onHeaders(new Metadata());
          if (response != null) {
            @SuppressWarnings("unchecked")
            R typed = (R) response;
            listener.onMessage(typed);
          }
          listener.onClose(status, trailers);
        }
      };
    }

    @Override
    public String authority() {
      return "fake";
    }
  }

  /** The UNKNOWN_FIELD refusal as a sidecar of 0.2.0 sends it. */
  private static StatusRuntimeException sidecarRefusal() {
    return StatusProto.toStatusRuntimeException(
        com.google.rpc.Status.newBuilder()
            .setCode(Status.Code.FAILED_PRECONDITION.value())
            .setMessage("field 77 of safewrite.v1.WriteOptions is unknown (safewrite 0.2.0)")
            .addDetails(
                Any.pack(
                    ErrorInfo.newBuilder()
                        .setDomain(SafewriteException.DOMAIN)
                        .setReason("UNKNOWN_FIELD")
                        .putMetadata("sidecar_version", "0.2.0")
                        .putMetadata("number", "77")
                        .build()))
            .addDetails(
                Any.pack(
                    WriteFailure.newBuilder()
                        .setReason(dev.safewrite.v1.Reason.REASON_UNKNOWN_FIELD)
                        .build()))
            .build());
  }

  private static void assertRefused(SafewriteException e, String feature, String version) {
    assertTrue(e instanceof PreconditionFailedException, e.getMessage());
    assertEquals(ErrorKind.PRECONDITION_FAILED, e.kind());
    assertEquals(Status.Code.FAILED_PRECONDITION, e.code());
    assertEquals("UNKNOWN_FIELD", e.reason());
    assertEquals(SafewriteException.DOMAIN, e.domain());
    assertEquals(Reason.REASON_UNKNOWN_FIELD, e.writeFailureReason());
    assertEquals(Retry.RETRY_NEVER, e.retryAdvice());
    assertFalse(e.isRetryable());
    assertEquals(feature, e.errorMetadata().get("field"));
    assertEquals("0.2.0", e.errorMetadata().get("since"));
    assertEquals("client", e.errorMetadata().get("refused_by"));
    for (String part :
        List.of(
            feature,
            "needs a sidecar of 0.2.0 or newer",
            version,
            "nothing was sent",
            "docs/compatibility.md")) {
      assertTrue(e.description().contains(part), e.description() + " names " + part);
    }
  }

  @Test
  void olderThanTheFirstVersionWithCapabilitiesRefusesBeforeSendingAndAsksOnce() throws Exception {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.failure = Status.UNIMPLEMENTED;
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      ExecutorService pool = Executors.newFixedThreadPool(4);
      try {
        List<Future<SafewriteException>> refusals = new java.util.ArrayList<>();
        for (int i = 0; i < 4; i++) {
          refusals.add(
              pool.submit(
                  () ->
                      assertThrows(
                          SafewriteException.class,
                          () -> client.update(REF, Mutation.mergePatch("{}"), FENCED))));
        }
        for (Future<SafewriteException> refusal : refusals) {
          assertRefused(refusal.get(), FENCE, "older than 0.2.0");
        }
      } finally {
        pool.shutdownNow();
      }
      assertRefused(
          assertThrows(SafewriteException.class, () -> client.delete(REF)),
          DELETE,
          "older than 0.2.0");
      assertRefused(
          assertThrows(
              SafewriteException.class,
              () -> client.transact(REF, fresh -> Proposal.abort("no"), FENCED)),
          FENCE,
          "older than 0.2.0");
      assertRefused(
          assertThrows(
              SafewriteException.class,
              () -> client.lead(LeadConfig.builder("ns", "leader").build())),
          "safewrite.v1.WriterService/Lead",
          "older than 0.2.0");
      assertRefused(
          assertThrows(
              SafewriteException.class,
              () ->
                  client
                      .fenced(new Fence("ns", "leader", 3))
                      .update(REF, Mutation.mergePatch("{}"))),
          FENCE,
          "older than 0.2.0");
      // What 0.1.0 had is sent.
      client.update(REF, Mutation.mergePatch("{}"));
      assertEquals(List.of("Capabilities", "UpdateWithRetry"), sidecar.calls);
    }
  }

  @Test
  void aSidecarThatLacksTheFenceIsNamedByItsVersion() {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.answer = RecordingChannel.capabilities("0.2.7", FENCE);
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      assertRefused(
          assertThrows(
              SafewriteException.class,
              () -> client.update(REF, Mutation.mergePatch("{}"), FENCED)),
          FENCE,
          "this sidecar is 0.2.7");
      client.delete(REF);
      assertEquals(List.of("Capabilities", "Delete"), sidecar.calls);
    }
  }

  @Test
  void aSidecarWithEverythingGetsTheFencedWriteAndIsAskedOnce() {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.answer = RecordingChannel.capabilities("0.2.0");
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      client.update(REF, Mutation.mergePatch("{}"), FENCED);
      client.fenced(new Fence("ns", "leader", 3)).update(REF, Mutation.mergePatch("{}"));
      client.delete(REF);
      assertEquals(
          List.of("Capabilities", "UpdateWithRetry", "UpdateWithRetry", "Delete"), sidecar.calls);
    }
  }

  /**
   * Checks the failure of a call that needs {@code feature} while the sidecar's features could not
   * be learned: the exception of {@code code}, as for any failed call, its message saying what
   * happened with {@code cause}, the rpc Capabilities failure's own message.
   */
  private static void assertUnlearned(
      SafewriteException e,
      Class<? extends SafewriteException> type,
      Status.Code code,
      String feature,
      String cause) {
    assertEquals(type, e.getClass(), e.getMessage());
    assertEquals(code, e.code());
    assertEquals(
        feature
            + " needs a sidecar of 0.2.0 or newer; the sidecar's features could not be learned"
            + " (rpc Capabilities: "
            + cause
            + "); nothing was sent (docs/compatibility.md)",
        e.description());
    assertTrue(e.getMessage().startsWith("safewrite: " + code), e.getMessage());
    assertFalse("client".equals(e.errorMetadata().get("refused_by")), "not a skew refusal");
    assertTrue(e.getCause() instanceof StatusRuntimeException, "the Capabilities failure");
  }

  @Test
  void aFailingCapabilitiesFailsTheCallUnsentAndIsAskedAgain() {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.failure = Status.UNAVAILABLE.withDescription("connection refused");
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      SafewriteException e =
          assertThrows(
              SafewriteException.class,
              () -> client.update(REF, Mutation.mergePatch("{}"), FENCED));
      assertUnlearned(
          e, UnavailableException.class, Status.Code.UNAVAILABLE, FENCE, "connection refused");
      assertEquals(ErrorKind.UNAVAILABLE, e.kind());
      assertTrue(e.isRetryable(), "UNAVAILABLE stays retryable");
      assertEquals(List.of("Capabilities"), sidecar.calls, "the write was not sent");
      // Nor are the other calls that need a feature: each asks again, and fails the same way.
      assertUnlearned(
          assertThrows(SafewriteException.class, () -> client.delete(REF)),
          UnavailableException.class,
          Status.Code.UNAVAILABLE,
          "rpc " + DELETE,
          "connection refused");
      assertUnlearned(
          assertThrows(
              SafewriteException.class,
              () -> client.transact(REF, fresh -> Proposal.abort("no"), FENCED)),
          UnavailableException.class,
          Status.Code.UNAVAILABLE,
          FENCE,
          "connection refused");
      assertUnlearned(
          assertThrows(
              SafewriteException.class,
              () -> client.lead(LeadConfig.builder("ns", "leader").build())),
          UnavailableException.class,
          Status.Code.UNAVAILABLE,
          "rpc safewrite.v1.WriterService/Lead",
          "connection refused");
      assertEquals(4, sidecar.count("Capabilities"));
      assertEquals(4, sidecar.calls.size(), "nothing but Capabilities was sent: " + sidecar.calls);
      // What 0.1.0 had asks nothing and is sent.
      client.update(REF, Mutation.mergePatch("{}"));
      assertEquals(List.of("UpdateWithRetry"), sidecar.calls.subList(4, sidecar.calls.size()));
      // Nothing was kept: the next call that needs a feature asks again, and is sent or refused
      // by the answer.
      sidecar.answer = RecordingChannel.capabilities("0.2.0");
      client.update(REF, Mutation.mergePatch("{}"), FENCED);
      assertEquals(
          List.of("Capabilities", "UpdateWithRetry"),
          sidecar.calls.subList(5, sidecar.calls.size()));
      assertEquals(5, sidecar.count("Capabilities"));
      client.delete(REF);
      assertEquals(5, sidecar.count("Capabilities"), "the answer is kept");
    }
  }

  @Test
  void anotherCodeOfAFailingCapabilitiesPassesThroughWithItsDetails() {
    FakeSidecar sidecar = new FakeSidecar();
    StatusRuntimeException overloaded =
        StatusProto.toStatusRuntimeException(
            com.google.rpc.Status.newBuilder()
                .setCode(Status.Code.RESOURCE_EXHAUSTED.value())
                .setMessage("safewrite already has 64 RPCs in flight (--max-in-flight)")
                .addDetails(
                    Any.pack(
                        ErrorInfo.newBuilder()
                            .setDomain(SafewriteException.DOMAIN)
                            .setReason("OVERLOADED")
                            .build()))
                .addDetails(
                    Any.pack(
                        RetryInfo.newBuilder()
                            .setRetryDelay(
                                com.google.protobuf.Duration.newBuilder().setNanos(100_000_000))
                            .build()))
                .addDetails(
                    Any.pack(
                        WriteFailure.newBuilder()
                            .setReason(dev.safewrite.v1.Reason.REASON_OVERLOADED)
                            .build()))
                .build());
    sidecar.failure = overloaded.getStatus();
    sidecar.failureTrailers = overloaded.getTrailers();
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      SafewriteException e =
          assertThrows(
              SafewriteException.class,
              () -> client.update(REF, Mutation.mergePatch("{}"), FENCED));
      assertUnlearned(
          e,
          ResourceExhaustedException.class,
          Status.Code.RESOURCE_EXHAUSTED,
          FENCE,
          "safewrite already has 64 RPCs in flight (--max-in-flight)");
      assertEquals(ErrorKind.RESOURCE_EXHAUSTED, e.kind());
      assertEquals("OVERLOADED", e.reason());
      assertEquals(SafewriteException.DOMAIN, e.domain());
      assertEquals(Reason.REASON_OVERLOADED, e.writeFailureReason());
      assertEquals(java.util.Optional.of(Duration.ofMillis(100)), e.retryDelay());
      assertTrue(e.isRetryable());
      assertEquals(List.of("Capabilities"), sidecar.calls, "the write was not sent");
      // The next call asks again: a sidecar older than 0.2.0 now, which refuses it.
      sidecar.failure = Status.UNIMPLEMENTED;
      sidecar.failureTrailers = new Metadata();
      assertRefused(
          assertThrows(
              SafewriteException.class,
              () -> client.update(REF, Mutation.mergePatch("{}"), FENCED)),
          FENCE,
          "older than 0.2.0");
      assertEquals(List.of("Capabilities", "Capabilities"), sidecar.calls);
    }
  }

  private static void awaitTrue(java.util.function.BooleanSupplier condition, String what)
      throws InterruptedException {
    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!condition.getAsBoolean()) {
      assertTrue(System.nanoTime() < until, what + " within 10s");
      Thread.sleep(1);
    }
  }

  @Test
  void aCallWhoseTimeRunsOutOrIsInterruptedWhileAnotherAsksFailsUnsent() throws Exception {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.answer = RecordingChannel.capabilities("0.2.0");
    CountDownLatch held = new CountDownLatch(1);
    sidecar.capabilitiesHeld = held;
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      // Every wait is bounded, so that a client that waits unboundedly fails this test, not hangs.
      ExecutorService pool = Executors.newFixedThreadPool(3);
      try {
        // The first asks, and its Capabilities is held unanswered.
        Future<Result> first =
            pool.submit(() -> client.update(REF, Mutation.mergePatch("{}"), FENCED));
        awaitTrue(() -> sidecar.count("Capabilities") == 1, "the first asks");
        // A second with a deadline waits for it, until its deadline.
        WriteConfig soon =
            WriteConfig.builder().fence("ns", "leader", 3).timeout(Duration.ofMillis(50)).build();
        Future<SafewriteException> second =
            pool.submit(
                () ->
                    assertThrows(
                        SafewriteException.class,
                        () -> client.update(REF, Mutation.mergePatch("{}"), soon)));
        assertUnlearned(
            second.get(10, TimeUnit.SECONDS),
            DeadlineExceededException.class,
            Status.Code.DEADLINE_EXCEEDED,
            FENCE,
            "waited for another call's, past this call's deadline");
        // A third without one waits until its thread is interrupted.
        AtomicReference<Thread> waiter = new AtomicReference<>();
        Future<SafewriteException> third =
            pool.submit(
                () -> {
                  waiter.set(Thread.currentThread());
                  SafewriteException e =
                      assertThrows(SafewriteException.class, () -> client.delete(REF));
                  assertTrue(Thread.currentThread().isInterrupted(), "the interrupt is kept");
                  return e;
                });
        awaitTrue(
            () -> waiter.get() != null && waiter.get().getState() == Thread.State.WAITING,
            "the third waits");
        waiter.get().interrupt();
        SafewriteException interrupted = third.get(10, TimeUnit.SECONDS);
        assertEquals(CancelledException.class, interrupted.getClass(), interrupted.getMessage());
        assertEquals(Status.Code.CANCELLED, interrupted.code());
        assertTrue(
            interrupted
                .description()
                .startsWith(
                    "rpc "
                        + DELETE
                        + " needs a sidecar of 0.2.0 or newer; the sidecar's features could not"
                        + " be learned (rpc Capabilities: the calling thread was interrupted"),
            interrupted.description());
        // A fourth bounded only by its Context's deadline waits until that deadline.
        ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor();
        try {
          Future<SafewriteException> fourth =
              pool.submit(
                  () -> {
                    Context.CancellableContext context =
                        Context.current().withDeadlineAfter(50, TimeUnit.MILLISECONDS, timer);
                    try {
                      return context.call(
                          () -> assertThrows(SafewriteException.class, () -> client.delete(REF)));
                    } finally {
                      context.cancel(null);
                    }
                  });
          assertUnlearned(
              fourth.get(10, TimeUnit.SECONDS),
              DeadlineExceededException.class,
              Status.Code.DEADLINE_EXCEEDED,
              "rpc " + DELETE,
              "waited for another call's, past this call's deadline");
        } finally {
          timer.shutdownNow();
        }
        assertEquals(List.of("Capabilities"), sidecar.calls, "none was sent");
        held.countDown();
        first.get(10, TimeUnit.SECONDS);
        assertEquals(List.of("Capabilities", "UpdateWithRetry"), sidecar.calls);
      } finally {
        held.countDown();
        pool.shutdownNow();
      }
    }
  }

  @Test
  void theSidecarsOwnRefusalDecodesToTheSameException() {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.answer = RecordingChannel.capabilities("0.2.0");
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      SafewriteException e =
          assertThrows(
              SafewriteException.class,
              () ->
                  client.update(
                      ObjectRef.of("v1", "ConfigMap", "ns", "refuse"), Mutation.mergePatch("{}")));
      assertTrue(e instanceof PreconditionFailedException, e.getMessage());
      assertEquals("UNKNOWN_FIELD", e.reason());
      assertEquals(Reason.REASON_UNKNOWN_FIELD, e.writeFailureReason());
      assertFalse(e.isRetryable());
      assertEquals("0.2.0", e.errorMetadata().get("sidecar_version"));
    }
  }
}
