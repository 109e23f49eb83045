package responses

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// wireTool is any entry of tools; Type says which fields are meaningful.
type wireTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	Parameters   json.RawMessage `json:"parameters"`
	DeferLoading bool            `json:"defer_loading"`
	// Tools are a namespace's functions.
	Tools []wireTool `json:"tools"`
	// Function is a chat completions tool's definition, which another
	// gateway took here too (Shapes.ChatTool).
	Function json.RawMessage `json:"function"`
	// Format is a custom tool's input format (text, or a grammar).
	Format *struct {
		Type       string `json:"type"`
		Syntax     string `json:"syntax"`
		Definition string `json:"definition"`
	} `json:"format"`
}

// toolRef is how the client knows a tool that the worker is offered under
// a flat name: a function of a namespace (Codex's multi-agent and MCP tools),
// or a custom tool, whose one free-form string input the worker fills as the
// argument "input".
type toolRef struct {
	namespace string
	name      string
	custom    bool
}

// toolRefs maps the flat names offered to the worker back to the client's
// tools; nil when every tool is a plain function.
type toolRefs map[string]toolRef

// namespaceSep joins a namespace and its function into the flat name the
// worker sees; it is what MCP clients use for the same purpose, and it keeps
// the name valid for OpenAI-compatible workers.
const namespaceSep = "__"

// flatName is the worker's name for a function of a namespace ("" for a
// function with no name, which Validate refuses).
func flatName(namespace, name string) string {
	if namespace == "" || name == "" {
		return name
	}
	return namespace + namespaceSep + name
}

// customInput is the one argument a custom tool is offered with.
const customInput = "input"

var customParams = json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"The tool's whole input, as free-form text in the format the description gives."}},"required":["input"],"additionalProperties":false}`)

// hostedTools are tools OpenAI's servers run (search, code, images, MCP
// connectors). No worker can run them, so they are not offered.
var hostedTools = map[string]bool{
	"web_search": true, "web_search_preview": true, "web_search_preview_2025_03_11": true,
	"file_search": true, "code_interpreter": true, "image_generation": true, "computer_use_preview": true,
	"mcp": true, "local_shell": true, "tool_search": true, "shell": true, "apply_patch": true,
}

// decodeTools returns the tools offered to the worker, the name of each on
// the wire (for errors) and, when any tool is namespaced or custom, the map
// back to the client's names. A forced tool_choice naming a hosted tool is
// refused: the answer could not honour it.
func decodeTools(raw []json.RawMessage, forced string, shapes Shapes, d *httpx.Dropped) ([]chat.Tool, toolRefs, []string, error) {
	if len(raw) == 0 {
		return nil, nil, nil, nil
	}
	out := make([]chat.Tool, 0, len(raw))
	params := make([]string, 0, len(raw))
	var refs toolRefs
	add := func(param string, t chat.Tool, ref *toolRef) {
		out = append(out, t)
		params = append(params, param)
		if ref != nil {
			if refs == nil {
				refs = make(toolRefs)
			}
			refs[t.Name] = *ref
		}
	}
	for i, r := range raw {
		param := fmt.Sprintf("tools[%d]", i)
		var t wireTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, nil, nil, badParam(param, param+" must be a tool object")
		}
		if err := chatStyleTool(param, &t, shapes); err != nil {
			return nil, nil, nil, err
		}
		switch {
		case t.Type == "function" || t.Type == "custom":
			tool, ref, err := leafTool(param, "", "", &t)
			if err != nil {
				return nil, nil, nil, err
			}
			add(param, tool, ref)
		case t.Type == "namespace":
			if t.Name == "" {
				return nil, nil, nil, badParam(param+".name", param+".name: field required")
			}
			for j := range t.Tools {
				p := fmt.Sprintf("%s.tools[%d]", param, j)
				tool, ref, err := leafTool(p, t.Name, t.Description, &t.Tools[j])
				if err != nil {
					return nil, nil, nil, err
				}
				add(p, tool, ref)
			}
		case hostedTools[t.Type] || strings.HasPrefix(t.Type, "web_search") || strings.HasPrefix(t.Type, "computer_use"):
			if forced != "" && (forced == t.Type || forced == t.Name) {
				return nil, nil, nil, badParam("tool_choice", fmt.Sprintf("tool_choice forces the hosted tool %q, which this gateway's workers cannot run", t.Type))
			}
			d.Add(dropHostedTools)
		default:
			return nil, nil, nil, badParam(param+".type", fmt.Sprintf("%s: tool type %q is not supported", param, t.Type))
		}
	}
	return out, refs, params, nil
}

// leafTool translates a function or custom tool, on its own or inside a
// namespace (whose description then opens the tool's, as the model would
// otherwise not know which group a tool belongs to).
func leafTool(param, namespace, nsDescription string, t *wireTool) (chat.Tool, *toolRef, error) {
	if t.Type != "function" && t.Type != "custom" && t.Type != "" {
		return chat.Tool{}, nil, badParam(param+".type", fmt.Sprintf("%s: tool type %q is not supported inside a namespace", param, t.Type))
	}
	desc := t.Description
	if nsDescription != "" {
		desc = strings.TrimSpace(nsDescription + "\n\n" + desc)
	}
	out := chat.Tool{Name: flatName(namespace, t.Name), Description: desc, Parameters: t.Parameters}
	var ref *toolRef
	if namespace != "" {
		ref = &toolRef{namespace: namespace, name: t.Name}
	}
	if t.Type == "custom" {
		ref = &toolRef{namespace: namespace, name: t.Name, custom: true}
		out.Parameters = customParams
		if f := t.Format; f != nil && f.Type == "grammar" && f.Definition != "" {
			out.Description = strings.TrimSpace(out.Description + "\n\nThe input must follow this " + f.Syntax + " grammar:\n" + f.Definition)
		}
	}
	return out, ref, nil
}

// call turns a worker's call into the client's: for a custom tool the
// argument "input" (or, when the model sent something else, its arguments
// as they are) becomes the free-form input.
func (refs toolRefs) call(tc *chat.ToolCall) (ref toolRef, input string) {
	ref, ok := refs[tc.Name]
	if !ok {
		return toolRef{name: tc.Name}, ""
	}
	if !ref.custom {
		return ref, ""
	}
	var args map[string]json.RawMessage
	if json.Unmarshal([]byte(tc.Arguments), &args) == nil {
		var s string
		if raw, ok := args[customInput]; ok && json.Unmarshal(raw, &s) == nil {
			return ref, s
		}
	}
	return ref, tc.Arguments
}

// customArguments is the worker-side arguments of a custom tool call the
// client replays: the free-form input as the argument "input".
func customArguments(input string) string {
	b := append([]byte(`{"input":`), jsonx.AppendString(nil, input)...)
	return string(append(b, '}'))
}
