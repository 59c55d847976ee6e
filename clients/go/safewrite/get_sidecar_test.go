package safewrite_test

// Read your own writes against the real sidecar and API server: Get after a write
// answers that write from the sidecar's remembered copy, Get without a minimum reads
// live, a typed Get decodes into the caller's object, and refusals read as a write's.

import (
	"errors"
	"net/http"
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// atLeast fails the test unless resourceVersion got is a number at or past want's.
func atLeast(t *testing.T, got, want string) {
	t.Helper()
	g, errG := strconv.ParseUint(got, 10, 64)
	w, errW := strconv.ParseUint(want, 10, 64)
	if errG != nil || errW != nil || g < w {
		t.Fatalf("resourceVersion %q, want at least %q", got, want)
	}
}

func TestGetAfterAWriteReadsThatWrite(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)
	ref := newCounter(t, c)
	res, err := c.Update(ctx, ref, safewrite.CEL(increment))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, ref, safewrite.AtLeast(res))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Remembered || got.ResourceVersion != res.ResourceVersion || got.Object.GetResourceVersion() != res.ResourceVersion {
		t.Fatalf("Get(AtLeast) = remembered %v at %s (object at %s), want the remembered copy at %s",
			got.Remembered, got.ResourceVersion, got.Object.GetResourceVersion(), res.ResourceVersion)
	}
	wantData(t, got.Object, map[string]string{"n": "1"})
	if len(got.TraceID) != 32 {
		t.Errorf("TraceID %q, want 32 hex digits", got.TraceID)
	}

	// Another writer changes it behind the sidecar's back: the minimum is still met,
	// by whichever copy; without a minimum the read is live and sees the change.
	api := newAPIServer(t)
	stored := api.configMap(t, ref)
	if err := unstructured.SetNestedField(stored.Object, "10", "data", "n"); err != nil {
		t.Fatal(err)
	}
	path := "/api/v1/namespaces/" + ref.Namespace + "/configmaps/" + ref.Name
	if code, body := api.do(t, http.MethodPut, path, []byte(mustJSON(stored.Object))); code != http.StatusOK {
		t.Fatalf("PUT %s: HTTP %d: %s", path, code, body)
	}
	got, err = c.Get(ctx, ref, safewrite.AtLeast(res))
	if err != nil {
		t.Fatal(err)
	}
	atLeast(t, got.ResourceVersion, res.ResourceVersion)
	live, err := c.Get(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if live.Remembered {
		t.Error("Get without a minimum answered from the remembered copy, want a live read")
	}
	wantData(t, live.Object, map[string]string{"n": "10"})
	atLeast(t, live.ResourceVersion, res.ResourceVersion)

	// A read's resourceVersion is a minimum too.
	again, err := c.Get(ctx, ref, safewrite.WithMinResourceVersion(live.ResourceVersion))
	if err != nil {
		t.Fatal(err)
	}
	wantData(t, again.Object, map[string]string{"n": "10"})

	// A minimum that is not a decimal number cannot be compared: a live read.
	opaque, err := c.Get(ctx, ref, safewrite.WithMinResourceVersion("v2.a"))
	if err != nil || opaque.Remembered {
		t.Fatalf("Get with minimum \"v2.a\": %v, %+v; want a live read", err, opaque)
	}
}

func TestTypedGetDecodesIntoTheObject(t *testing.T) {
	c := newClient(t)
	typed := c.Typed(widgetScheme(t))
	ctx := testContext(t)
	w := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: namespace(t), Name: newName(t)}}
	w.Spec.Size = 3
	res, err := typed.Update(ctx, w, safewrite.MergePatch(`{"spec": {"size": 4}}`), safewrite.WithCreateIfMissingObject(w))
	if err != nil {
		t.Fatal(err)
	}
	read := &widget{ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name}}
	got, err := typed.Get(ctx, read, safewrite.AtLeast(res))
	if err != nil {
		t.Fatal(err)
	}
	if read.Spec.Size != 4 || read.ResourceVersion != res.ResourceVersion || read.UID != w.UID || !got.Remembered {
		t.Fatalf("typed Get: %+v (remembered %v), want size 4 at %s", read, got.Remembered, res.ResourceVersion)
	}
}

func TestGetRefusals(t *testing.T) {
	c := newClient(t)
	ctx := testContext(t)

	missing := configMapRef(t)
	_, err := c.Get(ctx, missing)
	swErr := asError(t, err)
	if !errors.Is(err, safewrite.ErrNotFound) || !apierrors.IsNotFound(err) || swErr.Target != missing || swErr.Retryable() {
		t.Errorf("a missing object: %v (target %v, retryable %v), want ErrNotFound, not retryable", err, swErr.Target, swErr.Retryable())
	}

	secret := safewrite.ObjectRef{APIVersion: "v1", Kind: "Secret", Namespace: namespace(t), Name: newName(t)}
	_, err = c.Get(ctx, secret)
	if swErr := asError(t, err); !errors.Is(err, safewrite.ErrPermissionDenied) || swErr.ReasonCode != safewritev1.Reason_REASON_POLICY_DENIED {
		t.Errorf("a Secret: %v, want ErrPermissionDenied with POLICY_DENIED", err)
	}

	// The resourceVersion of a later write of another object: the object as it is now,
	// read live, is at least that new (its own resourceVersion is when it last changed).
	first, other := newCounter(t, c), newCounter(t, c)
	res, err := c.Update(ctx, other, safewrite.CEL(increment))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, first, safewrite.AtLeast(res))
	if err != nil || got.Remembered {
		t.Errorf("a minimum from another object: %v (%+v), want a live read", err, got)
	}

	for _, rv := range []string{"1&watch=true", "1 2"} {
		_, err = c.Get(ctx, first, safewrite.WithMinResourceVersion(rv))
		swErr = asError(t, err)
		if !errors.Is(err, safewrite.ErrInvalid) || len(swErr.FieldViolations) != 1 || swErr.FieldViolations[0].Field != "min_resource_version" {
			t.Errorf("minimum %q: %v, want ErrInvalid on min_resource_version", rv, err)
		}
	}
}
