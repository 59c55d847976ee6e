package safewrite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"safewrite.dev/clients/go/safewrite"
)

func ExampleClient_Update() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := safewrite.NewClient("") // $SAFEWRITE_ADDRESS, else the sidecar's default 127.0.0.1:50051
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "counter"}
	res, err := c.Update(ctx, ref, safewrite.CEL(`{"data": {"n": string(int(object.data.n) + 1)}}`),
		safewrite.WithCreateIfMissing(`{"data": {"n": "0"}}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome, res.ResourceVersion)
}

func ExampleClient_PatchStatus() {
	ctx := context.Background()
	c, err := safewrite.NewClient("unix:///run/safewrite/safewrite.sock")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ref := safewrite.ObjectRef{APIVersion: "example.com/v1", Kind: "Widget", Namespace: "default", Name: "gear"}
	_, err = c.PatchStatus(ctx, ref, safewrite.MergePatch(map[string]any{
		"status": map[string]any{"phase": "Ready"},
	}), safewrite.WithPreconditionCEL(`object.spec.size > 0`))
	if errors.Is(err, safewrite.ErrPreconditionFailed) {
		var swErr *safewrite.Error
		errors.As(err, &swErr)
		fmt.Println("not ready to report; the object is now", swErr.CurrentObject.GetResourceVersion())
	}
}

func ExampleClient_Transact() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := safewrite.NewClient("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ref := safewrite.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web"}
	// Called with the fresh object on every attempt: compute the change from obj alone.
	res, err := c.Transact(ctx, ref, func(obj *unstructured.Unstructured) error {
		replicas, _, err := unstructured.NestedInt64(obj.Object, "spec", "replicas")
		if err != nil {
			return err
		}
		if replicas >= 10 {
			return safewrite.ErrAbort // write nothing
		}
		return unstructured.SetNestedField(obj.Object, replicas+1, "spec", "replicas")
	})
	switch {
	case errors.Is(err, safewrite.ErrConflict):
		fmt.Println("still contended after every attempt: requeue")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(res.Outcome, "after", res.Attempts, "attempt(s)")
	}
}

func ExampleClient_Get() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := safewrite.NewClient("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "counter"}
	res, err := c.Update(ctx, ref, safewrite.MergePatch(`{"data": {"phase": "done"}}`))
	if err != nil {
		log.Fatal(err)
	}
	// Read your own write: this state or a newer one, never the one before it.
	got, err := c.Get(ctx, ref, safewrite.AtLeast(res))
	if err != nil {
		log.Fatal(err)
	}
	phase, _, _ := unstructured.NestedString(got.Object.Object, "data", "phase")
	fmt.Println(phase, got.ResourceVersion, got.Remembered)
}

// The forms each patch constructor takes. Its type says which: MergePatch, Apply and
// WithCreateIfMissing take a safewrite.JSONObject (JSON text, a map[string]any, an
// *unstructured.Unstructured); a typed object goes to MergePatchObject, ApplyObject and
// WithCreateIfMissingObject; JSONPatch takes JSON text or []safewrite.JSONPatchOp;
// MergeFrom two objects of one Go type. Anything else does not compile.
func ExampleMergePatch() {
	ctx := context.Background()
	c, err := safewrite.NewClient("")
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ref := safewrite.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "settings"}

	for _, m := range []safewrite.Mutation{
		safewrite.MergePatch(`{"data": {"tier": "web"}}`),                             // JSON text
		safewrite.MergePatch([]byte(`{"data": {"tier": "web"}}`)),                     // []byte, json.RawMessage
		safewrite.MergePatch(map[string]any{"data": map[string]any{"stale": nil}}),    // a map; nil deletes
		safewrite.MergePatch(&unstructured.Unstructured{Object: map[string]any{}}),    // an Unstructured
		safewrite.JSONPatch([]safewrite.JSONPatchOp{{Op: "remove", Path: "/data/a"}}), // JSON Patch operations
		safewrite.JSONPatch(`[{"op": "add", "path": "/data/b", "value": "1"}]`),       // or their JSON text
	} {
		if _, err := c.Update(ctx, ref, m, safewrite.WithCreateIfMissing(`{}`)); err != nil {
			log.Fatal(err)
		}
	}

	// A typed object (here an Unstructured; a *corev1.ConfigMap is used the same way).
	desired := &unstructured.Unstructured{}
	desired.SetAPIVersion("v1")
	desired.SetKind("ConfigMap")
	desired.SetName("settings")
	before := desired.DeepCopy()
	desired.SetLabels(map[string]string{"tier": "web"})
	for _, m := range []safewrite.Mutation{
		safewrite.MergePatchObject(desired),
		safewrite.MergeFrom(before, desired), // before and after of one type
		safewrite.ApplyObject(desired, false),
	} {
		if _, err := c.Update(ctx, ref, m, safewrite.WithCreateIfMissingObject(desired),
			safewrite.WithFieldManager("example")); err != nil {
			log.Fatal(err)
		}
	}
}
