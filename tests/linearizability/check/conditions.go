package check

import (
	"fmt"
	"strings"
)

// A conditions list as a history writes it: one entry a condition, in the list's
// order, entries joined by ";", each "type=status/reason@lastTransitionTime", e.g.
//
//	Ready=True/Reconciled@2001-01-01T00:00:07Z;Synced=False/Waiting@2026-11-26T15:04:05Z
//
// A type holds no "=" or ";", a status no "/", a reason no "@" or ";" (as the API
// server validates them), a time none of them. Only these four fields are modelled.

// condition is one entry of a conditions list.
type condition struct {
	typ, status, reason, ltt string
}

// unknownLTT is, in a model's state, the lastTransitionTime of a condition whose
// status a write changed at a time of the sidecar's choosing, before any answer has
// shown which: the next answer that shows the entry tells it (see conditionsStep).
const unknownLTT = "?"

func (c condition) String() string {
	return c.typ + "=" + c.status + "/" + c.reason + "@" + c.ltt
}

// valid says whether the entry can be written in the format (and read back the same).
func (c condition) valid() error {
	switch {
	case c.typ == "" || strings.ContainsAny(c.typ, "=;"):
		return fmt.Errorf("condition type %q is empty or holds \"=\" or \";\"", c.typ)
	case strings.ContainsAny(c.status, "/;"):
		return fmt.Errorf("condition status %q holds \"/\" or \";\"", c.status)
	case strings.ContainsAny(c.reason, "@;"):
		return fmt.Errorf("condition reason %q holds \"@\" or \";\"", c.reason)
	case strings.Contains(c.ltt, ";"):
		return fmt.Errorf("lastTransitionTime %q holds \";\"", c.ltt)
	}
	return nil
}

// parseConditions reads a conditions list ("" is the empty list).
func parseConditions(s string) ([]condition, error) {
	if s == "" {
		return nil, nil
	}
	var list []condition
	seen := map[string]bool{}
	for _, entry := range strings.Split(s, ";") {
		typ, rest, ok1 := strings.Cut(entry, "=")
		status, rest, ok2 := strings.Cut(rest, "/")
		reason, ltt, ok3 := strings.Cut(rest, "@")
		if !ok1 || !ok2 || !ok3 || typ == "" {
			return nil, fmt.Errorf("%q is not a conditions list (type=status/reason@lastTransitionTime, joined by \";\")", s)
		}
		if seen[typ] {
			return nil, fmt.Errorf("%q holds the condition type %q twice", s, typ)
		}
		seen[typ] = true
		list = append(list, condition{typ, status, reason, ltt})
	}
	return list, nil
}

// mustConditions reads a list the loader has validated, or a model's own state.
func mustConditions(s string) []condition {
	list, err := parseConditions(s)
	if err != nil {
		panic(err)
	}
	return list
}

func formatConditions(list []condition) string {
	parts := make([]string, len(list))
	for n, c := range list {
		parts[n] = c.String()
	}
	return strings.Join(parts, ";")
}

// conditionHolds says whether a list shows the condition's type with its status and
// reason (what a set_condition answered unchanged must show).
func conditionHolds(list []condition, typ, status, reason string) bool {
	for _, e := range list {
		if e.typ == typ {
			return e.status == status && e.reason == reason
		}
	}
	return false
}
