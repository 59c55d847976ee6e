package safewrite_test

// One test per class of error, each provoked for real against the sidecar and the API
// server, checked with errors.Is / errors.As the way a controller would.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
)

func TestInvalidObjectHasFieldViolations(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	_, err := c.Update(testContext(t), ref, safewrite.MergePatch(`{"metadata": {"labels": {"app": "-bad-"}}}`))
	if !errors.Is(err, safewrite.ErrInvalid) {
		t.Fatalf("error %v, want ErrInvalid", err)
	}
	swErr := asError(t, err)
	if swErr.Code != codes.InvalidArgument || status.Code(err) != codes.InvalidArgument {
		t.Fatalf("code %v", swErr.Code)
	}
	if swErr.Reason != "Invalid" || swErr.Domain != safewrite.Domain || swErr.Metadata["http_status"] != "422" {
		t.Fatalf("reason %q, domain %q, metadata %v", swErr.Reason, swErr.Domain, swErr.Metadata)
	}
	if !hasViolation(swErr, "labels") {
		t.Fatalf("field violations %+v name no label", swErr.FieldViolations)
	}
	if delay, ok := swErr.RetryDelay(); ok {
		t.Fatalf("an invalid object has a retry delay %v", delay)
	}
	if swErr.Attempts != 1 || len(swErr.AttemptRecords) != 1 || swErr.AttemptRecords[0].HTTPStatus != 422 {
		t.Fatalf("attempts %d, records %+v", swErr.Attempts, swErr.AttemptRecords)
	}
	if !strings.Contains(err.Error(), "Invalid") {
		t.Fatalf("message %q", err.Error())
	}
	if labels := newAPIServer(t).configMap(t, ref).GetLabels(); len(labels) != 0 {
		t.Fatalf("an invalid write landed: labels %v", labels)
	}

	// The widgets CRD's schema refuses a spec that is not an object.
	widget := newWidget(t, c)
	_, err = c.Update(testContext(t), widget, safewrite.MergePatch(`{"spec": "large"}`))
	if swErr := asError(t, err); !errors.Is(err, safewrite.ErrInvalid) || swErr.Metadata["http_status"] != "422" || !hasViolation(swErr, "spec") {
		t.Fatalf("error %v (violations %+v), want a 422 naming spec", err, swErr.FieldViolations)
	}
}

func hasViolation(err *safewrite.Error, field string) bool {
	for _, v := range err.FieldViolations {
		if strings.Contains(v.Field, field) && v.Description != "" {
			return true
		}
	}
	return false
}

func TestInvalidRequestNamesTheField(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	_, err := c.Update(testContext(t), ref, safewrite.CEL("object.data.n +")) // does not compile
	swErr := asError(t, err)
	// INVALID_CEL is what the proto documents for a CEL that does not compile.
	celReason := swErr.Reason == "INVALID_CEL"
	if !errors.Is(err, safewrite.ErrInvalid) || !celReason || swErr.ReasonCode.String() != "REASON_"+swErr.Reason || !hasViolation(swErr, "cel") {
		t.Fatalf("error %v, reason %q, violations %+v", err, swErr.Reason, swErr.FieldViolations)
	}
	if swErr.Attempts != 0 {
		t.Fatalf("a request refused before sending made %d attempts", swErr.Attempts)
	}

	// Found on this side, before anything is sent: same class.
	if _, err := c.Update(testContext(t), ref, safewrite.Mutation{}); !errors.Is(err, safewrite.ErrInvalid) {
		t.Fatalf("the zero Mutation: %v, want ErrInvalid", err)
	}
	if _, err := c.Update(testContext(t), ref, safewrite.MergePatch("[1]")); !errors.Is(err, safewrite.ErrInvalid) {
		t.Fatalf("a merge patch that is an array: %v, want ErrInvalid", err)
	}
}

