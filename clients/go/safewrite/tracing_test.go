package safewrite_test

// The sidecar continues the caller's trace: the client sends the OpenTelemetry context
// of ctx (W3C traceparent), and every result and error carries the trace's id.

import (
	"context"
	"errors"
	"regexp"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
)

var traceIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// startSpan starts a span of a tracer provider of the test's own (the global one is
// left alone, as is the global propagator: the client must propagate without either).
func startSpan(t *testing.T, ctx context.Context) (context.Context, trace.Span, *tracetest.SpanRecorder) {
	t.Helper()
	recorder := tracetest.NewSpanRecorder()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	ctx, span := provider.Tracer("safewrite-go-test").Start(ctx, "reconcile")
	if !span.SpanContext().IsValid() {
		t.Fatal("the test's span has no valid span context")
	}
	return ctx, span, recorder
}

// wantFreshTraceID checks that id is a trace id of the sidecar's own, not callers.
func wantFreshTraceID(t *testing.T, what, id, callers string) {
	t.Helper()
	if !traceIDPattern.MatchString(id) {
		t.Errorf("%s: TraceID %q is not 32 hex digits (is the sidecar's tracing off?)", what, id)
	}
	if id == callers {
		t.Errorf("%s: TraceID %q is the trace of a span that was not sent", what, id)
	}
}

func TestTraceIsContinued(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx, span, recorder := startSpan(t, testContext(t))
	traceID := span.SpanContext().TraceID().String()

	res, err := c.Update(ctx, ref, safewrite.CEL(increment))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUpdated || res.TraceID != traceID {
		t.Errorf("Update: outcome %v, TraceID %q, want Updated in the caller's trace %q", res.Outcome, res.TraceID, traceID)
	}

	res, err = c.Transact(ctx, ref, bump)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUpdated || res.TraceID != traceID {
		t.Errorf("Transact: outcome %v, TraceID %q, want Updated in the caller's trace %q", res.Outcome, res.TraceID, traceID)
	}

	widget := newWidget(t, c)
	res, err = c.PatchStatus(ctx, widget, safewrite.MergePatch(`{"status": {"count": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.TraceID != traceID {
		t.Errorf("PatchStatus: TraceID %q, want the caller's trace %q", res.TraceID, traceID)
	}
	res, err = c.TransactStatus(ctx, widget, func(obj *unstructured.Unstructured) error {
		return unstructured.SetNestedField(obj.Object, int64(2), "status", "count")
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.TraceID != traceID {
		t.Errorf("TransactStatus: TraceID %q, want the caller's trace %q", res.TraceID, traceID)
	}

	// A failure carries the trace id too (the WriteFailure detail).
	_, err = c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithPreconditionCEL(`object.data.n == "no"`))
	if !errors.Is(err, safewrite.ErrPreconditionFailed) {
		t.Fatalf("%v, want ErrPreconditionFailed", err)
	}
	if swErr := asError(t, err); swErr.TraceID != traceID {
		t.Errorf("a failed Update: TraceID %q, want the caller's trace %q", swErr.TraceID, traceID)
	}
	_, err = c.Transact(ctx, ref, bump, safewrite.WithResourceVersion("1"))
	if !errors.Is(err, safewrite.ErrConflict) {
		t.Fatalf("%v, want ErrConflict", err)
	}
	if swErr := asError(t, err); swErr.TraceID != traceID {
		t.Errorf("a failed Transact: TraceID %q, want the caller's trace %q", swErr.TraceID, traceID)
	}

	span.End()
	ended := recorder.Ended()
	if len(ended) != 1 || ended[0].SpanContext().TraceID().String() != traceID {
		t.Fatalf("the recorder holds %d ended span(s), want the test's one", len(ended))
	}
}

func TestTraceWithoutASpanIsTheSidecars(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	_, span, _ := startSpan(t, testContext(t))
	callers := span.SpanContext().TraceID().String()
	defer span.End()

	// The span exists but is not in the calls' context: each call is a trace of its own.
	plain := testContext(t)
	res, err := c.Update(plain, ref, safewrite.CEL(increment))
	if err != nil {
		t.Fatal(err)
	}
	wantFreshTraceID(t, "Update", res.TraceID, callers)
	first := res.TraceID
	res, err = c.Transact(plain, ref, bump)
	if err != nil {
		t.Fatal(err)
	}
	wantFreshTraceID(t, "Transact", res.TraceID, callers)
	if res.TraceID == first {
		t.Errorf("two calls without a span share the trace %q", first)
	}
}

func TestWithoutTracePropagation(t *testing.T) {
	c := dial(t, sidecarEnv(t, "SAFEWRITE_ADDRESS"), safewrite.WithoutTracePropagation())
	ref := newCounter(t, c)
	ctx, span, _ := startSpan(t, testContext(t))
	callers := span.SpanContext().TraceID().String()
	defer span.End()

	res, err := c.Update(ctx, ref, safewrite.CEL(increment))
	if err != nil {
		t.Fatal(err)
	}
	wantFreshTraceID(t, "Update", res.TraceID, callers)
	res, err = c.Transact(ctx, ref, bump)
	if err != nil {
		t.Fatal(err)
	}
	wantFreshTraceID(t, "Transact", res.TraceID, callers)
}
