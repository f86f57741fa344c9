package chat

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	for in, want := range map[string]string{
		`{"b": 1, "a": [true, null, "x"]}`:               `{"a":[true,null,"x"],"b":1}`,
		`{"command":"ls -l\n<a>&\u2028"}`:                "{\"command\":\"ls -l\\n<a>&\u2028\"}",
		`[1.0, 1e21, 1.5e-7, -0, 0.1, 100, 1e2]`:         `[1,1e+21,1.5e-7,0,0.1,100,100]`,
		`{"\u00e9":1,"z":2,"\ud83d\ude00":3,"\uffff":4}`: "{\"z\":2,\"\u00e9\":1,\"\U0001F600\":3,\"\uffff\":4}",
		`"\u0001"`: `"\u0001"`,
	} {
		got, err := CanonicalJSON(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
}

func TestInputHash(t *testing.T) {
	sum := sha256.Sum256([]byte(`{"command":"ls"}`))
	want := hex.EncodeToString(sum[:])
	if got := InputHash(json.RawMessage(`{ "command" : "ls" }`)); got != want {
		t.Errorf("InputHash = %s, want %s", got, want)
	}
	if InputHash(json.RawMessage(`{"command":"ls"}`)) == InputHash(json.RawMessage(`{"command":"rm"}`)) {
		t.Error("different inputs hash the same")
	}
}
