package check

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Options of a check.
type Options struct {
	// HTMLDir is where the visualisation of a violation is written. File defaults it
	// to the history file's directory; Check writes none when it is empty (and then
	// skips the verbose check that the visualisation needs).
	HTMLDir string
	// Timeout bounds the whole history's check; 0 means none.
	Timeout time.Duration
}

// Verdict of a history.
type Verdict int

// The verdicts, in the order the command's exit codes rank them.
const (
	Linearizable Verdict = iota // every object's operations are linearizable
	Violation                   // some object's are not
	TimedOut                    // no violation found, but some object's check ran out of time
)

// ObjectReport is the check of one object.
type ObjectReport struct {
	Key, Model string
	Operations int // porcupine operations checked (see Report.Operations)
	Result     porcupine.CheckResult
	// Longest is the length of the longest linearizable prefix found, for a violation
	// whose visualisation was asked for.
	Longest  int
	HTML     string // the visualisation written for a violation, if any
	HTMLErr  error  // why it could not be written
	Duration time.Duration
}

// Report is the check of one history.
type Report struct {
	Name       string
	File       string // "" for a history checked from memory
	Operations int    // the history's operations
	Unknown    int    // of which answered unknown
	Results    map[string]int
	// Codes counts the operations whose gRPC code is not OK, by "CODE/REASON".
	Codes    map[string]int
	Objects  []ObjectReport
	Duration time.Duration
	Verdict  Verdict
}

// File loads a history file and checks it. The error is an *InputError when the file
// cannot be read.
func File(path string, opts Options) (*Report, error) {
	h, err := Load(path)
	if err != nil {
		return nil, err
	}
	if opts.HTMLDir == "" {
		opts.HTMLDir = filepath.Dir(path)
	}
	r, err := check(h, opts, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)))
	if r != nil {
		r.File = path
	}
	return r, err
}

// Check checks a history held in memory.
func Check(h *History, opts Options) (*Report, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return check(h, opts, safeName(h.Name))
}

func check(h *History, opts Options, stem string) (*Report, error) {
	start := time.Now()
	r := &Report{
		Name:       h.Name,
		Operations: len(h.Operations),
		Results:    map[string]int{},
		Codes:      map[string]int{},
	}
	for _, op := range h.Operations {
		r.Results[op.Result]++
		if op.Result == ResultUnknown {
			r.Unknown++
		}
		if op.Code != "" && op.Code != "OK" {
			key := op.Code
			if op.Reason != "" {
				key += "/" + op.Reason
			}
			r.Codes[key]++
		}
	}
	byObject := h.operationsByObject()
	var deadline time.Time
	if opts.Timeout > 0 {
		deadline = start.Add(opts.Timeout)
	}
	r.Objects = make([]ObjectReport, len(h.Objects))
	// Objects are independent: each is checked on its own, a few at a time.
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(h.Objects))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				r.Objects[i] = checkObject(h.Objects[i], byObject[h.Objects[i].Key], deadline, opts.HTMLDir, stem)
			}
		}()
	}
	for i := range h.Objects {
		work <- i
	}
	close(work)
	wg.Wait()
	r.Duration = time.Since(start)
	for _, o := range r.Objects {
		switch o.Result {
		case porcupine.Illegal:
			r.Verdict = Violation
		case porcupine.Unknown:
			if r.Verdict == Linearizable {
				r.Verdict = TimedOut
			}
		}
	}
	return r, nil
}

// indexed is a history operation with its index.
type indexed struct {
	Operation
	index int
}

func (h *History) operationsByObject() map[string][]indexed {
	m := map[string][]indexed{}
	for i, op := range h.Operations {
		m[op.Object] = append(m[op.Object], indexed{op, i})
	}
	return m
}

