// Package mcp offers the tools of Model Context Protocol servers to chatd's agent:
// servers configured in a JSON file in the format MCP clients use ("mcpServers"), over
// streamable HTTP or stdio, with chatd's rules for approval, idempotency, cancellation,
// progress and per-user identity. docs/tools.md is the user's guide.
package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// Approval policies of a server or a tool (ServerConfig.Approval).
const (
	// ApprovalAuto asks a person unless the tool says it only reads (readOnlyHint).
	ApprovalAuto = "auto"
	// ApprovalAlways asks a person before every call.
	ApprovalAlways = "always"
	// ApprovalNever never asks.
	ApprovalNever = "never"
)

// Forwarding of the caller's identity (ServerConfig.ForwardUser).
const (
	// ForwardNone sends nothing of the user.
	ForwardNone = ""
	// ForwardID sends the user's id.
	ForwardID = "id"
	// ForwardToken sends the user's id and the bearer token their message came with.
	ForwardToken = "token"
)

// DefaultTimeout bounds a call when the configuration does not.
const DefaultTimeout = 2 * time.Minute

// Config is a CHATD_MCP_CONFIG file: {"mcpServers": {"<name>": {…}}}.
type Config struct {
	Servers map[string]ServerConfig
}

// ServerConfig is one server: either url (streamable HTTP) or command (stdio), plus
// chatd's own keys.
type ServerConfig struct {
	// URL is a streamable HTTP endpoint; Headers are sent on every request to it.
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	// Command, Args and Env start a stdio server as chatd's child (Env adds to what the
	// child gets: PATH and HOME from chatd, nothing else of chatd's environment).
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	// Type is what other MCP clients write ("http", "streamable-http", "stdio"): checked
	// against url or command when given.
	Type string `json:"type"`

	// Approval is the server's policy: auto (the default), always or never.
	Approval string `json:"approval"`
	// Idempotent declares every tool of the server idempotent (nil: per tool, from its
	// annotations).
	Idempotent *bool `json:"idempotent"`
	// Timeout bounds each call ("30s", "5m"; default 2m).
	Timeout Duration `json:"timeout"`
	// Stale stops a call that sends no progress for this long ("90s"), or never
	// ("off"); default: chatd's CHATD_TOOL_STALE.
	Stale Stale `json:"stale"`
	// ForwardUser sends the caller's id to the server: "id" (or true), or "token": the id
	// and the bearer token their message was sent with. Default: nothing.
	ForwardUser ForwardUser `json:"forwardUser"`
	// Tools overrides the server's keys per tool, by the tool's name on the server.
	Tools map[string]ToolConfig `json:"tools"`
	// Disabled leaves the server out.
	Disabled bool `json:"disabled"`
}

// ToolConfig overrides a server's keys for one tool.
type ToolConfig struct {
	Approval   string   `json:"approval"`
	Idempotent *bool    `json:"idempotent"`
	Timeout    Duration `json:"timeout"`
	Stale      Stale    `json:"stale"`
	// Disabled leaves the tool out.
	Disabled bool `json:"disabled"`
}

// Duration is a time.Duration written as a string ("30s") in the file.
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New(`a duration is a string such as "30s" or "5m"`)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		return fmt.Errorf("%q is not a positive duration (such as \"30s\" or \"5m\")", s)
	}
	*d = Duration(v)
	return nil
}

// Stale is a duration ("90s") or "off", written as a string; off is negative.
type Stale time.Duration

func (d *Stale) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil && s == "off" {
		*d = -1
		return nil
	}
	var v Duration
	if err := v.UnmarshalJSON(b); err != nil {
		return fmt.Errorf(`%w, or "off"`, err)
	}
	*d = Stale(v)
	return nil
}

// ForwardUser is "id" (or true) or nothing (false, "").
type ForwardUser string

func (f *ForwardUser) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case bool:
		if v {
			*f = ForwardID
		} else {
			*f = ForwardNone
		}
		return nil
	case string:
		switch v {
		case "", "none":
			*f = ForwardNone
			return nil
		case ForwardID, ForwardToken:
			*f = ForwardUser(v)
			return nil
		}
	}
	return fmt.Errorf(`%s: use true, false, "id", "token" or "none"`, b)
}