func TestPreconditionFailedCarriesTheCurrentObject(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)

	_, err := c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithPreconditionCEL(`object.data.n == "42"`))
	if !errors.Is(err, safewrite.ErrPreconditionFailed) {
		t.Fatalf("error %v, want ErrPreconditionFailed", err)
	}
	swErr := asError(t, err)
	if swErr.Code != codes.FailedPrecondition || swErr.Reason != "PRECONDITION_FAILED" {
		t.Fatalf("code %v, reason %q", swErr.Code, swErr.Reason)
	}
	if swErr.CurrentObject == nil || swErr.CurrentObject.GetName() != ref.Name {
		t.Fatalf("current object %v", swErr.CurrentObject)
	}
	wantData(t, swErr.CurrentObject, map[string]string{"n": "0"})

	// The uid of the current object satisfies a uid precondition; another uid does not.
	uid := swErr.CurrentObject.GetUID()
	res, err := c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithUID(uid))
	if err != nil {
		t.Fatal(err)
	}
	wantData(t, res.Object, map[string]string{"n": "1"})
	_, err = c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithUID("00000000-0000-0000-0000-000000000000"))
	if !errors.Is(err, safewrite.ErrPreconditionFailed) {
		t.Fatalf("error %v, want ErrPreconditionFailed", err)
	}

	// A failing JSON Patch test, and a false CEL precondition in a transaction, too.
	_, err = c.Update(ctx, ref, safewrite.JSONPatch(`[{"op": "test", "path": "/data/n", "value": "5"}]`))
	if !errors.Is(err, safewrite.ErrPreconditionFailed) || asError(t, err).CurrentObject == nil {
		t.Fatalf("error %v, want ErrPreconditionFailed with the current object", err)
	}
	_, err = c.Transact(ctx, ref, func(*unstructured.Unstructured) error { return nil },
		safewrite.WithPreconditions(safewrite.Preconditions{CEL: `object.data.n == "42"`}))
	if !errors.Is(err, safewrite.ErrPreconditionFailed) {
		t.Fatalf("error %v, want ErrPreconditionFailed", err)
	}
	wantData(t, asError(t, err).CurrentObject, map[string]string{"n": "1"})
	if n := newAPIServer(t).dataN(t, ref); n != "1" {
		t.Fatalf("data.n = %q after failed preconditions, want 1", n)
	}
}

func TestConflictWhenAttemptsRunOut(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)

	// Contention: each attempt's function writes the object itself, so its proposal is
	// always stale. Requeue makes one attempt; max_attempts=2 makes two.
	contend := func(obj *unstructured.Unstructured) error {
		if _, err := c.Update(ctx, ref, safewrite.CEL(increment)); err != nil {
			return err
		}
		return bump(obj)
	}
	for _, policy := range []safewrite.RetryPolicy{{Requeue: true}, {MaxAttempts: 2, InitialBackoff: time.Millisecond}} {
		before := newAPIServer(t).dataN(t, ref)
		_, err := c.Transact(ctx, ref, contend, safewrite.WithRetryPolicy(policy))
		if !errors.Is(err, safewrite.ErrConflict) {
			t.Fatalf("policy %+v: error %v, want ErrConflict", policy, err)
		}
		swErr := asError(t, err)
		want := 1
		if policy.MaxAttempts > 0 {
			want = policy.MaxAttempts
		}
		if swErr.Code != codes.Aborted || swErr.Reason != "Conflict" || swErr.Attempts != want {
			t.Fatalf("policy %+v: code %v, reason %q, %d attempt(s); want ABORTED, Conflict, %d", policy, swErr.Code, swErr.Reason, swErr.Attempts, want)
		}
		for _, r := range swErr.AttemptRecords {
			if r.HTTPStatus != 409 {
				t.Fatalf("policy %+v: attempt %+v, want HTTP 409", policy, r)
			}
		}
		// Only the function's own increments landed, one per attempt.
		if n, after := atoi(t, before)+want, newAPIServer(t).dataN(t, ref); after != strconv.Itoa(n) {
			t.Fatalf("policy %+v: data.n %s, want %d", policy, after, n)
		}
	}

	// A strict resourceVersion precondition that is stale: ABORTED at once.
	stale := readObject(t, c, ref).GetResourceVersion()
	if _, err := c.Update(ctx, ref, safewrite.CEL(increment)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithResourceVersion(stale))
	if swErr := asError(t, err); !errors.Is(err, safewrite.ErrConflict) || swErr.Reason != "RESOURCE_VERSION_MISMATCH" {
		t.Fatalf("error %v, want ErrConflict with reason RESOURCE_VERSION_MISMATCH", err)
	}
}