func checkObject(obj Object, ops []indexed, deadline time.Time, htmlDir, stem string) ObjectReport {
	start := time.Now()
	rep := ObjectReport{Key: obj.Key, Model: obj.Model}
	ordered := numericRVs(obj, ops)
	model := modelOf(obj, ops, ordered)
	history := operations(obj, ops, ordered)
	rep.Operations = len(history)
	var timeout time.Duration
	if !deadline.IsZero() {
		timeout = time.Until(deadline)
		if timeout <= 0 {
			rep.Result = porcupine.Unknown
			return rep
		}
	}
	// The plain check is faster; the verbose one, for the visualisation, runs again
	// only on a violation.
	res := porcupine.CheckOperationsTimeout(model, history, timeout)
	rep.Result = res
	if res == porcupine.Illegal && htmlDir != "" {
		if !deadline.IsZero() {
			timeout = max(time.Until(deadline), 30*time.Second)
		}
		_, info := porcupine.CheckOperationsVerbose(model, history, timeout)
		for _, partition := range info.PartialLinearizations() {
			for _, l := range partition {
				rep.Longest = max(rep.Longest, len(l))
			}
		}
		rep.HTML = filepath.Join(htmlDir, stem+"."+safeName(obj.Key)+".html")
		if err := os.MkdirAll(htmlDir, 0o755); err != nil {
			rep.HTMLErr = err
		} else if err := porcupine.VisualizePath(model, info, rep.HTML); err != nil {
			rep.HTMLErr = err
		}
		if rep.HTMLErr != nil {
			rep.HTML = ""
		}
	}
	rep.Duration = time.Since(start)
	return rep
}

func modelOf(obj Object, ops []indexed, ordered bool) porcupine.Model {
	switch obj.Model {
	case ModelCounter:
		n, _ := strconv.ParseInt(obj.Initial, 10, 64) // validated
		return counterModel(n)
	case ModelRegister:
		return registerModel(obj.Initial, obj.InitialRV, ordered)
	case ModelConditions:
		asked := map[string]bool{}
		for _, op := range ops {
			if op.Kind == KindSetCondition && op.Input.LTT != "" {
				asked[op.Input.LTT] = true
			}
		}
		return conditionsModel(formatConditions(mustConditions(obj.Initial)), asked)
	case ModelFinalizers:
		return finalizersModel(obj.Initial)
	default:
		return setModel(obj.Initial)
	}
}

