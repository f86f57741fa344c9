package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxRequestIDLen is the longest requestId the protocol allows, in characters.
const MaxRequestIDLen = 128

// MaxToolNameLen is the longest tool name, in bytes.
const MaxToolNameLen = 64

// Errors of CheckID and CheckJSONText. Their text completes a sentence that names what
// was checked: "the chat id " + err.Error().
var (
	ErrNotUTF8 = errors.New("is not valid UTF-8")
	ErrHasNUL  = errors.New("contains a NUL character")
)

// CheckID checks the text of an id a client gave (a chat id, a message or request id, a
// tool call id; a session or run id before it is parsed as a UUID), whatever its length
// limit: an id must be valid UTF-8 without NUL. PostgreSQL's text holds neither, so such
// an id can be neither stored nor looked up: the database would refuse the statement
// (SQLSTATE class 22), and a client must not be told that as an outage. Transports check
// ids with it where they enter, before anything reads the database, and answer
// bad_request. It returns ErrNotUTF8 or ErrHasNUL.
func CheckID(id string) error {
	switch {
	case !utf8.ValidString(id):
		return ErrNotUTF8
	case strings.IndexByte(id, 0) >= 0:
		return ErrHasNUL
	}
	return nil
}

// CheckJSONText checks that b, JSON a client sent (a WebSocket frame, a request's body),
// is valid UTF-8, as JSON must be (RFC 8259): it returns ErrNotUTF8 otherwise.
// encoding/json replaces each byte of invalid UTF-8 in a string with U+FFFD without a
// word, so an id with such bytes would silently become another id, and two different
// ones the same (a requestId, the idempotency key, would take the other's run). Its NULs
// are escapes (\u0000), which CheckID finds once decoded.
func CheckJSONText(b []byte) error {
	if !utf8.Valid(b) {
		return ErrNotUTF8
	}
	return nil
}

// ValidRequestID reports whether id is a requestId the protocol allows: 1 to
// MaxRequestIDLen characters (not bytes) of valid UTF-8 without NUL.
func ValidRequestID(id string) bool {
	return id != "" && CheckID(id) == nil && utf8.RuneCountInString(id) <= MaxRequestIDLen
}

// ValidToolCallID reports whether id can name a tool call: 1 to 256 bytes of UTF-8
// without NUL.
func ValidToolCallID(id string) bool {
	return id != "" && len(id) <= 256 && CheckID(id) == nil
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

// Title lengths, in characters.
const (
	// MaxTitleLen is the longest title a person may give a session.
	MaxTitleLen = 200
	// autoTitleLen is how much of the first user message becomes the session's title.
	autoTitleLen = 80
	// PreviewLen is how much of its newest message the conversation list shows of a
	// session.
	PreviewLen = 120
)

// SessionTitle is the title a session takes from its first user message: the message
// with its runs of white space collapsed to one space, cut after autoTitleLen
// characters (never inside one) with "…" added when it was cut.
func SessionTitle(content string) string {
	t, cut := cutChars(strings.Join(strings.Fields(CleanText(content)), " "), autoTitleLen)
	if cut {
		t = strings.TrimSuffix(t, " ") + "…"
	}
	return t
}

// Preview is the start of a message as the conversation list shows it: white space
// collapsed, at most n characters.
func Preview(content string, n int) string {
	t, _ := cutChars(strings.Join(strings.Fields(content), " "), n)
	return strings.TrimSuffix(t, " ")
}

// cutChars returns the first n characters of s, and whether s was longer.
func cutChars(s string, n int) (string, bool) {
	for i := range s {
		if n == 0 {
			return s[:i], true
		}
		n--
	}
	return s, false
}

// CheckTitle checks a title a person gives a session, trimmed of surrounding white
// space: 1 to MaxTitleLen characters of valid UTF-8 without NUL. It returns the trimmed
// title, or an error saying what is wrong.
func CheckTitle(title string) (string, error) {
	t := strings.TrimSpace(title)
	switch {
	case !utf8.ValidString(t):
		return "", errors.New("title is not valid UTF-8")
	case t == "":
		return "", errors.New("title is empty")
	case utf8.RuneCountInString(t) > MaxTitleLen:
		return "", fmt.Errorf("title is longer than %d characters", MaxTitleLen)
	case strings.IndexByte(t, 0) >= 0:
		return "", errors.New("title contains a NUL character")
	}
	return t, nil
}

// CleanJSON makes JSON storable as PostgreSQL's jsonb, which refuses U+0000 and unpaired
// surrogates in strings (`\u0000`, a lone `\ud800`) and invalid UTF-8: each becomes
// U+FFFD, in strings and keys; everything else is kept byte for byte. It returns nil
// for input that is not JSON. Valid JSON without them, the common case, is returned as
// it is after one scan.
func CleanJSON(b []byte) []byte {
	if !utf8.Valid(b) {
		b = []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	if !json.Valid(b) {
		return nil
	}
	if !bytes.Contains(b, []byte(`\u`)) {
		return b
	}
	var out []byte // nil until something changes
	keep := func(from, to int) {
		if out != nil {
			out = append(out, b[from:to]...)
		}
	}
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c == '"' {
			inString = !inString
		}
		if !inString || c != '\\' {
			keep(i, i+1)
			continue
		}
		if b[i+1] != 'u' { // one escaped character: \" \\ \n …
			keep(i, i+2)
			i++
			continue
		}
		// Valid JSON: a \u escape has its four hex digits.
		r, _ := escapedRune(b[i+2 : i+6])
		n := 6
		bad := r == 0 || utf16.IsSurrogate(r)
		if r >= 0xd800 && r < 0xdc00 && i+11 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if low, _ := escapedRune(b[i+8 : i+12]); low >= 0xdc00 && low <= 0xdfff {
				bad, n = false, 12 // a pair: one character outside the BMP
			}
		}
		if bad {
			if out == nil {
				out = append(make([]byte, 0, len(b)), b[:i]...)
			}
			out = append(out, `\ufffd`...)
		} else {
			keep(i, i+n)
		}
		i += n - 1
	}
	if out == nil {
		return b
	}
	return out
}

// escapedRune decodes the four hex digits of a \u escape.
func escapedRune(hex []byte) (rune, bool) {
	var r rune
	for _, h := range hex {
		switch {
		case h >= '0' && h <= '9':
			r = r<<4 | rune(h-'0')
		case h >= 'a' && h <= 'f':
			r = r<<4 | rune(h-'a'+10)
		case h >= 'A' && h <= 'F':
			r = r<<4 | rune(h-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}
