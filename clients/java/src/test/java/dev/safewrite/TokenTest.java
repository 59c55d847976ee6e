package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Status;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The token of a sidecar started with {@code --token-file}: what the client sends, and what that
 * sidecar answers.
 */
class TokenTest {
  private static final Duration TIMEOUT = Duration.ofSeconds(30);

  private static SafewriteClient tokenClient(String token) {
    SafewriteClient.Builder builder =
        SafewriteClient.builder()
            .address(Sidecar.env("SAFEWRITE_TOKEN_ADDR"))
            .defaultTimeout(TIMEOUT);
    return token == null ? builder.build() : builder.token(token).build();
  }

  private static Result create(SafewriteClient client, ObjectRef ref) {
    return client.update(
        ref, Mutation.mergePatch("{}"), WriteConfig.builder().createIfMissing("{}").build());
  }

  @Test
  void tokenIsSentStrippedOnEveryCall() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client =
        SafewriteClient.builder().channel(channel).token(" s3cret-token\n").build();
    ObjectRef ref = ObjectRef.of("v1", "ConfigMap", "default", "token");
    assertThrows(UnavailableException.class, () -> client.update(ref, Mutation.mergePatch("{}")));
    assertThrows(
        UnavailableException.class, () -> client.patchStatus(ref, Mutation.mergePatch("{}")));
    assertThrows(UnavailableException.class, () -> client.transact(ref, fresh -> null));
    assertThrows(UnavailableException.class, () -> client.get(ref));
    assertEquals(Collections.nCopies(4, "Bearer s3cret-token"), channel.values("authorization"));
  }

  @Test
  void withoutATokenNoAuthorizationIsSent() {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    assertThrows(
        UnavailableException.class,
        () ->
            client.update(
                ObjectRef.of("v1", "ConfigMap", "default", "token"), Mutation.mergePatch("{}")));
    assertEquals(Collections.singletonList(null), channel.values("authorization"));
  }

  @Test
  void tokenThatCannotBeSentIsRefused() {
    for (String token : List.of("", "  \t\n", "s3cret\ntoken", "s3cret\u00e9", "s3cret\u0000")) {
      IllegalArgumentException e =
          assertThrows(
              IllegalArgumentException.class, () -> SafewriteClient.builder().token(token));
      assertTrue(e.getMessage().startsWith("the sidecar's token "), e.getMessage());
      assertFalse(e.getMessage().contains("s3cret"), "the message quotes the token");
    }
    assertThrows(NullPointerException.class, () -> SafewriteClient.builder().token(null));
  }

  @Test
  void channelAndAddressTogetherAreRefused() {
    SafewriteClient.Builder builder =
        SafewriteClient.builder().address("127.0.0.1:1").channel(new RecordingChannel());
    assertThrows(IllegalStateException.class, builder::build);
  }

  @Test
  @Tag("sidecar")
  void callWithoutTokenIsTokenRequired() {
    try (SafewriteClient client = tokenClient(null)) {
      UnauthenticatedException e =
          assertThrows(
              UnauthenticatedException.class, () -> create(client, Sidecar.configMap("no-token")));
      assertEquals(Status.Code.UNAUTHENTICATED, e.code());
      assertEquals("TOKEN_REQUIRED", e.reason());
      assertFalse(e.isRetryable());
    }
  }

  @Test
  @Tag("sidecar")
  void callWithAnotherTokenIsTokenInvalid() {
    try (SafewriteClient client = tokenClient(Sidecar.env("SAFEWRITE_TOKEN") + "-not")) {
      UnauthenticatedException e =
          assertThrows(
              UnauthenticatedException.class,
              () -> create(client, Sidecar.configMap("wrong-token")));
      assertEquals("TOKEN_INVALID", e.reason());
      assertFalse(e.isRetryable());
    }
  }

  @Test
  @Tag("sidecar")
  void callWithTheTokenWrites() {
    // With surrounding whitespace, as a token read from a file often has.
    try (SafewriteClient client = tokenClient(Sidecar.env("SAFEWRITE_TOKEN") + "\n")) {
      ObjectRef ref = Sidecar.configMap("token");
      assertEquals(Outcome.CREATED, create(client, ref).outcome());
      Result result =
          client.transact(
              ref,
              fresh -> {
                fresh.object().set("data", Json.object("{\"by\": \"transact\"}"));
                return null;
              });
      assertEquals(Outcome.UPDATED, result.outcome());
    }
  }

  @Test
  @Tag("sidecar")
  void tokenGoesOverTheCallersChannel() throws Exception {
    ManagedChannel channel =
        Grpc.newChannelBuilder(
                Sidecar.env("SAFEWRITE_TOKEN_ADDR"), InsecureChannelCredentials.create())
            .build();
    try (SafewriteClient client =
        SafewriteClient.builder()
            .channel(channel)
            .token(Sidecar.env("SAFEWRITE_TOKEN"))
            .defaultTimeout(TIMEOUT)
            .build()) {
      assertEquals(Outcome.CREATED, create(client, Sidecar.configMap("token-channel")).outcome());
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }
}
