package safewrite

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// traceparentKey is the W3C Trace Context header that the sidecar continues.
const traceparentKey = "traceparent"

// WithoutTracePropagation stops the client from sending the caller's OpenTelemetry
// context (W3C traceparent and tracestate, and whatever else the global propagator
// injects) with its calls. Each call then starts a trace of its own in the sidecar.
func WithoutTracePropagation() Option {
	return func(cfg *clientConfig) { cfg.noTracePropagation = true }
}

// injectTraceContext returns ctx with the OpenTelemetry context of ctx added to its
// outgoing gRPC metadata: what the global propagator ([otel.GetTextMapPropagator])
// injects and, when that has no traceparent (the global propagator is a no-op until the
// application sets one), the W3C Trace Context of [propagation.TraceContext]. So a
// caller with a valid span in ctx always sends traceparent, and a caller without one
// sends nothing. Outgoing metadata that already carries a traceparent (put there by
// the caller or by another interceptor) is left as it is.
func injectTraceContext(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	if len(md.Get(traceparentKey)) > 0 {
		return ctx
	}
	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if carrier.Get(traceparentKey) == "" {
		propagation.TraceContext{}.Inject(ctx, carrier)
	}
	if len(carrier) == 0 {
		return ctx
	}
	md = md.Copy() // the outgoing metadata of ctx must not be changed in place
	for key, value := range carrier {
		md.Set(key, value) // lowercases the key, as gRPC metadata requires
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// traceUnaryInterceptor propagates the caller's OpenTelemetry context on unary calls.
func traceUnaryInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(injectTraceContext(ctx), method, req, reply, cc, opts...)
}

// traceStreamInterceptor propagates the caller's OpenTelemetry context on streams (the
// Transact stream): the metadata goes with the stream's headers.
func traceStreamInterceptor(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(injectTraceContext(ctx), desc, cc, method, opts...)
}

// tracingConn applies the trace interceptors to calls over a connection that the
// client did not dial itself ([NewClientFromConn]), where it cannot install
// interceptors.
type tracingConn struct {
	grpc.ClientConnInterface
}

func (c tracingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return c.ClientConnInterface.Invoke(injectTraceContext(ctx), method, args, reply, opts...)
}

func (c tracingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return c.ClientConnInterface.NewStream(injectTraceContext(ctx), desc, method, opts...)
}
