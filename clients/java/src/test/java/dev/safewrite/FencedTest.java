package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.safewrite.v1.DeleteRequest;
import dev.safewrite.v1.LeadRequest;
import dev.safewrite.v1.PatchStatusRequest;
import dev.safewrite.v1.TransactRequest;
import dev.safewrite.v1.UpdateWithRetryRequest;
import dev.safewrite.v1.WriteOptions;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * What the client sends for leadership without a sidecar: the Lead request, and the fence a fenced
 * view puts on every write.
 */
class FencedTest {
  private static final ObjectRef REF = ObjectRef.of("v1", "ConfigMap", "default", "counter");
  private static final Mutation INCREMENT =
      Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}");
  private static final Fence FENCE = new Fence("default", "leader", 7);

  @Test
  void everyWriteOfAFencedViewCarriesItsFence() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient fenced = SafewriteClient.forChannel(channel).fenced(FENCE);
    assertEquals(FENCE, fenced.fence().orElseThrow());
    WriteOptions options = WriteOptions.newBuilder().setFence(FENCE.toProto()).build();

    assertThrows(UnavailableException.class, () -> fenced.update(REF, INCREMENT));
    assertThrows(UnavailableException.class, () -> fenced.patchStatus(REF, INCREMENT));
    assertThrows(UnavailableException.class, () -> fenced.delete(REF));
    assertThrows(
        UnavailableException.class,
        () -> fenced.update(REF, INCREMENT, WriteConfig.builder().fieldManager("m").build()));
    assertThrows(UnavailableException.class, () -> fenced.transact(REF, fresh -> null));

    UpdateWithRetryRequest write =
        UpdateWithRetryRequest.newBuilder()
            .setTarget(REF.toProto())
            .setMutation(INCREMENT.toProto())
            .setOptions(options)
            .build();
    assertEquals(write, channel.sent.get(0));
    assertEquals(
        PatchStatusRequest.newBuilder()
            .setTarget(REF.toProto())
            .setMutation(INCREMENT.toProto())
            .setOptions(options)
            .build(),
        channel.sent.get(1));
    assertEquals(
        DeleteRequest.newBuilder().setTarget(REF.toProto()).setFence(FENCE.toProto()).build(),
        channel.sent.get(2));
    assertEquals(
        UpdateWithRetryRequest.newBuilder()
            .setTarget(REF.toProto())
            .setMutation(INCREMENT.toProto())
            .setOptions(options.toBuilder().setFieldManager("m"))
            .build(),
        channel.sent.get(3),
        "the fence joins the config's options");
    if (channel.sent.size() > 4) { // the stream may end before its first message is sent
      assertEquals(options, ((TransactRequest) channel.sent.get(4)).getBegin().getOptions());
    }
  }

  @Test
  void theSameFenceIsAcceptedAnotherRefusedBeforeAnythingIsSent() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    SafewriteClient fenced = client.fenced(FENCE);

    assertThrows(
        UnavailableException.class,
        () -> fenced.update(REF, INCREMENT, WriteConfig.builder().fence(FENCE).build()));
    assertEquals(1, channel.sent.size());

    WriteConfig otherEpoch = WriteConfig.builder().fence("default", "leader", 6).build();
    IllegalArgumentException refused =
        assertThrows(
            IllegalArgumentException.class, () -> fenced.update(REF, INCREMENT, otherEpoch));
    assertTrue(refused.getMessage().contains("epoch 6"), refused.getMessage());
    assertThrows(
        IllegalArgumentException.class,
        () ->
            fenced.delete(
                REF, DeleteConfig.builder().fence(new Fence("default", "other", 7)).build()));
    assertEquals(1, channel.sent.size(), "nothing more was sent");

    assertTrue(client.fence().isEmpty(), "the client itself is not fenced");
    assertEquals(
        new Fence("default", "leader", 8),
        fenced.fenced(new Fence("default", "leader", 8)).fence().orElseThrow());
  }

  @Test
  void leadSendsTheConfigAndAFailureToOpenIsThrown() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    LeadConfig config =
        LeadConfig.builder("default", "leader")
            .identity("pod-0")
            .leaseDuration(Duration.ofSeconds(2))
            .renewDeadline(Duration.ofMillis(1500))
            .retryPeriod(Duration.ofMillis(200))
            .build();
    assertThrows(UnavailableException.class, () -> client.lead(config));
    assertEquals(
        List.of(
            LeadRequest.newBuilder()
                .setNamespace("default")
                .setName("leader")
                .setIdentity("pod-0")
                .setLeaseDuration(com.google.protobuf.Duration.newBuilder().setSeconds(2))
                .setRenewDeadline(
                    com.google.protobuf.Duration.newBuilder().setNanos(500_000_000).setSeconds(1))
                .setRetryPeriod(com.google.protobuf.Duration.newBuilder().setNanos(200_000_000))
                .build()),
        channel.sent);
    assertEquals("default", config.namespace());
    assertEquals("leader", config.name());
    assertThrows(NullPointerException.class, () -> LeadConfig.builder(null, "x"));
  }
}