// operations turns one object's history operations into porcupine operations:
//
//   - an unknown answer may have taken effect at any time after its call, so its
//     return is after every other time of the object's history (as etcd's robustness
//     tests do), unless the history bounds it (see bounds);
//   - an already_applied answer is its effect (made within the call or earlier) and a
//     read of the object it answered with (see role);
//   - a read that failed, or carried no object, says nothing and is left out.
func operations(obj Object, ops []indexed, ordered bool) []porcupine.Operation {
	var latest int64
	clients := map[int]int{}
	for _, op := range ops {
		latest = max(latest, op.Return)
		clients[op.Client] = 0
	}
	infinity := int64(math.MaxInt64 / 2)
	if latest < infinity {
		infinity = latest + 1
	}
	// The visualisation wants clients numbered from 0.
	ids := make([]int, 0, len(clients))
	for c := range clients {
		ids = append(ids, c)
	}
	sort.Ints(ids)
	for n, c := range ids {
		clients[c] = n
	}

	open := bounds(obj, ops)
	// repeats: register values written more than once, which an answer from within a
	// batch can show twice with one resourceVersion.
	repeats := map[string]bool{}
	if obj.Model == ModelRegister {
		writes := map[string]int{obj.Initial: 1}
		for _, op := range ops {
			switch op.Kind {
			case KindWrite:
				writes[op.Input.Value]++
			case KindCAS, KindCASRV:
				writes[op.Input.To]++
			}
		}
		for v, n := range writes {
			repeats[v] = n > 1
		}
	}
	history := make([]porcupine.Operation, 0, len(ops))
	add := func(op indexed, i in, o out, ret int64) {
		history = append(history, porcupine.Operation{
			ClientId: clients[op.Client],
			Input:    i,
			Call:     op.Call,
			Output:   o,
			Return:   ret,
			Metadata: meta{index: op.index, client: op.Client, via: op.Via, code: op.Code, reason: op.Reason},
		})
	}
	for _, op := range ops {
		i := in{kind: kindNames[op.Kind], x: op.Input.Value}
		switch i.kind {
		case kCAS:
			i.from, i.x = op.Input.From, op.Input.To
		case kCASRV:
			i.rv, i.x = op.Input.RV, op.Input.To
		case kSetCondition:
			i.x = ""
			i.cond = condition{typ: op.Input.Type, status: op.Input.Status, reason: op.Input.Reason, ltt: op.Input.LTT}
		}
		o := answerOf(obj.Model, op.Operation)
		if ordered {
			i.rvn, _ = strconv.ParseUint(i.rv, 10, 64)
			o.rvn, _ = strconv.ParseUint(o.rv, 10, 64)
		}
		switch {
		case i.kind == kRead:
			if (o.result != rOK && o.result != rUnchanged) || !o.has {
				continue
			}
			o.result = rOK
			add(op, i, o, op.Return)
		case o.result == rUnknown || o.result == rAlreadyApplied:
			e := open[op.index]
			effect := i
			effect.must, effect.after, effect.atKnown, effect.rank = e.must, e.after, e.atKnown, e.rank
			effect.junk, effect.prev = e.junk, e.prev
			if e.unseen {
				effect.x = unseenValue
			}
			ret := infinity
			if o.result == rAlreadyApplied {
				effect.role = roleEffect
				ret = op.Return
			}
			if e.bounded {
				ret = min(ret, e.by)
			}
			if !e.drop {
				add(op, effect, out{result: rUnknown}, max(ret, op.Call))
			}
			if o.result == rAlreadyApplied && o.has {
				read := in{kind: kRead, role: roleReadback}
				if i.kind == kAppend {
					read.x = i.x
				}
				o.result = rOK
				add(op, read, o, op.Return)
			}
		default:
			if i.kind == kCASRV && o.result == rAborted && (op.Code == "ABORTED" || op.Code == "") {
				i.rvMismatch = true
			}
			if !o.has && !i.rvMismatch && (o.result == rAborted ||
				(o.result == rPreconditionFailed && i.kind != kCAS)) {
				// It changed nothing and shows nothing: any state explains it.
				continue
			}
			if observes(i, o) {
				// It changed nothing and showed the object as it stood, which alone
				// says it could not have changed it: a read.
				i = in{kind: kRead, role: roleObserved, was: describeCall(i)}
				if repeats[o.value] && obj.Model == ModelRegister {
					i.role = roleObservedRepeatable
				}
			}
			add(op, i, o, op.Return)
		}
	}
	history = mismatched(history, ordered)
	history = mergeReads(obj.Model, history)
	tighten(obj.Model, history, ordered)
	return history
}

