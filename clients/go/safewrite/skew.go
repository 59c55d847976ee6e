package safewrite

// Version skew (docs/compatibility.md): a call that needs an RPC, a field or an enum
// value its sidecar lacks is refused here, before anything is sent, as the sidecar
// itself refuses a field it does not know (FAILED_PRECONDITION, reason UNKNOWN_FIELD).
// What was added after 0.1.0 is read once from the generated descriptor (the proto's
// method_since, since and value_since options); what the sidecar has, from its rpc
// Capabilities, asked once per client, the first time a call needs something added
// after 0.1.0. While Capabilities fails (but UNIMPLEMENTED), such calls fail too,
// before anything is sent, and the next one asks again.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// sinceIndex is what the contract added after 0.1.0, by the first version that has it.
type sinceIndex struct {
	// methods: by gRPC method path ("/safewrite.v1.WriterService/Lead").
	methods map[string]string
	// fields: by full name ("safewrite.v1.WriteOptions.fence").
	fields map[protoreflect.FullName]string
	// values: by enum, then number, of the values with a value_since option.
	values map[protoreflect.FullName]map[protoreflect.EnumNumber]string
	// reaches: the messages through which a field or enum value above may be set; the
	// walk of a request enters no other.
	reaches map[protoreflect.FullName]bool
	// walked: for each message that reaches, the fields the walk looks at: those with a
	// since option, and those that reach.
	walked map[protoreflect.FullName][]protoreflect.FieldDescriptor
	// capabilities: the first version with rpc Capabilities; a sidecar that answers it
	// UNIMPLEMENTED is older.
	capabilities string
}

// since is read from the generated descriptor when the package loads.
var since = readSince(safewritev1.File_safewrite_v1_writer_proto)

func readSince(file protoreflect.FileDescriptor) *sinceIndex {
	ix := &sinceIndex{
		methods: map[string]string{},
		fields:  map[protoreflect.FullName]string{},
		values:  map[protoreflect.FullName]map[protoreflect.EnumNumber]string{},
		reaches: map[protoreflect.FullName]bool{},
		walked:  map[protoreflect.FullName][]protoreflect.FieldDescriptor{},
	}
	for i := 0; i < file.Services().Len(); i++ {
		svc := file.Services().Get(i)
		for j := 0; j < svc.Methods().Len(); j++ {
			m := svc.Methods().Get(j)
			if v := proto.GetExtension(m.Options(), safewritev1.E_MethodSince).(string); v != "" {
				ix.methods["/"+string(svc.FullName())+"/"+string(m.Name())] = v
			}
		}
	}
	ix.capabilities = ix.methods[safewritev1.WriterService_Capabilities_FullMethodName]

	var messages []protoreflect.MessageDescriptor
	addEnums := func(enums protoreflect.EnumDescriptors) {
		for i := 0; i < enums.Len(); i++ {
			e := enums.Get(i)
			for j := 0; j < e.Values().Len(); j++ {
				v := e.Values().Get(j)
				if s := proto.GetExtension(v.Options(), safewritev1.E_ValueSince).(string); s != "" {
					if ix.values[e.FullName()] == nil {
						ix.values[e.FullName()] = map[protoreflect.EnumNumber]string{}
					}
					ix.values[e.FullName()][v.Number()] = s
				}
			}
		}
	}
	var addMessages func(protoreflect.MessageDescriptors)
	addMessages = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			messages = append(messages, m)
			for j := 0; j < m.Fields().Len(); j++ {
				f := m.Fields().Get(j)
				if s := proto.GetExtension(f.Options(), safewritev1.E_Since).(string); s != "" {
					ix.fields[f.FullName()] = s
				}
			}
			addEnums(m.Enums())
			addMessages(m.Messages())
		}
	}
	addEnums(file.Enums())
	addMessages(file.Messages())

	// A message reaches what one of its fields is, or holds (an enum, a message, a
	// map's value), until nothing changes: at most one round per message.
	for round := 0; round <= len(messages); round++ {
		changed := false
		for _, m := range messages {
			if ix.reaches[m.FullName()] {
				continue
			}
			for j := 0; j < m.Fields().Len(); j++ {
				if ix.fieldReaches(m.Fields().Get(j)) {
					ix.reaches[m.FullName()] = true
					changed = true
					break
				}
			}
		}
		if !changed {
			break
		}
	}
	for _, m := range messages {
		if !ix.reaches[m.FullName()] {
			continue
		}
		for j := 0; j < m.Fields().Len(); j++ {
			if f := m.Fields().Get(j); ix.fieldReaches(f) {
				ix.walked[m.FullName()] = append(ix.walked[m.FullName()], f)
			}
		}
	}
	return ix
}

