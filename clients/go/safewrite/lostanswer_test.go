package safewrite_test

// Writes whose answer is lost after the API server committed them, against the real
// sidecar at SAFEWRITE_LOSSY_ADDR: with-sidecar.sh puts a fault proxy between it and the
// API server that resets every write's stream once the API server has answered. Objects
// are created through the normal sidecar and read straight from the API server, and each
// call through the lossy one writes an object that sidecar has not touched before: its
// first write to an object reads it live, so the change it sends is valid and committed.

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// wantLostUnkeyed checks the error of a call without an idempotency key whose write's
// answer was lost: UNKNOWN, WRITE_OUTCOME_UNKNOWN, and not retryable.
func wantLostUnkeyed(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, safewrite.ErrOutcomeUnknown) {
		t.Fatalf("%s: error %v, want ErrOutcomeUnknown", what, err)
	}
	swErr := asError(t, err)
	if swErr.Code != codes.Unknown || swErr.Reason != "WRITE_OUTCOME_UNKNOWN" ||
		swErr.ReasonCode != safewritev1.Reason_REASON_WRITE_OUTCOME_UNKNOWN {
		t.Fatalf("%s: code %v, reason %q (%v)", what, swErr.Code, swErr.Reason, swErr.ReasonCode)
	}
	// The change may have been applied: the same call sent again could apply it twice.
	if swErr.Idempotent || swErr.Retryable() || safewrite.Retryable(err) {
		t.Fatalf("%s: Idempotent %v, Retryable %v; want both false", what, swErr.Idempotent, swErr.Retryable())
	}
	if !strings.Contains(swErr.Message, "idempotency") {
		t.Errorf("%s: the message does not say how to make it retryable: %q", what, swErr.Message)
	}
	if len(swErr.AttemptRecords) != 1 || swErr.AttemptRecords[0].HTTPStatus != 0 {
		t.Errorf("%s: attempt records %+v, want one without an answer", what, swErr.AttemptRecords)
	}
}

func TestLostAnswerWithoutKeyIsNotRetryable(t *testing.T) {
	lossy := dial(t, sidecarEnv(t, "SAFEWRITE_LOSSY_ADDR"))
	c := newClient(t)
	api := newAPIServer(t)
	ctx := testContext(t)

	ref := newCounter(t, c)
	_, err := lossy.Update(ctx, ref, safewrite.CEL(increment))
	wantLostUnkeyed(t, "Update", err)
	// The API server committed the increment; only its answer was lost.
	if n := api.dataN(t, ref); n != "1" {
		t.Fatalf("after the lost answer data.n = %s, want 1", n)
	}

	ref = newCounter(t, c)
	_, err = lossy.Transact(ctx, ref, bump)
	wantLostUnkeyed(t, "Transact", err)
	if n := api.dataN(t, ref); n != "1" {
		t.Fatalf("after the lost transaction's answer data.n = %s, want 1", n)
	}
}

func TestLostAnswerWithKeyIsFoundOnTheObject(t *testing.T) {
	lossy := dial(t, sidecarEnv(t, "SAFEWRITE_LOSSY_ADDR"))
	c := newClient(t)
	ref := newCounter(t, c)
	api := newAPIServer(t)
	ctx := testContext(t)

	// The sidecar retries the lost write itself: its next read finds the key on the
	// object, so the call succeeds as already applied, and the change was made once.
	key := "go-" + newName(t)
	res, err := lossy.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithIdempotencyKey(key))
	if err != nil {
		t.Fatalf("a keyed increment whose answer was lost: %v", err)
	}
	if res.Outcome != safewrite.OutcomeUpdated || !res.AlreadyApplied {
		t.Fatalf("outcome %v, already applied %v; want Updated, true", res.Outcome, res.AlreadyApplied)
	}
	wantData(t, res.Object, map[string]string{"n": "1"})
	if len(res.AttemptRecords) != 2 || res.AttemptRecords[0].HTTPStatus != 0 {
		t.Errorf("attempt records %+v, want the lost write, then the read that found the key", res.AttemptRecords)
	}
	if n := api.dataN(t, ref); n != "1" {
		t.Fatalf("data.n = %s, want 1", n)
	}
	// The same change with the same key through the normal sidecar: made once.
	again, err := c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithIdempotencyKey(key))
	if err != nil || !again.AlreadyApplied {
		t.Fatalf("the same key again: %+v, %v; want already applied", again, err)
	}

	calls := 0
	count := func(obj *unstructured.Unstructured) error { calls++; return bump(obj) }
	ref = newCounter(t, c)
	res, err = lossy.Transact(ctx, ref, count, safewrite.WithIdempotencyKey(key+"-t"))
	if err != nil || res.Outcome != safewrite.OutcomeUpdated || !res.AlreadyApplied {
		t.Fatalf("a keyed transaction whose answer was lost: %+v, %v", res, err)
	}
	if n := api.dataN(t, ref); calls != 1 || n != "1" {
		t.Fatalf("the function ran %d time(s) and data.n = %s; want 1 and 1", calls, n)
	}
}