// readObject reads an object through the sidecar (an empty merge patch changes nothing
// and answers with the object as read).
func readObject(t *testing.T, c *safewrite.Client, ref safewrite.ObjectRef) *unstructured.Unstructured {
	t.Helper()
	res, err := c.Update(testContext(t), ref, safewrite.MergePatch("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUnchanged {
		t.Fatalf("reading %s: outcome %v", ref, res.Outcome)
	}
	return res.Object
}

func TestPermissionDenied(t *testing.T) {
	admin := newClient(t)
	restricted := dial(t, sidecarEnv(t, "SAFEWRITE_RESTRICTED_ADDR"))
	ctx := testContext(t)

	// It may read configmaps but not create one...
	_, err := restricted.Update(ctx, configMapRef(t), safewrite.MergePatch(`{"data": {"n": "1"}}`), safewrite.WithCreateIfMissing("{}"))
	if !errors.Is(err, safewrite.ErrPermissionDenied) {
		t.Fatalf("error %v, want ErrPermissionDenied", err)
	}
	swErr := asError(t, err)
	if swErr.Code != codes.PermissionDenied || swErr.Reason != "Forbidden" || swErr.Metadata["http_status"] != "403" {
		t.Fatalf("code %v, reason %q, metadata %v", swErr.Code, swErr.Reason, swErr.Metadata)
	}
	// ...nor change one.
	ref := newCounter(t, admin)
	_, err = restricted.Transact(ctx, ref, bump)
	if !errors.Is(err, safewrite.ErrPermissionDenied) {
		t.Fatalf("error %v, want ErrPermissionDenied", err)
	}
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("a forbidden write landed: data.n = %q", n)
	}
}

func TestNotFound(t *testing.T) {
	c := newClient(t)
	ref := configMapRef(t)
	ctx := testContext(t)

	_, err := c.Update(ctx, ref, safewrite.CEL(increment))
	if swErr := asError(t, err); !errors.Is(err, safewrite.ErrNotFound) || swErr.Code != codes.NotFound || swErr.Reason != "NotFound" {
		t.Fatalf("error %v, want ErrNotFound with reason NotFound", err)
	}
	// The advice names this client's option, not the proto's field.
	if msg := asError(t, err).Message; !strings.Contains(msg, "safewrite.WithCreateIfMissing") || strings.Contains(msg, "create_if_missing_json") {
		t.Fatalf("message %q, want it to name safewrite.WithCreateIfMissing", msg)
	}

	gadget := safewrite.ObjectRef{APIVersion: "test.safewrite.dev/v1", Kind: "Gadget", Namespace: ref.Namespace, Name: "x"}
	_, err = c.Update(ctx, gadget, safewrite.MergePatch("{}"))
	if swErr := asError(t, err); !errors.Is(err, safewrite.ErrNotFound) || swErr.Reason != "UNKNOWN_KIND" || swErr.Attempts != 0 {
		t.Fatalf("error %v, want ErrNotFound with reason UNKNOWN_KIND and no attempt", err)
	}

	_, err = c.Transact(ctx, ref, func(*unstructured.Unstructured) error {
		t.Error("the function ran for a missing object")
		return nil
	})
	if !errors.Is(err, safewrite.ErrNotFound) {
		t.Fatalf("error %v, want ErrNotFound", err)
	}
}

func TestDeadlineExceeded(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)

	// A deadline too short for the call. (The sidecar's rate limit is shared by all
	// callers: a call whose wait for it would pass its deadline gets RESOURCE_EXHAUSTED
	// instead; give it a moment to refill first.)
	time.Sleep(200 * time.Millisecond)
	ctx, cancel := context.WithTimeout(testContext(t), time.Microsecond)
	defer cancel()
	_, err := c.Update(ctx, ref, safewrite.CEL(increment))
	if !errors.Is(err, safewrite.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrDeadlineExceeded and context.DeadlineExceeded", err)
	}
	if errors.Is(err, safewrite.ErrUnavailable) || errors.Is(err, context.Canceled) {
		t.Fatalf("error %v matches another class too", err)
	}

	// A transaction whose function outlasts the deadline writes nothing.
	ctx, cancel = context.WithTimeout(testContext(t), 300*time.Millisecond)
	defer cancel()
	_, err = c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		time.Sleep(time.Second)
		return unstructured.SetNestedField(obj.Object, "5", "data", "n")
	})
	if !errors.Is(err, safewrite.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrDeadlineExceeded", err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("a transaction past its deadline wrote data.n = %q", n)
	}
}

