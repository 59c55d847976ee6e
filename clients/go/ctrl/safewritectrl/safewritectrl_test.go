package safewritectrl_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"safewrite.dev/clients/go/ctrl/safewritectrl"
	"safewrite.dev/clients/go/safewrite"
)

// TestIgnoreNotFound: controller-runtime's helpers read safewrite's errors, made by
// the real sidecar, as they read the API server's.
func TestIgnoreNotFound(t *testing.T) {
	addr, ns := os.Getenv("SAFEWRITE_ADDRESS"), os.Getenv("SAFEWRITE_NAMESPACE")
	if addr == "" || ns == "" {
		if testing.Short() {
			t.Skip("-short skips the tests that need a sidecar")
		}
		t.Fatal("SAFEWRITE_ADDRESS or SAFEWRITE_NAMESPACE is unset: run this through clients/go/test.sh")
	}
	c, err := safewrite.NewClient(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	typed := safewritectrl.Typed(c, fake.NewClientBuilder().WithScheme(scheme).Build())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "go-ctrl-" + hex.EncodeToString(suffix[:])}}

	_, err = typed.Update(ctx, cm, safewrite.MergePatch(`{"data": {"a": "1"}}`))
	if !apierrors.IsNotFound(err) || client.IgnoreNotFound(err) != nil {
		t.Fatalf("a missing ConfigMap: %v; IgnoreNotFound gives %v", err, client.IgnoreNotFound(err))
	}
	if res, err := safewritectrl.Result(client.IgnoreNotFound(err)); err != nil || res != (reconcile.Result{}) {
		t.Fatalf("Result of an ignored NotFound: %v, %v", res, err)
	}
	// Created through the typed path from a typed object: no creationTimestamp: null.
	cm.Data = map[string]string{"n": "0"}
	res, err := typed.Update(ctx, cm, safewrite.MergePatchObject(&corev1.ConfigMap{Data: map[string]string{"a": "1"}}), safewrite.WithCreateIfMissingObject(cm))
	if err != nil || res.Outcome != safewrite.OutcomeCreated || cm.Data["a"] != "1" || cm.Data["n"] != "0" || cm.UID == "" {
		t.Fatalf("create-if-missing from a typed object: %v, %v, %+v", res, err, cm)
	}
	_, err = typed.Update(ctx, cm, safewrite.CEL(`{"data": {"n": "1"}}`), safewrite.WithResourceVersion("1"))
	if !apierrors.IsConflict(err) || client.IgnoreNotFound(err) == nil {
		t.Fatalf("a stale resourceVersion: %v", err)
	}
	if _, rerr := safewritectrl.Result(err); !errors.Is(rerr, reconcile.TerminalError(nil)) {
		t.Fatalf("Result of a resourceVersion mismatch: %v, want a terminal error", rerr)
	}
}

func TestResult(t *testing.T) {
	throttled, err := status.New(codes.Unavailable, "throttled").WithDetails(
		protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: "CIRCUIT_OPEN", Domain: safewrite.Domain}),
		protoadapt.MessageV1Of(&errdetails.RetryInfo{RetryDelay: durationpb.New(3 * time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := safewritectrl.Result(safewrite.FromError(throttled.Err())); err != nil || res.RequeueAfter != 3*time.Second {
		t.Errorf("a retry delay: %v, %v", res, err)
	}
	conflict := safewrite.FromError(status.Error(codes.Aborted, "conflict"))
	if res, err := safewritectrl.Result(conflict); err != conflict || res != (reconcile.Result{}) {
		t.Errorf("a conflict: %v, %v", res, err)
	}
	invalid := safewrite.FromError(status.Error(codes.InvalidArgument, "bad"))
	if _, err := safewritectrl.Result(invalid); !errors.Is(err, reconcile.TerminalError(nil)) || !errors.Is(err, safewrite.ErrInvalid) {
		t.Errorf("an invalid request: %v", err)
	}
	// An owner already controlled by another, or a finalizer for an object being
	// deleted: only a different request can succeed.
	for _, reason := range []string{"ALREADY_OWNED", "OBJECT_DELETING"} {
		refused, err := status.New(codes.FailedPrecondition, "refused").WithDetails(
			protoadapt.MessageV1Of(&errdetails.ErrorInfo{Reason: reason, Domain: safewrite.Domain}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := safewritectrl.Result(safewrite.FromError(refused.Err())); !errors.Is(err, reconcile.TerminalError(nil)) || !errors.Is(err, safewrite.ErrPreconditionFailed) {
			t.Errorf("%s: %v, want a terminal error", reason, err)
		}
	}
	// Cut off by its own deadline, a call may have left a write in flight: it is not
	// Retryable without a key, but a requeued reconcile reads the object again before
	// it decides, which is what the advice asks; so it requeues, never terminal.
	cutOff := safewrite.FromError(status.Error(codes.DeadlineExceeded, "context deadline exceeded"))
	if cutOff.(*safewrite.Error).Retryable() {
		t.Errorf("a deadline without a key is Retryable")
	}
	if res, err := safewritectrl.Result(cutOff); err != cutOff || res != (reconcile.Result{}) {
		t.Errorf("a deadline without a key: %v, %v; want the error, to requeue", res, err)
	}
	cutOff.(*safewrite.Error).Idempotent = true // as a call WithIdempotencyKey marks its error
	if res, err := safewritectrl.Result(cutOff); err != cutOff || res != (reconcile.Result{}) {
		t.Errorf("a deadline with a key: %v, %v", res, err)
	}
	other := errors.New("other")
	if _, err := safewritectrl.Result(other); err != other {
		t.Errorf("a foreign error: %v", err)
	}
	if res, err := safewritectrl.Result(nil); err != nil || res != (reconcile.Result{}) {
		t.Errorf("nil: %v, %v", res, err)
	}
}
