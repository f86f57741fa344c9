package conversation

import (
	"context"
	"encoding/json"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/chat"
)

// ShellTool is the tool whose approval rules name a command: its calls match a rule when
// their command's first word is the rule's, and it holds no shell syntax that could run
// another command (ShellMeta).
const ShellTool = "shell"

// ShellMeta are the characters that keep a shell command from matching a rule: with one
// of them, a command could run more than the command its first word names.
const ShellMeta = ";&|`$()<>\n\r"

// RuleFor returns the rule an approval with scope "session" of a call of tool name with
// input makes: for ShellTool, its command's first word (command); for other tools, any
// call of the tool (command nil). ok is false for a shell call with no command word.
func RuleFor(name string, input json.RawMessage) (command *string, ok bool) {
	if name != ShellTool {
		return nil, true
	}
	word, _, ok := shellCommand(input)
	if !ok {
		return nil, false
	}
	return &word, true
}

// shellCommand returns a shell call's first word, and whether the command has shell
// syntax.
func shellCommand(input json.RawMessage) (word string, meta bool, ok bool) {
	var in struct {
		Command string `json:"command"`
	}
	if json.Unmarshal(input, &in) != nil {
		return "", false, false
	}
	fields := strings.Fields(in.Command)
	if len(fields) == 0 {
		return "", false, false
	}
	return fields[0], strings.ContainsAny(in.Command, ShellMeta), true
}

// RuleMatches reports whether rule approves a call of tool name with input.
func RuleMatches(rule chat.ApprovalRule, name string, input json.RawMessage) bool {
	if rule.Tool != name {
		return false
	}
	if rule.Command == nil {
		return name != ShellTool
	}
	word, meta, ok := shellCommand(input)
	return ok && !meta && word == *rule.Command
}

// loadRules reads the session's approval rules once.
func (a *Actor) loadRules() error {
	if a.rulesLoaded {
		return nil
	}
	rules, err := a.journal.approvalRules()
	if err != nil {
		return err
	}
	a.rules, a.rulesLoaded = rules, true
	return nil
}

// matchingRule returns the session's rule that approves call, nil for none (also when
// the rules cannot be read: the call then asks).
func (a *Actor) matchingRule(call ToolCall) *chat.ApprovalRule {
	if err := a.loadRules(); err != nil {
		a.logger().Error().Err(err).Msg("read the session's approval rules")
		return nil
	}
	input := call.Input
	if clean := chat.CleanJSON(input); clean != nil {
		input = clean
	}
	for i := range a.rules {
		if RuleMatches(a.rules[i], call.Name, input) {
			r := a.rules[i]
			return &r
		}
	}
	return nil
}

// ruleFor builds the rule a scope "session" approval of t makes; CodeBadRequest when the
// call cannot make one.
func (a *Actor) ruleFor(t *chat.ToolCall, req DecideRequest) (chat.ApprovalRule, error) {
	command, ok := RuleFor(t.Name, t.Input)
	if !ok {
		return chat.ApprovalRule{}, errorf(CodeBadRequest, "tool call %q has no command to allow for the session", t.CallID)
	}
	return chat.ApprovalRule{
		ID: newID(), SessionID: a.id, Tool: t.Name, Command: command,
		CreatedBy: req.By, CreatedVia: req.Via, ToolCallID: t.CallID, CreatedAt: a.now(),
	}, nil
}

// addRule stores a rule and tells the session's subscribers (approval.rules). A rule
// the same as one the session has is not stored again.
func (a *Actor) addRule(run *runState, r chat.ApprovalRule) error {
	if err := a.loadRules(); err != nil {
		return err
	}
	for _, x := range a.rules {
		if x.Tool == r.Tool && ((x.Command == nil) == (r.Command == nil)) && (x.Command == nil || *x.Command == *r.Command) {
			return nil
		}
	}
	if err := a.journal.insertRule(r); err != nil {
		return err
	}
	a.rules = append(slices.Clip(a.rules), r)
	a.publishRules(run)
	return nil
}

func (a *Actor) publishRules(run *runState) {
	ev := Event{Type: EventApprovalRules, Rules: slices.Clone(a.rules)}
	if ev.Rules == nil {
		ev.Rules = []chat.ApprovalRule{}
	}
	if run != nil {
		ev = a.runEvent(run, ev)
	}
	a.publish(ev)
}

// Revoke removes one of the session's approval rules: later calls it matched ask again.
// An unknown rule returns *Error with CodeNotFound and changes nothing.
func (a *Actor) Revoke(ctx context.Context, ruleID uuid.UUID) error {
	_, err := call(ctx, a, func(r chan result[struct{}]) intent { return &revokeIntent{ruleID, r} })
	return err
}

type revokeIntent struct {
	ruleID uuid.UUID
	reply  chan result[struct{}]
}

func (a *Actor) revoke(id uuid.UUID) error {
	if err := a.takeUpLoaded(); err != nil {
		return err
	}
	if err := a.load(); err != nil {
		return a.loadError(err)
	}
	if a.session == nil {
		return errorf(CodeNotFound, "no such session")
	}
	if err := a.loadRules(); err != nil {
		return a.storageError("read the session's approval rules", err)
	}
	i := slices.IndexFunc(a.rules, func(r chat.ApprovalRule) bool { return r.ID == id })
	if i < 0 {
		return errorf(CodeNotFound, "the session has no approval rule %s", id)
	}
	if _, err := a.journal.deleteRule(id); err != nil {
		return a.storageError("delete an approval rule", err)
	}
	a.rules = slices.Delete(slices.Clone(a.rules), i, i+1)
	a.publishRules(a.run)
	return nil
}
