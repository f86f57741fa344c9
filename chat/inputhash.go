package chat

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
)

// InputHash is the hash a decision on a tool call carries to say which input the person
// was shown: SHA-256, in lowercase hex, of the input's canonical JSON (CanonicalJSON).
// Input that is not JSON hashes as its bytes.
func InputHash(input json.RawMessage) string {
	b, err := CanonicalJSON(input)
	if err != nil {
		b = input
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CanonicalJSON returns the JSON Canonicalization Scheme (RFC 8785) form of a JSON value:
// no whitespace, object members sorted by their names' UTF-16 code units, numbers as
// ECMAScript writes them (JSON.stringify), strings escaping only '"', '\' and control
// characters. In JavaScript, JSON.stringify with object keys sorted gives the same bytes.
func CanonicalJSON(input json.RawMessage) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(input))
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := canonical(&b, v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func canonical(b *bytes.Buffer, v any) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return fmt.Errorf("chat: %v is not a JSON number", v)
		}
		b.WriteString(esNumber(v))
	case string:
		canonicalString(b, v)
	case []any:
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := canonical(b, e); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(x, y string) int {
			return slices.Compare(utf16.Encode([]rune(x)), utf16.Encode([]rune(y)))
		})
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			canonicalString(b, k)
			b.WriteByte(':')
			if err := canonical(b, v[k]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("chat: unexpected JSON value %T", v)
	}
	return nil
}

// esNumber writes f as ECMAScript's Number.prototype.toString does.
func esNumber(f float64) string {
	if f == 0 {
		return "0" // also -0
	}
	abs := math.Abs(f)
	if abs >= 1e21 || abs < 1e-6 {
		// Exponent form: ES writes 1e+21, 1.5e-7.
		s := strconv.FormatFloat(f, 'e', -1, 64)
		mant, exp, _ := bytes.Cut([]byte(s), []byte("e"))
		e, _ := strconv.Atoi(string(exp))
		sign := "+"
		if e < 0 {
			sign, e = "-", -e
		}
		return string(mant) + "e" + sign + strconv.Itoa(e)
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func canonicalString(b *bytes.Buffer, s string) {
	const hexDigits = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[r>>4])
			b.WriteByte(hexDigits[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}
