package safewrite

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/types"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Preconditions are checked by the sidecar on the fresh object before every write.
// When one is false nothing is written and the call fails with
// [ErrPreconditionFailed] carrying the current object (or [ErrConflict] for a
// resourceVersion mismatch); it is not retried. Empty fields are not checked.
type Preconditions struct {
	// UID: the object's metadata.uid must equal this.
	UID types.UID
	// ResourceVersion: strict compare-and-swap; the object's metadata.resourceVersion
	// must equal this, and a conflict is not retried.
	ResourceVersion string
	// CEL: an expression over `object` that must return true.
	CEL string
}

// RetryPolicy bounds the sidecar's retry loop. Zero fields take the sidecar's defaults.
// The call's context deadline always bounds the loop as well.
type RetryPolicy struct {
	// MaxAttempts is the most attempts to make, the first included.
	MaxAttempts int
	// InitialBackoff is the backoff before the second attempt.
	InitialBackoff time.Duration
	// MaxBackoff caps any single backoff.
	MaxBackoff time.Duration
	// Requeue makes one attempt only: a conflict comes back at once as [ErrConflict],
	// for controllers that prefer to requeue. It overrides MaxAttempts.
	Requeue bool
}

// Fence names the leadership a write is made under (see [WithFence]): a Lease the
// sidecar campaigns for through the Lead RPC, and the epoch of the caller's leadership
// as that RPC answered it (LeadResponse.epoch).
type Fence struct {
	// LeaseNamespace is the Lease's namespace.
	LeaseNamespace string
	// LeaseName is the Lease's name.
	LeaseName string
	// Epoch is the caller's epoch of that Lease; not 0.
	Epoch uint64
}

// WriteOption sets an option of one call: preconditions, retry policy, field manager,
// dry run, create-if-missing, fence.
type WriteOption func(*writeConfig)

type writeConfig struct {
	preconditions *safewritev1.Preconditions
	retryPolicy   *safewritev1.RetryPolicy
	options       *safewritev1.WriteOptions
	propagation   PropagationPolicy // Delete only: see WithPropagationPolicy
	err           error
}

func newWriteConfig(opts []WriteOption) (*writeConfig, error) {
	cfg := &writeConfig{}
	for _, opt := range opts {
		if opt != nil {
			opt(cfg)
		}
	}
	return cfg, cfg.err
}

func (cfg *writeConfig) pre() *safewritev1.Preconditions {
	if cfg.preconditions == nil {
		cfg.preconditions = &safewritev1.Preconditions{}
	}
	return cfg.preconditions
}

func (cfg *writeConfig) opts() *safewritev1.WriteOptions {
	if cfg.options == nil {
		cfg.options = &safewritev1.WriteOptions{}
	}
	return cfg.options
}

// WithPreconditions sets the preconditions checked before every write; its non-empty
// fields replace those set by earlier options.
func WithPreconditions(p Preconditions) WriteOption {
	return func(cfg *writeConfig) {
		if p.UID != "" {
			cfg.pre().Uid = string(p.UID)
		}
		if p.ResourceVersion != "" {
			cfg.pre().ResourceVersion = p.ResourceVersion
		}
		if p.CEL != "" {
			cfg.pre().Cel = p.CEL
		}
	}
}

// WithUID requires the object's metadata.uid to equal uid, so a call never changes an
// object that was deleted and re-created under the same name.
func WithUID(uid types.UID) WriteOption {
	return WithPreconditions(Preconditions{UID: uid})
}

// WithResourceVersion makes the call a strict compare-and-swap: the object's
// resourceVersion must equal rv, and a mismatch fails at once with [ErrConflict]
// (reason RESOURCE_VERSION_MISMATCH) instead of being retried.
func WithResourceVersion(rv string) WriteOption {
	return WithPreconditions(Preconditions{ResourceVersion: rv})
}

// WithPreconditionCEL requires the CEL expression over `object` to return true on the
// fresh object before every write, e.g. `object.status.phase == "Pending"`.
func WithPreconditionCEL(expression string) WriteOption {
	return WithPreconditions(Preconditions{CEL: expression})
}

