package safewrite

// The skew check's index of what the proto added after 0.1.0, and its cost, with no
// sidecar (skew_test.go checks the calls against fake sidecars of either age).

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// Capabilities answers as a sidecar of this client's version does: the fakes of the
// offline tests serve everything this client knows.
func (f *fakeWriter) Capabilities(context.Context, *safewritev1.CapabilitiesRequest) (*safewritev1.CapabilitiesResponse, error) {
	return capabilitiesOfThisVersion(), nil
}

// Capabilities: see fakeWriter's.
func (f *leadWriter) Capabilities(context.Context, *safewritev1.CapabilitiesRequest) (*safewritev1.CapabilitiesResponse, error) {
	return capabilitiesOfThisVersion(), nil
}

// capabilitiesOfThisVersion names every RPC, field and enum value of the generated
// descriptor, as a sidecar of [Version] does.
func capabilitiesOfThisVersion() *safewritev1.CapabilitiesResponse {
	file := safewritev1.File_safewrite_v1_writer_proto
	resp := &safewritev1.CapabilitiesResponse{Version: Version}
	for i := 0; i < file.Services().Len(); i++ {
		svc := file.Services().Get(i)
		for j := 0; j < svc.Methods().Len(); j++ {
			resp.Methods = append(resp.Methods, string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name()))
		}
	}
	enums := func(es protoreflect.EnumDescriptors) {
		for i := 0; i < es.Len(); i++ {
			for j := 0; j < es.Get(i).Values().Len(); j++ {
				resp.EnumValues = append(resp.EnumValues, string(es.Get(i).FullName())+"."+string(es.Get(i).Values().Get(j).Name()))
			}
		}
	}
	var messages func(protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			m := ms.Get(i)
			for j := 0; j < m.Fields().Len(); j++ {
				resp.Fields = append(resp.Fields, string(m.Fields().Get(j).FullName()))
			}
			enums(m.Enums())
			messages(m.Messages())
		}
	}
	enums(file.Enums())
	messages(file.Messages())
	return resp
}

func TestSinceIndexIsTheProtos(t *testing.T) {
	wantMethods := map[string]string{
		safewritev1.WriterService_Lead_FullMethodName:         "0.2.0",
		safewritev1.WriterService_Delete_FullMethodName:       "0.2.0",
		safewritev1.WriterService_Capabilities_FullMethodName: "0.2.0",
	}
	if !reflect.DeepEqual(since.methods, wantMethods) {
		t.Errorf("methods with method_since: %v, want %v", since.methods, wantMethods)
	}
	wantFields := map[protoreflect.FullName]string{"safewrite.v1.WriteOptions.fence": "0.2.0"}
	if !reflect.DeepEqual(since.fields, wantFields) {
		t.Errorf("fields with since: %v, want %v", since.fields, wantFields)
	}
	if len(since.values) != 0 {
		t.Errorf("enum values with value_since: %v, want none", since.values)
	}
	if since.capabilities != "0.2.0" {
		t.Errorf("rpc Capabilities since %q", since.capabilities)
	}
	for _, name := range []protoreflect.FullName{"safewrite.v1.UpdateWithRetryRequest", "safewrite.v1.PatchStatusRequest",
		"safewrite.v1.TransactRequest", "safewrite.v1.TransactBegin", "safewrite.v1.WriteOptions"} {
		if !since.reaches[name] {
			t.Errorf("%s does not reach WriteOptions.fence", name)
		}
	}
	for _, name := range []protoreflect.FullName{"safewrite.v1.ObjectRef", "safewrite.v1.Mutation", "safewrite.v1.GetRequest",
		"safewrite.v1.DeleteRequest", "safewrite.v1.LeadRequest", "safewrite.v1.TransactProposal"} {
		if since.reaches[name] {
			t.Errorf("%s is walked, but holds nothing with a since option", name)
		}
	}
}

