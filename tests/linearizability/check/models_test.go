package check

import (
	"testing"
)

// Small hand-written histories, one object each: the correct ones pass and the
// broken ones are caught.

// o is an operation at [call, ret] by client c.
func o(c int, call, ret int64, kind, result, value, rv string) Operation {
	return Operation{Client: c, Object: "ns/obj", Call: call, Return: ret, Kind: kind, Result: result, Value: value, RV: rv}
}

func with(op Operation, in Input) Operation {
	op.Input = in
	return op
}

func verdict(t *testing.T, model, initial, initialRV string, ops ...Operation) Verdict {
	t.Helper()
	h := &History{
		Name:       t.Name(),
		Objects:    []Object{{Key: "ns/obj", Model: model, Initial: initial, InitialRV: initialRV}},
		Operations: ops,
	}
	r, err := Check(h, Options{})
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return r.Verdict
}

func expect(t *testing.T, want Verdict, model, initial, initialRV string, ops ...Operation) {
	t.Helper()
	if got := verdict(t, model, initial, initialRV, ops...); got != want {
		t.Fatalf("verdict %v, want %v", got, want)
	}
}

const (
	ok        = Linearizable
	violation = Violation
)

func TestCounter(t *testing.T) {
	cases := []struct {
		name string
		want Verdict
		ops  []Operation
	}{
		{"two concurrent increments and a read", ok, []Operation{
			o(1, 0, 10, KindInc, ResultOK, "2", ""),
			o(2, 5, 20, KindInc, ResultOK, "1", ""),
			o(3, 25, 30, KindRead, ResultOK, "2", ""),
		}},
		{"a value told twice", violation, []Operation{
			o(1, 0, 10, KindInc, ResultOK, "1", ""),
			o(2, 5, 20, KindInc, ResultOK, "1", ""),
		}},
		{"an increment told the batch's final value", violation, []Operation{
			o(1, 0, 10, KindInc, ResultOK, "2", ""),
			o(2, 0, 10, KindInc, ResultOK, "2", ""),
		}},
		{"a stale read", violation, []Operation{
			o(1, 0, 10, KindInc, ResultOK, "1", ""),
			o(2, 20, 30, KindRead, ResultOK, "0", ""),
		}},
		{"a precondition_failed showing the value as it stood", ok, []Operation{
			o(1, 0, 10, KindInc, ResultOK, "1", ""),
			o(2, 5, 30, KindInc, ResultPreconditionFailed, "1", ""),
			o(3, 8, 30, KindInc, ResultOK, "2", ""),
		}},
		{"a precondition_failed showing a value that never was", violation, []Operation{
			o(1, 0, 10, KindInc, ResultOK, "1", ""),
			o(2, 20, 30, KindInc, ResultPreconditionFailed, "5", ""),
		}},
		{"an increment answered unchanged", violation, []Operation{
			o(1, 0, 10, KindInc, ResultUnchanged, "0", ""),
		}},
		{"an aborted increment changes nothing", ok, []Operation{
			o(1, 0, 10, KindInc, ResultAborted, "", ""),
			o(2, 20, 30, KindRead, ResultOK, "0", ""),
		}},
		{"an aborted increment that took effect", violation, []Operation{
			o(1, 0, 10, KindInc, ResultAborted, "", ""),
			o(2, 20, 30, KindRead, ResultOK, "1", ""),
		}},
		{"already_applied: its own lost attempt made the change", ok, []Operation{
			o(1, 0, 50, KindInc, ResultAlreadyApplied, "2", ""),
			o(2, 10, 20, KindInc, ResultOK, "1", ""),
			o(3, 60, 70, KindRead, ResultOK, "2", ""),
		}},
		{"already_applied after a retried unknown: counted once", ok, []Operation{
			o(1, 0, 10, KindInc, ResultUnknown, "", ""),
			o(1, 20, 30, KindInc, ResultAlreadyApplied, "1", ""),
			o(2, 40, 50, KindRead, ResultOK, "1", ""),
		}},
		{"already_applied showing a value that never was", violation, []Operation{
			o(1, 0, 10, KindInc, ResultAlreadyApplied, "7", ""),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expect(t, c.want, ModelCounter, "0", "", c.ops...) })
	}
}