// mergeReads makes one read of reads that saw the same object and whose intervals
// share a time. The object was as they saw it during one stretch of time (a
// resourceVersion is written once, and within a batch a value written once is held
// once; a counter's value and a set's list only grow); that stretch meets every one of
// their intervals, so it meets the time they share, where the one read goes. The
// search then places one read instead of trying every subset of them.
func mergeReads(model string, history []porcupine.Operation) []porcupine.Operation {
	type seen struct {
		n     int64
		value string
		rv    string
	}
	groups := map[seen][]int{}
	kept := history[:0:0]
	for n, op := range history {
		i, o := op.Input.(in), op.Output.(out)
		// A register's value alone can come back: only its resourceVersion is unique,
		// and within a batch only for values written once. A list of conditions or
		// finalizers comes back too, within a batch with one resourceVersion: only
		// live reads, which see no batch's inside, are merged.
		if i.kind != kRead || (i.x != "" && !hasItem(o.value, i.x)) ||
			(model == ModelRegister && (o.rv == "" || i.role == roleObservedRepeatable)) ||
			((model == ModelConditions || model == ModelFinalizers) && (o.rv == "" || i.role != roleWhole)) {
			kept = append(kept, op)
			continue
		}
		k := seen{o.n, o.value, o.rv}
		groups[k] = append(groups[k], n)
	}
	keys := make([]seen, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool { return groups[keys[a]][0] < groups[keys[b]][0] })
	for _, k := range keys {
		reads := groups[k]
		sort.SliceStable(reads, func(a, b int) bool { return history[reads[a]].Call < history[reads[b]].Call })
		merged := -1 // in kept
		for _, n := range reads {
			op := history[n]
			op.Input = in{kind: kRead} // the item an already_applied answer holds is there
			if merged >= 0 && op.Call <= kept[merged].Return {
				kept[merged].Call = op.Call
				kept[merged].Return = min(kept[merged].Return, op.Return)
				continue
			}
			kept = append(kept, op)
			merged = len(kept) - 1
		}
	}
	return kept
}

// observes says whether an answer that wrote nothing and carries the object says no
// more than a read of it: the reason it gave for not writing holds of the object it
// showed (a failed cas showing another value; an unchanged write showing its value;
// an aborted cas_rv showing another resourceVersion, ...).
func observes(i in, o out) bool {
	if !o.has || (o.result != rUnchanged && o.result != rPreconditionFailed && o.result != rAborted) {
		return false
	}
	switch i.kind {
	case kInc:
		return o.result != rUnchanged
	case kWrite:
		return o.result != rUnchanged || o.value == i.x
	case kCAS:
		switch o.result {
		case rUnchanged:
			return o.value == i.from && i.from == i.x
		case rPreconditionFailed:
			return o.value != i.from
		}
		return true
	case kCASRV:
		switch {
		case o.rv == "":
			return false
		case o.result == rUnchanged:
			return o.rv == i.rv && o.value == i.x
		case i.rvMismatch:
			return o.rv != i.rv
		}
		return true
	case kAppend:
		return o.result != rUnchanged || hasItem(o.value, i.x)
	case kAdd:
		return o.result != rUnchanged || hasItem(o.value, i.x)
	case kRemove:
		return o.result != rUnchanged || !hasItem(o.value, i.x)
	case kSetCondition:
		if o.result != rUnchanged {
			return true
		}
		list, err := parseConditions(o.value)
		return err == nil && conditionHolds(list, i.cond.typ, i.cond.status, i.cond.reason)
	}
	return false
}

// mismatched leaves out the aborted cas_rv operations whose resourceVersion certainly
// differed from the object's at some time within the call: when an operation answered
// with another resourceVersion was made within it, or (ordered) one answered with a
// higher one was made before it returned. Placed there, they change nothing and every
// linearization keeps them, so the search need not place them.
func mismatched(history []porcupine.Operation, ordered bool) []porcupine.Operation {
	type pin struct {
		call, ret int64
		rv        string
		rvn       uint64
	}
	var pins []pin
	for _, op := range history {
		if o := op.Output.(out); o.has && o.rv != "" && o.result != rUnknown {
			pins = append(pins, pin{op.Call, op.Return, o.rv, o.rvn})
		}
	}
	kept := history[:0]
	for _, op := range history {
		i := op.Input.(in)
		if i.rvMismatch {
			certain := false
			for _, p := range pins {
				if (p.rv != i.rv && p.call >= op.Call && p.ret <= op.Return) ||
					(ordered && p.rvn > i.rvn && p.ret <= op.Return) {
					certain = true
					break
				}
			}
			if certain {
				continue
			}
		}
		kept = append(kept, op)
	}
	return kept
}

