// Command widgets is a controller-runtime controller that writes the status of Widgets
// (test.safewrite.dev/v1) through the safewrite sidecar: the typed path
// (safewrite.Typed) and its conditions helper, with no client-side retry loop.
//
// For each Widget it reports status.capacity (ten times spec.size), status.observedGeneration
// and a Ready condition (True with reason Sized when spec.size > 0, else False with
// reason Empty) whose lastTransitionTime moves only when its status does. The status
// write wakes the controller again; that reconcile changes nothing, so the sidecar
// writes nothing (OutcomeUnchanged) and the controller settles.
//
//	go run ./examples/widgets
//
// It talks to the API server of the kubeconfig (KUBECONFIG, ~/.kube/config, in-cluster)
// or, when SAFEWRITE_CP_ENV names the test harness's control-plane env file, to that
// control plane; to the sidecar at SAFEWRITE_ADDRESS (default 127.0.0.1:50051); and
// watches the namespace SAFEWRITE_NAMESPACE, or every namespace when that is unset.
// With WIDGETS_LEASE=namespace/name it reconciles only while it leads that Lease through
// the sidecar (safewritectrl.ElectedManager), its writes fenced, and exits once it
// stops leading; POD_NAME, when set, is its identity in the Lease.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"safewrite.dev/clients/go/ctrl/safewritectrl"
	"safewrite.dev/clients/go/safewrite"
)

func main() {
	ctrl.SetLogger(zap.New())
	cfg, err := restConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "widgets:", err)
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), cfg, os.Getenv("SAFEWRITE_NAMESPACE"), &WidgetReconciler{}); err != nil {
		fmt.Fprintln(os.Stderr, "widgets:", err)
		os.Exit(1)
	}
}

// run runs a manager with r as the Widget controller until ctx ends.
func run(ctx context.Context, cfg *rest.Config, namespace string, r *WidgetReconciler) error {
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		return err
	}
	opts := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if namespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("the manager: %w", err)
	}
	sidecar, err := safewrite.NewClient("") // SAFEWRITE_ADDRESS, else 127.0.0.1:50051
	if err != nil {
		return err
	}
	defer sidecar.Close()
	r.Client = mgr.GetClient()
	r.Writer = safewritectrl.Typed(sidecar, mgr.GetClient())
	// With WIDGETS_LEASE=namespace/name, the controller runs only while this replica
	// leads that Lease through the sidecar, and every write it makes is fenced.
	var elected manager.Manager = mgr
	if leaseNamespace, leaseName, ok := strings.Cut(os.Getenv("WIDGETS_LEASE"), "/"); ok {
		elected = safewritectrl.NewElectedManager(mgr, sidecar, leaseNamespace, leaseName,
			safewrite.WithIdentity(os.Getenv("POD_NAME"))) // empty: the sidecar makes one
	}
	if err := ctrl.NewControllerManagedBy(elected).For(&Widget{}).Complete(r); err != nil {
		return fmt.Errorf("the controller: %w", err)
	}
	return elected.Start(ctx) // with a Lease: safewritectrl.ErrLeadershipLost once it is lost
}

// WidgetReconciler reports the status of Widgets.
type WidgetReconciler struct {
	client.Client
	// Writer writes the status through the sidecar.
	Writer *safewrite.Typed
	// Written and Unchanged count the status writes by outcome.
	Written, Unchanged atomic.Int64
}

// Reconcile writes the status of one Widget.
func (r *WidgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var widget Widget
	if err := r.Get(ctx, req.NamespacedName, &widget); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// Called with the fresh Widget on every attempt: the status is computed from it.
	res, err := r.Writer.TransactStatus(ctx, &widget, func() error {
		ready := metav1.Condition{Type: "Ready", ObservedGeneration: widget.Generation,
			Status: metav1.ConditionTrue, Reason: "Sized", Message: fmt.Sprintf("size %d", widget.Spec.Size)}
		if widget.Spec.Size <= 0 {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "Empty", "size is 0"
		}
		widget.Status.ObservedGeneration = widget.Generation
		widget.Status.Capacity = widget.Spec.Size * 10
		safewrite.SetCondition(&widget.Status.Conditions, ready)
		return nil
	})
	if err == nil {
		if res.Outcome.Wrote() {
			r.Written.Add(1)
		} else {
			r.Unchanged.Add(1)
		}
	}
	// A Widget deleted meanwhile is done; other errors requeue or not as they call for.
	return safewritectrl.Result(client.IgnoreNotFound(err))
}

// restConfig is the control plane of SAFEWRITE_CP_ENV (SERVER, ADMIN_TOKEN, CA_FILE)
// when it is set, else controller-runtime's usual config (kubeconfig or in-cluster).
func restConfig() (*rest.Config, error) {
	path := os.Getenv("SAFEWRITE_CP_ENV")
	if path == "" {
		return ctrl.GetConfig()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if key, value, ok := strings.Cut(scanner.Text(), "="); ok {
			env[key] = value
		}
	}
	if err := scanner.Err(); err != nil {
		return nil, err
	}
	if env["SERVER"] == "" {
		return nil, fmt.Errorf("%s has no SERVER", path)
	}
	return &rest.Config{
		Host:            env["SERVER"],
		BearerToken:     env["ADMIN_TOKEN"],
		TLSClientConfig: rest.TLSClientConfig{CAFile: env["CA_FILE"]},
	}, nil
}
