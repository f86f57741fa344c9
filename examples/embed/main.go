// Command embed is chatd embedded in a Go program (package server) with a tool of its
// own: lookup_order, which looks an order up in the shop's records (a map here, your
// database or API in earnest). docs/tools.md walks through it.
//
// It reads chatd's flags and environment variables, as bin/chatd does:
//
//	DATABASE_URL=postgres://... go run ./examples/embed
//	DATABASE_URL=... CHATD_AGENT=openai OPENAI_API_KEY=... CHATD_MODEL=gpt-4.1-mini go run ./examples/embed
//
// With EMBED_MODEL=scripted it answers with a small deterministic model of its own instead
// of the configured provider: a message naming an order (A-1001) makes it call
// lookup_order and tell what the tool returned. Its test runs it so, and needs no LLM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"regexp"
	"syscall"

	"github.com/chatd/chatd/agent"
	"github.com/chatd/chatd/server"
)

func main() {
	cfg, err := server.ConfigFromEnv(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "embed: %v\n", err)
		os.Exit(2)
	}
	opts := []server.Option{server.WithTools(lookupOrder{orders: sampleOrders})}
	if os.Getenv("EMBED_MODEL") == "scripted" {
		opts = append(opts, server.WithModel(scriptedModel{}, "embed-scripted"))
	}
	s, err := server.New(cfg, opts...)
	if err != nil {
		fmt.Fprintf(os.Stderr, "embed: %v\n", err)
		os.Exit(1)
	}
	// Run serves until SIGINT or SIGTERM, then shuts down gracefully.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := s.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "embed: %v\n", err)
		os.Exit(1)
	}
}

// order is what the shop knows of an order.
type order struct {
	ID      string `json:"order_id"`
	Status  string `json:"status"`
	Carrier string `json:"carrier,omitempty"`
	ETA     string `json:"eta,omitempty"`
}

var sampleOrders = map[string]order{
	"A-1001": {ID: "A-1001", Status: "shipped", Carrier: "Parcelforce", ETA: "2026-12-02"},
	"A-1002": {ID: "A-1002", Status: "awaiting payment"},
}

// lookupOrder is the program's own tool: an agent.Tool.
type lookupOrder struct {
	orders map[string]order
}

// Spec describes lookup_order to the model.
func (lookupOrder) Spec() agent.ToolSpec {
	return agent.ToolSpec{
		Name:        "lookup_order",
		Description: "Looks up an order of the shop by its id (such as A-1001) and returns its status, carrier and expected delivery date.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string","description":"the order's id, such as A-1001"}},"required":["order_id"],"additionalProperties":false}`),
		// Reading changes nothing: a call cut off by a restart may be run again.
		Idempotent: true,
	}
}

// Run returns the order as JSON. An error is shown to the model, which may try again.
func (t lookupOrder) Run(_ context.Context, input json.RawMessage, _ agent.Env) (string, error) {
	var in struct {
		OrderID string `json:"order_id"`
	}
	if err := json.Unmarshal(input, &in); err != nil || in.OrderID == "" {
		return "", errors.New("input must be an object with an order_id")
	}
	o, ok := t.orders[in.OrderID]
	if !ok {
		return "", fmt.Errorf("no order %q", in.OrderID)
	}
	b, err := json.Marshal(o)
	return string(b), err
}

// orderID finds an order id in a message.
var orderID = regexp.MustCompile(`\b[A-Z]-\d{4}\b`)

// scriptedModel stands in for an LLM: it calls lookup_order for an order id the user
// names, then reports the tool's result.
type scriptedModel struct{}

// Stream answers the conversation's last message.
func (scriptedModel) Stream(_ context.Context, req agent.ModelRequest, emit func(agent.ModelEvent) error) error {
	if len(req.Messages) == 0 {
		return emit(agent.ModelEvent{Kind: agent.EventText, Text: "Hello."})
	}
	last := req.Messages[len(req.Messages)-1]
	switch {
	case last.Role == agent.RoleTool && last.IsError:
		return emit(agent.ModelEvent{Kind: agent.EventText, Text: "I could not find it: " + last.Result})
	case last.Role == agent.RoleTool:
		return emit(agent.ModelEvent{Kind: agent.EventText, Text: "Here is the order: " + last.Result})
	case last.Role == agent.RoleUser && orderID.MatchString(last.Text):
		input, err := json.Marshal(map[string]string{"order_id": orderID.FindString(last.Text)})
		if err != nil {
			return err
		}
		return emit(agent.ModelEvent{Kind: agent.EventToolCall, ToolCall: agent.ToolCall{
			ID: fmt.Sprintf("call_%d", len(req.Messages)), Name: "lookup_order", Input: input,
		}})
	}
	return emit(agent.ModelEvent{Kind: agent.EventText, Text: "Which order? Give its id, such as A-1001."})
}
