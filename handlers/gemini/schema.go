package gemini

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// maxSchemaDepth bounds how deep a schema is walked: a hostile one could
// nest without end, and no real tool's parameters come near it.
const maxSchemaDepth = 64

// jsonSchema returns raw as JSON Schema, the form the neutral model and
// every worker take. raw is either the Gemini API's Schema type (an OpenAPI
// subset: type names in capitals, nullable, int64 bounds as strings,
// propertyOrdering) or JSON Schema already, which Gemini CLI still writes
// with capital type names. Both are read the same way: capital type names
// become JSON Schema's, nullable becomes a "null" type, numeric strings of
// the count bounds become numbers, Gemini-only keywords are left out, and
// every other keyword is kept as it is. A schema that is not an object is
// refused with the reason.
func jsonSchema(raw json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers exactly as sent
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errNotObject
	}
	if err := normalizeSchema(obj, 0); err != nil {
		return nil, err
	}
	return json.Marshal(obj)
}

type schemaError string

func (e schemaError) Error() string { return string(e) }

const (
	errNotObject = schemaError("a schema must be a JSON object")
	errTooDeep   = schemaError("the schema nests deeper than 64 levels")
)

// geminiTypes are the Gemini Schema's type names and JSON Schema's for
// them (TYPE_UNSPECIFIED says nothing).
var geminiTypes = map[string]string{
	"STRING": "string", "NUMBER": "number", "INTEGER": "integer", "BOOLEAN": "boolean",
	"ARRAY": "array", "OBJECT": "object", "NULL": "null", "TYPE_UNSPECIFIED": "",
}

// countKeywords are the bounds the Gemini Schema carries as int64, which
// protobuf JSON may write as strings.
var countKeywords = []string{"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}

// schemaMaps are keywords whose value maps names to schemas; schemaLists
// hold lists of schemas; schemaOne hold one schema.
var (
	schemaMaps  = []string{"properties", "$defs", "definitions", "patternProperties", "dependentSchemas"}
	schemaLists = []string{"anyOf", "oneOf", "allOf", "prefixItems"}
	schemaOne   = []string{"items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"}
)

func normalizeSchema(s map[string]any, depth int) error {
	if depth > maxSchemaDepth {
		return errTooDeep
	}
	normalizeType(s)
	for _, k := range countKeywords {
		if str, ok := s[k].(string); ok {
			if n, err := strconv.ParseInt(str, 10, 64); err == nil {
				s[k] = n
			}
		}
	}
	// Gemini's ordering hint and its "any_of" spelling.
	delete(s, "propertyOrdering")
	if v, ok := s["any_of"]; ok {
		if _, has := s["anyOf"]; !has {
			s["anyOf"] = v
		}
		delete(s, "any_of")
	}
	for _, k := range schemaMaps {
		if m, ok := s[k].(map[string]any); ok {
			for _, sub := range m {
				if err := normalizeSub(sub, depth); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range schemaLists {
		if l, ok := s[k].([]any); ok {
			for _, sub := range l {
				if err := normalizeSub(sub, depth); err != nil {
					return err
				}
			}
		}
	}
	for _, k := range schemaOne {
		if err := normalizeSub(s[k], depth); err != nil {
			return err
		}
	}
	return nil
}

func normalizeSub(v any, depth int) error {
	if m, ok := v.(map[string]any); ok {
		return normalizeSchema(m, depth+1)
	}
	return nil
}

// normalizeType writes type in JSON Schema's names and folds nullable in.
func normalizeType(s map[string]any) {
	switch t := s["type"].(type) {
	case string:
		if jt, ok := geminiTypes[strings.ToUpper(t)]; ok {
			if jt == "" {
				delete(s, "type")
			} else {
				s["type"] = jt
			}
		}
	case []any:
		for i, e := range t {
			if str, ok := e.(string); ok {
				if jt, ok := geminiTypes[strings.ToUpper(str)]; ok && jt != "" {
					t[i] = jt
				}
			}
		}
	}
	n, ok := s["nullable"].(bool)
	if !ok {
		return
	}
	delete(s, "nullable")
	if t, isName := s["type"].(string); n && isName && t != "null" {
		s["type"] = []any{t, "null"}
	}
}
