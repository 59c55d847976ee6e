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

// cond is a set_condition at [call, ret] by client c, asking for lastTransitionTime
// ltt ("" for the time of the write), answered with the conditions list value.
func cond(c int, call, ret int64, typ, status, reason, ltt, result, value, rv string) Operation {
	return with(o(c, call, ret, KindSetCondition, result, value, rv),
		Input{Type: typ, Status: status, Reason: reason, LTT: ltt})
}

// Times as the workload asks for them (unique, in the past) and as the sidecar
// chooses them (the time of the write).
const (
	asked1 = "2001-01-01T00:00:01Z"
	asked2 = "2001-01-01T00:00:02Z"
	asked3 = "2001-01-01T00:00:03Z"
	now1   = "2026-11-26T15:04:05Z"
	now2   = "2026-11-26T15:04:06Z"
)

func TestConditions(t *testing.T) {
	read := func(c int, call, ret int64, value, rv string) Operation {
		return o(c, call, ret, KindRead, ResultOK, value, rv)
	}
	cases := []struct {
		name string
		want Verdict
		ops  []Operation
	}{
		{"two types set at once, each told the list right after its own", ok, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "5"),
			cond(2, 0, 10, "B", "False", "Wait", "", ResultOK, "A=True/Done@"+asked1+";B=False/Wait@"+now1, "5"),
			read(3, 20, 30, "A=True/Done@"+asked1+";B=False/Wait@"+now1, "5"),
		}},
		{"a new reason keeps the lastTransitionTime, a new status moves it", ok, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "True", "Again", asked2, ResultOK, "A=True/Again@"+asked1, "3"),
			cond(3, 40, 50, "A", "False", "Lost", asked3, ResultOK, "A=False/Lost@"+asked3, "4"),
			cond(1, 60, 70, "A", "True", "Back", "", ResultOK, "A=True/Back@"+now1, "5"),
			cond(2, 80, 90, "A", "True", "Back", asked2, ResultUnchanged, "A=True/Back@"+now1, "5"),
		}},
		{"a lost status change, its time learned from a read", ok, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "False", "Lost", "", ResultUnknown, "", ""),
			read(3, 40, 50, "A=False/Lost@"+now2, "3"),
			cond(2, 60, 70, "A", "False", "Again", "", ResultOK, "A=False/Again@"+now2, "4"),
		}},
		{"a lost change that was never made", ok, []Operation{
			cond(2, 0, 10, "A", "False", "Lost", "", ResultUnknown, "", ""),
			read(3, 40, 50, "", "3"),
		}},
		{"a failed call showing the list as it stood", ok, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "B", "True", "Done", asked2, ResultAborted, "A=True/Done@"+asked1, "2"),
		}},
		{"one type set twice in a batch, each told the batch's final list", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=False/Lost@"+asked2, "5"),
			cond(2, 0, 10, "A", "False", "Lost", asked2, ResultOK, "A=False/Lost@"+asked2, "5"),
		}},
		{"a member's change lost from the batch's write", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "5"),
			cond(2, 0, 10, "B", "True", "Done", asked2, ResultOK, "B=True/Done@"+asked2, "5"),
			read(3, 20, 30, "B=True/Done@"+asked2, "5"),
		}},
		{"told a status it did not set", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=False/Done@"+asked1, "2"),
		}},
		{"the lastTransitionTime moved without a status change", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "True", "Again", asked2, ResultOK, "A=True/Again@"+asked2, "3"),
		}},
		{"the lastTransitionTime kept on a status change", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "False", "Lost", "", ResultOK, "A=False/Lost@"+asked1, "3"),
		}},
		{"a status change not to the time asked for", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "False", "Lost", asked2, ResultOK, "A=False/Lost@"+now1, "3"),
		}},
		{"the time of a lost status change, two different ones told", violation, []Operation{
			cond(2, 0, 10, "A", "False", "Lost", "", ResultUnknown, "", ""),
			read(3, 20, 30, "A=False/Lost@"+now1, "3"),
			read(3, 40, 50, "A=False/Lost@"+now2, "3"),
		}},
		{"an unchanged answer for a status that was not there", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "False", "Done", "", ResultUnchanged, "A=True/Done@"+asked1, "2"),
		}},
		{"a change of nothing answered written", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "A", "True", "Done", asked2, ResultOK, "A=True/Done@"+asked1, "3"),
		}},
		{"a stale read", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			read(3, 20, 30, "", "1"),
		}},
		{"an aborted set that took effect", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultAborted, "", ""),
			read(3, 20, 30, "A=True/Done@"+asked1, "2"),
		}},
		{"the object said gone", violation, []Operation{
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultGone, "", ""),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expect(t, c.want, ModelConditions, "", "1", c.ops...) })
	}
}