// WithRetryPolicy overrides the sidecar's retry policy for this call.
func WithRetryPolicy(p RetryPolicy) WriteOption {
	return func(cfg *writeConfig) {
		if p.MaxAttempts < 0 || p.InitialBackoff < 0 || p.MaxBackoff < 0 {
			cfg.err = clientError(codes.InvalidArgument, "retry policy: negative values are not allowed")
			return
		}
		rp := &safewritev1.RetryPolicy{MaxAttempts: uint32(p.MaxAttempts), Requeue: p.Requeue}
		if p.InitialBackoff > 0 {
			rp.InitialBackoff = durationpb.New(p.InitialBackoff)
		}
		if p.MaxBackoff > 0 {
			rp.MaxBackoff = durationpb.New(p.MaxBackoff)
		}
		cfg.retryPolicy = rp
	}
}

// WithFieldManager sets the field manager recorded in managedFields (the sidecar's
// default is "safewrite"). Server-side apply ([Apply]) needs one.
func WithFieldManager(name string) WriteOption {
	return func(cfg *writeConfig) { cfg.opts().FieldManager = name }
}

// WithDryRun asks the API server to validate and admit the write without persisting it.
func WithDryRun() WriteOption {
	return func(cfg *writeConfig) { cfg.opts().DryRun = true }
}

// WithIdempotencyKey makes a read-dependent change exactly-once across lost answers:
// the sidecar records key on the object (annotation safewrite.dev/applied-keys) in the
// same write as the change, and when a later attempt or call finds it there it writes
// nothing and answers [OutcomeUpdated] with [Result.AlreadyApplied] set. With a key, a
// call that failed with [ErrOutcomeUnknown], [ErrUnavailable] or [ErrDeadlineExceeded]
// may be sent again as it was. key must be 1 to 128 characters of [A-Za-z0-9._:-],
// unique per intended change (a UUID works). Not for server-side apply, nor for status
// writes.
func WithIdempotencyKey(key string) WriteOption {
	return func(cfg *writeConfig) { cfg.opts().IdempotencyKey = key }
}

// WithWriteAlone sends the write on its own. By default the sidecar commits writes to
// the same object (and subresource) that arrive while one is in flight together: one
// read, each call's preconditions and mutation applied in arrival order, one write,
// and every call still gets its own answer, as if they had been written one after
// another ([AttemptRecord.BatchSize] says how many a write carried).
func WithWriteAlone() WriteOption {
	return func(cfg *writeConfig) { cfg.opts().WriteAlone = true }
}

// WithFence makes the write one a deposed leader cannot make: the sidecar sends it
// only while it leads under f's Lease and epoch, else the call fails with
// [ErrPreconditionFailed] and [Error.ReasonCode] REASON_NOT_LEADER, and only when the
// object records no later epoch of that Lease, else REASON_FENCED (a later leader has
// written it). Neither is retryable and nothing was written. The epoch comes from the
// Lead RPC (LeadResponse.epoch).
func WithFence(f Fence) WriteOption {
	return func(cfg *writeConfig) {
		cfg.opts().Fence = &safewritev1.Fence{LeaseNamespace: f.LeaseNamespace, LeaseName: f.LeaseName, Epoch: f.Epoch}
	}
}

// WithCreateIfMissing gives the object to create when the target does not exist, as
// JSON text, a map[string]any or an *unstructured.Unstructured (see [JSONObject]); for
// a typed object use [WithCreateIfMissingObject]. The mutation is applied to it before
// it is created, so "create or change" applies the change exactly once either way;
// apiVersion, kind, name and namespace default to the target's, so `{}` will do. The
// call's outcome is then [OutcomeCreated]. Not allowed for status writes.
func WithCreateIfMissing[O JSONObject](obj O) WriteOption {
	return createIfMissing(obj)
}

// WithCreateIfMissingObject is [WithCreateIfMissing] with the object given as an
// [Object], such as the typed object being updated. Its nulls are dropped as
// [MergePatchObject] drops them. A nil obj fails with [ErrInvalid].
func WithCreateIfMissingObject(obj Object) WriteOption {
	if obj == nil || isNilPointer(obj) {
		return createIfMissing(nil)
	}
	return createIfMissing(obj)
}

func createIfMissing(obj any) WriteOption {
	return func(cfg *writeConfig) {
		text, err := jsonText(obj, '{')
		if err != nil {
			cfg.err = clientError(codes.InvalidArgument, "create-if-missing object: %v", err)
			return
		}
		cfg.opts().CreateIfMissingJson = text
	}
}
