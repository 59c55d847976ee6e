package safewrite

// The typed path: calls about Go-typed Kubernetes objects (client.Object in
// controller-runtime's terms) whose apiVersion and kind come from a runtime.Scheme and
// whose result is decoded back into the caller's object.

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sigsjson "sigs.k8s.io/json"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Object is a Kubernetes object with metadata: what controller-runtime calls
// client.Object. Every typed object of client-go (a *corev1.ConfigMap), every type
// made with controller-gen, and *unstructured.Unstructured is one.
type Object interface {
	metav1.Object
	runtime.Object
}

// MutateFunc changes the object a typed transaction was given, in place. Before each
// call the object holds the fresh object as the sidecar read it, so the function must
// compute its change from the object alone. Returning [ErrAbort] (or an error wrapping
// it) ends the transaction without writing ([OutcomeAborted], no error); any other
// error also ends it without writing and is returned as it is.
type MutateFunc func() error

// Typed calls the sidecar about typed objects: apiVersion and kind come from a
// runtime.Scheme (the scheme a controller-runtime manager or a client-go clientset
// uses), namespace and name from the object's metadata, and the object the sidecar
// returns is decoded back into the caller's object. It is safe for concurrent use.
type Typed struct {
	client *Client
	scheme *runtime.Scheme
}

// Typed returns a client of typed objects whose kinds scheme knows.
func (c *Client) Typed(scheme *runtime.Scheme) *Typed {
	return &Typed{client: c, scheme: scheme}
}

// Client returns the client t calls through.
func (t *Typed) Client() *Client { return t.client }

// Scheme returns the scheme t resolves kinds with.
func (t *Typed) Scheme() *runtime.Scheme { return t.scheme }

// GVKFor returns the group, version and kind of obj: from scheme for a typed object
// (when scheme registers its type under several, the one its TypeMeta names), from its
// own apiVersion and kind for an unstructured one. The error matches [ErrInvalid].
func GVKFor(scheme *runtime.Scheme, obj runtime.Object) (schema.GroupVersionKind, error) {
	if obj == nil {
		return schema.GroupVersionKind{}, clientError(codes.InvalidArgument, "the object is nil")
	}
	set := obj.GetObjectKind().GroupVersionKind()
	if _, ok := obj.(runtime.Unstructured); ok {
		if set.Kind == "" || set.Version == "" {
			return schema.GroupVersionKind{}, clientError(codes.InvalidArgument,
				"an unstructured object needs apiVersion and kind")
		}
		return set, nil
	}
	if scheme == nil {
		return schema.GroupVersionKind{}, clientError(codes.InvalidArgument, "no scheme to find the kind of %T in", obj)
	}
	gvks, _, err := scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, clientError(codes.InvalidArgument, "the kind of %T: %v", obj, err)
	}
	if len(gvks) == 1 {
		return gvks[0], nil
	}
	for _, gvk := range gvks {
		if gvk == set {
			return gvk, nil
		}
	}
	return schema.GroupVersionKind{}, clientError(codes.InvalidArgument,
		"%T is registered as several kinds %v: set its apiVersion and kind to choose one", obj, gvks)
}

// RefFor returns the ObjectRef of obj with apiVersion and kind from scheme (see
// [GVKFor]) and namespace and name from its metadata.
func RefFor(scheme *runtime.Scheme, obj Object) (ObjectRef, error) {
	gvk, err := GVKFor(scheme, obj)
	if err != nil {
		return ObjectRef{}, err
	}
	return Ref(gvk, obj.GetNamespace(), obj.GetName()), nil
}

// RefOf returns the ObjectRef of obj through t's scheme (see [RefFor]).
func (t *Typed) RefOf(obj Object) (ObjectRef, error) { return RefFor(t.scheme, obj) }

// Update is [Client.Update] of obj's main resource, named by obj's kind (from the
// scheme), namespace and name; on success obj becomes the object as this call left it
// ([Result.Object]: as written, or as read when unchanged). m is any mutation; for one
// computed from typed values use [MergeFrom] (exactly what changed) or [MergePatch] of
// a typed object (its fields, nulls dropped). On failure obj is left as it was.
func (t *Typed) Update(ctx context.Context, obj Object, m Mutation, opts ...WriteOption) (*Result, error) {
	return t.write(ctx, mainResource, obj, m, opts)
}

// PatchStatus is [Client.PatchStatus] of obj's status subresource, with obj as for
// [Typed.Update].
func (t *Typed) PatchStatus(ctx context.Context, obj Object, m Mutation, opts ...WriteOption) (*Result, error) {
	return t.write(ctx, statusSubresource, obj, m, opts)
}