func TestFinalizers(t *testing.T) {
	add := func(c int, call, ret int64, x, result, value, rv string) Operation {
		return with(o(c, call, ret, KindAdd, result, value, rv), Input{Value: x})
	}
	remove := func(c int, call, ret int64, x, result, value, rv string) Operation {
		return with(o(c, call, ret, KindRemove, result, value, rv), Input{Value: x})
	}
	read := func(c int, call, ret int64, value, rv string) Operation {
		return o(c, call, ret, KindRead, ResultOK, value, rv)
	}
	cases := []struct {
		name string
		want Verdict
		ops  []Operation
	}{
		{"adds and removes at once, each told the list right after its own", ok, []Operation{
			add(1, 0, 10, "f", ResultOK, "f", "5"),
			add(2, 0, 10, "g", ResultOK, "f,g", "5"),
			remove(3, 0, 10, "f", ResultOK, "g", "5"),
			add(4, 0, 10, "g", ResultUnchanged, "g", "5"),
			read(5, 20, 30, "g", "5"),
		}},
		{"nothing to do, nothing written", ok, []Operation{
			remove(1, 0, 10, "f", ResultUnchanged, "", "1"),
			add(2, 20, 30, "f", ResultOK, "f", "2"),
			add(3, 40, 50, "f", ResultUnchanged, "f", "2"),
		}},
		{"a lost add, made or not", ok, []Operation{
			add(1, 0, 10, "f", ResultUnknown, "", ""),
			read(2, 20, 30, "", "1"),
			read(2, 40, 50, "f", "2"),
		}},
		{"one finalizer added and removed in a batch, each told the final list", violation, []Operation{
			add(1, 0, 10, "f", ResultOK, "", "5"),
			remove(2, 0, 10, "f", ResultOK, "", "5"),
		}},
		{"a member's change lost from the batch's write", violation, []Operation{
			add(1, 0, 10, "f", ResultOK, "f", "5"),
			add(2, 0, 10, "g", ResultOK, "g", "5"),
			read(3, 20, 30, "g", "5"),
		}},
		{"added twice", violation, []Operation{
			add(1, 0, 10, "f", ResultOK, "f", "2"),
			add(2, 20, 30, "f", ResultOK, "f", "3"),
		}},
		{"a removal told the finalizer is still there", violation, []Operation{
			add(1, 0, 10, "f", ResultOK, "f", "2"),
			remove(2, 20, 30, "f", ResultOK, "f", "3"),
		}},
		{"an add answered unchanged with the finalizer absent", violation, []Operation{
			add(1, 0, 10, "f", ResultUnchanged, "", "1"),
		}},
		{"an unchanged removal whose finalizer was there", violation, []Operation{
			add(1, 0, 10, "f", ResultOK, "f", "2"),
			remove(2, 20, 30, "f", ResultUnchanged, "", "3"),
		}},
		{"a stale read", violation, []Operation{
			add(1, 0, 10, "f", ResultOK, "f", "2"),
			read(2, 20, 30, "", "1"),
		}},
		{"a lost add made, then undone", violation, []Operation{
			add(1, 0, 10, "f", ResultUnknown, "", ""),
			read(2, 20, 30, "f", "2"),
			read(2, 40, 50, "", "2"),
		}},
		{"the object said gone", violation, []Operation{
			remove(1, 0, 10, "f", ResultGone, "", ""),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expect(t, c.want, ModelFinalizers, "", "1", c.ops...) })
	}
}

// The conditions and finalizers models check one condition type or finalizer at a time
// (see partitionLists): what holds across two of them at one point is not checked.
// These histories are not linearizable, and pass.
func TestListsCheckedPerEntry(t *testing.T) {
	final := "A=True/Done@" + asked1 + ";B=True/Done@" + asked2
	t.Run("conditions: each member told the batch's final list", func(t *testing.T) {
		expect(t, ok, ModelConditions, "", "1",
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, final, "5"),
			cond(2, 0, 10, "B", "True", "Done", asked2, ResultOK, final, "5"))
	})
	t.Run("conditions: the entries in another order", func(t *testing.T) {
		expect(t, ok, ModelConditions, "", "1",
			cond(1, 0, 10, "A", "True", "Done", asked1, ResultOK, "A=True/Done@"+asked1, "2"),
			cond(2, 20, 30, "B", "True", "Done", asked2, ResultOK, final, "3"),
			o(3, 40, 50, KindRead, ResultOK, "B=True/Done@"+asked2+";A=True/Done@"+asked1, "3"))
	})
	t.Run("finalizers: each member told the batch's final list", func(t *testing.T) {
		expect(t, ok, ModelFinalizers, "", "1",
			with(o(1, 0, 10, KindAdd, ResultOK, "f,g", "5"), Input{Value: "f"}),
			with(o(2, 0, 10, KindAdd, ResultOK, "f,g", "5"), Input{Value: "g"}))
	})
}