// tighten narrows the operations' intervals by what their answers pin: a counter's
// value, a set's length and, in an ordered register, conditions or finalizers
// history, the resourceVersion never go back, and an operation whose answer carries
// one is linearized where the object has it (right after a write, or as an answer
// that wrote nothing shows it). The conditions and finalizers models do not track
// the resourceVersion: this narrowing is what holds their answers to its order.
// So an operation answered with a lower one is linearized before one answered with
// a higher one: after the latest call of those lower, and before the earliest
// return of those higher. Every linearization the models accept keeps within the
// narrowed intervals, and the search no longer tries the orders they rule out.
func tighten(model string, history []porcupine.Operation, ordered bool) {
	type pinned struct {
		at      int // in history
		version uint64
	}
	var pins []pinned
	for n, op := range history {
		o := op.Output.(out)
		if !o.has || o.result == rUnknown {
			continue
		}
		switch model {
		case ModelCounter:
			if o.n >= 0 {
				pins = append(pins, pinned{n, uint64(o.n)})
			}
		case ModelRegister, ModelConditions, ModelFinalizers:
			if ordered && o.rv != "" {
				pins = append(pins, pinned{n, o.rvn})
			}
		case ModelSet:
			items := 0
			if o.value != "" {
				items = 1 + strings.Count(o.value, ",")
			}
			pins = append(pins, pinned{n, uint64(items)})
		}
	}
	if len(pins) < 2 {
		return
	}
	sort.SliceStable(pins, func(a, b int) bool { return pins[a].version < pins[b].version })
	// after[k]: the latest call of the operations pinned lower than pins[k];
	// before[k]: the earliest return of those pinned higher.
	after := make([]int64, len(pins))
	before := make([]int64, len(pins))
	latest, lower := int64(math.MinInt64), int64(math.MinInt64)
	for k := 0; k < len(pins); k++ {
		if k > 0 && pins[k].version != pins[k-1].version {
			lower = latest
		}
		after[k] = lower
		latest = max(latest, history[pins[k].at].Call)
	}
	earliest, higher := int64(math.MaxInt64), int64(math.MaxInt64)
	for k := len(pins) - 1; k >= 0; k-- {
		if k < len(pins)-1 && pins[k].version != pins[k+1].version {
			higher = earliest
		}
		before[k] = higher
		earliest = min(earliest, history[pins[k].at].Return)
	}
	for k, p := range pins {
		op := &history[p.at]
		call, ret := max(op.Call, after[k]), min(op.Return, before[k])
		if call <= ret {
			// Otherwise no linearization fits: the model finds out, on the
			// interval as it was.
			op.Call, op.Return = call, ret
		}
	}
}

// numericRVs says whether every resourceVersion of a register's, conditions' or
// finalizers' history is a decimal number (as etcd's revisions are): the register's
// model then also requires that they never go back (see registerModel), and every
// such history is narrowed by them (see tighten).
func numericRVs(obj Object, ops []indexed) bool {
	switch obj.Model {
	case ModelRegister, ModelConditions, ModelFinalizers:
	default:
		return false
	}
	number := func(rv string) bool {
		_, err := strconv.ParseUint(rv, 10, 64)
		return rv == "" || err == nil
	}
	if !number(obj.InitialRV) {
		return false
	}
	for _, op := range ops {
		if !number(op.RV) || (op.Kind == KindCASRV && !number(op.Input.RV)) {
			return false
		}
	}
	return true
}

// answerOf reads an operation's answer for its model. An unknown answer's object, if
// any, is not used.
func answerOf(model string, op Operation) out {
	o := out{result: resultNames[op.Result]}
	if o.result == rUnknown {
		return o
	}
	switch model {
	case ModelCounter:
		if op.Value != "" {
			o.has = true
			o.n, _ = strconv.ParseInt(op.Value, 10, 64) // validated
		}
	default:
		o.has = op.Value != "" || op.RV != ""
	}
	o.value, o.rv = op.Value, op.RV
	return o
}

