package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// createRequest is the wire body of POST /v1/responses. Harmless fields
// (user, parallel_tool_calls, truncation, stream_options, safety_identifier,
// client_metadata) are accepted; fields that would change the answer and
// can't be honoured are decoded only to be rejected, or, when coding agents
// send them on every turn, dropped visibly (see droppable).
type createRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Metadata           map[string]string `json:"metadata"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	PreviousResponseID string            `json:"previous_response_id"`
	User               string            `json:"user"`
	PromptCacheKey     string            `json:"prompt_cache_key"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Truncation         string            `json:"truncation"`

	Background   bool            `json:"background"`
	Include      []string        `json:"include"`
	Text         *textOptions    `json:"text"`
	Conversation json.RawMessage `json:"conversation"`
	Prompt       json.RawMessage `json:"prompt"`
	TopLogprobs  *int            `json:"top_logprobs"`
	MaxToolCalls *int            `json:"max_tool_calls"`

	Reasoning   json.RawMessage `json:"reasoning"`
	ServiceTier json.RawMessage `json:"service_tier"`
}

type textOptions struct {
	Format *struct {
		Type string `json:"type"`
	} `json:"format"`
	Verbosity json.RawMessage `json:"verbosity"`
}

// inputItem is any item of a list input; Type (or Role, for the short
// message form) says which fields are meaningful.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ID        string          `json:"id"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Arguments string          `json:"arguments"`
	Input     *string         `json:"input"`
	Output    json.RawMessage `json:"output"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// Fields this protocol accepts but drops, as counted in
// poolgate_request_fields_ignored_total{protocol="responses"}.
const (
	dropReasoning      = "reasoning"
	dropInclude        = "include"
	dropServiceTier    = "service_tier"
	dropVerbosity      = "text.verbosity"
	dropHostedTools    = "tools.hosted"
	dropReasoningItems = "input.reasoning"
	dropCompaction     = "input.compaction"
	dropHostedCalls    = "input.hosted_tool_call"
	dropImages         = "content.image"
	dropFiles          = "content.file"
)

// DroppedFields lists every field name the Responses decoder may report as
// dropped, so the counter can be pre-initialised.
var DroppedFields = []string{
	dropReasoning, dropInclude, dropServiceTier, dropVerbosity, dropHostedTools,
	dropReasoningItems, dropCompaction, dropHostedCalls, dropImages, dropFiles,
}

// decoded is a validated create request: the neutral request without the
// stored history, this turn's input as neutral messages and as items, the
// map back to the client's tool names, and what was dropped.
type decoded struct {
	wire    createRequest
	chat    chat.Request
	input   []chat.Message
	items   []item
	refs    toolRefs
	dropped httpx.Dropped
	// toolParams names each neutral tool by its place in the wire tools
	// (namespaces are flattened and hosted tools are not offered).
	toolParams []string
	// shapes are another gateway's forms, taken (Config.Shapes).
	shapes Shapes
}

// decodeCreate parses a create body and checks this protocol's fields; the
// whole request is validated once the stored history it continues is in
// (see prepare).
func decodeCreate(body []byte, shapes Shapes) (*decoded, error) {
	d := &decoded{shapes: shapes}
	in := &d.wire
	if err := json.Unmarshal(body, in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, badParam(te.Field, fmt.Sprintf("%s: expected %s, got %s", te.Field, te.Type, te.Value))
		}
		return nil, badParam("", "invalid JSON body: "+err.Error())
	}
	if err := in.checkFields(&d.dropped); err != nil {
		return nil, err
	}
	var err error
	c := &d.chat
	if c.Tools, d.refs, d.toolParams, err = decodeTools(in.Tools, forcedTool(in.ToolChoice), d.shapes, &d.dropped); err != nil {
		return nil, err
	}
	if c.ToolChoice, err = decodeToolChoice(in.ToolChoice); err != nil {
		return nil, err
	}
	if d.input, d.items, err = d.decodeInput(in.Input); err != nil {
		return nil, err
	}
	c.Model, c.Temperature, c.TopP, c.Stream = in.Model, in.Temperature, in.TopP, in.Stream
	if in.MaxOutputTokens != nil {
		c.MaxTokens = *in.MaxOutputTokens
	}
	c.AffinityHint = in.PromptCacheKey
	if c.AffinityHint == "" {
		c.AffinityHint = in.User
	}
	return d, nil
}

// param is this protocol's name for a neutral field. The transcript is the
// instructions, the stored history and the input, so its messages are
// named as the input.
func (d *decoded) param(ve *chat.ValidationError) string {
	switch ve.Field {
	case "tools":
		if ve.Index >= 0 && ve.Index < len(d.toolParams) {
			p := d.toolParams[ve.Index]
			if ve.Member != "" {
				p += "." + ve.Member
			}
			return p
		}
	case "messages":
		return "input"
	case "max_tokens":
		return "max_output_tokens"
	}
	return ve.Field
}

// checkFields checks the fields of this protocol only (what every protocol
// checks is chat.Validate's) and records the dropped ones.
func (in *createRequest) checkFields(d *httpx.Dropped) error {
	switch {
	case in.Model == "" && in.PreviousResponseID == "":
		return badParam("model", "model: field required")
	case jsonx.IsNull(in.Input):
		return badParam("input", "input: field required")
	case in.Background:
		return badParam("background", "background responses are not supported by this gateway")
	case !jsonx.IsNull(in.Conversation):
		return badParam("conversation", "conversations are not supported; use previous_response_id")
	case !jsonx.IsNull(in.Prompt):
		return badParam("prompt", "prompt templates are not supported by this gateway")
	case in.TopLogprobs != nil && *in.TopLogprobs > 0:
		return badParam("top_logprobs", "logprobs are not supported by this gateway")
	case in.MaxToolCalls != nil:
		return badParam("max_tool_calls", "max_tool_calls is not supported by this gateway")
	case in.MaxOutputTokens != nil && *in.MaxOutputTokens < 1:
		return badParam("max_output_tokens", "max_output_tokens must be at least 1")
	case in.Temperature != nil && (*in.Temperature < 0 || *in.Temperature > 2):
		return badParam("temperature", "temperature must be between 0 and 2")
	case in.Truncation != "" && in.Truncation != "auto" && in.Truncation != "disabled":
		return badParam("truncation", "truncation must be \"auto\" or \"disabled\"")
	case in.Text != nil && in.Text.Format != nil && in.Text.Format.Type != "text":
		return badParam("text.format", fmt.Sprintf("text.format type %q is not supported; the workers cannot enforce structured output", in.Text.Format.Type))
	}
	for _, inc := range in.Include {
		// Logprobs would be silently missing; everything else asks for
		// reasoning or hosted-tool details this gateway never produces.
		if strings.Contains(inc, "logprobs") {
			return badParam("include", fmt.Sprintf("include value %q is not supported: logprobs are not available", inc))
		}
	}
	if len(in.Include) > 0 {
		d.Add(dropInclude)
	}
	d.AddSet(dropReasoning, in.Reasoning)
	d.AddSet(dropServiceTier, in.ServiceTier)
	if in.Text != nil {
		d.AddSet(dropVerbosity, in.Text.Verbosity)
	}
	return validateMetadata(in.Metadata)
}

func validateMetadata(m map[string]string) error {
	if len(m) > 16 {
		return badParam("metadata", "metadata may have at most 16 keys")
	}
	for k, v := range m {
		if len(k) > 64 || len(v) > 512 {
			return badParam("metadata", "metadata keys are at most 64 characters and values at most 512")
		}
	}
	return nil
}

// decodeInput turns a string or item-list input into neutral messages and
// the items input_items lists.
func (d *decoded) decodeInput(raw json.RawMessage) ([]chat.Message, []item, error) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, badParam("input", "input: "+err.Error())
		}
		return []chat.Message{{Role: chat.RoleUser, Content: s}},
			[]item{{ID: newID("msg_"), Type: "message", Status: "completed", Role: chat.RoleUser, Parts: []string{s}}}, nil
	}
	var list []inputItem
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, badParam("input", "input must be a string or a list of items")
	}
	if len(list) == 0 {
		return nil, nil, badParam("input", "input must not be empty")
	}
	ic := inputContext{decoded: d, current: currentTurn(list),
		msgs: make([]chat.Message, 0, len(list)), items: make([]item, 0, len(list))}
	for i := range list {
		if err := ic.add(i, &list[i]); err != nil {
			return nil, nil, err
		}
	}
	return ic.msgs, ic.items, nil
}

// currentTurn is the index of the last user message item, the one an answer
// depends on; -1 when there is none (the input answers tool calls).
func currentTurn(list []inputItem) int {
	for i := len(list) - 1; i >= 0; i-- {
		if it := &list[i]; (it.Type == "message" || it.Type == "") && it.Role == "user" {
			return i
		}
	}
	return -1
}

// inputContext is the translation of one input list under way.
type inputContext struct {
	*decoded
	current int
	msgs    []chat.Message
	items   []item
}

// addCall appends a call to the assistant turn it belongs to: calls right
// after an assistant message (or each other) are that one turn.
func (ic *inputContext) addCall(call chat.ToolCall) {
	if n := len(ic.msgs); n > 0 && ic.msgs[n-1].Role == chat.RoleAssistant {
		ic.msgs[n-1].ToolCalls = append(ic.msgs[n-1].ToolCalls, call)
		return
	}
	ic.msgs = append(ic.msgs, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{call}})
}

func (ic *inputContext) add(i int, it *inputItem) error {
	param := fmt.Sprintf("input[%d]", i)
	switch it.Type {
	case "message", "":
		role, parts, err := ic.messageParts(param, it, i == ic.current)
		if err != nil {
			return err
		}
		ic.msgs = append(ic.msgs, chat.Message{Role: role, Content: strings.Join(parts, "\n\n")})
		ic.items = append(ic.items, item{ID: idOr(it.ID, "msg_"), Type: "message", Status: "completed", Role: it.Role, Parts: parts})
	case "function_call":
		if it.CallID == "" || it.Name == "" {
			return badParam(param, param+": function_call needs call_id and name")
		}
		ic.addCall(chat.ToolCall{ID: it.CallID, Name: flatName(it.Namespace, it.Name), Arguments: it.Arguments})
		ic.items = append(ic.items, item{ID: idOr(it.ID, "fc_"), Type: "function_call", Status: "completed",
			CallID: it.CallID, Name: it.Name, Namespace: it.Namespace, Arguments: it.Arguments})
	case "custom_tool_call":
		if it.CallID == "" || it.Name == "" || it.Input == nil {
			return badParam(param, param+": custom_tool_call needs call_id, name and input")
		}
		ic.addCall(chat.ToolCall{ID: it.CallID, Name: flatName(it.Namespace, it.Name), Arguments: customArguments(*it.Input)})
		ic.items = append(ic.items, item{ID: idOr(it.ID, "ctc_"), Type: "custom_tool_call", Status: "completed",
			CallID: it.CallID, Name: it.Name, Namespace: it.Namespace, Input: *it.Input})
	case "function_call_output", "custom_tool_call_output":
		out, err := ic.callOutput(param, it)
		if err != nil {
			return err
		}
		ic.msgs = append(ic.msgs, chat.Message{Role: chat.RoleTool, ToolCallID: it.CallID, Content: out})
		ic.items = append(ic.items, item{ID: idOr(it.ID, "fco_"), Type: it.Type, Status: "completed",
			CallID: it.CallID, Output: out})
	case "reasoning":
		// Reasoning from another server: the workers neither make nor read it.
		ic.dropped.Add(dropReasoningItems)
	case "compaction", "compaction_summary":
		// An encrypted summary only OpenAI's servers can read.
		ic.dropped.Add(dropCompaction)
	case "web_search_call", "file_search_call", "code_interpreter_call", "image_generation_call",
		"computer_call", "computer_call_output", "local_shell_call", "local_shell_call_output",
		"tool_search_call", "tool_search_output", "mcp_call", "mcp_list_tools",
		"mcp_approval_request", "mcp_approval_response":
		// Calls of tools the client's earlier provider ran on its side.
		ic.dropped.Add(dropHostedCalls)
	default:
		return badParam(param, fmt.Sprintf("%s: input item type %q is not supported by this gateway", param, it.Type))
	}
	return nil
}

// messageParts validates a message item and returns its neutral role and
// text parts. Images and files become a note (the workers are text-only), so
// the conversation reads on; a current turn that is nothing but media is a
// 400, since any answer would pretend to have seen it.
func (ic *inputContext) messageParts(param string, it *inputItem, current bool) (string, []string, error) {
	var role string
	switch it.Role {
	case "user":
		role = chat.RoleUser
	case "assistant":
		role = chat.RoleAssistant
	case "system", "developer":
		role = chat.RoleSystem
	default:
		return "", nil, badParam(param+".role", fmt.Sprintf("%s.role must be user, assistant, system or developer, got %q", param, it.Role))
	}
	if jsonx.IsNull(it.Content) {
		return "", nil, badParam(param+".content", param+".content: field required")
	}
	if it.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(it.Content, &s); err != nil {
			return "", nil, badParam(param+".content", param+".content: "+err.Error())
		}
		return role, []string{s}, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return "", nil, badParam(param+".content", param+".content must be a string or a list of parts")
	}
	texts := make([]string, 0, len(parts))
	media, words := 0, 0
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "refusal", "text", "summary_text":
			texts = append(texts, p.Text)
			if strings.TrimSpace(p.Text) != "" {
				words++
			}
		case "input_image":
			ic.dropped.Add(dropImages)
			texts = append(texts, imageNote)
			media++
		case "input_file":
			ic.dropped.Add(dropFiles)
			texts = append(texts, fileNote)
			media++
		default:
			pp := fmt.Sprintf("%s.content[%d]", param, j)
			return "", nil, badParam(pp, fmt.Sprintf("%s: %s parts are not supported; the workers are text-only", pp, p.Type))
		}
	}
	if current && media > 0 && words == 0 {
		return "", nil, badParam(param+".content", param+": this turn is only images or files, which the workers cannot read (they are text-only)")
	}
	return role, texts, nil
}

// Notes that stand in for media the text-only workers cannot see.
const (
	imageNote = "[image omitted: the model cannot see images]"
	fileNote  = "[file omitted: the model cannot read attached files]"
)

// callOutput returns a tool output: a string, or parts whose text counts
// (an image a tool returned becomes a note).
func (ic *inputContext) callOutput(param string, it *inputItem) (string, error) {
	if it.CallID == "" {
		return "", badParam(param+".call_id", param+".call_id: field required")
	}
	if jsonx.IsNull(it.Output) {
		return "", badParam(param+".output", param+".output: field required")
	}
	if it.Output[0] == '"' {
		var s string
		err := json.Unmarshal(it.Output, &s)
		if err != nil {
			return "", badParam(param+".output", param+".output: "+err.Error())
		}
		return s, nil
	}
	var hint string
	if ic.shapes != nil {
		var s string
		var ok bool
		if s, ok, hint = ic.shapes.Output(it.Output); ok {
			return s, nil
		}
	}
	var parts []contentPart
	if err := json.Unmarshal(it.Output, &parts); err != nil {
		return "", badParam(param+".output", param+".output must be a string or a list of parts"+hint)
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text":
			texts = append(texts, p.Text)
		case "input_image":
			ic.dropped.Add(dropImages)
			texts = append(texts, imageNote)
		case "input_file":
			ic.dropped.Add(dropFiles)
			texts = append(texts, fileNote)
		default:
			return "", badParam(param+".output", fmt.Sprintf("%s.output: %s parts are not supported; the workers are text-only", param, p.Type))
		}
	}
	return strings.Join(texts, "\n\n"), nil
}

// nameToolResults fills the tool name of each result in input from the call
// it answers, found in input or in the stored history before it; workers
// that render results by name need it, and function_call_output omits it.
// One pass over both, with a map: a transcript may hold thousands of calls.
func nameToolResults(history, input []chat.Message) {
	var names map[string]string
	note := func(msgs []chat.Message) {
		for i := range msgs {
			for _, tc := range msgs[i].ToolCalls {
				if names == nil {
					names = make(map[string]string)
				}
				names[tc.ID] = tc.Name
			}
		}
	}
	note(history)
	for i := range input {
		m := &input[i]
		switch {
		case len(m.ToolCalls) > 0:
			note(input[i : i+1])
		case m.Role == chat.RoleTool && m.Name == "":
			m.Name = names[m.ToolCallID]
		}
	}
}

// wireToolChoice is the object form of tool_choice.
type wireToolChoice struct {
	Type      string `json:"type"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// forcedTool returns what a tool_choice object forces: a tool's name, or a
