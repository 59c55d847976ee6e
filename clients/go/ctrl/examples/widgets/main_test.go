package main

// Runs the example controller (a real controller-runtime manager) for a few seconds
// against the harness's control plane and sidecar (clients/go/test.sh starts them) and
// checks the status it writes, exactly.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

func needEnv(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		if os.Getenv(name) == "" {
			if testing.Short() {
				t.Skipf("%s is unset; -short skips the tests that need a sidecar", name)
			}
			t.Fatalf("%s is unset: run this through clients/go/test.sh, which starts a control plane and sidecars", name)
		}
	}
}

func TestControllerWritesWidgetStatus(t *testing.T) {
	needEnv(t, "SAFEWRITE_CP_ENV", "SAFEWRITE_ADDRESS")
	ctrl.SetLogger(zap.New(zap.WriteTo(t.Output()), zap.Level(zapcore.ErrorLevel)))
	cfg, err := restConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// Straight to the API server, not through the manager's cache or the sidecar.
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// A namespace of its own, so the controller sees only this test's Widget.
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "go-ctrl-example-" + hex.EncodeToString(suffix[:])}}
	if err := direct.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = direct.Delete(context.Background(), ns) })

	r := &WidgetReconciler{}
	managerCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(managerCtx, cfg, ns.Name, r) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("the manager: %v", err)
		}
	}()

	key := types.NamespacedName{Namespace: ns.Name, Name: "gear"}
	widget := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Spec: WidgetSpec{Size: 3}}
	if err := direct.Create(ctx, widget); err != nil {
		t.Fatal(err)
	}
	created := time.Now().Truncate(time.Second)

	// 1. Created with size 3: Ready, capacity 30, one write; the reconcile that the
	// write itself causes writes nothing.
	got := waitForGeneration(t, ctx, direct, key, 1)
	ltt1 := got.Status.Conditions[0].LastTransitionTime
	if ltt1.Time.Before(created) || ltt1.Time.After(time.Now()) {
		t.Fatalf("lastTransitionTime %v, want the time of the first reconcile", ltt1)
	}
	wantStatus(t, got, `{"observedGeneration":1,"capacity":30,"conditions":[{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"`+
		ltt1.UTC().Format(time.RFC3339)+`","reason":"Sized","message":"size 3"}]}`)
	settled(t, ctx, direct, key, got.ResourceVersion)
	if r.Written.Load() != 1 || r.Unchanged.Load() < 1 {
		t.Fatalf("%d status write(s) and %d unchanged reconcile(s), want 1 and at least 1", r.Written.Load(), r.Unchanged.Load())
	}

	// 2. Resized to 5, a second later: still Ready, so lastTransitionTime stays.
	time.Sleep(time.Until(created.Add(1100 * time.Millisecond)))
	setSize(t, ctx, direct, key, 5)
	got = waitForGeneration(t, ctx, direct, key, 2)
	wantStatus(t, got, `{"observedGeneration":2,"capacity":50,"conditions":[{"type":"Ready","status":"True","observedGeneration":2,"lastTransitionTime":"`+
		ltt1.UTC().Format(time.RFC3339)+`","reason":"Sized","message":"size 5"}]}`)

	// 3. Emptied: not Ready, and the transition is dated now.
	setSize(t, ctx, direct, key, 0)
	emptied := time.Now().Truncate(time.Second)
	got = waitForGeneration(t, ctx, direct, key, 3)
	ltt3 := got.Status.Conditions[0].LastTransitionTime
	if !ltt3.After(ltt1.Time) || ltt3.Time.Before(emptied) {
		t.Fatalf("lastTransitionTime %v after the status changed, want after %v and not before %v", ltt3, ltt1, emptied)
	}
	wantStatus(t, got, `{"observedGeneration":3,"conditions":[{"type":"Ready","status":"False","observedGeneration":3,"lastTransitionTime":"`+
		ltt3.UTC().Format(time.RFC3339)+`","reason":"Empty","message":"size is 0"}]}`)
	settled(t, ctx, direct, key, got.ResourceVersion)
	if r.Written.Load() != 3 {
		t.Fatalf("%d status writes, want 3 (one per generation)", r.Written.Load())
	}
	t.Logf("%d status writes, %d reconciles that wrote nothing", r.Written.Load(), r.Unchanged.Load())
}

// waitForGeneration waits until the Widget's status reports generation.
func waitForGeneration(t *testing.T, ctx context.Context, c client.Client, key types.NamespacedName, generation int64) *Widget {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var w Widget
		if err := c.Get(ctx, key, &w); err != nil {
			t.Fatal(err)
		}
		if w.Status.ObservedGeneration == generation && len(w.Status.Conditions) > 0 {
			return &w
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status never reported generation %d: %+v", generation, w.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// settled checks that the Widget stays at resourceVersion rv for a second: the
// controller does not keep writing.
func settled(t *testing.T, ctx context.Context, c client.Client, key types.NamespacedName, rv string) {
	t.Helper()
	time.Sleep(time.Second)
	var w Widget
	if err := c.Get(ctx, key, &w); err != nil {
		t.Fatal(err)
	}
	if w.ResourceVersion != rv {
		t.Fatalf("the Widget changed again (resourceVersion %s, then %s): %+v", rv, w.ResourceVersion, w.Status)
	}
}

func setSize(t *testing.T, ctx context.Context, c client.Client, key types.NamespacedName, size int64) {
	t.Helper()
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"size":`+jsonNumber(size)+`}}`))
	if err := c.Patch(ctx, w, patch); err != nil {
		t.Fatal(err)
	}
}

func jsonNumber(n int64) string {
	data, _ := json.Marshal(n)
	return string(data)
}

func wantStatus(t *testing.T, w *Widget, want string) {
	t.Helper()
	got, err := json.Marshal(w.Status)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("status\n%s\nwant\n%s", got, want)
	}
}
