package wstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/chatd/chatd/docs"
)

// schemaURL is where the compiler files the embedded schema; nothing is fetched from it.
const schemaURL = "file:///chatd/docs/protocol.schema.json"

// frameSchemas are docs/protocol.schema.json compiled once: ClientFrame and ServerFrame,
// and the definition of each of their frame types.
type frameSchemas struct {
	client, server *jsonschema.Schema
	clientTypes    map[string]*jsonschema.Schema
	serverTypes    map[string]*jsonschema.Schema

	mu   sync.Mutex // guards c and defs
	c    *jsonschema.Compiler
	defs map[string]*jsonschema.Schema
}

var loadSchemas = sync.OnceValues(func() (*frameSchemas, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(docs.ProtocolSchema))
	if err != nil {
		return nil, fmt.Errorf("parse protocol.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat() // uuid and date-time are part of the contract, not annotations
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("load protocol.schema.json: %w", err)
	}
	s := &frameSchemas{c: c, defs: make(map[string]*jsonschema.Schema)}
	if s.client, s.clientTypes, err = compileUnion(c, "ClientFrame"); err != nil {
		return nil, err
	}
	if s.server, s.serverTypes, err = compileUnion(c, "ServerFrame"); err != nil {
		return nil, err
	}
	return s, nil
})

// compileUnion compiles the oneOf definition name and each of its branches, keyed by the
// branch's type const.
func compileUnion(c *jsonschema.Compiler, name string) (*jsonschema.Schema, map[string]*jsonschema.Schema, error) {
	union, err := c.Compile(schemaURL + "#/$defs/" + name)
	if err != nil {
		return nil, nil, fmt.Errorf("compile %s: %w", name, err)
	}
	types, err := FrameTypes(name)
	if err != nil {
		return nil, nil, err
	}
	byType := make(map[string]*jsonschema.Schema, len(types))
	for typ, def := range types {
		if byType[typ], err = c.Compile(schemaURL + "#/$defs/" + def); err != nil {
			return nil, nil, fmt.Errorf("compile %s: %w", def, err)
		}
	}
	return union, byType, nil
}

// FrameTypes returns the frame types of one of the schema's unions ("ClientFrame",
// "ServerFrame" or "Event"), each with the name of its definition. It fails when two
// branches share a type: then the type would not say which definition a frame is of.
func FrameTypes(union string) (map[string]string, error) {
	var doc struct {
		Defs map[string]struct {
			OneOf []struct {
				Ref string `json:"$ref"`
			} `json:"oneOf"`
			Properties struct {
				Type struct {
					Const *string `json:"const"`
				} `json:"type"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(docs.ProtocolSchema, &doc); err != nil {
		return nil, fmt.Errorf("parse protocol.schema.json: %w", err)
	}
	u, ok := doc.Defs[union]
	if !ok || len(u.OneOf) == 0 {
		return nil, fmt.Errorf("protocol.schema.json has no oneOf %s", union)
	}
	out := make(map[string]string, len(u.OneOf))
	for _, branch := range u.OneOf {
		name, ok := strings.CutPrefix(branch.Ref, "#/$defs/")
		if !ok {
			return nil, fmt.Errorf("%s: branch %q is not a $ref to a definition", union, branch.Ref)
		}
		typ := doc.Defs[name].Properties.Type.Const
		if typ == nil {
			return nil, fmt.Errorf("%s: %s has no type const", union, name)
		}
		if prev, dup := out[*typ]; dup {
			return nil, fmt.Errorf("%s: %s and %s both have type %q", union, prev, name, *typ)
		}
		out[*typ] = name
	}
	return out, nil
}

// ValidateDefinition checks b against one definition of the schema, such as the HTTP
// API's "Session" or "HttpError".
func ValidateDefinition(name string, b []byte) error {
	s, err := loadSchemas()
	if err != nil {
		return err
	}
	s.mu.Lock()
	def, ok := s.defs[name]
	if !ok {
		def, err = s.c.Compile(schemaURL + "#/$defs/" + name)
		if err == nil {
			s.defs[name] = def
		}
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("compile %s: %w", name, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s is not JSON: %w: %s", name, err, b)
	}
	if err := def.Validate(v); err != nil {
		return fmt.Errorf("not a %s of docs/protocol.schema.json: %w: %s", name, err, b)
	}
	return nil
}

// ValidateServerFrame checks b against the schema's ServerFrame: a frame the server may
// send. The error names the frame's type and what breaks its definition.
func ValidateServerFrame(b []byte) error {
	s, err := loadSchemas()
	if err != nil {
		return err
	}
	return validate(b, "server", s.server, s.serverTypes)
}

// ValidateClientFrame checks b against the schema's ClientFrame: a frame the protocol
// allows a client to send (unknown fields included). The server accepts a few frames it
// does not (a UUID without hyphens, say); tests of those use SendUnchecked.
func ValidateClientFrame(b []byte) error {
	s, err := loadSchemas()
	if err != nil {
		return err
	}
	return validate(b, "client", s.client, s.clientTypes)
}

func validate(b []byte, side string, union *jsonschema.Schema, byType map[string]*jsonschema.Schema) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s frame is not JSON: %w: %s", side, err, b)
	}
	// The union's branches have distinct type consts (FrameTypes checks), so a frame
	// matches the union exactly when it matches its type's definition. Checking that one
	// alone costs less than trying every branch (tests validate every delta), and the
	// error says what is wrong with the frame as that type, not with each branch.
	schema := union
	if obj, ok := v.(map[string]any); ok {
		if typ, ok := obj["type"].(string); ok {
			if schema = byType[typ]; schema == nil {
				return fmt.Errorf("%s frame: type %q is not a %s frame type: %s", side, typ, side, b)
			}
		}
	}
	if err := schema.Validate(v); err != nil {
		return fmt.Errorf("%s frame does not match docs/protocol.schema.json: %w\nframe: %s", side, err, b)
	}
	return nil
}