// hosted tool's type; "" for the string forms.
func forcedTool(raw json.RawMessage) string {
	var tc wireToolChoice
	if jsonx.IsNull(raw) || raw[0] != '{' || json.Unmarshal(raw, &tc) != nil {
		return ""
	}
	if tc.Type == "function" || tc.Type == "custom" {
		return flatName(tc.Namespace, tc.Name)
	}
	return tc.Type
}

// decodeToolChoice reads tool_choice; whether the tools can satisfy it is
// for Validate.
func decodeToolChoice(raw json.RawMessage) (chat.ToolChoice, error) {
	if jsonx.IsNull(raw) {
		return chat.ToolChoice{}, nil
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		switch s {
		case "auto":
			return chat.ToolChoice{Mode: chat.ToolAuto}, nil
		case "none":
			return chat.ToolChoice{Mode: chat.ToolNone}, nil
		case "required":
			return chat.ToolChoice{Mode: chat.ToolRequired}, nil
		default:
			return chat.ToolChoice{}, badParam("tool_choice", fmt.Sprintf("tool_choice %q must be auto, none, required or a function", s))
		}
	} else {
		var tc wireToolChoice
		if err := json.Unmarshal(raw, &tc); err != nil {
			return chat.ToolChoice{}, badParam("tool_choice", "tool_choice must be a string or an object")
		}
		if tc.Type != "function" && tc.Type != "custom" {
			return chat.ToolChoice{}, badParam("tool_choice", fmt.Sprintf("tool_choice type %q is not supported; use auto, none, required, a function or a custom tool", tc.Type))
		}
		return chat.ToolChoice{Mode: chat.ToolNamed, Name: flatName(tc.Namespace, tc.Name)}, nil
	}
}

func idOr(id, prefix string) string {
	if id != "" {
		return id
	}
	return newID(prefix)
}
