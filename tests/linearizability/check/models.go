package check

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// The models are porcupine NondeterministicModels: an operation whose outcome the
// answer leaves open (result unknown) steps to both "not applied" and "applied", and
// the checker carries the set of states that remain possible.
//
// An answer's object is what the caller was told the object looked like at the
// operation's linearization point; when it carries none (out.has is false) only the
// outcome is checked.

type opKind uint8

const (
	kInc opKind = iota
	kRead
	kWrite
	kCAS
	kCASRV
	kAppend
	kSetCondition
	kAdd
	kRemove
)

var kindNames = map[string]opKind{
	KindInc: kInc, KindRead: kRead, KindWrite: kWrite, KindCAS: kCAS, KindCASRV: kCASRV, KindAppend: kAppend,
	KindSetCondition: kSetCondition, KindAdd: kAdd, KindRemove: kRemove,
}

func (k opKind) String() string {
	for name, v := range kindNames {
		if v == k {
			return name
		}
	}
	return "?"
}

type result uint8

const (
	rOK result = iota
	rUnchanged
	rAlreadyApplied
	rPreconditionFailed
	rAborted
	rUnknown
	rGone
)

var resultNames = map[string]result{
	ResultOK: rOK, ResultUnchanged: rUnchanged, ResultAlreadyApplied: rAlreadyApplied,
	ResultPreconditionFailed: rPreconditionFailed, ResultAborted: rAborted, ResultUnknown: rUnknown,
	ResultGone: rGone,
}

func (r result) String() string {
	for name, v := range resultNames {
		if v == r {
			return name
		}
	}
	return "?"
}

// role says which part of a history operation a porcupine operation stands for. An
// already_applied answer says that the change was made by an earlier attempt of this
// call or by an earlier call with the same idempotency key, and that nothing was
// written this time; it becomes two operations over the call's interval: its effect,
// which may or may not have been made within the interval (made by this call's own
// lost attempt, or earlier by another operation that is in the history itself), and a
// read of the object it answered with.
type role uint8

const (
	roleWhole    role = iota
	roleEffect        // the effect of an already_applied answer
	roleReadback      // the object an already_applied answer carried
	// an answer that wrote nothing, checked as a read of the object it showed (see
	// observes); repeatable when its value may be held twice within a batch
	roleObserved
	roleObservedRepeatable
)

// in is a porcupine operation's input: what was asked.
type in struct {
	kind opKind
	role role
	// x is the value written (write), the value swapped in (cas, cas_rv), the item
	// appended (append), the finalizer added or removed (add, remove), or, for the
	// readback of an already_applied append, the item the answer's list must hold.
	x    string
	from string // cas: the value required
	rv   string // cas_rv: the resourceVersion required
	rvn  uint64 // the same as a number, when the history is ordered
	// cond: the condition a set_condition sets (ltt "" for the time of the write).
	cond condition
	// key: in a partition of a conditions or finalizers history (see
	// partitionLists), the condition type or finalizer it checks; the answer's list
	// is then that entry alone (or empty), and so is what the state is held to.
	key string
	// rvMismatch: an aborted cas_rv whose code (ABORTED) says the resourceVersion did
	// not match.
	rvMismatch bool
	// was: for an answer checked as a read (roleObserved), the call it answered.
	was string

	// What the history tells of an open effect (an unknown answer, or the effect of
	// an already_applied one); see bounds.

	// must: the effect was certainly made, by this operation (a value or item that no
	// other operation writes, or a lastTransitionTime no other asks for, and that an
	// answer shows) or, for an already_applied effect, by it or an earlier one: the
	// operation steps only where it can have made it.
	must bool
	// after (sets, when atKnown): the list as it stood just before the item was
	// appended, as the answers show it (a set's lists only grow, so every answer that
	// holds the item shows the same items before it).
	after   string
	atKnown bool
	// rank (counters): the place of an unknown increment among the history's unknown
	// increments, by call time, from 1; 0 for none. Those increments are alike and
	// may all take effect at any time after their calls, so any linearization can be
	// reordered to take them in that order: the checker only tries that one.
	rank int
	// junk (registers): 1 + the index of an unknown write whose value nothing else
	// refers to (x is then unseenValue), 0 for none; (conditions, finalizers) 1 + the
	// index of an unknown write with others alike (the same change, asking no time of
	// its own). prev: 1 + the index of the alike one called before it, which is taken
	// first (as rank for counters), 0 for none.
	junk, prev int
}

