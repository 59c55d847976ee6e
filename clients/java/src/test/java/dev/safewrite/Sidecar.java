package dev.safewrite;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * The sidecars of tests/harness/with-sidecar.sh, read from its environment. A test that needs them
 * fails, not skips, when they are missing.
 */
final class Sidecar {
  /** A lock for tests that load the sidecar's rate limit, or are upset by such load. */
  static final String RATE_LIMIT = "sidecar-rate-limit";

  /** A lock for tests that use the peer sidecars: one of them pauses a peer for seconds. */
  static final String PEERS = "sidecar-peers";

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

  /** The two peer sidecars' addresses (SAFEWRITE_PEER_ADDRS), as two pods' sidecars. */
  static List<String> peerAddresses() {
    List<String> addresses = List.of(env("SAFEWRITE_PEER_ADDRS").split(","));
    assertEquals(2, addresses.size(), "SAFEWRITE_PEER_ADDRS: " + addresses);
    return addresses;
  }

  /** The process ids of the peer sidecars, in the order of {@link #peerAddresses()}. */
  static List<Long> peerPids() {
    List<Long> pids = Stream.of(env("SAFEWRITE_PEER_PIDS").split(",")).map(Long::valueOf).toList();
    assertEquals(2, pids.size(), "SAFEWRITE_PEER_PIDS: " + pids);
    return pids;
  }

  /** A client of the peer sidecar at {@code address}, its own connection. */
  static SafewriteClient peer(String address) {
    return SafewriteClient.builder()
        .address(address)
        .defaultTimeout(Duration.ofSeconds(30))
        .build();
  }

  /**
   * Sends {@code signal} ({@code STOP}, {@code CONT}) to a peer sidecar: a paused pod, and its
   * waking. A test that stops one continues it in a {@code finally}.
   */
  static void signal(long pid, String signal) throws Exception {
    Process kill = new ProcessBuilder("kill", "-" + signal, Long.toString(pid)).inheritIO().start();
    assertTrue(kill.waitFor(10, TimeUnit.SECONDS), "kill -" + signal + " " + pid + " hung");
    assertEquals(0, kill.exitValue(), "kill -" + signal + " " + pid);
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
                WriteConfig.builder().createIfMissing("{\"data\": " + dataJson + "}").build());
    assertEquals(Outcome.CREATED, result.outcome());
    return result;
  }

  /** The object as it is now: a no-op write answers it as read. */
  static ObjectNode read(ObjectRef ref) {
    Result result = client().update(ref, Mutation.mergePatch("{}"));
    assertEquals(Outcome.UNCHANGED, result.outcome());
    return result.object();
  }

  static String data(ObjectNode object, String key) {
    return object.withObjectProperty("data").get(key).asText();
  }

  /**
   * Deletes a ConfigMap through the API server itself (the sidecar deletes nothing), as the control
   * plane's admin: an object with finalizers stays, being deleted, until they are gone.
   */
  static void deleteConfigMap(ObjectRef ref) throws Exception {
    Map<String, String> controlPlane = new HashMap<>();
    for (String line : Files.readAllLines(Path.of(env("SAFEWRITE_CP_ENV")))) {
      int eq = line.indexOf('=');
      if (eq > 0) {
        controlPlane.put(line.substring(0, eq), line.substring(eq + 1));
      }
    }
    HttpClient http =
        HttpClient.newBuilder()
            .sslContext(trusting(Path.of(controlPlane.get("CA_FILE"))))
            .connectTimeout(Duration.ofSeconds(5))
            .build();
    URI uri =
        URI.create(
            controlPlane.get("SERVER")
                + "/api/v1/namespaces/"
                + ref.namespace()
                + "/configmaps/"
                + ref.name());
    HttpResponse<String> answer =
        http.send(
            HttpRequest.newBuilder(uri)
                .DELETE()
                .header("Authorization", "Bearer " + controlPlane.get("ADMIN_TOKEN"))
                .timeout(Duration.ofSeconds(10))
                .build(),
            HttpResponse.BodyHandlers.ofString());
    assertTrue(
        answer.statusCode() == 200 || answer.statusCode() == 202,
        "DELETE " + uri + ": " + answer.statusCode() + " " + answer.body());
  }

  /** TLS that trusts the certificate authority in {@code caFile} (PEM). */
  private static SSLContext trusting(Path caFile) throws Exception {
    KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
    trusted.load(null, null);
    try (InputStream pem = Files.newInputStream(caFile)) {
      trusted.setCertificateEntry(
          "ca", CertificateFactory.getInstance("X.509").generateCertificate(pem));
    }
    TrustManagerFactory trust =
        TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    trust.init(trusted);
    SSLContext tls = SSLContext.getInstance("TLS");
    tls.init(null, trust.getTrustManagers(), null);
    return tls;
  }
}
