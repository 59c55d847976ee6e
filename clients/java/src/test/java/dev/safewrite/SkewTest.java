package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.Any;
import com.google.rpc.ErrorInfo;
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
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.protobuf.StatusProto;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

/**
 * Version skew without a sidecar: what a request needs (read from the proto's since options), and
 * the client over a fake sidecar whose Capabilities answer is made up (one that lacks the fence,
 * one older than 0.2.0, one whose Capabilities fails): the call it cannot serve is refused before
 * anything is sent, as the sidecar's own UNKNOWN_FIELD refusal comes, and Capabilities is asked
 * once.
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
   * A fake sidecar: Capabilities answers {@code answer} (or fails with {@code failure}),
   * UpdateWithRetry and Delete answer GONE (or, for the name "refuse", the sidecar's own
   * UNKNOWN_FIELD refusal); every call is recorded by its method's name, and the others fail
   * UNIMPLEMENTED, as an unserved method does.
   */
  private static final class FakeSidecar extends Channel {
    volatile CapabilitiesResponse answer;
    volatile Status failure = Status.UNIMPLEMENTED;
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
              if (answer != null) {
                response = answer;
              } else {
                status = failure;
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

  @Test
  void aFailingCapabilitiesDoesNotBreakTheCallAndIsAskedAgain() {
    FakeSidecar sidecar = new FakeSidecar();
    sidecar.failure = Status.INTERNAL;
    try (SafewriteClient client = SafewriteClient.forChannel(sidecar)) {
      client.update(REF, Mutation.mergePatch("{}"), FENCED);
      sidecar.failure = Status.UNIMPLEMENTED;
      assertRefused(
          assertThrows(
              SafewriteException.class,
              () -> client.update(REF, Mutation.mergePatch("{}"), FENCED)),
          FENCE,
          "older than 0.2.0");
      assertEquals(List.of("Capabilities", "UpdateWithRetry", "Capabilities"), sidecar.calls);
      assertEquals(2, sidecar.count("Capabilities"));
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