// fieldReaches reports whether setting f may set something added after 0.1.0.
func (ix *sinceIndex) fieldReaches(f protoreflect.FieldDescriptor) bool {
	if _, ok := ix.fields[f.FullName()]; ok {
		return true
	}
	if f.IsMap() {
		f = f.MapValue()
	}
	if e := f.Enum(); e != nil && ix.values[e.FullName()] != nil {
		return true
	}
	if m := f.Message(); m != nil && ix.reaches[m.FullName()] {
		return true
	}
	return false
}

// feature is one thing a request uses that was added after 0.1.0.
type feature struct {
	// name is its full name: "safewrite.v1.WriterService/Delete",
	// "safewrite.v1.WriteOptions.fence",
	// "safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN".
	name string
	// since is the first version that has it.
	since string
	// metadata names it as the sidecar's own refusal does (field, message, number; or
	// field, enum, value; or method).
	metadata map[string]string
}

// uses returns what a call of method with req uses that was added after 0.1.0, in the
// order a walk over its set fields meets it; nil (without allocating) when nothing.
func (ix *sinceIndex) uses(method string, req proto.Message) []feature {
	var found []feature
	if s, ok := ix.methods[method]; ok {
		name := method[1:]
		found = append(found, feature{name: name, since: s, metadata: map[string]string{"method": name}})
	}
	if req != nil {
		found = ix.walk(req.ProtoReflect(), "", found)
	}
	return found
}

// walk appends what m's set fields use, path being the fields leading to m ("options"):
// of its set fields, those that have a since option or may hold one that has.
func (ix *sinceIndex) walk(m protoreflect.Message, path string, found []feature) []feature {
	for _, f := range ix.walked[m.Descriptor().FullName()] {
		if !m.Has(f) {
			continue
		}
		v := m.Get(f)
		if s, ok := ix.fields[f.FullName()]; ok {
			found = append(found, feature{name: string(f.FullName()), since: s, metadata: map[string]string{
				"field":   path,
				"message": string(m.Descriptor().FullName()),
				"number":  strconv.Itoa(int(f.Number())),
			}})
		}
		at := string(f.Name())
		if path != "" {
			at = path + "." + at
		}
		switch {
		case f.IsList():
			list := v.List()
			for i := 0; i < list.Len(); i++ {
				found = ix.value(f, list.Get(i), at, found)
			}
		case f.IsMap():
			found = ix.mapValues(f, v.Map(), at, found)
		default:
			found = ix.value(f, v, at, found)
		}
	}
	return found
}

// mapValues appends what the values of map field f (at path) use. (Apart from walk,
// whose found would otherwise move to the heap for the closure on every call.)
func (ix *sinceIndex) mapValues(f protoreflect.FieldDescriptor, m protoreflect.Map, path string, found []feature) []feature {
	m.Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
		found = ix.value(f.MapValue(), v, path, found)
		return true
	})
	return found
}