func TestUsesNamesWhatARequestSets(t *testing.T) {
	fenced := &safewritev1.UpdateWithRetryRequest{Options: &safewritev1.WriteOptions{
		Fence: &safewritev1.Fence{LeaseNamespace: "ns", LeaseName: "l", Epoch: 1}}}
	got := since.uses(safewritev1.WriterService_UpdateWithRetry_FullMethodName, fenced)
	want := []feature{{name: "safewrite.v1.WriteOptions.fence", since: "0.2.0", metadata: map[string]string{
		"field": "options", "message": "safewrite.v1.WriteOptions", "number": "6"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("a fenced update uses %v, want %v", got, want)
	}
	plain := &safewritev1.UpdateWithRetryRequest{Options: &safewritev1.WriteOptions{FieldManager: "me"}}
	if got := since.uses(safewritev1.WriterService_UpdateWithRetry_FullMethodName, plain); got != nil {
		t.Errorf("an update without a fence uses %v", got)
	}
	got = since.uses(safewritev1.WriterService_Delete_FullMethodName, &safewritev1.DeleteRequest{})
	if len(got) != 1 || got[0].name != "safewrite.v1.WriterService/Delete" || got[0].metadata["method"] != got[0].name {
		t.Errorf("a delete uses %v", got)
	}

	// An enum value with value_since (the proto has none yet): a fake index that says
	// PROPAGATION_POLICY_ORPHAN came in 0.3.0.
	ix := &sinceIndex{
		methods: map[string]string{},
		fields:  map[protoreflect.FullName]string{},
		values: map[protoreflect.FullName]map[protoreflect.EnumNumber]string{
			"safewrite.v1.PropagationPolicy": {protoreflect.EnumNumber(safewritev1.PropagationPolicy_PROPAGATION_POLICY_ORPHAN): "0.3.0"},
		},
		reaches: map[protoreflect.FullName]bool{"safewrite.v1.DeleteRequest": true},
		walked: map[protoreflect.FullName][]protoreflect.FieldDescriptor{
			"safewrite.v1.DeleteRequest": {(&safewritev1.DeleteRequest{}).ProtoReflect().Descriptor().Fields().ByName("propagation_policy")},
		},
	}
	orphan := &safewritev1.DeleteRequest{PropagationPolicy: safewritev1.PropagationPolicy_PROPAGATION_POLICY_ORPHAN}
	got = ix.uses(safewritev1.WriterService_Delete_FullMethodName, orphan)
	want = []feature{{name: "safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN", since: "0.3.0", metadata: map[string]string{
		"field": "propagation_policy", "enum": "safewrite.v1.PropagationPolicy", "value": "3"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("an orphaning delete uses %v, want %v", got, want)
	}
	err := (&sidecarFeatures{version: "0.2.0", has: map[string]bool{}}).missing(got)
	if err == nil || err.Message != "safewrite.v1.PropagationPolicy.PROPAGATION_POLICY_ORPHAN needs a sidecar of 0.3.0 or newer; this sidecar is 0.2.0; nothing was sent (docs/compatibility.md)" {
		t.Errorf("refusal: %v", err)
	}
	foreground := &safewritev1.DeleteRequest{PropagationPolicy: safewritev1.PropagationPolicy_PROPAGATION_POLICY_FOREGROUND}
	if got := ix.uses(safewritev1.WriterService_Delete_FullMethodName, foreground); got != nil {
		t.Errorf("a foreground delete uses %v", got)
	}
}

// TestUsesCostsNoAllocationForOldFeatures: the check of a call that needs nothing
// added after 0.1.0 allocates nothing (and asks no Capabilities: see skew_test.go).
func TestUsesCostsNoAllocationForOldFeatures(t *testing.T) {
	req := &safewritev1.UpdateWithRetryRequest{
		Target:   &safewritev1.ObjectRef{ApiVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"},
		Mutation: &safewritev1.Mutation{Kind: &safewritev1.Mutation_Cel{Cel: &safewritev1.CelMutation{Expression: "{}"}}},
		Options:  &safewritev1.WriteOptions{FieldManager: "me", IdempotencyKey: "k"},
	}
	allocs := testing.AllocsPerRun(100, func() {
		if since.uses(safewritev1.WriterService_UpdateWithRetry_FullMethodName, req) != nil {
			t.Fatal("uses something new")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per check", allocs)
	}
}

// BenchmarkCheck: the per-call check of an update, with and without a fence, against
// a sidecar whose features are known.
func BenchmarkCheck(b *testing.B) {
	c := &Client{}
	c.skew.known.Store(featuresOf(capabilitiesOfThisVersion()))
	plain := &safewritev1.UpdateWithRetryRequest{
		Target:   &safewritev1.ObjectRef{ApiVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"},
		Mutation: &safewritev1.Mutation{Kind: &safewritev1.Mutation_Cel{Cel: &safewritev1.CelMutation{Expression: "{}"}}},
		Options:  &safewritev1.WriteOptions{FieldManager: "me"},
	}
	fenced := &safewritev1.UpdateWithRetryRequest{Target: plain.Target, Mutation: plain.Mutation, Options: &safewritev1.WriteOptions{
		Fence: &safewritev1.Fence{LeaseNamespace: "ns", LeaseName: "l", Epoch: 1}}}
	for name, req := range map[string]*safewritev1.UpdateWithRetryRequest{"plain": plain, "fenced": fenced} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := c.check(context.Background(), safewritev1.WriterService_UpdateWithRetry_FullMethodName, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
