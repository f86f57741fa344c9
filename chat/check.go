package chat

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxRequestIDLen is the longest requestId the protocol allows, in characters.
const MaxRequestIDLen = 128

// MaxToolNameLen is the longest tool name, in bytes.
const MaxToolNameLen = 64

// ValidRequestID reports whether id is a requestId the protocol allows: 1 to
// MaxRequestIDLen characters (not bytes) of valid UTF-8 without NUL.
func ValidRequestID(id string) bool {
	return id != "" && utf8.ValidString(id) && utf8.RuneCountInString(id) <= MaxRequestIDLen &&
		strings.IndexByte(id, 0) < 0
}

// ValidToolCallID reports whether id can name a tool call: 1 to 256 bytes of UTF-8
// without NUL.
func ValidToolCallID(id string) bool {
	return id != "" && len(id) <= 256 && utf8.ValidString(id) && strings.IndexByte(id, 0) < 0
}

// ValidToolName reports whether name can name a tool: 1 to MaxToolNameLen ASCII letters,
// digits, '_' and '-', what OpenAI's and Anthropic's APIs accept as a function name. A
// name a model made up that no tool could have is told apart from a real one.
func ValidToolName(name string) bool {
	if name == "" || len(name) > MaxToolNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckToolInput checks that a tool input is JSON that PostgreSQL's jsonb accepts: valid
// UTF-8, and no string holding U+0000.
func CheckToolInput(b []byte) error {
	if !utf8.Valid(b) {
		return errors.New("not valid UTF-8")
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return errors.New("not JSON")
	}
	if hasNUL(v) {
		return errors.New(`contains \u0000, which cannot be stored`)
	}
	return nil
}

func hasNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.IndexByte(v, 0) >= 0
	case []any:
		return slices.ContainsFunc(v, hasNUL)
	case map[string]any:
		for k, e := range v {
			if strings.IndexByte(k, 0) >= 0 || hasNUL(e) {
				return true
			}
		}
	}
	return false
}

// CleanText makes text storable: PostgreSQL text holds neither NUL nor invalid UTF-8,
// and what clients see must be what is stored. Both become U+FFFD.
func CleanText(s string) string {
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return s
}