// value appends what one value of field f (at path) uses.
func (ix *sinceIndex) value(f protoreflect.FieldDescriptor, v protoreflect.Value, path string, found []feature) []feature {
	if e := f.Enum(); e != nil {
		s, ok := ix.values[e.FullName()][v.Enum()]
		if !ok {
			return found
		}
		name := string(e.Values().ByNumber(v.Enum()).Name())
		return append(found, feature{name: string(e.FullName()) + "." + name, since: s, metadata: map[string]string{
			"field": path,
			"enum":  string(e.FullName()),
			"value": strconv.Itoa(int(v.Enum())),
		}})
	}
	if f.Message() != nil {
		return ix.walk(v.Message(), path, found)
	}
	return found
}

// sidecarFeatures is what a sidecar said it has.
type sidecarFeatures struct {
	// version is the sidecar's version; empty for a sidecar older than rpc
	// Capabilities, which has exactly what has no since option.
	version string
	// has holds the names of its methods, fields and enum values.
	has map[string]bool
}

// olderSidecar is a sidecar that answered rpc Capabilities UNIMPLEMENTED.
var olderSidecar = &sidecarFeatures{}

func featuresOf(resp *safewritev1.CapabilitiesResponse) *sidecarFeatures {
	f := &sidecarFeatures{version: resp.GetVersion(), has: map[string]bool{}}
	for _, names := range [][]string{resp.GetMethods(), resp.GetFields(), resp.GetEnumValues()} {
		for _, name := range names {
			f.has[name] = true
		}
	}
	return f
}

// missing returns the first of uses the sidecar lacks, as the error of a call refused
// before it was sent; nil when it has them all.
func (f *sidecarFeatures) missing(uses []feature) *Error {
	for _, u := range uses {
		if !f.has[u.name] {
			return f.refusal(u)
		}
	}
	return nil
}

// refusal is the error of a call that needs u, which this sidecar lacks: the
// sidecar's own refusal of a field it does not know (FAILED_PRECONDITION, reason
// UNKNOWN_FIELD, never retryable), made here.
func (f *sidecarFeatures) refusal(u feature) *Error {
	which := f.version
	if which == "" {
		which = fmt.Sprintf("older than %s (it has no rpc Capabilities)", since.capabilities)
	}
	message := fmt.Sprintf("%s needs a sidecar of %s or newer; this sidecar is %s; nothing was sent (docs/compatibility.md)",
		u.name, u.since, which)
	metadata := map[string]string{"feature": u.name, "since": u.since, "sidecar_version": f.version}
	for k, v := range u.metadata {
		metadata[k] = v
	}
	reason := safewritev1.Reason_REASON_UNKNOWN_FIELD
	info := &errdetails.ErrorInfo{Reason: reason.String()[len("REASON_"):], Domain: Domain, Metadata: metadata}
	st := status.New(codes.FailedPrecondition, message)
	if withDetails, err := st.WithDetails(protoadapt.MessageV1Of(info),
		protoadapt.MessageV1Of(&safewritev1.WriteFailure{Reason: reason})); err == nil {
		st = withDetails
	}
	return fromStatus(st)
}

// unlearned is the error of a call that needs u when the sidecar's features could not
// be learned: nothing is sent (an older sidecar would drop what it does not know, a
// fence above all, and write without it), and the error is the Capabilities status's
// own, its code (so its retry advice) and details kept, with a message that says so.
func unlearned(u feature, st *status.Status) *Error {
	p := st.Proto()
	p.Message = fmt.Sprintf("%s needs a sidecar of %s or newer; this sidecar's features could not be learned (rpc Capabilities: %s); nothing was sent, and the next call asks again (docs/compatibility.md)",
		u.name, u.since, st.Message())
	e := fromStatus(status.FromProto(p))
	// Nothing was sent, so nothing is in doubt: sending the call again is safe, as for
	// a read (a DEADLINE_EXCEEDED or CANCELLED here is retryable without a key).
	e.Idempotent = true
	return e
}