// openEffect is what the rest of the history tells of an open effect.
type openEffect struct {
	drop    bool  // leave the operation out: not making it explains the history as well
	bounded bool  // made, if at all, by `by`
	by      int64 // the return of the first answer that shows the effect
	must    bool  // see in.must
	after   string
	atKnown bool
	rank    int
	unseen  bool // registers: the value written is unseenValue
	junk    int
	prev    int
}

// bounds reads, for the operations whose effect is open (unknown, and the effect of
// already_applied), what the answers of the others tell of it. All of it is sound,
// in that it leaves out no linearization up to reordering alike operations:
//
//   - set: an item that no answer holds was not appended before the last answer:
//     leaving the operation out explains everything (only an append of the item
//     reads its presence). An item that an answer holds was appended, before the
//     first such answer returned, onto the list that stands before it in every
//     answer (lists only grow); when no other operation appends the item, or the
//     answer was already_applied, it was certainly appended;
//   - register: a value that no other operation writes and that an answer shows was
//     certainly written by this one, before the first such answer returned;
//   - counter: the unknown increments are taken in the order of their calls (see
//     in.rank).
func bounds(obj Object, ops []indexed) map[int]openEffect {
	effects := map[int]openEffect{}
	isOpen := func(op indexed) bool {
		return op.Kind != KindRead && (op.Result == ResultUnknown || op.Result == ResultAlreadyApplied)
	}
	shows := func(op indexed) bool {
		return op.Result != ResultUnknown && (op.Value != "" || op.RV != "")
	}
	// seen: the earliest return of an answer showing the value (register) or holding
	// the item (set).
	seen := map[string]int64{}
	note := func(v string, t int64) {
		if old, ok := seen[v]; !ok || t < old {
			seen[v] = t
		}
	}
	switch obj.Model {
	case ModelCounter:
		var unknown []indexed
		for _, op := range ops {
			if op.Kind == KindInc && op.Result == ResultUnknown {
				unknown = append(unknown, op)
			}
		}
		sort.SliceStable(unknown, func(a, b int) bool { return unknown[a].Call < unknown[b].Call })
		for r, op := range unknown {
			effects[op.index] = openEffect{rank: r + 1}
		}
	case ModelSet:
		appenders := map[string]int{}
		var lists []indexed
		for _, op := range ops {
			if op.Kind == KindAppend {
				appenders[op.Input.Value]++
			}
			if shows(op) && op.Value != "" {
				lists = append(lists, op)
			}
		}
		// The items before each item: from the longest list first, then from any
		// other that holds items it does not (only when the history is not
		// linearizable).
		sort.SliceStable(lists, func(a, b int) bool { return len(lists[a].Value) > len(lists[b].Value) })
		after := map[string]string{}
		for _, op := range lists {
			list := op.Value
			for at := 0; at < len(list); {
				end := strings.IndexByte(list[at:], ',')
				if end < 0 {
					end = len(list)
				} else {
					end += at
				}
				item := list[at:end]
				if _, ok := after[item]; !ok {
					after[item] = list[:max(at-1, 0)]
				}
				note(item, op.Return)
				at = end + 1
			}
		}
		for _, op := range ops {
			if !isOpen(op) {
				continue
			}
			x := op.Input.Value
			t, observed := seen[x]
			if hasItem(obj.Initial, x) || !observed {
				// Present from the start, it changes nothing; never seen, it was not
				// appended before the last answer.
				effects[op.index] = openEffect{drop: true}
				continue
			}
			effects[op.index] = openEffect{
				bounded: true, by: t,
				must:  appenders[x] == 1 || op.Result == ResultAlreadyApplied,
				after: after[x], atKnown: true,
			}
		}
	case ModelRegister:
		writers := map[string]int{}
		expected := map[string]bool{}
		target := func(op indexed) string {
			if op.Kind == KindWrite {
				return op.Input.Value
			}
			return op.Input.To
		}
		for _, op := range ops {
			if op.Kind != KindRead {
				writers[target(op)]++
			}
			if op.Kind == KindCAS {
				expected[op.Input.From] = true
			}
			if shows(op) {
				note(op.Value, op.Return)
			}
		}
		// First the values certainly written, by whom and by when.
		writtenBy := map[string]int64{}
		for _, op := range ops {
			if op.Kind == KindRead {
				continue
			}
			v := target(op)
			switch {
			case writers[v] != 1 || v == obj.Initial:
			case op.Result == ResultOK:
				writtenBy[v] = op.Return
			case isOpen(op):
				if t, ok := seen[v]; ok {
					effects[op.index] = openEffect{bounded: true, by: t, must: true}
					writtenBy[v] = t
				}
			}
		}
		// left: a time after which the register never holds v again, if the history
		// shows one: v is the initial value and nothing writes it, or v is written
		// by one operation only; and an answer called after v was written shows
		// another value. never: nothing can have written v.
		left := func(v string) (t int64, known, never bool) {
			var since int64
			switch {
			case v == obj.Initial && writers[v] == 0:
			case v != obj.Initial && writers[v] == 0:
				return 0, true, true
			case v != obj.Initial && writers[v] == 1:
				by, ok := writtenBy[v]
				if !ok {
					return 0, false, false
				}
				since = by
			default:
				return 0, false, false
			}
			for _, op := range ops {
				if shows(op) && op.Value != v && op.Call >= since && (!known || op.Return < t) {
					t, known = op.Return, true
				}
			}
			return t, known, false
		}
		// A compare-and-swap can only take effect while the register holds its
		// expected value.
		for _, op := range ops {
			if op.Kind != KindCAS || op.Result != ResultUnknown {
				continue
			}
			t, known, never := left(op.Input.From)
			e := effects[op.index]
			switch {
			case never || (known && t < op.Call):
				effects[op.index] = openEffect{drop: true}
			case known:
				if !e.bounded || t < e.by {
					e.bounded, e.by = true, t
				}
				effects[op.index] = e
			}
		}
		// Alike junk writes, by precondition, in the order of their calls.
		groups := map[[3]string][]indexed{}
		for _, op := range ops {
			if !isOpen(op) {
				continue
			}
			v := target(op)
			e := effects[op.index]
			if e.drop || e.must || writers[v] != 1 || v == obj.Initial || expected[v] {
				continue
			}
			e.unseen = true
			if op.Result == ResultUnknown {
				key := [3]string{op.Kind, op.Input.From, op.Input.RV}
				groups[key] = append(groups[key], op)
			}
			effects[op.index] = e
		}
		junk := 0
		keys := make([][3]string, 0, len(groups))
		for k := range groups {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(a, b int) bool {
			return keys[a][0]+"\x00"+keys[a][1]+"\x00"+keys[a][2] < keys[b][0]+"\x00"+keys[b][1]+"\x00"+keys[b][2]
		})
		for _, k := range keys {
			group := groups[k]
			sort.SliceStable(group, func(a, b int) bool { return group[a].Call < group[b].Call })
			prev := 0
			for _, op := range group {
				junk++
				e := effects[op.index]
				e.junk, e.prev = junk, prev
				effects[op.index] = e
				prev = junk
			}
		}
	case ModelConditions, ModelFinalizers:
		listBounds(obj, ops, effects)
	}
	return effects
}

