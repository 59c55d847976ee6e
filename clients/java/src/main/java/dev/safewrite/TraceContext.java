package dev.safewrite;

import io.grpc.Metadata;
import io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator;
import io.opentelemetry.context.Context;
import io.opentelemetry.context.propagation.TextMapSetter;

/**
 * Trace propagation: the OpenTelemetry context current on the thread that starts a call (for every
 * method of {@link SafewriteClient}, the calling thread) goes out as W3C {@code traceparent} and
 * {@code tracestate} metadata, so the sidecar's span of the call becomes a child of the caller's
 * span.
 *
 * <p>opentelemetry-api is an optional dependency. Only the nested class {@code W3c} names its
 * types, and it is loaded on the first {@link #inject}, which runs only when {@link #AVAILABLE}:
 * without the jar nothing is sent and nothing fails.
 */
final class TraceContext {
  /** Whether opentelemetry-api (and the opentelemetry-context it depends on) can be loaded. */
  static final boolean AVAILABLE = available();

  private TraceContext() {}

  /**
   * Adds the current span's context to {@code headers}; nothing when no valid span is current. Call
   * it only when {@link #AVAILABLE}.
   */
  static void inject(Metadata headers) {
    W3c.inject(headers);
  }

  private static boolean available() {
    ClassLoader loader = TraceContext.class.getClassLoader();
    try {
      Class.forName("io.opentelemetry.context.Context", false, loader);
      Class.forName(
          "io.opentelemetry.api.trace.propagation.W3CTraceContextPropagator", false, loader);
      return true;
    } catch (ClassNotFoundException | LinkageError absent) {
      return false;
    }
  }

  /**
   * The W3C propagator itself, not {@code GlobalOpenTelemetry.getPropagators()}: the sidecar reads
   * only {@code traceparent} and {@code tracestate}; the global propagators send nothing until an
   * SDK or agent registers some; and {@code GlobalOpenTelemetry.get()} called before the
   * application's {@code GlobalOpenTelemetry.set(..)} installs a no-op for good, making that {@code
   * set} throw.
   */
  private static final class W3c {
    private static final TextMapSetter<Metadata> SETTER =
        (headers, key, value) ->
            headers.put(Metadata.Key.of(key, Metadata.ASCII_STRING_MARSHALLER), value);

    static void inject(Metadata headers) {
      W3CTraceContextPropagator.getInstance().inject(Context.current(), headers, SETTER);
    }
  }
}