// unseenValue stands for every value written by an unknown write that no answer
// shows, no other operation writes and no compare-and-swap expects: which of them the
// register holds makes no difference to any other operation, so they are one value,
// and such writes with the same precondition are alike.
const unseenValue = "\x00unseen"

// out is a porcupine operation's output: what was answered.
type out struct {
	result result
	has    bool   // the answer carried an object
	n      int64  // counter: its value
	value  string // register: data.v; set: data.items; conditions, finalizers: the list
	rv     string // "" when not known
	rvn    uint64 // the same as a number, when the history is ordered
}

// meta is a porcupine operation's metadata, for the visualisation.
type meta struct {
	index  int // in the history's operations
	client int
	via    string
	code   string
	reason string
}

func (m meta) String() string {
	s := fmt.Sprintf("operations[%d], client %d", m.index, m.client)
	if m.via != "" {
		s += ", via " + m.via
	}
	if m.code != "" {
		s += ", " + m.code
	}
	if m.reason != "" {
		s += " (" + m.reason + ")"
	}
	return s
}

func one(s any) []any    { return []any{s} }
func two(s, t any) []any { return []any{s, t} }
func hashString(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	return h.Sum64()
}

// ---- counter: state ctr ----

// ctr is a counter's state: its value, and how many of the ranked unknown increments
// have been taken.
type ctr struct {
	n     int64
	taken int
}

func counterModel(initial int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return one(ctr{n: initial}) },
		Step: func(state, input, output any) []any {
			return counterStep(state.(ctr), input.(in), output.(out))
		},
		Hash: func(state any) uint64 {
			c := state.(ctr)
			return uint64(c.n)*0x9E3779B97F4A7C15 ^ uint64(c.taken)
		},
		DescribeOperation:         describeOperation(ModelCounter),
		DescribeState:             func(state any) string { return strconv.FormatInt(state.(ctr).n, 10) },
		DescribeOperationMetadata: describeMeta,
	}
	return nm.ToModel()
}

func counterStep(s ctr, i in, o out) []any {
	same := func() []any {
		if o.has && o.n != s.n {
			return nil
		}
		return one(s)
	}
	switch i.kind {
	case kRead:
		return same()
	case kInc:
		switch o.result {
		case rOK:
			if o.has && o.n != s.n+1 {
				return nil
			}
			return one(ctr{s.n + 1, s.taken})
		case rUnknown:
			if i.rank > 0 {
				if s.taken != i.rank-1 {
					return nil
				}
				s.taken++
			}
			return two(s, ctr{s.n + 1, s.taken})
		case rPreconditionFailed, rAborted:
			return same()
		}
		// unchanged: an increment always changes the object.
	}
	return nil
}

// ---- register: state reg ----

// reg is a register's state: data.v and the resourceVersion, "" when not known (after
// a write whose answer was lost); low is the resourceVersion as a number when it is
// known, and a number it is no lower than when it is not (ordered histories only);
// taken is the bitmap of the junk writes taken (see in.junk).
type reg struct {
	v, rv string
	low   uint64
	taken string
}

func hasBit(bits string, n int) bool {
	return n/8 < len(bits) && bits[n/8]&(1<<(n%8)) != 0
}

func withBit(bits string, n int) string {
	b := make([]byte, max(len(bits), n/8+1))
	copy(b, bits)
	b[n/8] |= 1 << (n % 8)
	return string(b)
}

