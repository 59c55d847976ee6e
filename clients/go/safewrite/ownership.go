package safewrite

// Finalizers and owner references: one entry of metadata.finalizers or
// metadata.ownerReferences added or removed by the sidecar on the fresh object, leaving
// the others as they are, as controller-runtime's controllerutil helpers do on an object
// in hand.

import (
	"reflect"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// AddFinalizer adds finalizer to metadata.finalizers, as controllerutil.AddFinalizer
// does, on the fresh object of every attempt: every other finalizer is kept, and adding
// one that is there writes nothing ([OutcomeUnchanged]). finalizer is a qualified name
// such as "example.com/cleanup". An object being deleted (it has a deletionTimestamp)
// takes no new finalizer: the call fails, with nothing written, with
// [ErrPreconditionFailed] and [Error.ReasonCode] REASON_OBJECT_DELETING, not retryable;
// run the object's cleanup instead. An empty finalizer is [ErrInvalid].
func AddFinalizer(finalizer string) Mutation {
	return finalizerChange(finalizer, false)
}

// RemoveFinalizer removes finalizer from metadata.finalizers, as
// controllerutil.RemoveFinalizer does, on the fresh object of every attempt: every other
// finalizer is kept, and removing one that is not there writes nothing
// ([OutcomeUnchanged]). When the object does not exist, or the removal takes the last
// finalizer of an object being deleted, so that the API server deletes it, the call
// succeeds with [OutcomeGone] ([Result.Gone]): the object is gone, and a status write
// that would follow must be skipped. An empty finalizer is [ErrInvalid].
//
//	res, err := typed.Update(ctx, widget, safewrite.RemoveFinalizer("example.com/cleanup"))
func RemoveFinalizer(finalizer string) Mutation {
	return finalizerChange(finalizer, true)
}

func finalizerChange(finalizer string, remove bool) Mutation {
	if finalizer == "" {
		return Mutation{err: fieldError("mutation.finalizer.finalizer", "the finalizer is empty")}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_Finalizer{
		Finalizer: &safewritev1.FinalizerChange{Finalizer: finalizer, Remove: remove},
	}}}
}

// OwnerReferenceOption changes the reference [SetOwnerReference] and
// [SetControllerReference] make.
type OwnerReferenceOption func(*metav1.OwnerReference)

// WithBlockOwnerDeletion sets the reference's blockOwnerDeletion: the garbage collector
// keeps the owner until the object is deleted (foreground deletion).
// [SetControllerReference] sets it unless told otherwise, as controllerutil does.
func WithBlockOwnerDeletion(block bool) OwnerReferenceOption {
	return func(ref *metav1.OwnerReference) { ref.BlockOwnerDeletion = &block }
}

// SetControllerReference makes owner the controller of the object, as
// controllerutil.SetControllerReference does: it ensures, on the fresh object of every
// attempt, an owner reference to owner with controller and blockOwnerDeletion set
// (unless [WithBlockOwnerDeletion](false)). owner is any Kubernetes object (what
// controller-runtime calls client.Object) whose apiVersion and kind are set (its
// TypeMeta: objects read with client-go or controller-runtime often have none; then use
// [Typed.SetControllerReference], which takes them from a scheme) and whose uid is read
// from its metadata; without a uid the sidecar reads the owner, by name, for it.
//
//	res, err := typed.Update(ctx, configMap, typed.SetControllerReference(widget))
//
// References are matched by API group, kind and name, as controllerutil matches them
// (the version and the uid may differ): one that is there and identical writes nothing
// ([OutcomeUnchanged]), one that differs takes this reference's apiVersion, uid and
// flags in place (so an owner deleted and recreated under its name adopts the object),
// and a new one is appended; every other reference is kept. When another owner (another
// group, kind or name) is already the object's controller the call fails, with nothing written, with [ErrPreconditionFailed] and
// [Error.ReasonCode] REASON_ALREADY_OWNED, not retryable: its message names that
// controller, and [Error.CurrentObject] is the object. The object must be in owner's
// namespace (or owner cluster-scoped), or the call fails with [ErrInvalid] before
// anything is sent: the garbage collector would take an owner elsewhere for absent and
// delete the object.
func SetControllerReference(owner Object, opts ...OwnerReferenceOption) Mutation {
	return ownerMutation(owner, kindFromTypeMeta, false, withController(opts))
}

// SetOwnerReference ensures an owner reference to owner that is not a controller
// reference, as controllerutil.SetOwnerReference does: as [SetControllerReference], but
// with neither controller nor blockOwnerDeletion (unless [WithBlockOwnerDeletion]), so
// an existing reference to owner that has them is updated to one that has not.
func SetOwnerReference(owner Object, opts ...OwnerReferenceOption) Mutation {
	return ownerMutation(owner, kindFromTypeMeta, false, opts)
}