// An unknown answer branches: the change may have been made, at any time after the
// call, or not at all.
func TestUnknownBranches(t *testing.T) {
	lost := o(1, 0, 10, KindInc, ResultUnknown, "", "")
	t.Run("read sees it made", func(t *testing.T) {
		expect(t, ok, ModelCounter, "0", "", lost, o(2, 20, 30, KindRead, ResultOK, "1", ""))
	})
	t.Run("read sees it not made", func(t *testing.T) {
		expect(t, ok, ModelCounter, "0", "", lost, o(2, 20, 30, KindRead, ResultOK, "0", ""))
	})
	t.Run("made after a later read", func(t *testing.T) {
		expect(t, ok, ModelCounter, "0", "", lost,
			o(2, 20, 30, KindRead, ResultOK, "0", ""),
			o(2, 40, 50, KindRead, ResultOK, "1", ""))
	})
	t.Run("made, then undone", func(t *testing.T) {
		expect(t, violation, ModelCounter, "0", "", lost,
			o(2, 20, 30, KindRead, ResultOK, "1", ""),
			o(2, 40, 50, KindRead, ResultOK, "0", ""))
	})
	t.Run("made twice", func(t *testing.T) {
		expect(t, violation, ModelCounter, "0", "", lost, o(2, 20, 30, KindRead, ResultOK, "2", ""))
	})
	t.Run("two lost, both made, then an answer", func(t *testing.T) {
		expect(t, ok, ModelCounter, "0", "", lost, o(3, 5, 15, KindInc, ResultUnknown, "", ""),
			o(2, 20, 30, KindInc, ResultOK, "3", ""))
	})
	t.Run("register: either value", func(t *testing.T) {
		w := with(o(1, 0, 10, KindWrite, ResultUnknown, "", ""), Input{Value: "b"})
		expect(t, ok, ModelRegister, "a", "1", w, o(2, 20, 30, KindRead, ResultOK, "b", "7"))
		expect(t, ok, ModelRegister, "a", "1", w, o(2, 20, 30, KindRead, ResultOK, "a", "1"))
	})
	t.Run("set: either list", func(t *testing.T) {
		a := with(o(1, 0, 10, KindAppend, ResultUnknown, "", ""), Input{Value: "x"})
		expect(t, ok, ModelSet, "", "", a, o(2, 20, 30, KindRead, ResultOK, "x", "7"))
		expect(t, ok, ModelSet, "", "", a, o(2, 20, 30, KindRead, ResultOK, "", "7"))
		expect(t, violation, ModelSet, "", "", a,
			o(2, 20, 30, KindRead, ResultOK, "x", "7"),
			o(2, 40, 50, KindRead, ResultOK, "", "8"))
	})
}

func TestRegister(t *testing.T) {
	w := func(c int, call, ret int64, x, result, value, rv string) Operation {
		return with(o(c, call, ret, KindWrite, result, value, rv), Input{Value: x})
	}
	cas := func(c int, call, ret int64, from, to, result, value, rv string) Operation {
		return with(o(c, call, ret, KindCAS, result, value, rv), Input{From: from, To: to})
	}
	casRV := func(c int, call, ret int64, rv, to, result, value, answerRV string) Operation {
		op := with(o(c, call, ret, KindCASRV, result, value, answerRV), Input{RV: rv, To: to})
		if result == ResultAborted {
			op.Code = "ABORTED"
		}
		return op
	}
	read := func(c int, call, ret int64, value, rv string) Operation {
		return o(c, call, ret, KindRead, ResultOK, value, rv)
	}
	cases := []struct {
		name string
		want Verdict
		ops  []Operation
	}{
		{"a correct history", ok, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			cas(2, 20, 30, "b", "c", ResultOK, "c", "3"),
			cas(3, 25, 35, "b", "d", ResultPreconditionFailed, "c", "3"),
			read(4, 40, 50, "c", "3"),
			casRV(1, 60, 70, "3", "e", ResultOK, "e", "4"),
			casRV(2, 80, 90, "3", "f", ResultAborted, "", ""),
			w(3, 100, 110, "e", ResultUnchanged, "e", "4"),
			cas(4, 120, 130, "e", "e", ResultUnchanged, "e", "4"),
		}},
		{"one group commit, answered in turn", ok, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "5"),
			cas(2, 0, 10, "a", "z", ResultPreconditionFailed, "b", "5"),
			w(3, 0, 10, "c", ResultOK, "c", "5"),
			read(4, 20, 30, "c", "5"),
		}},
		{"one group commit, every member told the final object", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "c", "5"),
			w(3, 0, 10, "c", ResultOK, "c", "5"),
		}},
		{"a read of a value never written", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			read(2, 20, 30, "q", "2"),
		}},
		{"an unchanged answer on a state that did not hold its value", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			w(2, 20, 30, "c", ResultUnchanged, "c", "2"),
		}},
		{"a precondition_failed whose current value never existed", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			cas(2, 20, 30, "a", "c", ResultPreconditionFailed, "zz", "2"),
		}},
		{"a precondition_failed on a value that matched", violation, []Operation{
			cas(2, 0, 10, "a", "c", ResultPreconditionFailed, "a", "1"),
		}},
		{"a cas that succeeded on a value that did not match", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			cas(2, 20, 30, "a", "c", ResultOK, "c", "3"),
		}},
		{"a cas_rv aborted although its resourceVersion matched", violation, []Operation{
			casRV(1, 0, 10, "1", "b", ResultAborted, "", ""),
		}},
		{"a cas_rv that succeeded on a stale resourceVersion", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			casRV(2, 20, 30, "1", "c", ResultOK, "c", "3"),
		}},
		{"a read whose resourceVersion does not match", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "2"),
			read(2, 20, 30, "b", "9"),
		}},
		{"the resourceVersion going back", violation, []Operation{
			w(1, 0, 10, "b", ResultOK, "b", "5"),
			w(2, 20, 30, "c", ResultOK, "c", "3"),
		}},
		{"a lost write makes the resourceVersion unknown, then a read learns it", ok, []Operation{
			w(1, 0, 10, "b", ResultUnknown, "", ""),
			casRV(2, 20, 30, "1", "c", ResultAborted, "", ""),
			read(3, 40, 50, "b", "7"),
			casRV(2, 60, 70, "7", "d", ResultOK, "d", "8"),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expect(t, c.want, ModelRegister, "a", "1", c.ops...) })
	}
}

