package safewrite

import (
	"context"
	"errors"
	"io"
	"strings"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// maxAbortReason bounds the abort reason sent to the sidecar.
const maxAbortReason = 1024

// TransactFunc is a transaction's mutation: it changes obj, the fresh object, in place
// (it may also replace obj.Object wholesale). It is called once per attempt, each time
// with the next fresh object after a conflict, so it must compute its change from obj
// alone and have no other side effects. While the object is being created (see
// [WithCreateIfMissing]) obj has no resourceVersion.
//
// Returning nil proposes obj; leaving it as it was writes nothing ([OutcomeUnchanged]).
// Returning [ErrAbort], or an error wrapping it, ends the transaction without writing
// ([OutcomeAborted], no error). Any other error also ends it without writing, and is
// returned by [Client.Transact] as it is.
type TransactFunc func(obj *unstructured.Unstructured) error

// Transact runs the sidecar's retry loop with fn as the mutation of the object's main
// resource (the Transact stream): the sidecar sends the fresh object, fn changes it, the
// sidecar writes it with the resourceVersion it read, and on a conflict fn runs again on
// the next fresh object. Options are as for [Client.Update].
//
// ctx bounds the whole transaction, fn's runs included: its deadline is the sidecar's
// deadline too, and a fence it carries ([ContextWithFence]) fences the writes unless
// [WithFence] names one. When ctx ends (even while fn runs: what fn returns then is not
// proposed), or fn panics, the stream is torn down and nothing more is written; the
// error then matches [ErrCanceled] and [context.Canceled], or [ErrDeadlineExceeded] and
// [context.DeadlineExceeded].
func (c *Client) Transact(ctx context.Context, ref ObjectRef, fn TransactFunc, opts ...WriteOption) (*Result, error) {
	return c.transact(ctx, ref, false, unstructuredProposer(fn), opts)
}

// TransactStatus is [Client.Transact] writing fn's changes to the status subresource:
// only its effect on status is written.
func (c *Client) TransactStatus(ctx context.Context, ref ObjectRef, fn TransactFunc, opts ...WriteOption) (*Result, error) {
	return c.transact(ctx, ref, true, unstructuredProposer(fn), opts)
}

// proposer answers one fresh object with a proposal. An error ends the transaction
// without writing: [ErrAbort] (or an error wrapping it) as an abort, any other error is
// returned as it is.
type proposer func(fresh *safewritev1.FreshObject) (*safewritev1.TransactRequest, error)

// transact runs a Transact stream about ref, answering each fresh object with propose.
func (c *Client) transact(ctx context.Context, ref ObjectRef, status bool, propose proposer, opts []WriteOption) (*Result, error) {
	res, err := c.transactStream(ctx, ref, status, propose, opts)
	if err != nil {
		var swErr *Error
		if errors.As(err, &swErr) { // not fn's own error, which is returned as it is
			withTarget(swErr, ref)
		}
	}
	return res, err
}

func (c *Client) transactStream(ctx context.Context, ref ObjectRef, status bool, propose proposer, opts []WriteOption) (*Result, error) {
	if propose == nil {
		return nil, clientError(codes.InvalidArgument, "no transaction function")
	}
	cfg, err := newWriteConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.propagation != PropagationDefault {
		return nil, clientError(codes.InvalidArgument, "WithPropagationPolicy is for Delete only")
	}
	cfg.fenceFromContext(ctx)
	ctx, cancel := c.callContext(ctx)
	defer cancel() // tears the stream down on every way out
	begin := &safewritev1.TransactRequest{Message: &safewritev1.TransactRequest_Begin{
		Begin: &safewritev1.TransactBegin{
			Target:        ref.proto(),
			Status:        status,
			Preconditions: cfg.preconditions,
			RetryPolicy:   cfg.retryPolicy,
			Options:       cfg.options,
		},
	}}
	if err := c.check(ctx, safewritev1.WriterService_Transact_FullMethodName, begin); err != nil {
		return nil, err
	}
	stream, err := c.stub.Transact(ctx, c.callOpts...)
	if err != nil {
		return nil, withKey(FromError(err), cfg)
	}
	// A Send that fails with io.EOF means the stream has ended: its status comes from
	// Recv below.
	if err := stream.Send(begin); err != nil && !errors.Is(err, io.EOF) {
		return nil, withKey(FromError(err), cfg)
	}

	var fnErr error  // fn's own error, returned once the sidecar confirms the abort
	var aborted bool // an abort was sent: no further proposal is made
	for {
		resp, err := stream.Recv()
		if err != nil {
			if fnErr != nil {
				return nil, fnErr
			}
			if errors.Is(err, io.EOF) {
				return nil, clientError(codes.Internal, "the Transact stream ended without a result")
			}
			return nil, withKey(FromError(err), cfg)
		}
		switch msg := resp.GetMessage().(type) {
		case *safewritev1.TransactResponse_Result:
			_ = stream.CloseSend()
			if fnErr != nil {
				return nil, fnErr
			}
			return resultFrom(msg.Result)
		case *safewritev1.TransactResponse_Fresh:
			if aborted {
				// Aborted, yet another object came: stop here; the teardown writes nothing.
				if fnErr != nil {
					return nil, fnErr
				}
				return nil, clientError(codes.Internal, "the sidecar sent an object after the transaction was aborted")
			}
			proposal, ferr := propose(msg.Fresh)
			if err := ctx.Err(); err != nil {
				// The context ended while fn ran: propose nothing. Returning cancels the
				// stream, and the sidecar writes nothing after that point.
				if ferr != nil && !errors.Is(ferr, ErrAbort) {
					return nil, ferr
				}
				return nil, withKey(FromError(err), cfg)
			}
			if ferr != nil {
				aborted = true
				if !errors.Is(ferr, ErrAbort) {
					fnErr = ferr
				}
				proposal = abortProposal(msg.Fresh.GetAttempt(), ferr)
			} else if err := c.check(ctx, safewritev1.WriterService_Transact_FullMethodName, proposal); err != nil {
				// A proposal the sidecar cannot read is not sent: returning cancels the
				// stream, and the sidecar writes nothing after that point.
				return nil, err
			}
			if err := stream.Send(proposal); err != nil && !errors.Is(err, io.EOF) {
				if fnErr != nil {
					return nil, fnErr
				}
				return nil, withKey(FromError(err), cfg)
			}
		default:
			return nil, clientError(codes.Internal, "the sidecar sent an empty Transact message")
		}
	}
}

// unstructuredProposer runs fn on each fresh object and proposes the object it leaves.
func unstructuredProposer(fn TransactFunc) proposer {
	if fn == nil {
		return nil
	}
	return func(fresh *safewritev1.FreshObject) (*safewritev1.TransactRequest, error) {
		obj, err := decodeObject(fresh.GetObjectJson())
		if err != nil {
			return nil, clientError(codes.Internal, "the sidecar's fresh object is not a JSON object: %v", err)
		}
		if err := fn(obj); err != nil {
			return nil, err
		}
		text, err := encodeObject(obj)
		if err != nil {
			return nil, clientError(codes.InvalidArgument, "the transaction's object cannot be encoded as JSON: %v", err)
		}
		return objectProposal(fresh, text), nil
	}
}

// objectProposal proposes the whole object text as the answer to fresh.
func objectProposal(fresh *safewritev1.FreshObject, text string) *safewritev1.TransactRequest {
	return &safewritev1.TransactRequest{Message: &safewritev1.TransactRequest_Proposal{
		Proposal: &safewritev1.TransactProposal{
			Attempt: fresh.GetAttempt(),
			Change:  &safewritev1.TransactProposal_ObjectJson{ObjectJson: text},
		},
	}}
}

// mutationProposal proposes a mutation of fresh as the answer to it.
func mutationProposal(fresh *safewritev1.FreshObject, m *safewritev1.Mutation) *safewritev1.TransactRequest {
	return &safewritev1.TransactRequest{Message: &safewritev1.TransactRequest_Proposal{
		Proposal: &safewritev1.TransactProposal{
			Attempt: fresh.GetAttempt(),
			Change:  &safewritev1.TransactProposal_Mutation{Mutation: m},
		},
	}}
}

func abortProposal(attempt uint32, cause error) *safewritev1.TransactRequest {
	reason := ""
	if cause != nil && cause != ErrAbort {
		reason = cause.Error()
	}
	if len(reason) > maxAbortReason {
		reason = reason[:maxAbortReason]
	}
	reason = strings.ToValidUTF8(reason, "?") // proto3 strings must be UTF-8
	return &safewritev1.TransactRequest{Message: &safewritev1.TransactRequest_Proposal{
		Proposal: &safewritev1.TransactProposal{
			Attempt: attempt,
			Change:  &safewritev1.TransactProposal_Abort{Abort: &safewritev1.TransactAbort{Reason: reason}},
		},
	}}
}
