package safewrite_test

// Update, PatchStatus and Transact against the real sidecar and API server.

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
)

// bump increments data.n of a counter ConfigMap in place.
func bump(obj *unstructured.Unstructured) error {
	text, _, err := unstructured.NestedString(obj.Object, "data", "n")
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return fmt.Errorf("data.n: %w", err)
	}
	return unstructured.SetNestedField(obj.Object, strconv.Itoa(n+1), "data", "n")
}

func dataOf(t *testing.T, obj *unstructured.Unstructured) map[string]string {
	t.Helper()
	if obj == nil {
		t.Fatal("no object")
	}
	data, _, err := unstructured.NestedStringMap(obj.Object, "data")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func wantData(t *testing.T, obj *unstructured.Unstructured, want map[string]string) {
	t.Helper()
	if got := dataOf(t, obj); !reflect.DeepEqual(got, want) {
		t.Fatalf("data = %v, want %v", got, want)
	}
}

func TestUpdateWithCEL(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	res, err := c.Update(testContext(t), ref, safewrite.CEL(increment))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUpdated || !res.Outcome.Wrote() {
		t.Fatalf("outcome %v, want Updated", res.Outcome)
	}
	wantData(t, res.Object, map[string]string{"n": "1"})
	if res.Object.GetName() != ref.Name || res.Object.GetNamespace() != ref.Namespace {
		t.Fatalf("the result is %s/%s, want %s", res.Object.GetNamespace(), res.Object.GetName(), ref)
	}
	if res.ResourceVersion == "" || res.ResourceVersion != res.Object.GetResourceVersion() {
		t.Fatalf("resourceVersion %q, object's %q", res.ResourceVersion, res.Object.GetResourceVersion())
	}
	if res.Attempts < 1 || res.Attempts != len(res.AttemptRecords) || res.AttemptRecords[res.Attempts-1].Number != res.Attempts {
		t.Fatalf("attempts %d, records %+v", res.Attempts, res.AttemptRecords)
	}
	if last := res.AttemptRecords[res.Attempts-1]; last.HTTPStatus != 200 || last.ResourceVersionRead == "" {
		t.Fatalf("last attempt %+v, want HTTP 200 with the resourceVersion read", last)
	}
	if n := newAPIServer(t).dataN(t, ref); n != "1" {
		t.Fatalf("the API server has data.n = %q, want 1", n)
	}
}

func TestCreateIfMissingAppliesTheMutationOnce(t *testing.T) {
	c := newClient(t)
	ref := configMapRef(t)
	create := safewrite.WithCreateIfMissing(`{"data": {"n": "0"}}`)
	res, err := c.Update(testContext(t), ref, safewrite.CEL(increment), create)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeCreated {
		t.Fatalf("outcome %v, want Created", res.Outcome)
	}
	wantData(t, res.Object, map[string]string{"n": "1"})
	res, err = c.Update(testContext(t), ref, safewrite.CEL(increment), create)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("outcome %v, want Updated", res.Outcome)
	}
	wantData(t, res.Object, map[string]string{"n": "2"})
}

