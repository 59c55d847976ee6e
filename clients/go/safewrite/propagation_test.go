package safewrite

// Trace propagation as seen by a fake in-process WriterService that records the
// metadata of each call (the tests against the real sidecar are in tracing_test.go).

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// metadataWriter is a WriterService that records the incoming metadata of every call
// and answers with the trace id of its traceparent, as the sidecar does.
type metadataWriter struct {
	safewritev1.UnimplementedWriterServiceServer
	mu   sync.Mutex
	seen []metadata.MD
}

func (w *metadataWriter) record(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	w.mu.Lock()
	w.seen = append(w.seen, md)
	w.mu.Unlock()
	if parent := md.Get("traceparent"); len(parent) == 1 {
		if parts := strings.Split(parent[0], "-"); len(parts) == 4 {
			return parts[1]
		}
	}
	return ""
}

// last returns the metadata of the latest call.
func (w *metadataWriter) last(t *testing.T) metadata.MD {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 {
		t.Fatal("no call reached the fake sidecar")
	}
	return w.seen[len(w.seen)-1]
}

func (w *metadataWriter) UpdateWithRetry(ctx context.Context, _ *safewritev1.UpdateWithRetryRequest) (*safewritev1.UpdateWithRetryResponse, error) {
	return &safewritev1.UpdateWithRetryResponse{Result: &safewritev1.WriteResult{
		Outcome: safewritev1.Outcome_OUTCOME_UNCHANGED, ObjectJson: "{}", TraceId: w.record(ctx),
	}}, nil
}

func (w *metadataWriter) Transact(stream grpc.BidiStreamingServer[safewritev1.TransactRequest, safewritev1.TransactResponse]) error {
	traceID := w.record(stream.Context())
	if _, err := stream.Recv(); err != nil {
		return err
	}
	return stream.Send(&safewritev1.TransactResponse{Message: &safewritev1.TransactResponse_Result{Result: &safewritev1.WriteResult{
		Outcome: safewritev1.Outcome_OUTCOME_UNCHANGED, ObjectJson: "{}", TraceId: traceID,
	}}})
}

// metadataServer serves w in process and returns a dialer of it.
func metadataServer(t *testing.T, w *metadataWriter) grpc.DialOption {
	t.Helper()
	listener := bufconn.Listen(1 << 20)
	server := grpc.NewServer()
	safewritev1.RegisterWriterServiceServer(server, w)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return listener.DialContext(ctx)
	})
}

// setPropagator makes p the global propagator for the rest of the test.
func setPropagator(t *testing.T, p propagation.TextMapPropagator) {
	t.Helper()
	otel.SetTextMapPropagator(p)
	// The global one cannot be reset to its initial no-op; an empty composite is one.
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })
}

// spanContext returns ctx carrying a sampled remote span with a tracestate.
func spanContext(t *testing.T, ctx context.Context) (context.Context, trace.SpanContext) {
	t.Helper()
	traceID, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	spanID, err := trace.SpanIDFromHex("00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	state, err := trace.ParseTraceState("vendor=value")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true,
	})
	return trace.ContextWithSpanContext(ctx, sc), sc
}