// TestDeadlineReachesTheSidecar shows that the context's deadline is the sidecar's: with
// a backoff ceiling far beyond the deadline, the sidecar answers DEADLINE_EXCEEDED
// itself, with the attempts so far, long before the deadline passes here.
func TestDeadlineReachesTheSidecar(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	outer := testContext(t)
	ctx, cancel := context.WithTimeout(outer, 20*time.Second)
	defer cancel()
	began := time.Now()
	_, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		if _, err := c.Update(outer, ref, safewrite.CEL(increment)); err != nil { // a conflict
			return err
		}
		return bump(obj)
	}, safewrite.WithRetryPolicy(safewrite.RetryPolicy{MaxAttempts: 100, InitialBackoff: time.Hour, MaxBackoff: time.Hour}))
	elapsed := time.Since(began)
	if !errors.Is(err, safewrite.ErrDeadlineExceeded) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrDeadlineExceeded", err)
	}
	swErr := asError(t, err)
	if swErr.Reason != "DEADLINE_EXCEEDED" || swErr.Domain != safewrite.Domain || swErr.Attempts < 1 {
		t.Fatalf("reason %q, domain %q, %d attempt(s): want the sidecar's own answer with its attempts", swErr.Reason, swErr.Domain, swErr.Attempts)
	}
	// No write was in doubt (the last one was answered 409): the same call may be sent
	// again later, key or not.
	if !swErr.Retryable() {
		t.Fatalf("the sidecar's DEADLINE_EXCEEDED is not retryable: %v", err)
	}
	if elapsed > 19*time.Second {
		t.Fatalf("the answer took %v: the sidecar did not know the 20s deadline", elapsed)
	}
	if swErr.AttemptRecords[0].HTTPStatus != 409 {
		t.Fatalf("first attempt %+v, want a 409", swErr.AttemptRecords[0])
	}
}

func TestCanceled(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)

	// A context canceled before the call.
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	_, err := c.Update(ctx, ref, safewrite.CEL(increment))
	if !errors.Is(err, safewrite.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want ErrCanceled and context.Canceled", err)
	}

	// A context canceled while the transaction's function runs: nothing is written.
	ctx, cancel = context.WithCancel(testContext(t))
	defer cancel()
	_, err = c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		cancel()
		return unstructured.SetNestedField(obj.Object, "5", "data", "n")
	})
	if !errors.Is(err, safewrite.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want ErrCanceled and context.Canceled", err)
	}

	// Canceled from another goroutine while the function waits.
	ctx, cancel = context.WithCancel(testContext(t))
	defer cancel()
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	_, err = c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		<-ctx.Done()
		return unstructured.SetNestedField(obj.Object, "6", "data", "n")
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	time.Sleep(200 * time.Millisecond)
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("a canceled transaction wrote data.n = %q", n)
	}
}

// TestUnavailableWithRetryDelay runs a sidecar of its own whose API server does not
// answer (nothing listens at its address): the sidecar's retries run out and it answers
// UNAVAILABLE with a RetryInfo.
func TestUnavailableWithRetryDelay(t *testing.T) {
	port := closedPort(t)
	kubeconfig := writeKubeconfig(t, "https://127.0.0.1:"+port, "nobody")
	c := startSidecar(t, kubeconfig, "--max-attempts", "3", "--initial-backoff", "10ms")
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "x"}
	for _, call := range []func() error{
		func() error { _, err := c.Update(testContext(t), ref, safewrite.CEL(increment)); return err },
		func() error { _, err := c.Transact(testContext(t), ref, bump); return err },
	} {
		err := call()
		if !errors.Is(err, safewrite.ErrUnavailable) {
			t.Fatalf("error %v, want ErrUnavailable", err)
		}
		swErr := asError(t, err)
		delay, ok := swErr.RetryDelay()
		if !ok || delay <= 0 || swErr.Domain != safewrite.Domain {
			t.Fatalf("retry delay %v (given: %v), domain %q: want the sidecar's RetryInfo", delay, ok, swErr.Domain)
		}
		t.Logf("%v (retry after %v, %d attempt(s))", err, delay, swErr.Attempts)
	}
}

// TestUnavailableWhenNothingListens: the sidecar itself cannot be reached.
func TestUnavailableWhenNothingListens(t *testing.T) {
	c := dial(t, "127.0.0.1:"+closedPort(t))
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "x"}
	_, err := c.Update(testContext(t), ref, safewrite.CEL(increment))
	if !errors.Is(err, safewrite.ErrUnavailable) {
		t.Fatalf("error %v, want ErrUnavailable", err)
	}
	// Asked to wait for the sidecar, a call waits until its deadline instead.
	waiting := dial(t, "unix://"+filepath.Join(t.TempDir(), "absent.sock"), safewrite.WithWaitForReady())
	ctx, cancel := context.WithTimeout(testContext(t), 300*time.Millisecond)
	defer cancel()
	_, err = waiting.Update(ctx, ref, safewrite.CEL(increment))
	if !errors.Is(err, safewrite.ErrDeadlineExceeded) {
		t.Fatalf("error %v, want ErrDeadlineExceeded", err)
	}
}