func TestMergePatchJSONPatchAndApply(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)

	merged, err := c.Update(ctx, ref, safewrite.MergePatch(map[string]any{"data": map[string]any{"colour": "blue"}}))
	if err != nil {
		t.Fatal(err)
	}
	wantData(t, merged.Object, map[string]string{"n": "0", "colour": "blue"})

	patched, err := c.Update(ctx, ref, safewrite.JSONPatch([]safewrite.JSONPatchOp{
		{Op: "test", Path: "/data/colour", Value: "blue"},
		{Op: "replace", Path: "/data/colour", Value: "green"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	wantData(t, patched.Object, map[string]string{"n": "0", "colour": "green"})

	config := &unstructured.Unstructured{}
	config.SetAPIVersion("v1")
	config.SetKind("ConfigMap")
	config.SetName(ref.Name)
	config.SetNamespace(ref.Namespace)
	if err := unstructured.SetNestedField(config.Object, "go", "data", "owner"); err != nil {
		t.Fatal(err)
	}
	applied, err := c.Update(ctx, ref, safewrite.Apply(config, true), safewrite.WithFieldManager("safewrite-go-test"))
	if err != nil {
		t.Fatal(err)
	}
	if applied.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("outcome %v, want Updated", applied.Outcome)
	}
	if owner := dataOf(t, applied.Object)["owner"]; owner != "go" {
		t.Fatalf("data.owner = %q", owner)
	}
	var managers []string
	for _, entry := range applied.Object.GetManagedFields() {
		managers = append(managers, entry.Manager)
	}
	if !contains(managers, "safewrite-go-test") {
		t.Fatalf("managers %v lack safewrite-go-test", managers)
	}
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}

func TestUnchangedWritesNothing(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)
	before, err := c.Update(ctx, ref, safewrite.MergePatch(`{"data": {"n": "0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if before.Outcome != safewrite.OutcomeUnchanged || before.Outcome.Wrote() {
		t.Fatalf("outcome %v, want Unchanged", before.Outcome)
	}
	wantData(t, before.Object, map[string]string{"n": "0"})
	if status := before.AttemptRecords[0].HTTPStatus; status != 0 {
		t.Fatalf("an unchanged write recorded HTTP %d; want 0 (nothing sent)", status)
	}

	same, err := c.Transact(ctx, ref, func(*unstructured.Unstructured) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if same.Outcome != safewrite.OutcomeUnchanged || same.ResourceVersion != before.ResourceVersion {
		t.Fatalf("outcome %v at %s, want Unchanged at %s", same.Outcome, same.ResourceVersion, before.ResourceVersion)
	}
}

func TestDryRunDoesNotPersist(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	res, err := c.Update(testContext(t), ref, safewrite.CEL(increment), safewrite.WithDryRun())
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUpdated {
		t.Fatalf("outcome %v, want Updated", res.Outcome)
	}
	wantData(t, res.Object, map[string]string{"n": "1"})
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("a dry run persisted data.n = %q", n)
	}
}

func TestPatchStatus(t *testing.T) {
	c := newClient(t)
	ref := newWidget(t, c)
	ctx := testContext(t)
	res, err := c.PatchStatus(ctx, ref, safewrite.CEL(`{"status": {"count": object.status.count + 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	if count, _, _ := unstructured.NestedInt64(res.Object.Object, "status", "count"); res.Outcome != safewrite.OutcomeUpdated || count != 1 {
		t.Fatalf("outcome %v, status.count %d; want Updated, 1", res.Outcome, count)
	}

	// PatchStatus never changes the spec, even when the mutation tries to...
	res, err = c.PatchStatus(ctx, ref, safewrite.MergePatch(`{"spec": {"size": 99}, "status": {"count": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	count, _, _ := unstructured.NestedInt64(res.Object.Object, "status", "count")
	size, _, _ := unstructured.NestedInt64(res.Object.Object, "spec", "size")
	if count != 2 || size != 1 {
		t.Fatalf("status.count %d, spec.size %d; want 2, 1", count, size)
	}
	// ...and Update never changes the status.
	if _, err := c.Update(ctx, ref, safewrite.MergePatch(`{"spec": {"size": 2}, "status": {"count": 50}}`)); err != nil {
		t.Fatal(err)
	}
	now, code := newAPIServer(t).get(t, "/apis/test.safewrite.dev/v1/namespaces/"+ref.Namespace+"/widgets/"+ref.Name)
	if code != 200 {
		t.Fatalf("GET widget: HTTP %d", code)
	}
	count, _, _ = unstructured.NestedInt64(now.Object, "status", "count")
	size, _, _ = unstructured.NestedInt64(now.Object, "spec", "size")
	if count != 2 || size != 2 {
		t.Fatalf("status.count %d, spec.size %d; want 2, 2", count, size)
	}
}

func TestTransactUpdate(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)
	calls := 0
	res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		calls++
		if obj.GetResourceVersion() == "" || obj.GetName() != ref.Name {
			return fmt.Errorf("fresh object without identity: %s", mustJSON(obj.Object))
		}
		return bump(obj)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeUpdated || calls != 1 || res.Attempts != 1 {
		t.Fatalf("outcome %v after %d call(s), %d attempt(s); want Updated, 1, 1", res.Outcome, calls, res.Attempts)
	}
	wantData(t, res.Object, map[string]string{"n": "1"})

	// The function may replace the content wholesale.
	res, err = c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		obj.Object["data"] = map[string]any{"n": "10", "by": "transact"}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantData(t, res.Object, map[string]string{"n": "10", "by": "transact"})
}

func TestTransactStatus(t *testing.T) {
	c := newClient(t)
	ref := newWidget(t, c)
	res, err := c.TransactStatus(testContext(t), ref, func(obj *unstructured.Unstructured) error {
		count, _, err := unstructured.NestedInt64(obj.Object, "status", "count")
		if err != nil {
			return err
		}
		obj.Object["spec"] = map[string]any{"size": int64(42)} // not written: status only
		return unstructured.SetNestedField(obj.Object, count+5, "status", "count")
	})
	if err != nil {
		t.Fatal(err)
	}
	count, _, _ := unstructured.NestedInt64(res.Object.Object, "status", "count")
	size, _, _ := unstructured.NestedInt64(res.Object.Object, "spec", "size")
	if res.Outcome != safewrite.OutcomeUpdated || count != 5 || size != 1 {
		t.Fatalf("outcome %v, status.count %d, spec.size %d; want Updated, 5, 1", res.Outcome, count, size)
	}
}

func TestTransactCreateIfMissing(t *testing.T) {
	c := newClient(t)
	ref := configMapRef(t)
	res, err := c.Transact(testContext(t), ref, func(obj *unstructured.Unstructured) error {
		if rv := obj.GetResourceVersion(); rv != "" {
			return fmt.Errorf("an object being created has resourceVersion %q", rv)
		}
		return unstructured.SetNestedField(obj.Object, "7", "data", "n")
	}, safewrite.WithCreateIfMissing(map[string]any{"data": map[string]any{"n": "0"}}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeCreated {
		t.Fatalf("outcome %v, want Created", res.Outcome)
	}
	wantData(t, res.Object, map[string]string{"n": "7"})
}

func TestTransactAbort(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	res, err := c.Transact(testContext(t), ref, func(obj *unstructured.Unstructured) error {
		_ = unstructured.SetNestedField(obj.Object, "999", "data", "n")
		return fmt.Errorf("not today: %w", safewrite.ErrAbort)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != safewrite.OutcomeAborted || res.Outcome.Wrote() {
		t.Fatalf("outcome %v, want Aborted", res.Outcome)
	}
	wantData(t, res.Object, map[string]string{"n": "0"})
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("an aborted transaction wrote data.n = %q", n)
	}
}

func TestTransactErrorAbortsAndIsReturned(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	boom := errors.New("boom")
	_, err := c.Transact(testContext(t), ref, func(obj *unstructured.Unstructured) error {
		_ = unstructured.SetNestedField(obj.Object, "999", "data", "n")
		return boom
	})
	if err != boom {
		t.Fatalf("Transact returned %v, want the function's own error", err)
	}

	// An object that cannot be encoded is refused on this side: nothing is proposed.
	_, err = c.Transact(testContext(t), ref, func(obj *unstructured.Unstructured) error {
		obj.Object = nil
		return nil
	})
	if !errors.Is(err, safewrite.ErrInvalid) {
		t.Fatalf("Transact returned %v, want ErrInvalid", err)
	}
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("a failed transaction wrote data.n = %q", n)
	}

	// A panic in the function tears the stream down and propagates.
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the function's panic did not propagate")
			}
		}()
		_, _ = c.Transact(testContext(t), ref, func(obj *unstructured.Unstructured) error {
			_ = unstructured.SetNestedField(obj.Object, "999", "data", "n")
			panic("no")
		})
	}()
	time.Sleep(200 * time.Millisecond) // what a broken caller leaves behind would land by now
	if n := newAPIServer(t).dataN(t, ref); n != "0" {
		t.Fatalf("a panicking transaction wrote data.n = %q", n)
	}
}

// TestTransactRetriesOnConflict makes the first attempt conflict (the function writes
// the object itself) and checks the function runs again on the fresh object.
func TestTransactRetriesOnConflict(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)
	var seen []string
	res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		n, _, _ := unstructured.NestedString(obj.Object, "data", "n")
		seen = append(seen, n)
		if len(seen) == 1 {
			if _, err := c.Update(ctx, ref, safewrite.CEL(increment)); err != nil {
				return err
			}
		}
		return bump(obj)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, []string{"0", "1"}) {
		t.Fatalf("the function saw data.n %v, want [0 1]", seen)
	}
	if res.Attempts != 2 || res.AttemptRecords[0].HTTPStatus != 409 || res.AttemptRecords[0].Reason != "Conflict" {
		t.Fatalf("attempts %d %+v; want 2, the first a 409 Conflict", res.Attempts, res.AttemptRecords)
	}
	wantData(t, res.Object, map[string]string{"n": "2"})
}

// TestLostUpdateGoroutines: 8 goroutines x 25 read-dependent increments through
// Transact on one object: none is lost.
func TestLostUpdateGoroutines(t *testing.T) {
	const goroutines, perGoroutine = 8, 25
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)

	var (
		mu       sync.Mutex
		attempts int
		calls    int
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	errs := make(chan error, goroutines)
	began := time.Now()
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < perGoroutine; i++ {
				res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
					mu.Lock()
					calls++
					mu.Unlock()
					return bump(obj)
				}, safewrite.WithRetryPolicy(safewrite.RetryPolicy{MaxAttempts: 200}))
				if err != nil {
					errs <- err
					return
				}
				if res.Outcome != safewrite.OutcomeUpdated {
					errs <- fmt.Errorf("outcome %v, want Updated", res.Outcome)
					return
				}
				mu.Lock()
				attempts += res.Attempts
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	want := strconv.Itoa(goroutines * perGoroutine)
	if n := newAPIServer(t).dataN(t, ref); n != want {
		t.Fatalf("data.n = %s after %d increments: updates were lost", n, goroutines*perGoroutine)
	}
	if calls != attempts {
		t.Errorf("the functions ran %d times for %d attempts", calls, attempts)
	}
	t.Logf("lost-update (goroutines): %d writes took %d attempts in %v",
		goroutines*perGoroutine, attempts, time.Since(began).Round(time.Millisecond))
}

func TestUnixSocket(t *testing.T) {
	path := sidecarEnv(t, "SAFEWRITE_UNIX_SOCKET")
	ref := newCounter(t, newClient(t))
	// "unix:///abs/path" and a bare absolute path both dial the socket.
	for i, target := range []string{"unix://" + path, path} {
		c := dial(t, target, safewrite.WithWaitForReady())
		res, err := c.Update(testContext(t), ref, safewrite.CEL(increment))
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		wantData(t, res.Object, map[string]string{"n": strconv.Itoa(2*i + 1)})
		res, err = c.Transact(testContext(t), ref, bump)
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		wantData(t, res.Object, map[string]string{"n": strconv.Itoa(2*i + 2)})
	}
}

// TestIdempotencyKey: a call sent again with the same key does not change the object
// twice; it answers AlreadyApplied.
func TestIdempotencyKey(t *testing.T) {
	c := newClient(t)
	ref := newCounter(t, c)
	ctx := testContext(t)
	api := newAPIServer(t)
	key := "go-" + newName(t)

	for i, wantApplied := range []bool{false, true} {
		res, err := c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithIdempotencyKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != safewrite.OutcomeUpdated || res.AlreadyApplied != wantApplied {
			t.Fatalf("call %d: outcome %v, already applied %v; want Updated, %v", i+1, res.Outcome, res.AlreadyApplied, wantApplied)
		}
		if n := api.dataN(t, ref); n != "1" {
			t.Fatalf("call %d: data.n = %s, want 1", i+1, n)
		}
	}

	// In a transaction, the function does not even run once the key is recorded.
	calls := 0
	count := func(obj *unstructured.Unstructured) error { calls++; return bump(obj) }
	for i := 0; i < 2; i++ {
		res, err := c.Transact(ctx, ref, count, safewrite.WithIdempotencyKey(key+"-t"))
		if err != nil {
			t.Fatal(err)
		}
		if res.AlreadyApplied != (i == 1) {
			t.Fatalf("transaction %d: already applied %v", i+1, res.AlreadyApplied)
		}
	}
	if n := api.dataN(t, ref); calls != 1 || n != "2" {
		t.Fatalf("the function ran %d time(s) and data.n = %s; want 1 and 2", calls, n)
	}

	_, err := c.Update(ctx, ref, safewrite.CEL(increment), safewrite.WithIdempotencyKey("not a key!"))
	if swErr := asError(t, err); !errors.Is(err, safewrite.ErrInvalid) || !hasViolation(swErr, "idempotency_key") {
		t.Fatalf("a malformed key: %v", err)
	}
}
