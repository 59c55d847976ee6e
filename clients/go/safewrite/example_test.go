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