// listBounds reads what the history tells of the open writes of a conditions or
// finalizers list:
//
//   - a set_condition that asked for a lastTransitionTime no other operation asks
//     for, shown by an answer, was certainly made, moving the status, before the
//     first such answer returned (only a status change by it writes that time);
//   - open writes of one change (the same finalizer added, or removed; the same
//     condition set, asking no time of its own) are alike: which of them made the
//     change makes no difference, so they are taken in the order of their calls.
func listBounds(obj Object, ops []indexed, effects map[int]openEffect) {
	asked := map[string]int{}
	shown := map[string]int64{}
	for _, op := range ops {
		if op.Kind == KindSetCondition && op.Input.LTT != "" {
			asked[op.Input.LTT]++
		}
		if obj.Model == ModelConditions && op.Result != ResultUnknown && op.Value != "" {
			for _, c := range mustConditions(op.Value) {
				if t, ok := shown[c.ltt]; !ok || op.Return < t {
					shown[c.ltt] = op.Return
				}
			}
		}
	}
	type change struct{ kind, value, typ, status, reason string }
	groups := map[change][]indexed{}
	var order []change
	for _, op := range ops {
		if op.Kind == KindRead || op.Result != ResultUnknown {
			continue
		}
		if ltt := op.Input.LTT; ltt != "" {
			if t, ok := shown[ltt]; ok && asked[ltt] == 1 {
				effects[op.index] = openEffect{bounded: true, by: t, must: true}
			}
			continue
		}
		k := change{op.Kind, op.Input.Value, op.Input.Type, op.Input.Status, op.Input.Reason}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], op)
	}
	junk := 0
	for _, k := range order {
		group := groups[k]
		if len(group) < 2 {
			continue
		}
		sort.SliceStable(group, func(a, b int) bool { return group[a].Call < group[b].Call })
		prev := 0
		for _, op := range group {
			junk++
			effects[op.index] = openEffect{junk: junk, prev: prev}
			prev = junk
		}
	}
}