// registerModel is the register's model. When ordered, every resourceVersion of the
// object's history is a number, as etcd's revisions are, and the model also requires
// that the object's resourceVersion never goes back: a write's is no lower than the
// one before it (the members of one group commit share theirs). That orders the
// writes of different batches, which the checker would otherwise have to try in
// every order the answers leave open.
func registerModel(initial, initialRV string, ordered bool) porcupine.Model {
	low, _ := strconv.ParseUint(initialRV, 10, 64)
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return one(reg{v: initial, rv: initialRV, low: low}) },
		Step: func(state, input, output any) []any {
			return registerStep(state.(reg), input.(in), output.(out), ordered)
		},
		Hash: func(state any) uint64 {
			r := state.(reg)
			return hashString(r.v) ^ (hashString(r.rv) * 31) ^ (hashString(r.taken) * 17) ^ r.low
		},
		DescribeOperation: describeOperation(ModelRegister),
		DescribeState: func(state any) string {
			r := state.(reg)
			rv := r.rv
			if rv == "" {
				rv = "?"
				if ordered {
					rv = fmt.Sprintf("? (at least %d)", r.low)
				}
			}
			return quoteValue(r.v) + " @" + rv
		},
		DescribeOperationMetadata: describeMeta,
	}
	return nm.ToModel()
}

func registerStep(s reg, i in, o out, ordered bool) []any {
	// observed: an answer that wrote nothing shows the state as it is; a known
	// resourceVersion must match a known one, and an unknown one becomes known.
	observed := func() []any {
		if !o.has {
			return one(s)
		}
		if o.value != s.v {
			return nil
		}
		switch {
		case o.rv == "":
		case s.rv != "":
			if s.rv != o.rv {
				return nil
			}
		case ordered && o.rvn < s.low:
			return nil
		default:
			return one(reg{s.v, o.rv, o.rvn, s.taken})
		}
		return one(s)
	}
	if i.kind == kRead {
		return observed()
	}
	// A change is written only when the precondition holds and the value changes.
	holds := true
	switch i.kind {
	case kCAS:
		holds = s.v == i.from
	case kCASRV:
		if s.rv != "" {
			holds = s.rv == i.rv
		} else {
			holds = !ordered || i.rvn >= s.low
		}
	}
	changes := s.v != i.x
	switch o.result {
	case rOK:
		if !holds || !changes || (o.has && o.value != i.x) {
			return nil
		}
		if o.rv == "" {
			return one(reg{i.x, "", s.low, s.taken})
		}
		if i.kind == kCASRV && (o.rv == i.rv || (ordered && o.rvn <= i.rvn)) {
			return nil // a write makes a new resourceVersion
		}
		if ordered && o.rvn < s.low {
			return nil // the resourceVersion went back
		}
		return one(reg{i.x, o.rv, o.rvn, s.taken})
	case rUnchanged:
		if !holds || changes {
			return nil
		}
		return observed()
	case rPreconditionFailed:
		if i.kind == kCAS && holds {
			return nil
		}
		return observed()
	case rAborted:
		if i.rvMismatch && s.rv != "" && s.rv == i.rv {
			return nil
		}
		return observed()
	case rUnknown:
		if i.junk > 0 {
			if i.prev > 0 && !hasBit(s.taken, i.prev-1) {
				return nil
			}
			s.taken = withBit(s.taken, i.junk-1)
		}
		applied := reg{i.x, "", s.low, s.taken}
		switch {
		case i.must && !(holds && changes):
			return nil // it was made, and could not have been made here
		case i.must:
			return one(applied)
		case holds && changes:
			return two(s, applied)
		}
		return one(s)
	}
	return nil
}

// ---- set: state string, the items comma-separated in order ----

func setModel(initial string) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return one(initial) },
		Step: func(state, input, output any) []any {
			return setStep(state.(string), input.(in), output.(out))
		},
		Hash:                      func(state any) uint64 { return hashString(state.(string)) },
		DescribeOperation:         describeOperation(ModelSet),
		DescribeState:             func(state any) string { return "[" + state.(string) + "]" },
		DescribeOperationMetadata: describeMeta,
	}
	return nm.ToModel()
}

// hasItem says whether the comma-separated list holds the item.
func hasItem(list, item string) bool {
	for list != "" {
		head, rest, _ := strings.Cut(list, ",")
		if head == item {
			return true
		}
		list = rest
	}
	return false
}