// serverName is what may name a server: its tools are offered as <server>__<tool>, so
// "__" is not allowed in it (two servers' tools could share a name otherwise).
var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,30}$`)

// Load reads and checks the file at path. Every error names the server and the key.
func Load(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("CHATD_MCP_CONFIG: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return Config{}, fmt.Errorf("CHATD_MCP_CONFIG %s: %w", path, err)
	}
	return cfg, nil
}

// Parse checks a configuration: invalid JSON, unknown keys, a server with neither url nor
// command (or both), bad values are errors naming the server and the key.
func Parse(b []byte) (Config, error) {
	var top map[string]json.RawMessage
	if err := strictDecode(b, &top); err != nil {
		return Config{}, fmt.Errorf("not valid JSON: %w", err)
	}
	for k := range top {
		if k != "mcpServers" {
			return Config{}, fmt.Errorf(`unknown key %q at the top (the file is {"mcpServers": {"<name>": {…}}})`, k)
		}
	}
	raw, ok := top["mcpServers"]
	if !ok {
		return Config{}, errors.New(`no "mcpServers" key (the file is {"mcpServers": {"<name>": {…}}})`)
	}
	var servers map[string]json.RawMessage
	if err := strictDecode(raw, &servers); err != nil {
		return Config{}, fmt.Errorf(`"mcpServers" must be an object of servers by name: %w`, err)
	}
	cfg := Config{Servers: map[string]ServerConfig{}}
	names := make([]string, 0, len(servers))
	for name := range servers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s, err := parseServer(name, servers[name])
		if err != nil {
			return Config{}, fmt.Errorf("mcp server %q: %w", name, err)
		}
		if !s.Disabled {
			cfg.Servers[name] = s
		}
	}
	return cfg, nil
}

func parseServer(name string, raw json.RawMessage) (ServerConfig, error) {
	if !serverName.MatchString(name) || strings.Contains(name, "__") {
		return ServerConfig{}, errors.New(`the name: use 1 to 31 letters, digits, _ or - (not "__"), starting with a letter or digit`)
	}
	var s ServerConfig
	if err := strictDecode(raw, &s); err != nil {
		return ServerConfig{}, err
	}
	switch {
	case s.URL == "" && s.Command == "":
		return s, errors.New(`neither "url" (streamable HTTP) nor "command" (stdio)`)
	case s.URL != "" && s.Command != "":
		return s, errors.New(`both "url" and "command": give one`)
	}
	switch s.Type {
	case "":
	case "http", "streamable-http", "streamableHttp":
		if s.URL == "" {
			return s, fmt.Errorf(`"type" %q needs "url"`, s.Type)
		}
	case "stdio":
		if s.Command == "" {
			return s, errors.New(`"type" "stdio" needs "command"`)
		}
	default:
		return s, fmt.Errorf(`"type" %q: use "http" or "stdio" (SSE servers are not supported)`, s.Type)
	}
	if s.URL != "" {
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return s, fmt.Errorf(`"url" %q is not an http(s) URL`, s.URL)
		}
		if len(s.Args) > 0 || len(s.Env) > 0 {
			return s, errors.New(`"args" and "env" are for "command" servers`)
		}
	} else if len(s.Headers) > 0 {
		return s, errors.New(`"headers" are for "url" servers`)
	}
	if err := checkApproval(s.Approval); err != nil {
		return s, fmt.Errorf(`"approval": %w`, err)
	}
	for tool, t := range s.Tools {
		if err := checkApproval(t.Approval); err != nil {
			return s, fmt.Errorf(`"tools" %q "approval": %w`, tool, err)
		}
	}
	return s, nil
}

func checkApproval(v string) error {
	switch v {
	case "", ApprovalAuto, ApprovalAlways, ApprovalNever:
		return nil
	}
	return fmt.Errorf("%q: use %q, %q or %q", v, ApprovalAuto, ApprovalAlways, ApprovalNever)
}

// strictDecode decodes b into v, refusing unknown keys and trailing data.
func strictDecode(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field ") {
			return fmt.Errorf("unknown key %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		}
		return err
	}
	if d.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// stale is how long a call of tool of s may go without progress (agent.ToolSpec's
// StaleAfter): the tool's own, else the server's, else 0 (chatd's CHATD_TOOL_STALE).
func (s ServerConfig) stale(tool string) time.Duration {
	if t := s.Tools[tool].Stale; t != 0 {
		return time.Duration(t)
	}
	return time.Duration(s.Stale)
}

// timeout is the call timeout for tool of s.
func (s ServerConfig) timeout(tool string) time.Duration {
	if t := s.Tools[tool].Timeout; t > 0 {
		return time.Duration(t)
	}
	if s.Timeout > 0 {
		return time.Duration(s.Timeout)
	}
	return DefaultTimeout
}