// TestResourceExhausted runs a sidecar of its own that admits one RPC at a time: while a
// transaction holds it, another call is shed at once with a RetryInfo.
func TestResourceExhausted(t *testing.T) {
	admin := filepath.Join(filepath.Dir(sidecarEnv(t, "SAFEWRITE_CP_ENV")), "admin.kubeconfig")
	c := startSidecar(t, admin, "--max-in-flight", "1")
	ref := newCounter(t, newClient(t))
	ctx := testContext(t)

	var err error
	res, terr := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		_, err = c.Update(ctx, ref, safewrite.CEL(increment))
		return bump(obj)
	})
	if terr != nil || res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("the transaction: %v, %v", res, terr)
	}
	if !errors.Is(err, safewrite.ErrResourceExhausted) {
		t.Fatalf("error %v, want ErrResourceExhausted", err)
	}
	swErr := asError(t, err)
	if delay, ok := swErr.RetryDelay(); swErr.Reason != "OVERLOADED" || !ok || delay <= 0 {
		t.Fatalf("reason %q, retry delay %v (given: %v)", swErr.Reason, delay, ok)
	}
}

// TestUnauthenticated runs a sidecar of its own whose token the API server refuses.
func TestUnauthenticated(t *testing.T) {
	env := controlPlaneEnv(t)
	// The first request of a fresh sidecar is discovery: its 401 is classified like any
	// other answer, so the caller sees UNAUTHENTICATED, not an outage.
	c := startSidecar(t, writeKubeconfig(t, env["SERVER"], "not-a-token"), "--max-attempts", "2")
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: namespace(t), Name: "x"}
	_, err := c.Update(testContext(t), ref, safewrite.CEL(increment))
	if !errors.Is(err, safewrite.ErrUnauthenticated) {
		t.Fatalf("error %v, want ErrUnauthenticated", err)
	}
}

// TestInternalFromAFailingWebhook installs a validating admission webhook that cannot be
// reached (failurePolicy Fail) for configmaps with one label: the API server answers
// 500 InternalError, which the sidecar retries twice and then answers INTERNAL.
func TestInternalFromAFailingWebhook(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	api := newAPIServer(t)
	label := newName(t)
	name := "safewrite-go-" + label
	config := fmt.Sprintf(`{
	  "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
	  "metadata": {"name": %q},
	  "webhooks": [{
	    "name": "fail.safewrite.dev",
	    "clientConfig": {"url": "https://127.0.0.1:%s/validate"},
	    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}],
	    "objectSelector": {"matchLabels": {"safewrite-go-test": %q}},
	    "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 2
	  }]}`, name, closedPort(t), label)
	const path = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
	if code, body := api.do(t, http.MethodPost, path, []byte(config)); code != http.StatusCreated {
		t.Fatalf("creating the webhook: HTTP %d: %s", code, body)
	}
	t.Cleanup(func() { api.do(t, http.MethodDelete, path+"/"+name, nil) })

	patch := safewrite.MergePatch(map[string]any{"metadata": map[string]any{"labels": map[string]any{"safewrite-go-test": label}}})
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		// The API server takes a moment to start calling a new webhook.
		if _, err = c.Update(testContext(t), ref, patch, safewrite.WithDryRun()); err != nil {
			break
		}
	}
	if !errors.Is(err, safewrite.ErrInternal) {
		t.Fatalf("error %v, want ErrInternal", err)
	}
	swErr := asError(t, err)
	if swErr.Code != codes.Internal || swErr.Reason != "InternalError" || swErr.Metadata["http_status"] != "500" {
		t.Fatalf("code %v, reason %q, metadata %v", swErr.Code, swErr.Reason, swErr.Metadata)
	}
	if swErr.Attempts != 3 {
		t.Errorf("%d attempt(s), want 3 (an internal error is retried twice)", swErr.Attempts)
	}
	if labels := api.configMap(t, ref).GetLabels(); len(labels) != 0 {
		t.Fatalf("a refused write landed: labels %v", labels)
	}
}

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	return port
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