func appendItem(list, item string) string {
	if list == "" {
		return item
	}
	return list + "," + item
}

func setStep(s string, i in, o out) []any {
	observed := func(state string) []any {
		if o.has && o.value != state {
			return nil
		}
		return one(state)
	}
	switch i.kind {
	case kRead:
		if i.x != "" && !hasItem(s, i.x) {
			return nil // an already_applied append's answer must hold its item
		}
		return observed(s)
	case kAppend:
		present := hasItem(s, i.x)
		switch o.result {
		case rOK:
			if present {
				return nil
			}
			return observed(appendItem(s, i.x))
		case rUnchanged:
			if !present {
				return nil
			}
			return observed(s)
		case rPreconditionFailed, rAborted:
			return observed(s)
		case rUnknown:
			switch {
			case present:
				return one(s)
			case i.atKnown && s != i.after:
				// Not appended yet, and it cannot be appended here.
				if i.must {
					return nil
				}
				return one(s)
			case i.must:
				return one(appendItem(s, i.x))
			}
			return two(s, appendItem(s, i.x))
		}
	}
	return nil
}

// ---- conditions and finalizers: state lst ----

// lst is the state of a conditions or finalizers list in the partition of one key (see
// partitionLists): the key's entry as a history writes it ("" when it is not there),
// and the bitmap of the alike open writes taken (see in.junk). The initial state is
// the whole initial list (whole), cut to the key at the partition's first step.
type lst struct {
	list, taken string
	whole       bool
}

func hashLst(state any) uint64 {
	l := state.(lst)
	return hashString(l.list) ^ (hashString(l.taken) * 17)
}

func describeLst(state any) string { return "[" + state.(lst).list + "]" }

// cut is the state in the partition of the key.
func (s lst) cut(key string, project func(list, key string) string) lst {
	if s.whole {
		return lst{list: project(s.list, key), taken: s.taken}
	}
	return s
}

// open steps an open write (an unknown answer): to the state it makes, when the
// history says it was made (must), else to both. An alike open write (junk > 0) is
// taken only after the one called before it (prev), so that the search tries one
// order of them; a write that would change nothing is one the search need not take.
func (s lst) open(i in, changes bool, next string) []any {
	if i.junk > 0 {
		if i.prev > 0 && !hasBit(s.taken, i.prev-1) {
			return nil
		}
		s.taken = withBit(s.taken, i.junk-1)
	}
	switch {
	case i.must && !changes:
		return nil // it was made, and could not have been made here
	case i.must:
		return one(lst{list: next, taken: s.taken})
	case changes:
		return two(s, lst{list: next, taken: s.taken})
	}
	return one(s)
}

// conditionsModel is a register per condition type: its status, reason and
// lastTransitionTime, or its absence. A set_condition writes only when the status or
// the reason changes, and moves the lastTransitionTime exactly when the status
// changes (or the entry is new): to the time asked for, or to one of the sidecar's
// choosing, which must be no time a caller asked for (callers ask for times in the
// past, each its own). asked holds the times the history's callers asked for.
func conditionsModel(initial string, asked map[string]bool) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			return partitionLists(history, func(i in) string { return i.cond.typ }, conditionTypes, projectConditions)
		},
		Init: func() []any { return one(lst{list: initial, whole: true}) },
		Step: func(state, input, output any) []any {
			return conditionsStep(state.(lst), input.(in), output.(out), asked)
		},
		Hash:                      hashLst,
		DescribeOperation:         describeOperation(ModelConditions),
		DescribeState:             describeLst,
		DescribeOperationMetadata: describeMeta,
	}
	return nm.ToModel()
}

// entry reads one entry as a history writes it; false for "".
func entry(s string) (condition, bool) {
	if s == "" {
		return condition{}, false
	}
	typ, rest, _ := strings.Cut(s, "=")
	status, rest, _ := strings.Cut(rest, "/")
	reason, ltt, _ := strings.Cut(rest, "@")
	return condition{typ, status, reason, ltt}, true
}