func TestSet(t *testing.T) {
	app := func(c int, call, ret int64, x, result, value string) Operation {
		return with(o(c, call, ret, KindAppend, result, value, "1"), Input{Value: x})
	}
	read := func(c int, call, ret int64, value string) Operation {
		return o(c, call, ret, KindRead, ResultOK, value, "1")
	}
	cases := []struct {
		name string
		want Verdict
		ops  []Operation
	}{
		{"concurrent appends, each told the list after its own", ok, []Operation{
			app(1, 0, 10, "a", ResultOK, "a"),
			app(2, 0, 10, "b", ResultOK, "a,b"),
			read(3, 20, 30, "a,b"),
		}},
		{"an append's answer omits another completed append", violation, []Operation{
			app(1, 0, 10, "a", ResultOK, "a"),
			app(2, 20, 30, "b", ResultOK, "b"),
		}},
		{"every member told the batch's final list", violation, []Operation{
			app(1, 0, 10, "a", ResultOK, "a,b"),
			app(2, 0, 10, "b", ResultOK, "a,b"),
		}},
		{"a read in another order", violation, []Operation{
			app(1, 0, 10, "a", ResultOK, "a"),
			app(2, 20, 30, "b", ResultOK, "a,b"),
			read(3, 40, 50, "b,a"),
		}},
		{"already_applied by its own lost attempt, others appended since", ok, []Operation{
			app(1, 0, 50, "a", ResultAlreadyApplied, "a,b"),
			app(2, 10, 20, "b", ResultOK, "a,b"),
		}},
		{"already_applied after a retried unknown", ok, []Operation{
			app(1, 0, 10, "a", ResultUnknown, ""),
			app(1, 20, 30, "a", ResultAlreadyApplied, "a"),
			read(2, 40, 50, "a"),
		}},
		{"already_applied whose answer lacks its item", violation, []Operation{
			app(1, 0, 10, "a", ResultAlreadyApplied, ""),
		}},
		{"appended twice", violation, []Operation{
			app(1, 0, 10, "a", ResultOK, "a"),
			app(2, 20, 30, "a", ResultOK, "a,a"),
		}},
		{"an aborted append that took effect", violation, []Operation{
			app(1, 0, 10, "a", ResultAborted, ""),
			read(2, 20, 30, "a"),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expect(t, c.want, ModelSet, "", "", c.ops...) })
	}
}

// A register whose resourceVersions are not numbers is checked for equality only.
func TestRegisterOpaqueResourceVersions(t *testing.T) {
	w := func(c int, call, ret int64, x, rv string) Operation {
		return with(o(c, call, ret, KindWrite, ResultOK, x, rv), Input{Value: x})
	}
	// "b-5" before "a-3": fine when they are opaque.
	expect(t, ok, ModelRegister, "a", "x-1",
		w(1, 0, 10, "b", "b-5"), w(2, 20, 30, "c", "a-3"),
		o(3, 40, 50, KindRead, ResultOK, "c", "a-3"))
	expect(t, violation, ModelRegister, "a", "x-1",
		w(1, 0, 10, "b", "b-5"), o(3, 20, 30, KindRead, ResultOK, "b", "a-3"))
}