// safeName makes a key or name usable in a file name.
func safeName(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "history"
	}
	return b.String()
}

// Line is the report's one line: the name, the operations, the unknowns, the
// results, the codes that are not OK, the objects, the time taken and the verdict.
func (r *Report) Line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d ops, %d unknown, results", r.Name, r.Operations, r.Unknown)
	for _, name := range allResults {
		fmt.Fprintf(&b, " %s=%d", name, r.Results[name])
	}
	b.WriteString(", codes")
	if len(r.Codes) == 0 {
		b.WriteString(" none")
	}
	codes := make([]string, 0, len(r.Codes))
	for c := range r.Codes {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		fmt.Fprintf(&b, " %s=%d", c, r.Codes[c])
	}
	fmt.Fprintf(&b, ", %d objects, checked in %s: ", len(r.Objects), r.Duration.Round(time.Millisecond))
	switch r.Verdict {
	case Linearizable:
		b.WriteString("ok")
	case Violation:
		var parts []string
		for _, o := range r.Objects {
			if o.Result != porcupine.Illegal {
				continue
			}
			p := fmt.Sprintf("VIOLATION in object %s (%s model, %d operations checked; ", o.Key, o.Model, o.Operations)
			if o.Longest > 0 {
				p += fmt.Sprintf("longest linearizable prefix %d; ", o.Longest)
			}
			switch {
			case o.HTML != "":
				p += "see " + o.HTML + ")"
			case o.HTMLErr != nil:
				p += "visualisation not written: " + o.HTMLErr.Error() + ")"
			default:
				p += "no visualisation asked for)"
			}
			parts = append(parts, p)
		}
		b.WriteString(strings.Join(parts, "; "))
	case TimedOut:
		var keys []string
		for _, o := range r.Objects {
			if o.Result == porcupine.Unknown {
				keys = append(keys, o.Key)
			}
		}
		fmt.Fprintf(&b, "TIMED OUT checking object %s: no violation found in the time allowed; "+
			"shorten the workload (fewer operations, or fewer at a time, per object)", strings.Join(keys, ", "))
	}
	return b.String()
}

// ExitCode is the command's exit code for this report: 0 linearizable, 1 violation,
// 3 timed out.
func (r *Report) ExitCode() int {
	switch r.Verdict {
	case Violation:
		return 1
	case TimedOut:
		return 3
	}
	return 0
}
