/**
 * Trace propagation: when `@opentelemetry/api` (an optional peer dependency) is
 * installed and a span is active, the call's metadata carries the caller's context as
 * W3C `traceparent` (and `tracestate`), so the sidecar's span of the call becomes a child
 * of the caller's span. Without the package, or outside a span, nothing is sent.
 */
import type { Metadata } from "@grpc/grpc-js";

type OtelApi = typeof import("@opentelemetry/api");

/** The API, loaded once; undefined when the package is not installed. */
const otel: OtelApi | undefined = await import("@opentelemetry/api").then(
  (api) => api,
  () => undefined,
);

/** Whether `@opentelemetry/api` could be loaded. */
export const tracingAvailable: boolean = otel !== undefined;

/**
 * Adds the active OpenTelemetry context to `metadata`: whatever the global propagator
 * injects and, when it injects no `traceparent` (no propagator registered), the active
 * span's context in the W3C format. Keys already present are left as they are. Never
 * throws: a failing propagator is skipped.
 */
export function injectTraceContext(metadata: Metadata): void {
  if (otel === undefined) {
    return;
  }
  try {
    const active = otel.context.active();
    const carrier: Record<string, string> = {};
    try {
      otel.propagation.inject(active, carrier);
    } catch {
      // A propagator that throws: fall back to the span context below.
    }
    if (carrier["traceparent"] === undefined) {
      const span = otel.trace.getSpanContext(active);
      if (span !== undefined && otel.trace.isSpanContextValid(span)) {
        const flags = (span.traceFlags & 0xff).toString(16).padStart(2, "0");
        carrier["traceparent"] = `00-${span.traceId}-${span.spanId}-${flags}`;
        const state = span.traceState?.serialize();
        if (state) {
          carrier["tracestate"] = state;
        }
      }
    }
    for (const [key, value] of Object.entries(carrier)) {
      if (metadata.get(key).length === 0) {
        metadata.set(key, value);
      }
    }
  } catch {
    // Propagation never fails a call.
  }
}
