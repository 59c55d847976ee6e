package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import io.grpc.Grpc;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

@Tag("sidecar")
class UnixSocketTest {

  @Test
  void unixSocketUrlAndBarePathBothWork() {
    String socket = Sidecar.env("SAFEWRITE_UNIX_SOCKET");
    ObjectRef ref = Sidecar.configMap("uds");
    for (String address : new String[] {"unix://" + socket, socket}) {
      try (SafewriteClient client = SafewriteClient.connect(address)) {
        Result result =
            client.update(
                ref,
                Mutation.cel("{\"data\": {\"n\": string(int(object.data.n) + 1)}}"),
                WriteConfig.builder()
                    .createIfMissing("{\"data\": {\"n\": \"0\"}}")
                    .timeout(java.time.Duration.ofSeconds(20))
                    .build());
        assertEquals(address.equals(socket) ? "2" : "1", Sidecar.data(result.object(), "n"));
      }
    }
  }

  @Test
  void callersChannelIsUsedAndLeftOpen() throws Exception {
    ManagedChannel channel =
        Grpc.newChannelBuilder(Sidecar.address(), InsecureChannelCredentials.create()).build();
    try {
      try (SafewriteClient client = SafewriteClient.forChannel(channel)) {
        Result result =
            client.update(
                Sidecar.configMap("channel"),
                Mutation.mergePatch("{}"),
                WriteConfig.builder()
                    .createIfMissing("{}")
                    .timeout(java.time.Duration.ofSeconds(20))
                    .build());
        assertEquals(Outcome.CREATED, result.outcome());
      }
      assertFalse(channel.isShutdown(), "close() left the caller's channel open");
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
    }
  }

  @Test
  void addressDefaultsToTheEnvironment() {
    // The harness exports SAFEWRITE_ADDRESS; connect() reads it.
    try (SafewriteClient client = SafewriteClient.connect()) {
      ObjectRef ref = Sidecar.configMap("env");
      Result result =
          client.update(
              ref,
              Mutation.mergePatch("{}"),
              WriteConfig.builder()
                  .createIfMissing("{}")
                  .timeout(java.time.Duration.ofSeconds(20))
                  .build());
      assertEquals(Outcome.CREATED, result.outcome());
    }
  }
}
