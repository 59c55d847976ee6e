package safewrite

// Keyed lists: one entry of a list of objects matched by some of its fields (what
// `x-kubernetes-list-type: map` declares), upserted or removed by the sidecar on the
// fresh object, so that controllers sharing the list never drop each other's entries.

import (
	"fmt"

	safewritev1 "safewrite.dev/clients/go/safewrite/v1"
)

// UpsertListEntry merges entry into the entry of the list at path whose key fields
// equal entry's, or appends it when none does. path is field names joined by dots,
// e.g. "status.parents"; keys names the key fields, e.g. []string{"controllerName"};
// entry is a JSON object carrying every key field. Its type is any because any value
// that encoding/json marshals to a JSON object is accepted, the list's item type above
// all (a Go struct such as a gateway API RouteParentStatus), as well as a
// map[string]any, an *unstructured.Unstructured, and JSON text (a value whose type's
// underlying type is string or []byte, json.RawMessage included). A value that does
// not marshal, or marshals to something else than an object (a slice, a number), or
// nil fails with [ErrInvalid] naming mutation.list_entry.entry_json. The entry is
// merged as an RFC 7386 merge patch, so a null removes a field (a Go struct's nulls
// are dropped, as [MergePatchObject] drops them):
//
//	safewrite.UpsertListEntry("status.parents", []string{"controllerName"}, map[string]any{
//		"controllerName": "example.com/gateway", "accepted": true,
//	})
//
// Every other entry, and the order of all of them, is kept; an upsert that changes
// nothing writes nothing ([OutcomeUnchanged]). A missing list is created, with the
// objects on the way to it; a path through a value that is not an object, or to one
// that is not a list, fails with [ErrInvalid]. The error is [ErrInvalid] too for an
// empty path, no keys, or an entry that is not an object or lacks a key field.
func UpsertListEntry(path string, keys []string, entry any) Mutation {
	return listEntry(path, keys, entry, false)
}

// RemoveListEntry removes the entry of the list at path whose key fields equal entry's
// (only its key fields are read: the entry given to [UpsertListEntry] will do). Every
// other entry keeps its place; removing an entry that is not there writes nothing.
// Arguments and errors are as for [UpsertListEntry].
func RemoveListEntry(path string, keys []string, entry any) Mutation {
	return listEntry(path, keys, entry, true)
}

func listEntry(path string, keys []string, entry any, remove bool) Mutation {
	if path == "" {
		return Mutation{err: fieldError("mutation.list_entry.path", "the list's path is empty")}
	}
	if len(keys) == 0 {
		return Mutation{err: fieldError("mutation.list_entry.keys", "no key field names the entry")}
	}
	for i, key := range keys {
		if key == "" {
			return Mutation{err: fieldError(fmt.Sprintf("mutation.list_entry.keys[%d]", i), "the key field's name is empty")}
		}
	}
	text, err := jsonText(entry, '{')
	if err != nil {
		return Mutation{err: fieldError("mutation.list_entry.entry_json", "the entry: %v", err)}
	}
	decoded, err := decodeJSON([]byte(text))
	if err != nil {
		return Mutation{err: fieldError("mutation.list_entry.entry_json", "the entry: %v", err)}
	}
	fields := decoded.(map[string]any)
	for _, key := range keys {
		if value, ok := fields[key]; !ok || value == nil {
			return Mutation{err: fieldError("mutation.list_entry.entry_json", "the entry has no key field %q", key)}
		}
	}
	return Mutation{pb: &safewritev1.Mutation{Kind: &safewritev1.Mutation_ListEntry{
		ListEntry: &safewritev1.ListEntryChange{Path: path, Keys: append([]string(nil), keys...), EntryJson: text, Remove: remove},
	}}}
}
