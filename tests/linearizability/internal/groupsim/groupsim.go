// Package groupsim simulates the sidecar's group commit against an API server, in
// virtual time, and records the history its clients see, in the checker's format.
//
// Writers to one object queue while a write to it is in flight; when it ends, the
// queue becomes the next batch: one read, each member's mutation applied in arrival
// order (the fold), one write carrying the read's resourceVersion (a conflict re-reads
// and re-applies the whole batch), one new resourceVersion. A compare-and-swap on the
// resourceVersion goes alone. Faults: a write applied whose answer is lost, a write
// never applied whose answer times out, and clients whose deadline passes before the
// answer comes (the write goes on without them).
//
// The Variant says how the members are answered: Correct is the sidecar's contract;
// BatchFinal and NotThreaded are bugs the checker must catch.
package groupsim

import (
	"container/heap"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"time"

	"safewrite.dev/tests/linearizability/check"
)

// Variant of the group commit.
type Variant int

const (
	// Correct answers each member with the object as it stood right after its own
	// mutation, with the resourceVersion of the write that carried it.
	Correct Variant = iota
	// BatchFinal answers every member with the batch's final object.
	BatchFinal
	// NotThreaded applies each member's mutation to the batch's read instead of the
	// running result, and writes the last change.
	NotThreaded
)

func (v Variant) String() string {
	return [...]string{"correct", "batch-final", "not-threaded"}[v]
}

// Config of a run.
type Config struct {
	Seed                      int64
	Variant                   Variant
	Counters, Registers, Sets int // objects of each model
	Conditions, Finalizers    int
	ClientsPerObject          int
	// ListClients share each conditions or finalizers object (0: ClientsPerObject):
	// a violation of their models takes the checker longer to prove when more calls
	// are in flight at once.
	ListClients                int
	OpsPerClient               int
	LostAnswer                 float64 // a batch's write applied, its answer lost
	NotApplied                 float64 // a batch's write not applied, its answer lost
	ClientCut                  float64 // an operation whose caller stops waiting
	CounterPreconditionPercent int     // of increments, how many carry a CEL precondition
	RegisterCASPercent         int     // of a register's operations, how many are cas (at most 60)
}

// Default is a workload with every kind of operation and fault.
func Default(seed int64) Config {
	return Config{
		Seed: seed, Counters: 2, Registers: 2, Sets: 2, Conditions: 2, Finalizers: 2,
		ClientsPerObject: 6, OpsPerClient: 12,
		LostAnswer: 0.04, NotApplied: 0.03, ClientCut: 0.03,
		CounterPreconditionPercent: 20, RegisterCASPercent: 25,
	}
}

// Stats of a run.
type Stats struct {
	Batches int
	// Shared counts the written batches in which two members or more changed the
	// object and were answered.
	Shared int
	// Certain counts the batches whose answers, under the variant, cannot be
	// linearized whatever else happened (0 for Correct).
	Certain int
}

const maxMembers = 64

type object struct {
	key, model string
	value, rv  string // as committed at the API server
	queue      []*call
	busy       bool
}

// call is one operation in flight.
type call struct {
	c         *client
	op        check.Operation
	alone     bool
	started   bool // its batch has begun: its effect no longer depends on its caller
	answering bool // its answer is on its way: its caller waits for it
	done      bool // its caller has its answer (or gave up)
	ret       int64
}

type client struct {
	id     int
	obj    *object
	left   int
	seen   string // value and resourceVersion last seen, for cas and cas_rv
	seenRV string
	n      int
	retry  string // an append to send again (its answer was unknown)
}

type event struct {
	at  int64
	seq int
	run func()
}