func conditionsStep(s lst, i in, o out, asked map[string]bool) []any {
	s = s.cut(i.key, projectConditions)
	// observed: the answer shows the entry as it is; a time the state does not know
	// (unknownLTT) it tells, and it must be one no caller asked for.
	observed := func(state string) []any {
		if !o.has || o.value == state {
			return one(lst{list: state, taken: s.taken})
		}
		e, present := entry(state)
		a, shown := entry(o.value)
		if !present || !shown || e.typ != a.typ || e.status != a.status || e.reason != a.reason ||
			e.ltt != unknownLTT || asked[a.ltt] {
			return nil
		}
		return one(lst{list: o.value, taken: s.taken})
	}
	switch i.kind {
	case kRead:
		return observed(s.list)
	case kSetCondition:
		c := i.cond
		moved := c.ltt
		if moved == "" {
			moved = unknownLTT
		}
		e, present := entry(s.list)
		next, changes, moves := "", true, true
		switch {
		case !present:
			next = condition{c.typ, c.status, c.reason, moved}.String()
		case e.status != c.status:
			next = condition{c.typ, c.status, c.reason, moved}.String()
		case e.reason != c.reason:
			next, moves = condition{c.typ, c.status, c.reason, e.ltt}.String(), false
		default:
			next, changes, moves = s.list, false, false
		}
		switch o.result {
		case rOK:
			if !changes {
				return nil
			}
			return observed(next)
		case rUnchanged:
			if changes {
				return nil
			}
			return observed(s.list)
		case rPreconditionFailed, rAborted:
			return observed(s.list)
		case rUnknown:
			if i.must && !moves {
				// Its time is shown: it was made where it moved the status.
				return nil
			}
			return s.open(i, changes, next)
		}
		// gone: the object is never deleted.
	}
	return nil
}

// finalizersModel is a bit per finalizer of metadata.finalizers: add sets it, remove
// clears it, and either writes nothing when there is nothing to do.
func finalizersModel(initial string) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			return partitionLists(history, func(i in) string { return i.x }, finalizerNames, projectFinalizers)
		},
		Init: func() []any { return one(lst{list: initial, whole: true}) },
		Step: func(state, input, output any) []any {
			return finalizersStep(state.(lst), input.(in), output.(out))
		},
		Hash:                      hashLst,
		DescribeOperation:         describeOperation(ModelFinalizers),
		DescribeState:             describeLst,
		DescribeOperationMetadata: describeMeta,
	}
	return nm.ToModel()
}

func finalizersStep(s lst, i in, o out) []any {
	s = s.cut(i.key, projectFinalizers)
	observed := func(state string) []any {
		if o.has && o.value != state {
			return nil
		}
		return one(lst{list: state, taken: s.taken})
	}
	switch i.kind {
	case kRead:
		return observed(s.list)
	case kAdd, kRemove:
		present := s.list != ""
		changes, next := !present, i.x
		if i.kind == kRemove {
			changes, next = present, ""
		}
		switch o.result {
		case rOK:
			if !changes {
				return nil
			}
			return observed(next)
		case rUnchanged:
			if changes {
				return nil
			}
			return observed(s.list)
		case rPreconditionFailed, rAborted:
			return observed(s.list)
		case rUnknown:
			return s.open(i, changes, next)
		}
		// gone: the object is never deleted.
	}
	return nil
}

// ---- partitions of a list, one per entry ----

