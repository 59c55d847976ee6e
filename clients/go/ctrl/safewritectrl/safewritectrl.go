// Package safewritectrl connects the safewrite Go client to controller-runtime: a typed
// safewrite client over a controller-runtime client's scheme, the reconcile result a
// safewrite error calls for, and a manager whose controllers run only while this
// process leads a Lease through the sidecar, their writes fenced ([ElectedManager]).
//
// It is a module of its own (safewrite.dev/clients/go/ctrl), so that programs that use
// safewrite without controller-runtime do not depend on it.
package safewritectrl

import (
	"errors"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Typed returns a typed safewrite client whose kinds come from the scheme of cl (the
// manager's client: mgr.GetClient()).
func Typed(c *safewrite.Client, cl client.Client) *safewrite.Typed {
	return c.Typed(cl.Scheme())
}

// Result is the reconcile result for err, the error of a safewrite call made by a
// reconciler (nil for success):
//
//   - nil: done, {} and nil;
//   - an error the sidecar asked to retry after a delay (throttling, an open circuit
//     breaker, load shedding): requeue after that delay, with no error;
//   - any other retryable error ([safewrite.Error.Retryable], as the proto advises:
//     conflicts that outlasted the retry policy, an outage, the sidecar's own
//     DEADLINE_EXCEEDED): returned, so the controller requeues with its rate limiter;
//   - a write that may have been applied, from a call without an idempotency key (its
//     outcome unknown, or its own deadline or cancellation cut it off): returned too.
//     The advice is to read the object before deciding again, and a requeued reconcile
//     does exactly that: it starts from the object as it now is;
//   - any other error (invalid, forbidden, a precondition false, a finalizer added to
//     an object being deleted, another owner already the object's controller): a
//     reconcile.TerminalError, logged and not requeued until the object changes again.
//
// Errors that are not from safewrite are returned as they are.
//
//	_, err := typed.TransactStatus(ctx, &widget, setStatus)
//	return safewritectrl.Result(client.IgnoreNotFound(err))
func Result(err error) (reconcile.Result, error) {
	if err == nil {
		return reconcile.Result{}, nil
	}
	var swErr *safewrite.Error
	if !errors.As(err, &swErr) {
		return reconcile.Result{}, err
	}
	if swErr.Advice() == safewritev1.Retry_RETRY_WITH_IDEMPOTENCY_KEY {
		return reconcile.Result{}, err
	}
	if !swErr.Retryable() {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if delay, ok := swErr.RetryDelay(); ok && delay > 0 {
		return reconcile.Result{RequeueAfter: delay}, nil
	}
	return reconcile.Result{}, err
}