// RemoveOwnerReference removes the owner reference to owner, as
// controllerutil.RemoveOwnerReference does: the first one matched by owner's API group,
// kind and name (its uid and version are not compared); every other reference is
// kept. Removing a reference that is not there writes nothing ([OutcomeUnchanged]), and
// removing the last one removes the list. owner is as for [SetControllerReference].
func RemoveOwnerReference(owner Object) Mutation {
	return ownerMutation(owner, kindFromTypeMeta, true, nil)
}

// EnsureOwnerReference ensures ref among the object's owner references, exactly as
// given (a nil Controller or BlockOwnerDeletion is false), matched by ref's API group,
// kind and name as for [SetControllerReference]; without a UID the sidecar reads the owner, named by
// ref.Name in the object's namespace (or cluster-scoped), for it. APIVersion, Kind and
// Name are required ([ErrInvalid]).
func EnsureOwnerReference(ref metav1.OwnerReference) Mutation {
	return ownerReferenceChange(ref, false)
}

// RemoveOwnerReferenceTo removes the owner reference ref names: the first one with
// ref's API group, kind and name (ref.UID, its version and flags are not compared).
// Otherwise as [RemoveOwnerReference].
func RemoveOwnerReferenceTo(ref metav1.OwnerReference) Mutation {
	return ownerReferenceChange(ref, true)
}

// SetControllerReference is [SetControllerReference] with owner's apiVersion and kind
// from t's scheme (see [GVKFor]), so owner needs no TypeMeta.
func (t *Typed) SetControllerReference(owner Object, opts ...OwnerReferenceOption) Mutation {
	return ownerMutation(owner, t.kindFromScheme, false, withController(opts))
}

// SetOwnerReference is [SetOwnerReference] with owner's apiVersion and kind from t's
// scheme.
func (t *Typed) SetOwnerReference(owner Object, opts ...OwnerReferenceOption) Mutation {
	return ownerMutation(owner, t.kindFromScheme, false, opts)
}

// RemoveOwnerReference is [RemoveOwnerReference] with owner's apiVersion and kind from
// t's scheme.
func (t *Typed) RemoveOwnerReference(owner Object) Mutation {
	return ownerMutation(owner, t.kindFromScheme, true, nil)
}

// withController puts the controller reference's defaults before opts.
func withController(opts []OwnerReferenceOption) []OwnerReferenceOption {
	controller := func(ref *metav1.OwnerReference) {
		yes := true
		ref.Controller = &yes
		ref.BlockOwnerDeletion = &yes
	}
	return append([]OwnerReferenceOption{controller}, opts...)
}

// kindFromTypeMeta is owner's group, version and kind as its TypeMeta says.
func kindFromTypeMeta(owner Object) (schema.GroupVersionKind, error) {
	gvk := owner.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" || gvk.Version == "" {
		return schema.GroupVersionKind{}, clientError(codes.InvalidArgument,
			"the owner %T %q has no apiVersion and kind: set them (its TypeMeta), or take them from a scheme with Typed.SetControllerReference and the like",
			owner, owner.GetName())
	}
	return gvk, nil
}

func (t *Typed) kindFromScheme(owner Object) (schema.GroupVersionKind, error) {
	return GVKFor(t.scheme, owner)
}

// ownerMutation is the owner reference change for owner, whose kind kindOf finds.
func ownerMutation(owner Object, kindOf func(Object) (schema.GroupVersionKind, error), remove bool, opts []OwnerReferenceOption) Mutation {
	if owner == nil || isNilPointer(owner) {
		return Mutation{err: fieldError("mutation.owner_reference.owner", "the owner is nil")}
	}
	gvk, err := kindOf(owner)
	if err != nil {
		return Mutation{err: err}
	}
	apiVersion, kind := gvk.ToAPIVersionAndKind()
	ref := metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: owner.GetName(), UID: owner.GetUID()}
	for _, opt := range opts {
		if opt != nil {
			opt(&ref)
		}
	}
	m := ownerReferenceChange(ref, remove)
	if !remove { // a reference that should not be there may always go
		m.ownerNamespace = owner.GetNamespace()
	}
	return m
}

// ownerReferenceChange is the proto's change of ref.
func ownerReferenceChange(ref metav1.OwnerReference, remove bool) Mutation {
	for _, required := range []struct{ field, name, value string }{
		{"api_version", "apiVersion", ref.APIVersion}, {"kind", "kind", ref.Kind}, {"name", "name", ref.Name},
	} {
		if required.value == "" {
			return Mutation{err: fieldError("mutation.owner_reference.owner."+required.field, "the owner reference has no %s", required.name)}
		}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_OwnerReference{
		OwnerReference: &safewritev1.OwnerReferenceChange{
			Owner: &safewritev1.OwnerReference{
				ApiVersion:         ref.APIVersion,
				Kind:               ref.Kind,
				Name:               ref.Name,
				Uid:                string(ref.UID),
				Controller:         ref.Controller != nil && *ref.Controller,
				BlockOwnerDeletion: ref.BlockOwnerDeletion != nil && *ref.BlockOwnerDeletion,
			},
			Remove: remove,
		},
	}}}
}

// isNilPointer reports whether v is a nil pointer in a non-nil interface, such as a nil
// *corev1.ConfigMap, whose methods would panic.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
