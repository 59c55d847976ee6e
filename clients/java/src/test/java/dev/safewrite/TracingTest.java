package dev.safewrite;

import static dev.safewrite.Sidecar.client;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.opentelemetry.api.trace.Span;
import io.opentelemetry.api.trace.SpanContext;
import io.opentelemetry.api.trace.TraceFlags;
import io.opentelemetry.api.trace.TraceState;
import io.opentelemetry.context.Context;
import java.io.File;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.Callable;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Trace propagation: the current OpenTelemetry span's context goes out as W3C traceparent, and the
 * sidecar's span joins its trace. A span context made with the API alone (no SDK) is enough.
 */
class TracingTest {
  private static final String TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
  private static final String SPAN_ID = "00f067aa0ba902b7";
  private static final SpanContext SPAN =
      SpanContext.create(
          TRACE_ID,
          SPAN_ID,
          TraceFlags.getSampled(),
          TraceState.builder().put("vendor", "value").build());

  private static final ObjectRef OFFLINE = ObjectRef.of("v1", "ConfigMap", "default", "traced");
  private static final Mutation PATCH = Mutation.mergePatch("{}");

  /** Runs {@code body} on this thread with {@link #SPAN} as the current span. */
  private static <T> T inSpan(Callable<T> body) throws Exception {
    return Context.current().with(Span.wrap(SPAN)).wrap(body).call();
  }

  private static Result touch(SafewriteClient client, String prefix) {
    return client.update(
        Sidecar.configMap(prefix), PATCH, WriteConfig.builder().createIfMissing("{}").build());
  }

  @Test
  void openTelemetryIsFoundOnTheClassPath() {
    assertTrue(TraceContext.AVAILABLE);
  }

  @Test
  void currentSpanGoesOutOnEveryCall() throws Exception {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client = SafewriteClient.forChannel(channel);
    inSpan(() -> assertThrows(UnavailableException.class, () -> client.update(OFFLINE, PATCH)));
    inSpan(
        () -> assertThrows(UnavailableException.class, () -> client.transact(OFFLINE, f -> null)));
    assertThrows(UnavailableException.class, () -> client.update(OFFLINE, PATCH));
    String traceparent = "00-" + TRACE_ID + "-" + SPAN_ID + "-01";
    assertEquals(Arrays.asList(traceparent, traceparent, null), channel.values("traceparent"));
    assertEquals(Arrays.asList("vendor=value", "vendor=value", null), channel.values("tracestate"));
  }

  @Test
  void propagationTurnedOffSendsNothing() throws Exception {
    RecordingChannel channel = new RecordingChannel();
    SafewriteClient client =
        SafewriteClient.builder().channel(channel).propagateTrace(false).build();
    inSpan(() -> assertThrows(UnavailableException.class, () -> client.update(OFFLINE, PATCH)));
    assertEquals(Collections.singletonList(null), channel.values("traceparent"));
    assertEquals(Collections.singletonList(null), channel.values("tracestate"));
  }

  @Test
  @Tag("sidecar")
  void sidecarSpanJoinsTheCurrentTrace() throws Exception {
    assertEquals(TRACE_ID, inSpan(() -> touch(client(), "traced")).traceId());
    Result transacted =
        inSpan(
            () ->
                client()
                    .transact(
                        Sidecar.configMap("traced-tx"),
                        fresh -> null,
                        WriteConfig.builder().createIfMissing("{}").build()));
    assertEquals(TRACE_ID, transacted.traceId());
  }

  @Test
  @Tag("sidecar")
  void errorCarriesTheCurrentTrace() throws Exception {
    NotFoundException e =
        inSpan(
            () ->
                assertThrows(
                    NotFoundException.class,
                    () -> client().update(Sidecar.configMap("traced-missing"), PATCH)));
    assertEquals(TRACE_ID, e.traceId());
  }

  @Test
  @Tag("sidecar")
  void outsideASpanOrWithPropagationOffTheSidecarStartsItsOwnTrace() throws Exception {
    String outside = touch(client(), "untraced").traceId();
    assertFalse(outside.isEmpty(), "the sidecar's tracing is off");
    assertNotEquals(TRACE_ID, outside);
    try (SafewriteClient off =
        SafewriteClient.builder().address(Sidecar.address()).propagateTrace(false).build()) {
      String untraced = inSpan(() -> touch(off, "propagation-off")).traceId();
      assertFalse(untraced.isEmpty(), "the sidecar's tracing is off");
      assertNotEquals(TRACE_ID, untraced);
    }
  }

  /**
   * Runs in a class loader that cannot load OpenTelemetry, as when the jar is absent; it names
   * nothing of TracingTest, whose fields need OpenTelemetry.
   */
  static final class WithoutOpenTelemetry implements Callable<String> {
    @Override
    public String call() {
      try (SafewriteClient client = SafewriteClient.connect()) {
        Result result =
            client.update(
                Sidecar.configMap("no-otel"),
                Mutation.mergePatch("{}"),
                WriteConfig.builder().createIfMissing("{}").build());
        return TraceContext.AVAILABLE + " " + result.outcome();
      }
    }
  }

  @Test
  @Tag("sidecar")
  void worksWithoutOpenTelemetryOnTheClassPath() throws Exception {
    List<URL> withoutOpenTelemetry = new ArrayList<>();
    String[] classPath = System.getProperty("java.class.path").split(File.pathSeparator);
    for (String entry : classPath) {
      if (!Path.of(entry).getFileName().toString().startsWith("opentelemetry-")) {
        withoutOpenTelemetry.add(Path.of(entry).toUri().toURL());
      }
    }
    assertTrue(withoutOpenTelemetry.size() < classPath.length, "no opentelemetry jar to leave out");
    // Left open: the shared gRPC event loop of that loader stops a moment after the client
    // closes and loads classes as it does.
    URLClassLoader loader =
        new URLClassLoader(
            withoutOpenTelemetry.toArray(URL[]::new), ClassLoader.getPlatformClassLoader());
    assertThrows(
        ClassNotFoundException.class,
        () -> Class.forName("io.opentelemetry.context.Context", false, loader));
    var constructor =
        loader.loadClass(WithoutOpenTelemetry.class.getName()).getDeclaredConstructor();
    constructor.setAccessible(true);
    @SuppressWarnings("unchecked")
    Callable<String> call = (Callable<String>) constructor.newInstance();
    // A span is current in this class loader; the client in the other one cannot see it.
    assertEquals("false CREATED", inSpan(call));
  }
}
