package safewrite

// Read your own writes: Get reads an object at least as new as a resourceVersion the
// caller names, typically the one its own write answered with.

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// GetOption sets an option of one [Client.Get] or [Typed.Get]: how new the answer must
// be ([AtLeast], [WithMinResourceVersion]).
type GetOption func(*getConfig)

type getConfig struct {
	minResourceVersion string
}

// AtLeast asks for the object at least as new as res, the result of a write of it
// (res.ResourceVersion): the write's own state or a newer one, never an older one, even
// where an informer's cache would still answer with the object from before the write.
// A nil res, or one without a resourceVersion (an [OutcomeGone] that wrote nothing),
// asks for nothing: a live read.
//
//	res, err := c.Update(ctx, ref, safewrite.MergePatch(`{"data": {"phase": "done"}}`))
//	...
//	got, err := c.Get(ctx, ref, safewrite.AtLeast(res))
func AtLeast(res *Result) GetOption {
	return func(cfg *getConfig) {
		cfg.minResourceVersion = ""
		if res != nil {
			cfg.minResourceVersion = res.ResourceVersion
		}
	}
}

// WithMinResourceVersion asks for the object at least as new as resourceVersion rv:
// [Result.ResourceVersion] of a write (as [AtLeast] does), or [GetResult.ResourceVersion]
// of an earlier read. Empty: a live read. Versions compare as Kubernetes defines them
// (KEP-5504): ASCII digits without a leading zero, the shorter older, equal lengths
// lexically; an rv that is not well formed ("0", leading zeros, other characters) is
// never compared and always read live. The sidecar refuses, with [ErrInvalid] naming
// the field "min_resource_version", an rv with a character outside [A-Za-z0-9._:-] or
// one past what the API server can represent (more than 2^64-1); and with
// [ErrUnavailable] (reason RESOURCE_VERSION_TOO_LARGE) one the API server has not
// reached (see [Client.Get]).
func WithMinResourceVersion(rv string) GetOption {
	return func(cfg *getConfig) { cfg.minResourceVersion = rv }
}

// GetResult is an object as [Client.Get] read it.
type GetResult struct {
	// Object is the object, with integral numbers as int64, as in [Result.Object].
	Object *unstructured.Unstructured
	// ResourceVersion is Object's metadata.resourceVersion.
	ResourceVersion string
	// Remembered is true when the sidecar answered from its remembered copy of the
	// object (as it last read or wrote it, at or past the minimum asked for) without a
	// request to the API server; false for a live read.
	Remembered bool
	// TraceID is the W3C trace id of the sidecar's span of the call, as
	// [Result.TraceID]; empty when the sidecar's tracing is off.
	TraceID string

	objectJSON string // Object as the sidecar sent it
}

// Get reads the object ref names (Get): read your own writes. With [AtLeast] (or
// [WithMinResourceVersion]) the answer is at least as new as that write, never older:
// from the sidecar's remembered copy when that copy is at or past it, with no request
// to the API server ([GetResult.Remembered]), else with one "not older than" read of
// the API server (a GET with resourceVersion set to the minimum, served from its watch
// cache). Without a minimum it is always a live read. A controller that just wrote
// through the sidecar reads the result back this way instead of through its
// informer's cache, which may not have seen the write yet.
//
// A minimum the API server has not reached within its wait (about 3 s) is refused,
// never answered: [ErrUnavailable] with [Error.ReasonCode]
// REASON_RESOURCE_VERSION_TOO_LARGE and [Error.RetryDelay] the server's retry delay
// ([Error.Retryable] is true); with a deadline shorter than that wait,
// [ErrDeadlineExceeded] at the deadline. The sidecar does not retry it.
//
// A failure is an [*Error] as for a write: [ErrNotFound] when the object does not
// exist, [ErrPermissionDenied] when the sidecar's policy does not allow reading it
// (Secrets, unless allowed: reason POLICY_DENIED), [ErrInvalid] for a malformed
// reference or minimum (see [WithMinResourceVersion]), [ErrUnavailable] and the others
// when the API server cannot answer. A read writes nothing, so [Error.Idempotent] is
// true: a Get cut off by its deadline may simply be sent again.
func (c *Client) Get(ctx context.Context, ref ObjectRef, opts ...GetOption) (*GetResult, error) {
	ctx, cancel := c.callContext(ctx)
	defer cancel()
	req := getRequest(ref, opts)
	if err := c.check(ctx, safewritev1.WriterService_Get_FullMethodName, req); err != nil {
		return nil, withTarget(err, ref)
	}
	resp, err := c.stub.Get(ctx, req, c.callOpts...)
	if err != nil {
		return nil, withTarget(readError(FromError(err)), ref)
	}
	return getResultFrom(resp)
}

// getRequest is the GetRequest of a Get of ref with opts.
func getRequest(ref ObjectRef, opts []GetOption) *safewritev1.GetRequest {
	cfg := &getConfig{}
	for _, opt := range opts {
		if opt != nil {
			opt(cfg)
		}
	}
	return &safewritev1.GetRequest{Target: ref.proto(), MinResourceVersion: cfg.minResourceVersion}
}

// readError returns err, the error of a read, with [Error.Idempotent] set: a read
// changes nothing, so no write can be in doubt and sending it again is always safe.
func readError(err error) error {
	var swErr *Error
	if errors.As(err, &swErr) {
		swErr.Idempotent = true
	}
	return err
}

func getResultFrom(resp *safewritev1.GetResponse) (*GetResult, error) {
	obj, err := decodeObject(resp.GetObjectJson())
	if err != nil {
		return nil, clientError(codes.Internal, "the sidecar's object is not a JSON object: %v", err)
	}
	return &GetResult{
		Object:          obj,
		ResourceVersion: resp.GetResourceVersion(),
		Remembered:      resp.GetRemembered(),
		TraceID:         resp.GetTraceId(),
		objectJSON:      resp.GetObjectJson(),
	}, nil
}

// Get is [Client.Get] of obj, named by its kind (from the scheme), namespace and name;
// on success obj becomes the object as read (decoded as [Typed.Update] decodes), on
// failure it is left as it was. After a typed write, pass its result:
//
//	res, err := typed.Update(ctx, widget, safewrite.MergeFrom(before, widget))
//	...
//	_, err = typed.Get(ctx, widget, safewrite.AtLeast(res))
func (t *Typed) Get(ctx context.Context, obj Object, opts ...GetOption) (*GetResult, error) {
	ref, err := t.RefOf(obj)
	if err != nil {
		return nil, err
	}
	got, err := t.client.Get(ctx, ref, opts...)
	if err != nil {
		return nil, err
	}
	if err := decodeInto(got.objectJSON, obj); err != nil {
		return got, withTarget(clientError(codes.Internal, "the object the sidecar returned does not decode into %T: %v", obj, err), ref)
	}
	return got, nil
}