type events []*event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(*event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

type sim struct {
	cfg     Config
	rng     *rand.Rand
	now     int64
	seq     int
	queue   events
	rv      int
	history *check.History
	stats   Stats
	// pairs: for conditions and finalizers under NotThreaded, pairs of members whose
	// answers no order of the two explains; Run counts as certain those that no other
	// call could have come between (see certainPairs).
	pairs [][2]*call
}

// Run simulates the workload and returns its history.
func Run(cfg Config) (*check.History, Stats) {
	s := &sim{cfg: cfg, rng: rand.New(rand.NewSource(cfg.Seed))}
	s.history = &check.History{Name: fmt.Sprintf("groupsim-%s-seed%d", cfg.Variant, cfg.Seed)}
	var objects []*object
	for _, m := range []struct {
		model string
		n     int
	}{{check.ModelCounter, cfg.Counters}, {check.ModelRegister, cfg.Registers}, {check.ModelSet, cfg.Sets},
		{check.ModelConditions, cfg.Conditions}, {check.ModelFinalizers, cfg.Finalizers}} {
		for i := range m.n {
			s.rv++
			o := &object{key: fmt.Sprintf("sim/%s-%d", m.model, i), model: m.model, rv: strconv.Itoa(s.rv)}
			switch m.model {
			case check.ModelCounter:
				o.value = "0"
			case check.ModelRegister:
				o.value = "init"
			}
			objects = append(objects, o)
			s.history.Objects = append(s.history.Objects, check.Object{Key: o.key, Model: o.model, Initial: o.value, InitialRV: o.rv})
		}
	}
	id := 0
	for _, o := range objects {
		clients := cfg.ClientsPerObject
		if cfg.ListClients > 0 && (o.model == check.ModelConditions || o.model == check.ModelFinalizers) {
			clients = cfg.ListClients
		}
		for range clients {
			c := &client{id: id, obj: o, left: cfg.OpsPerClient, seen: o.value, seenRV: o.rv}
			id++
			s.at(s.between(0, 300_000), func() { s.next(c) })
		}
	}
	for s.queue.Len() > 0 {
		e := heap.Pop(&s.queue).(*event)
		s.now = e.at
		e.run()
	}
	s.certainPairs()
	return s.history, s.stats
}

func (s *sim) at(t int64, f func()) {
	s.seq++
	heap.Push(&s.queue, &event{at: t, seq: s.seq, run: f})
}

func (s *sim) after(lo, hi int64, f func()) { s.at(s.now+s.between(lo, hi), f) }

func (s *sim) between(lo, hi int64) int64 { return lo + s.rng.Int63n(hi-lo+1) }

func (s *sim) chance(p float64) bool { return s.rng.Float64() < p }

// next starts the client's next operation after a pause.
func (s *sim) next(c *client) {
	if c.left == 0 {
		return
	}
	c.left--
	s.after(0, 400_000, func() { s.issue(c) })
}

func (s *sim) issue(c *client) {
	o := c.obj
	c.n++
	unique := fmt.Sprintf("c%dn%d", c.id, c.n)
	op := check.Operation{Client: c.id, Object: o.key, Call: s.now}
	r := s.rng.Intn(100)
	alone := false
	switch o.model {
	case check.ModelCounter:
		switch {
		case r < 20:
			op.Kind, op.Via = check.KindRead, "live_read"
		case r < 20+80*s.cfg.CounterPreconditionPercent/100:
			op.Kind, op.Via = check.KindInc, "cel_precondition"
		default:
			op.Kind, op.Via = check.KindInc, "cel"
		}
	case check.ModelRegister:
		switch {
		case r < 25:
			op.Kind, op.Via = check.KindRead, "live_read"
		case r < 25+s.cfg.RegisterCASPercent:
			op.Kind, op.Via = check.KindCAS, "json_patch_test"
			op.Input.From, op.Input.To = c.seen, unique
		case r < 85:
			op.Kind, op.Via = check.KindWrite, "merge"
			op.Input.Value = unique
			if s.chance(0.1) {
				op.Input.Value = c.seen // a write of the value it holds: unchanged
			}
		default:
			op.Kind, op.Via = check.KindCASRV, "rv_precondition"
			op.Input.RV, op.Input.To = c.seenRV, unique
			alone = true
		}
	case check.ModelConditions:
		if r < 25 {
			op.Kind, op.Via = check.KindRead, "live_read"
			break
		}
		op.Kind, op.Via = check.KindSetCondition, "patch_status"
		op.Input.Type = []string{"A", "B", "C"}[s.rng.Intn(3)]
		op.Input.Status = []string{"True", "False"}[s.rng.Intn(2)]
		op.Input.Reason = []string{"Done", "Wait"}[s.rng.Intn(2)]
		if s.chance(0.5) {
			// A time of the caller's own, unique and in the past.
			op.Input.LTT = time.Unix(978307200+int64(c.id)*100_000+int64(c.n), 0).UTC().Format(time.RFC3339)
		}
	case check.ModelFinalizers:
		if r < 25 {
			op.Kind, op.Via = check.KindRead, "live_read"
			break
		}
		op.Kind, op.Via = check.KindAdd, "finalizer"
		if s.chance(0.5) {
			op.Kind = check.KindRemove
		}
		op.Input.Value = fmt.Sprintf("sim.dev/f%d", s.rng.Intn(4))
	case check.ModelSet:
		switch {
		case c.retry != "":
			op.Kind, op.Via = check.KindAppend, "cel"
			op.Input.Value = c.retry
			c.retry = ""
		case r < 25:
			op.Kind, op.Via = check.KindRead, "live_read"
		default:
			op.Kind, op.Via = check.KindAppend, "cel"
			op.Input.Value = unique
		}
	}
	k := &call{c: c, op: op, alone: alone}
	if op.Kind == check.KindRead {
		s.after(100_000, 800_000, func() {
			value, rv := o.value, o.rv
			s.after(100_000, 800_000, func() { s.answer(k, check.ResultOK, value, rv) })
		})
		return
	}
	if s.chance(s.cfg.ClientCut) {
		s.after(200_000, 4_000_000, func() { s.cut(k) })
	}
	s.after(20_000, 200_000, func() {
		if k.done {
			return // the caller went away before its request arrived
		}
		if k.alone {
			s.alone(k)
			return
		}
		o.queue = append(o.queue, k)
		if !o.busy {
			s.batch(o)
		}
	})
}

// cut: the caller's deadline passes before its answer.
func (s *sim) cut(k *call) {
	if k.done || k.answering {
		return
	}
	s.answerUnknown(k, "DEADLINE_EXCEEDED", "")
	if !k.started {
		// Still queued: the sidecar drops it before the next batch.
		q := k.c.obj.queue
		for i, x := range q {
			if x == k {
				k.c.obj.queue = append(q[:i:i], q[i+1:]...)
				break
			}
		}
	}
}

func (s *sim) answerUnknown(k *call, code, reason string) {
	s.finish(k, check.ResultUnknown, code, reason, "", "")
	if k.op.Kind == check.KindAppend && s.chance(0.6) {
		k.c.retry = k.op.Input.Value
	}
}

func (s *sim) answer(k *call, result, value, rv string) {
	code, reason := "OK", ""
	switch result {
	case check.ResultPreconditionFailed:
		code, reason = "FAILED_PRECONDITION", "PRECONDITION_FAILED"
	case check.ResultAborted:
		code, reason = "ABORTED", "RESOURCE_VERSION_MISMATCH"
	}
	s.finish(k, result, code, reason, value, rv)
}

func (s *sim) finish(k *call, result, code, reason, value, rv string) {
	if k.done {
		return
	}
	k.done = true
	k.ret = s.now
	op := k.op
	op.Return = s.now
	op.Result, op.Code, op.Reason, op.Value, op.RV = result, code, reason, value, rv
	s.history.Operations = append(s.history.Operations, op)
	if result != check.ResultUnknown && (value != "" || rv != "") {
		k.c.seen, k.c.seenRV = value, rv
	}
	s.next(k.c)
}

// verdict of one member's mutation on a state.
type verdict int

const (
	changed verdict = iota
	unchanged
	alreadyApplied
	preconditionFailed
)

// apply is a member's mutation: its verdict and the state after it. now is the time
// of the fold, in the simulation's microseconds.
func apply(model string, op check.Operation, state string, now int64) (verdict, string) {
	switch op.Kind {
	case check.KindSetCondition:
		return setCondition(op.Input, state, now)
	case check.KindAdd, check.KindRemove:
		var kept []string
		present := false
		for _, f := range strings.Split(state, ",") {
			if f == op.Input.Value {
				present = true
			} else if f != "" {
				kept = append(kept, f)
			}
		}
		switch {
		case op.Kind == check.KindAdd && present, op.Kind == check.KindRemove && !present:
			return unchanged, state
		case op.Kind == check.KindAdd:
			kept = append(strings.Split(state, ","), op.Input.Value)
			if state == "" {
				kept = kept[1:]
			}
		}
		return changed, strings.Join(kept, ",")
	case check.KindInc:
		n, _ := strconv.ParseInt(state, 10, 64)
		if op.Via == "cel_precondition" && n%5 == 4 {
			return preconditionFailed, state
		}
		return changed, strconv.FormatInt(n+1, 10)
	case check.KindWrite:
		if state == op.Input.Value {
			return unchanged, state
		}
		return changed, op.Input.Value
	case check.KindCAS, check.KindCASRV:
		if op.Kind == check.KindCAS && state != op.Input.From {
			return preconditionFailed, state
		}
		if state == op.Input.To {
			return unchanged, state
		}
		return changed, op.Input.To
	case check.KindAppend:
		// The idempotency key is derived from the item: it is on the object exactly
		// when the item is in the list.
		for _, item := range strings.Split(state, ",") {
			if item == op.Input.Value {
				return alreadyApplied, state
			}
		}
		if state == "" {
			return changed, op.Input.Value
		}
		return changed, state + "," + op.Input.Value
	}
	panic("no mutation for " + op.Kind)
}

var results = map[verdict]string{
	changed: check.ResultOK, unchanged: check.ResultUnchanged,
	alreadyApplied: check.ResultAlreadyApplied, preconditionFailed: check.ResultPreconditionFailed,
}

// batch takes the object's queue as the next batch.
func (s *sim) batch(o *object) {
	n := min(len(o.queue), maxMembers)
	if n == 0 {
		o.busy = false
		return
	}
	members := append([]*call(nil), o.queue[:n]...)
	o.queue = o.queue[n:]
	o.busy = true
	for _, m := range members {
		m.started = true
	}
	s.stats.Batches++
	s.attempt(o, members)
}

// attempt: one read, the fold, one write.
func (s *sim) attempt(o *object, members []*call) {
	// Those whose caller went away leave before the attempt: nothing is written on
	// their behalf from then on.
	staying := members[:0:0]
	for _, m := range members {
		if !m.done {
			staying = append(staying, m)
		}
	}
	members = staying
	if len(members) == 0 {
		s.batch(o)
		return
	}
	s.after(100_000, 700_000, func() {
		fresh, freshRV := o.value, o.rv
		verdicts := make([]verdict, len(members))
		states := make([]string, len(members))
		running, body, first := fresh, fresh, -1
		for i, m := range members {
			from := running
			if s.cfg.Variant == NotThreaded {
				from = fresh
			}
			verdicts[i], states[i] = apply(o.model, m.op, from, s.now)
			if verdicts[i] == changed {
				running, body = states[i], states[i]
				if first < 0 {
					first = i
				}
			}
		}
		if first < 0 {
			s.after(10_000, 100_000, func() {
				for i, m := range members {
					s.answer(m, results[verdicts[i]], states[i], freshRV)
				}
				s.batch(o)
			})
			return
		}
		s.after(200_000, 2_000_000, func() {
			if o.rv != freshRV {
				// 409 Conflict: re-read and re-apply the whole batch.
				s.after(50_000, 300_000, func() { s.attempt(o, members) })
				return
			}
			applied := !s.chance(s.cfg.NotApplied)
			lost := !applied || s.chance(s.cfg.LostAnswer)
			written := ""
			if applied {
				s.rv++
				o.value, o.rv = body, strconv.Itoa(s.rv)
				written = o.rv
			}
			s.after(50_000, 500_000, func() {
				if lost {
					s.lost(o, members, verdicts, states, first, freshRV, applied)
					return
				}
				s.noteShared(o, members, verdicts, states, body)
				for i, m := range members {
					state, rv := states[i], freshRV
					if i >= first {
						rv = written
					}
					if s.cfg.Variant == BatchFinal {
						state, rv = body, written
					}
					m.answering = true
					result := results[verdicts[i]]
					s.after(10_000, 200_000, func() { s.answer(m, result, state, rv) })
				}
				s.batch(o)
			})
		})
	})
}

// lost: the write's answer did not come. Members before the first change are answered
// from the read; a change with an idempotency key (an append) is retried: the re-read
// shows the key, and it is answered already_applied when the write was applied;
// the rest cannot know.
func (s *sim) lost(o *object, members []*call, verdicts []verdict, states []string, first int, freshRV string, applied bool) {
	var retry []*call
	for i, m := range members {
		switch {
		case i < first:
			s.answer(m, results[verdicts[i]], states[i], freshRV)
		case m.op.Kind == check.KindAppend && verdicts[i] == changed && applied:
			retry = append(retry, m)
		case verdicts[i] == changed:
			s.answerUnknown(m, "UNKNOWN", "WRITE_OUTCOME_UNKNOWN")
		default:
			s.answerUnknown(m, "UNAVAILABLE", "")
		}
	}
	if len(retry) == 0 {
		s.batch(o)
		return
	}
	s.after(100_000, 600_000, func() {
		value, rv := o.value, o.rv
		s.after(10_000, 100_000, func() {
			for _, m := range retry {
				s.answer(m, check.ResultAlreadyApplied, value, rv)
			}
			s.batch(o)
		})
	})
}

// noteShared counts a written batch with two changes or more, and whether the
// variant's answers are then certainly not linearizable.
func (s *sim) noteShared(o *object, members []*call, verdicts []verdict, states []string, body string) {
	var changes []int
	for i, m := range members {
		if verdicts[i] == changed && !m.done {
			changes = append(changes, i)
		}
	}
	if len(changes) < 2 {
		return
	}
	s.stats.Shared++
	switch s.cfg.Variant {
	case BatchFinal:
		// Every change is told the final object: a counter's value twice, a list
		// ending in another's item, a register's value another member wrote, a
		// condition or finalizer list without the change itself.
		switch o.model {
		case check.ModelConditions, check.ModelFinalizers:
			for _, i := range changes {
				if !holdsAfter(members[i].op, body) {
					s.stats.Certain++
					break
				}
			}
			return
		case check.ModelRegister:
		default:
			s.stats.Certain++
			return
		}
		for _, i := range changes {
			if states[i] != body { // its own value, not the final one
				s.stats.Certain++
				break
			}
		}
	case NotThreaded:
		// Two increments told the same value; two appends each told a list without
		// the other's item; two compare-and-swaps of one value both succeeding.
		a, b := members[changes[0]].op, members[changes[1]].op
		switch o.model {
		case check.ModelConditions, check.ModelFinalizers:
			s.notePair(members, verdicts, states, changes)
		case check.ModelRegister:
			if a.Kind == check.KindCAS && b.Kind == check.KindCAS && a.Input.From == b.Input.From {
				s.stats.Certain++
			}
		default:
			s.stats.Certain++
		}
	}
}

// alone: a compare-and-swap on the resourceVersion, never grouped.
func (s *sim) alone(k *call) {
	o := k.c.obj
	k.started = true
	s.after(100_000, 700_000, func() {
		if o.rv != k.op.Input.RV {
			s.after(10_000, 100_000, func() { s.answer(k, check.ResultAborted, "", "") })
			return
		}
		v, state := apply(o.model, k.op, o.value, s.now)
		if v == unchanged {
			value, rv := o.value, o.rv
			s.after(10_000, 100_000, func() { s.answer(k, check.ResultUnchanged, value, rv) })
			return
		}
		s.after(200_000, 2_000_000, func() {
			if o.rv != k.op.Input.RV {
				s.after(10_000, 100_000, func() { s.answer(k, check.ResultAborted, "", "") })
				return
			}
			s.rv++
			o.value, o.rv = state, strconv.Itoa(s.rv)
			rv := o.rv
			s.after(50_000, 500_000, func() { s.answer(k, check.ResultOK, state, rv) })
		})
	})
}

// notePair notes, in a not-threaded batch of conditions or finalizers, the first
// two changes to one condition type or finalizer whose answers no order of the two
// explains: each was applied to the batch's read, and neither, applied after the
// other, gives what it was told. (Conditions only when both asked for their
// lastTransitionTime: a time of the write's own is not known to the checker.)
func (s *sim) notePair(members []*call, verdicts []verdict, states []string, changes []int) {
	for x, i := range changes {
		for _, j := range changes[x+1:] {
			a, b := members[i].op, members[j].op
			if key(a) != key(b) || (a.Kind == check.KindSetCondition && (a.Input.LTT == "" || b.Input.LTT == "")) {
				continue
			}
			if v, after := apply(modelOf(b), b, states[i], 0); v == changed && after == states[j] {
				continue // a, then b
			}
			if v, after := apply(modelOf(a), a, states[j], 0); v == changed && after == states[i] {
				continue // b, then a
			}
			s.pairs = append(s.pairs, [2]*call{members[i], members[j]})
			return
		}
	}
}

// key is the condition type or finalizer an operation writes.
func key(op check.Operation) string {
	if op.Kind == check.KindSetCondition {
		return op.Input.Type
	}
	return op.Input.Value
}

func modelOf(op check.Operation) string {
	if op.Kind == check.KindSetCondition {
		return check.ModelConditions
	}
	return check.ModelFinalizers
}

// certainPairs counts the pairs (see sim.pairs) that no other call on their key
// could have come between: none called before the later of the two returned that
// was not answered before the earlier of the two was called.
func (s *sim) certainPairs() {
	for _, p := range s.pairs {
		a, b := p[0], p[1]
		between := false
		for _, op := range s.history.Operations {
			if op.Object != a.op.Object || op.Kind == check.KindRead || key(op) != key(a.op) ||
				(op.Client == a.op.Client && op.Call == a.op.Call) || (op.Client == b.op.Client && op.Call == b.op.Call) {
				continue
			}
			if op.Call < max(a.ret, b.ret) && (op.Result == check.ResultUnknown || op.Return > min(a.op.Call, b.op.Call)) {
				between = true
				break
			}
		}
		if !between {
			s.stats.Certain++
		}
	}
}

// The conditions lists the simulation writes, in the checker's format: entries
// "type=status/reason@lastTransitionTime" joined by ";".

type simCondition struct{ typ, status, reason, ltt string }

func parseSimConditions(state string) []simCondition {
	var list []simCondition
	if state == "" {
		return nil
	}
	for _, e := range strings.Split(state, ";") {
		typ, rest, _ := strings.Cut(e, "=")
		status, rest, _ := strings.Cut(rest, "/")
		reason, ltt, _ := strings.Cut(rest, "@")
		list = append(list, simCondition{typ, status, reason, ltt})
	}
	return list
}

func formatSimConditions(list []simCondition) string {
	parts := make([]string, len(list))
	for i, c := range list {
		parts[i] = c.typ + "=" + c.status + "/" + c.reason + "@" + c.ltt
	}
	return strings.Join(parts, ";")
}

// setCondition as the sidecar does it: the time of the write, in seconds, when the
// caller asked for none.
func setCondition(in check.Input, state string, now int64) (verdict, string) {
	ltt := in.LTT
	if ltt == "" {
		ltt = time.Unix(1795000000+now/1_000_000, 0).UTC().Format(time.RFC3339)
	}
	list := parseSimConditions(state)
	for i, c := range list {
		if c.typ != in.Type {
			continue
		}
		if c.status == in.Status && c.reason == in.Reason {
			return unchanged, state
		}
		if c.status != in.Status {
			list[i].ltt = ltt
		}
		list[i].status, list[i].reason = in.Status, in.Reason
		return changed, formatSimConditions(list)
	}
	return changed, formatSimConditions(append(list, simCondition{in.Type, in.Status, in.Reason, ltt}))
}

// holdsAfter says whether a list shows what a condition or finalizer change makes.
func holdsAfter(op check.Operation, body string) bool {
	switch op.Kind {
	case check.KindSetCondition:
		for _, c := range parseSimConditions(body) {
			if c.typ == op.Input.Type {
				return c.status == op.Input.Status && c.reason == op.Input.Reason
			}
		}
		return false
	default:
		present := false
		for _, f := range strings.Split(body, ",") {
			present = present || f == op.Input.Value
		}
		return present == (op.Kind == check.KindAdd)
	}
}
