package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
)

// The frames are the baseline's chat.delta, byte for byte.
func TestAppendDelta(t *testing.T) {
	prefix := `,"runId":"r","requestId":"q","messageId":"m","text":"`
	got := string(appendDelta(nil, 42, prefix, 41, time.Unix(0, 1763712000123456789)))
	want := `{"type":"chat.delta","seq":42,"runId":"r","requestId":"q","messageId":"m","text":" 41:1763712000123456789"}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestParseSpec(t *testing.T) {
	for in, want := range map[string]spec{
		"":                       {100, 50},
		"tokens=7 rate=0":        {7, 0},
		"tokens=-3 rate=x other": {100, 50},
	} {
		if got := parseSpec(in); got != want {
			t.Errorf("parseSpec(%q) = %+v, want %+v", in, got, want)
		}
	}
}

// A run publishes every token, then chat.done, into the channel's history, where a
// client that resubscribes recovers them from.
func TestRunPublishesWithHistory(t *testing.T) {
	p, err := newPeer(history{size: 100, ttl: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.node.Shutdown(t.Context()) }()
	done := p.start("chat:t", spec{tokens: 10, rate: 0}, "q")
	if done == nil {
		t.Fatal("the first run did not start")
	}
	if p.start("chat:t", spec{tokens: 10, rate: 0}, "q") != nil {
		t.Fatal("a second run started on a channel whose run streams") // one run at a time per channel
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the run did not end")
	}
	h, err := p.node.History("chat:t", centrifuge.WithLimit(centrifuge.NoLimit))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Publications) != 11 || h.Offset != 11 {
		t.Fatalf("%d publications up to offset %d, want 11 and 11", len(h.Publications), h.Offset)
	}
	for i, pub := range h.Publications {
		var f struct {
			Type string `json:"type"`
			Seq  int    `json:"seq"`
		}
		if err := json.Unmarshal(pub.Data, &f); err != nil {
			t.Fatalf("publication %d: %v: %s", i, err, pub.Data)
		}
		want := "chat.delta"
		if i == 10 {
			want = "chat.done"
		}
		if f.Type != want || f.Seq != i+1 || pub.Offset != uint64(i+1) {
			t.Errorf("publication %d: %s %d at offset %d", i, f.Type, f.Seq, pub.Offset)
		}
	}
}