// skewState is a client's knowledge of its sidecar's features.
type skewState struct {
	// known is set once rpc Capabilities answered (or answered UNIMPLEMENTED).
	known atomic.Pointer[sidecarFeatures]
	mu    sync.Mutex
	// asking is the Capabilities call in flight; nil when none is.
	asking *asking
}

// asking is one Capabilities call, which the calls that need its answer meanwhile wait
// for.
type asking struct {
	// done is closed when the call has ended, and the fields below are set.
	done chan struct{}
	// failed is why it failed (but UNIMPLEMENTED); nil when it answered.
	failed *status.Status
	// ctxEnded: it failed because the context of the call that asked ended, which says
	// nothing to the calls waiting for it: they ask again.
	ctxEnded bool
}

// check refuses, before anything is sent, a call of method with req that needs an RPC,
// a field or an enum value the sidecar lacks. A call that needs nothing added after
// 0.1.0 costs a walk over the set fields of the messages that may hold something, and
// no Capabilities call. When the sidecar's features cannot be learned (rpc
// Capabilities failed otherwise than UNIMPLEMENTED, or ctx ended while waiting for
// another call's answer), the call fails closed, with nothing sent: a sidecar older
// than 0.2.0 that fails Capabilities (say RESOURCE_EXHAUSTED) and then accepts the call
// would drop the fields it does not know, and write a fenced write unfenced. The error
// has the Capabilities status's code (the context's when ctx ended), so UNAVAILABLE and
// RESOURCE_EXHAUSTED stay retryable; nothing is kept, and the next call asks again.
func (c *Client) check(ctx context.Context, method string, req proto.Message) error {
	uses := since.uses(method, req)
	if len(uses) == 0 {
		return nil
	}
	f, failed := c.features(ctx)
	if failed != nil {
		return unlearned(uses[0], failed)
	}
	if err := f.missing(uses); err != nil {
		return err
	}
	return nil
}

// features returns the sidecar's features, asking rpc Capabilities the first time
// (one call at a time: the others wait for its answer, or their ctx); or, when they
// could not be learned, the status that says why: the failed Capabilities call's (the
// one in flight when the call arrived, unless that failed for its own caller's
// context: then this call asks again), or ctx's when it ended while waiting.
func (c *Client) features(ctx context.Context) (*sidecarFeatures, *status.Status) {
	s := &c.skew
	if f := s.known.Load(); f != nil {
		return f, nil
	}
	for {
		s.mu.Lock()
		if f := s.known.Load(); f != nil {
			s.mu.Unlock()
			return f, nil
		}
		if a := s.asking; a != nil {
			s.mu.Unlock()
			select {
			case <-a.done:
				if f := s.known.Load(); f != nil {
					return f, nil
				}
				if a.ctxEnded {
					continue
				}
				return nil, a.failed
			case <-ctx.Done():
				st := status.FromContextError(ctx.Err())
				return nil, status.New(st.Code(), st.Message()+", waiting for another call's answer")
			}
		}
		a := &asking{done: make(chan struct{})}
		s.asking = a
		s.mu.Unlock()

		f, failed := c.askCapabilities(ctx)
		s.mu.Lock()
		if f != nil {
			s.known.Store(f)
		}
		a.failed = failed
		a.ctxEnded = failed != nil && ctx.Err() != nil
		s.asking = nil
		close(a.done)
		s.mu.Unlock()
		return f, failed
	}
}

// askCapabilities calls rpc Capabilities: the sidecar's features, [olderSidecar] for
// UNIMPLEMENTED, or the status of any other failure.
func (c *Client) askCapabilities(ctx context.Context) (*sidecarFeatures, *status.Status) {
	resp, err := c.stub.Capabilities(ctx, &safewritev1.CapabilitiesRequest{}, c.callOpts...)
	if err == nil {
		return featuresOf(resp), nil
	}
	st := status.Convert(err)
	if st.Code() == codes.Unimplemented {
		return olderSidecar, nil
	}
	return nil, st
}