// callBoth makes an Update and a Transact with ctx, checks that both answer with
// wantTraceID and returns the metadata each sent.
func callBoth(t *testing.T, c *Client, w *metadataWriter, ctx context.Context, wantTraceID string) (unary, stream metadata.MD) {
	t.Helper()
	ref := ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"}
	res, err := c.Update(ctx, ref, MergePatch(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.TraceID != wantTraceID {
		t.Errorf("Update: TraceID %q, want %q", res.TraceID, wantTraceID)
	}
	unary = w.last(t)
	res, err = c.Transact(ctx, ref, func(*unstructured.Unstructured) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if res.TraceID != wantTraceID {
		t.Errorf("Transact: TraceID %q, want %q", res.TraceID, wantTraceID)
	}
	return unary, w.last(t)
}

func TestTracePropagation(t *testing.T) {
	w := &metadataWriter{}
	dialer := metadataServer(t, w)
	dial := func(opts ...Option) *Client {
		c, err := NewClient("passthrough:///fake", append(opts, WithGRPCDialOptions(dialer))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	ctx, sc := spanContext(t, context.Background())
	wantParent := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"

	t.Run("no global propagator", func(t *testing.T) {
		unary, stream := callBoth(t, dial(), w, ctx, sc.TraceID().String())
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 1 || got[0] != wantParent {
				t.Errorf("%s: traceparent %q, want %q", kind, got, wantParent)
			}
			if got := md.Get("tracestate"); len(got) != 1 || got[0] != "vendor=value" {
				t.Errorf("%s: tracestate %q", kind, got)
			}
		}
	})

	t.Run("no span", func(t *testing.T) {
		unary, stream := callBoth(t, dial(), w, context.Background(), "")
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 0 {
				t.Errorf("%s: traceparent %q sent without a span", kind, got)
			}
		}
	})

	t.Run("WithoutTracePropagation", func(t *testing.T) {
		unary, stream := callBoth(t, dial(WithoutTracePropagation()), w, ctx, "")
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 0 {
				t.Errorf("%s: traceparent %q sent, although turned off", kind, got)
			}
		}
	})

	t.Run("global propagator without trace context", func(t *testing.T) {
		// The global propagator injects only baggage: traceparent is added all the same.
		setPropagator(t, propagation.Baggage{})
		member, err := baggage.NewMember("tenant", "a")
		if err != nil {
			t.Fatal(err)
		}
		bag, err := baggage.New(member)
		if err != nil {
			t.Fatal(err)
		}
		unary, stream := callBoth(t, dial(), w, baggage.ContextWithBaggage(ctx, bag), sc.TraceID().String())
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("baggage"); len(got) != 1 || got[0] != "tenant=a" {
				t.Errorf("%s: baggage %q", kind, got)
			}
			if got := md.Get("traceparent"); len(got) != 1 || got[0] != wantParent {
				t.Errorf("%s: traceparent %q, want %q", kind, got, wantParent)
			}
		}
	})

	t.Run("global propagator with trace context", func(t *testing.T) {
		setPropagator(t, propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
		unary, stream := callBoth(t, dial(), w, ctx, sc.TraceID().String())
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 1 || got[0] != wantParent {
				t.Errorf("%s: traceparent %q, want it once: %q", kind, got, wantParent)
			}
		}
	})

	t.Run("traceparent already in the metadata", func(t *testing.T) {
		mine := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		callCtx := metadata.AppendToOutgoingContext(ctx, "traceparent", mine, "x-other", "kept")
		unary, stream := callBoth(t, dial(), w, callCtx, "0af7651916cd43dd8448eb211c80319c")
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 1 || got[0] != mine {
				t.Errorf("%s: traceparent %q, want the caller's %q", kind, got, mine)
			}
			if got := md.Get("x-other"); len(got) != 1 {
				t.Errorf("%s: x-other %q", kind, got)
			}
		}
	})

	t.Run("other outgoing metadata is kept", func(t *testing.T) {
		callCtx := metadata.AppendToOutgoingContext(ctx, "x-other", "kept")
		unary, stream := callBoth(t, dial(), w, callCtx, sc.TraceID().String())
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("x-other"); len(got) != 1 || got[0] != "kept" {
				t.Errorf("%s: x-other %q", kind, got)
			}
		}
	})

	t.Run("the caller's interceptors see it", func(t *testing.T) {
		var seen []string
		var mu sync.Mutex
		look := func(ctx context.Context) {
			md, _ := metadata.FromOutgoingContext(ctx)
			mu.Lock()
			seen = append(seen, strings.Join(md.Get("traceparent"), ","))
			mu.Unlock()
		}
		c := dial(WithGRPCDialOptions(
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				look(ctx)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				look(ctx)
				return streamer(ctx, desc, cc, method, opts...)
			})))
		callBoth(t, c, w, ctx, sc.TraceID().String())
		if len(seen) != 2 || seen[0] != wantParent || seen[1] != wantParent {
			t.Errorf("the caller's interceptors saw traceparent %q, want %q twice", seen, wantParent)
		}
	})

	t.Run("NewClientFromConn", func(t *testing.T) {
		conn, err := grpc.NewClient("passthrough:///fake", dialer, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		unary, stream := callBoth(t, mustFromConn(t, conn), w, ctx, sc.TraceID().String())
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 1 || got[0] != wantParent {
				t.Errorf("%s: traceparent %q, want %q", kind, got, wantParent)
			}
		}
		unary, stream = callBoth(t, mustFromConn(t, conn, WithoutTracePropagation()), w, ctx, "")
		for kind, md := range map[string]metadata.MD{"unary": unary, "stream": stream} {
			if got := md.Get("traceparent"); len(got) != 0 {
				t.Errorf("%s: traceparent %q sent, although turned off", kind, got)
			}
		}
	})
}

// mustFromConn returns a client over conn, the caller's connection.
func mustFromConn(t *testing.T, conn grpc.ClientConnInterface, opts ...Option) *Client {
	t.Helper()
	c, err := NewClientFromConn(conn, opts...)
	if err != nil {
		t.Fatalf("NewClientFromConn: %v", err)
	}
	return c
}