// partitionLists splits a conditions or finalizers history into one history per
// condition type or finalizer (key), as a register per type and a bit per finalizer:
// the writes of that key, and as reads, every answer that shows the list (a live
// read, a write of another key, an answer that wrote nothing), each answer's list cut
// to that key's entry. A linearization of the whole projects onto each partition.
//
// What the partitions do not check is that one answer shows all keys as they stood
// at one point, and the order of the entries: an answer that shows another key's
// change made after its own (the batch's final list) passes when each key's own
// history allows it. Partitions of two keys would check it, but their searches
// multiply: with the writes whose outcome is open (which may take effect at any time
// after their call) of both keys, one of 1,200 operations ran out of 20 seconds where
// each key alone took under half a second.
func partitionLists(history []porcupine.Operation, keyOf func(in) string, keysOf func(list string) []string,
	project func(list, key string) string) [][]porcupine.Operation {
	var keys []string
	seen := map[string]bool{}
	note := func(k string) {
		if k != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, op := range history {
		i, o := op.Input.(in), op.Output.(out)
		if i.kind != kRead {
			note(keyOf(i))
		}
		if o.has {
			for _, k := range keysOf(o.value) {
				note(k)
			}
		}
	}
	if len(keys) == 0 {
		return [][]porcupine.Operation{history}
	}
	partitions := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		var part []porcupine.Operation
		for _, op := range history {
			i, o := op.Input.(in), op.Output.(out)
			switch {
			case i.kind != kRead && keyOf(i) == k:
			case !o.has || o.result == rUnknown:
				continue // another key's write that shows nothing
			case i.kind != kRead:
				i = in{kind: kRead, role: roleObserved, was: describeCall(i) + " → " + o.result.String()}
				o.result = rOK
			}
			i.key = k
			if o.has {
				o.value = project(o.value, k)
			}
			op.Input, op.Output = i, o
			part = append(part, op)
		}
		partitions = append(partitions, part)
	}
	return partitions
}

func conditionTypes(list string) []string {
	var types []string
	for _, c := range mustConditions(list) {
		types = append(types, c.typ)
	}
	return types
}

func finalizerNames(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

// projectConditions cuts a conditions list to the entry of the type, if any.
func projectConditions(list, typ string) string {
	for _, c := range mustConditions(list) {
		if c.typ == typ {
			return c.String()
		}
	}
	return ""
}

// projectFinalizers cuts a finalizers list to the finalizer, if it is there.
func projectFinalizers(list, finalizer string) string {
	if hasItem(list, finalizer) {
		return finalizer
	}
	return ""
}

// ---- descriptions ----

func describeMeta(m any) string {
	if m == nil {
		return ""
	}
	return m.(meta).String()
}

func describeOperation(model string) func(input, output any) string {
	return func(input, output any) string {
		i, o := input.(in), output.(out)
		call := describeCall(i)
		switch i.role {
		case roleEffect:
			return call + " → already_applied: its change, made here or earlier"
		case roleReadback:
			call = "already_applied: its answer"
			if i.x != "" {
				call = fmt.Sprintf("append(%s) already_applied: its answer", i.x)
			}
		case roleObserved, roleObservedRepeatable:
			call = i.was + " → " + o.result.String() + ", so a read"
		}
		answer := ""
		if o.has {
			switch model {
			case ModelCounter:
				answer = strconv.FormatInt(o.n, 10)
			case ModelRegister:
				answer = fmt.Sprintf("%q", o.value)
			case ModelSet, ModelConditions, ModelFinalizers:
				answer = "[" + o.value + "]"
			}
			if o.rv != "" {
				answer += " @" + o.rv
			}
		}
		if i.kind == kRead {
			if answer == "" {
				answer = "(no object)"
			}
			return call + " → " + answer
		}
		if answer != "" {
			answer = " " + answer
		}
		return call + " → " + o.result.String() + answer
	}
}

func quoteValue(v string) string {
	if v == unseenValue {
		return "(a value no answer shows)"
	}
	return strconv.Quote(v)
}

// describeCall describes what an operation asked.
func describeCall(i in) string {
	switch i.kind {
	case kWrite:
		return fmt.Sprintf("write(%s)", quoteValue(i.x))
	case kCAS:
		return fmt.Sprintf("cas(%q→%s)", i.from, quoteValue(i.x))
	case kCASRV:
		return fmt.Sprintf("cas_rv(@%s→%s)", i.rv, quoteValue(i.x))
	case kAppend:
		return fmt.Sprintf("append(%s)", i.x)
	case kAdd, kRemove:
		return fmt.Sprintf("%s(%s)", i.kind, i.x)
	case kSetCondition:
		ltt := i.cond.ltt
		if ltt == "" {
			ltt = "now"
		}
		return fmt.Sprintf("set_condition(%s=%s/%s@%s)", i.cond.typ, i.cond.status, i.cond.reason, ltt)
	}
	return i.kind.String()
}
