package agui

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// patchOp is one operation of an RFC 6902 JSON Patch, what STATE_DELTA carries.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from"`
	Value json.RawMessage `json:"value"`
}

// applyPatch applies an RFC 6902 JSON Patch to doc (JSON; empty is null) and returns the
// result. It fails, changing nothing, when an operation fails: a path that does not
// exist, a failed test, an unknown op.
func applyPatch(doc json.RawMessage, patch []patchOp) (json.RawMessage, error) {
	var root any
	if len(doc) > 0 {
		if err := json.Unmarshal(doc, &root); err != nil {
			return nil, fmt.Errorf("the state is not JSON: %w", err)
		}
	}
	for i, op := range patch {
		var err error
		root, err = applyOp(root, op)
		if err != nil {
			return nil, fmt.Errorf("operation %d (%s %s): %w", i, op.Op, op.Path, err)
		}
	}
	return json.Marshal(root)
}

func applyOp(root any, op patchOp) (any, error) {
	value := func() (any, error) {
		if op.Value == nil {
			return nil, fmt.Errorf("no value")
		}
		var v any
		err := json.Unmarshal(op.Value, &v)
		return v, err
	}
	switch op.Op {
	case "add", "replace", "test":
		v, err := value()
		if err != nil {
			return nil, err
		}
		switch op.Op {
		case "add":
			return set(root, op.Path, v, true)
		case "replace":
			return set(root, op.Path, v, false)
		}
		got, err := get(root, op.Path)
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(got, v) {
			return nil, fmt.Errorf("test failed")
		}
		return root, nil
	case "remove":
		root, _, err := remove(root, op.Path)
		return root, err
	case "move":
		if op.Path == op.From || strings.HasPrefix(op.Path, op.From+"/") {
			if op.Path == op.From {
				return root, nil
			}
			return nil, fmt.Errorf("cannot move a value into itself")
		}
		root, v, err := remove(root, op.From)
		if err != nil {
			return nil, err
		}
		return set(root, op.Path, v, true)
	case "copy":
		v, err := get(root, op.From)
		if err != nil {
			return nil, err
		}
		return set(root, op.Path, deepCopy(v), true)
	}
	return nil, fmt.Errorf("unknown op %q", op.Op)
}

// pointer splits a JSON Pointer (RFC 6901) into its unescaped tokens.
func pointer(p string) ([]string, error) {
	if p == "" {
		return nil, nil
	}
	if p[0] != '/' {
		return nil, fmt.Errorf("path %q does not start with /", p)
	}
	toks := strings.Split(p[1:], "/")
	for i, t := range toks {
		toks[i] = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
	}
	return toks, nil
}

func get(root any, path string) (any, error) {
	toks, err := pointer(path)
	if err != nil {
		return nil, err
	}
	cur := root
	for _, t := range toks {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[t]
			if !ok {
				return nil, fmt.Errorf("no member %q", t)
			}
			cur = v
		case []any:
			i, err := index(t, len(c)-1)
			if err != nil {
				return nil, err
			}
			cur = c[i]
		default:
			return nil, fmt.Errorf("%q is inside a scalar", t)
		}
	}
	return cur, nil
}

// set adds (insert: add's semantics) or replaces the value at path and returns the new root.
func set(root any, path string, v any, insert bool) (any, error) {
	toks, err := pointer(path)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return v, nil
	}
	parent, err := get(root, joinPointer(toks[:len(toks)-1]))
	if err != nil {
		return nil, err
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]any:
		if _, ok := p[last]; !ok && !insert {
			return nil, fmt.Errorf("no member %q to replace", last)
		}
		p[last] = v
		return root, nil
	case []any:
		var arr []any
		if insert {
			i := len(p)
			if last != "-" {
				if i, err = index(last, len(p)); err != nil {
					return nil, err
				}
			}
			arr = append(p[:i:i], append([]any{v}, p[i:]...)...)
		} else {
			i, err := index(last, len(p)-1)
			if err != nil {
				return nil, err
			}
			p[i] = v
			return root, nil
		}
		return replaceAt(root, toks[:len(toks)-1], arr)
	}
	return nil, fmt.Errorf("%q is inside a scalar", last)
}

// remove takes the value at path out and returns the new root and the value.
func remove(root any, path string) (any, any, error) {
	toks, err := pointer(path)
	if err != nil {
		return nil, nil, err
	}
	if len(toks) == 0 {
		return nil, root, nil
	}
	parent, err := get(root, joinPointer(toks[:len(toks)-1]))
	if err != nil {
		return nil, nil, err
	}
	last := toks[len(toks)-1]
	switch p := parent.(type) {
	case map[string]any:
		v, ok := p[last]
		if !ok {
			return nil, nil, fmt.Errorf("no member %q to remove", last)
		}
		delete(p, last)
		return root, v, nil
	case []any:
		i, err := index(last, len(p)-1)
		if err != nil {
			return nil, nil, err
		}
		v := p[i]
		arr := append(p[:i:i], p[i+1:]...)
		root, err = replaceAt(root, toks[:len(toks)-1], arr)
		return root, v, err
	}
	return nil, nil, fmt.Errorf("%q is inside a scalar", last)
}

// replaceAt puts a (new) array where the one at toks was: slices do not change in place.
func replaceAt(root any, toks []string, arr []any) (any, error) {
	return set(root, joinPointer(toks), arr, false)
}

func joinPointer(toks []string) string {
	var b strings.Builder
	for _, t := range toks {
		b.WriteByte('/')
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1"))
	}
	return b.String()
}

// index parses an array index no greater than max.
func index(t string, max int) (int, error) {
	i, err := strconv.Atoi(t)
	if err != nil || i < 0 || i > max || (len(t) > 1 && t[0] == '0') {
		return 0, fmt.Errorf("bad array index %q", t)
	}
	return i, nil
}

func deepCopy(v any) any {
	switch c := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(c))
		for k, e := range c {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		a := make([]any, len(c))
		for i, e := range c {
			a[i] = deepCopy(e)
		}
		return a
	}
	return v
}