// write is [Client.write] of obj's subresource sub: the code of [Typed.Update] and
// [Typed.PatchStatus].
func (t *Typed) write(ctx context.Context, sub subresource, obj Object, m Mutation, opts []WriteOption) (*Result, error) {
	ref, err := t.RefOf(obj)
	if err != nil {
		return nil, err
	}
	res, err := t.client.write(ctx, sub, ref, m, opts)
	return t.decodeResult(res, err, obj)
}

// Transact is [Client.Transact] with fn changing obj in place: before each call of fn
// the fresh object is decoded into obj, and what fn changed is proposed as the JSON
// merge patch from obj before fn to obj after it (see [MergeFrom]), applied by the
// sidecar to the fresh object it read. So fields obj's Go type does not know are kept,
// and an fn that changes nothing writes nothing ([OutcomeUnchanged]). On success obj
// is the object as written (or as read, when unchanged or aborted: [Result.Object]);
// on failure it is the last fresh object, or as it was when none arrived. obj names
// the object as for [Typed.Update].
//
//	res, err := typed.Transact(ctx, deployment, func() error {
//		deployment.Spec.Replicas = ptr.To(*deployment.Spec.Replicas + 1)
//		return nil
//	})
func (t *Typed) Transact(ctx context.Context, obj Object, fn MutateFunc, opts ...WriteOption) (*Result, error) {
	return t.transact(ctx, obj, false, fn, opts)
}

// TransactStatus is [Typed.Transact] writing fn's changes to the status subresource:
// only its effect on status is written.
func (t *Typed) TransactStatus(ctx context.Context, obj Object, fn MutateFunc, opts ...WriteOption) (*Result, error) {
	return t.transact(ctx, obj, true, fn, opts)
}

func (t *Typed) transact(ctx context.Context, obj Object, status bool, fn MutateFunc, opts []WriteOption) (*Result, error) {
	ref, err := t.RefOf(obj)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, withTarget(clientError(codes.InvalidArgument, "no transaction function"), ref)
	}
	res, err := t.client.transact(ctx, ref, status, typedProposer(obj, fn), opts)
	return t.decodeResult(res, err, obj)
}

// typedProposer decodes each fresh object into obj, runs fn and proposes the merge
// patch of what it changed.
func typedProposer(obj Object, fn MutateFunc) proposer {
	return func(fresh *safewritev1.FreshObject) (*safewritev1.TransactRequest, error) {
		if err := decodeInto(fresh.GetObjectJson(), obj); err != nil {
			return nil, clientError(codes.Internal, "the sidecar's fresh object does not decode into %T: %v", obj, err)
		}
		before, err := json.Marshal(obj)
		if err != nil {
			return nil, clientError(codes.InvalidArgument, "%T cannot be encoded as JSON: %v", obj, err)
		}
		if err := fn(); err != nil {
			return nil, err
		}
		after, err := json.Marshal(obj)
		if err != nil {
			return nil, clientError(codes.InvalidArgument, "the transaction's object cannot be encoded as JSON: %v", err)
		}
		patch, err := mergeDiff(json.RawMessage(before), json.RawMessage(after))
		if err != nil {
			return nil, clientError(codes.InvalidArgument, "the transaction's change: %v", err)
		}
		return mutationProposal(fresh, &safewritev1.Mutation{Kind: &safewritev1.Mutation_MergePatch{
			MergePatch: &safewritev1.MergePatch{PatchJson: patch},
		}}), nil
	}
}

// decodeResult decodes a successful call's object into obj.
func (t *Typed) decodeResult(res *Result, err error, obj Object) (*Result, error) {
	if err != nil || res == nil || res.objectJSON == "" {
		return res, err
	}
	if err := decodeInto(res.objectJSON, obj); err != nil {
		return res, clientError(codes.Internal, "the object the sidecar returned does not decode into %T: %v", obj, err)
	}
	return res, nil
}

// decodeInto sets obj to the object in text: an Unstructured takes it as it is; a
// typed object is reset to its zero value first, so no field of its former content
// survives, and decoded the way the API machinery decodes (case-sensitive field
// names, integers kept as integers).
func decodeInto(text string, obj Object) error {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		decoded, err := decodeObject(text)
		if err != nil {
			return err
		}
		u.Object = decoded.Object
		return nil
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("%T is not a non-nil pointer", obj)
	}
	v.Elem().SetZero()
	return sigsjson.UnmarshalCaseSensitivePreserveInts([]byte(text), obj)
}
