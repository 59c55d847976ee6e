package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;

import com.google.gson.JsonObject;
import java.time.Duration;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The sidecars of tests/harness/with-sidecar.sh, read from its environment. A test that needs them
 * fails, not skips, when they are missing.
 */
final class Sidecar {
  /** A lock for tests that load the sidecar's rate limit, or are upset by such load. */
  static final String RATE_LIMIT = "sidecar-rate-limit";

  private static final AtomicInteger NAMES = new AtomicInteger();

  /** Tells this run's objects from those of earlier runs against the same API server. */
  static final String RUN = Long.toString(System.nanoTime() % 1_000_000_000L, 36);

  private static SafewriteClient client;

  private Sidecar() {}

  static String env(String name) {
    String value = System.getenv(name);
    if (value == null || value.isEmpty()) {
      throw new IllegalStateException(
          name
              + " is not set: run the tests through ../../tests/harness/with-sidecar.sh "
              + "(bash test.sh does)");
    }
    return value;
  }

  static String address() {
    return env("SAFEWRITE_ADDRESS");
  }

  static String namespace() {
    return env("SAFEWRITE_NAMESPACE");
  }

  /** One client for the whole run, shared by the tests (it is safe for concurrent use). */
  static synchronized SafewriteClient client() {
    if (client == null) {
      client =
          SafewriteClient.builder()
              .address(address())
              .defaultTimeout(Duration.ofSeconds(30))
              .build();
    }
    return client;
  }

  /** A name no other test of this run uses. */
  static String name(String prefix) {
    return prefix + "-java-" + RUN + "-" + NAMES.incrementAndGet();
  }

  static ObjectRef configMap(String prefix) {
    return ObjectRef.of("v1", "ConfigMap", namespace(), name(prefix));
  }

  static ObjectRef widget(String prefix) {
    return ObjectRef.of("test.safewrite.dev/v1", "Widget", namespace(), name(prefix));
  }

  /** Creates a ConfigMap with {@code data} (JSON of the data map) and returns it. */
  static Result create(ObjectRef ref, String dataJson) {
    Result result =
        client()
            .update(
                ref,
                Mutation.mergePatch("{}"),
                WriteOption.createIfMissing("{\"data\": " + dataJson + "}"));
    assertEquals(Outcome.CREATED, result.outcome());
    return result;
  }

  /** The object as it is now: a no-op write answers it as read. */
  static JsonObject read(ObjectRef ref) {
    Result result = client().update(ref, Mutation.mergePatch("{}"));
    assertEquals(Outcome.UNCHANGED, result.outcome());
    return result.object();
  }

  static String data(JsonObject object, String key) {
    return object.getAsJsonObject("data").get(key).getAsString();
  }
}
