package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// messagesRequest is the wire body of POST /v1/messages (and, minus the
// sampling fields, of count_tokens). The last group holds fields coding
// agents send on every turn that a text-only worker cannot honour: they are
// decoded only to be dropped visibly (see droppable).
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []wireMessage   `json:"messages"`
	Tools         []wireTool      `json:"tools"`
	ToolChoice    *wireToolChoice `json:"tool_choice"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        bool            `json:"stream"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	MCPServers []json.RawMessage `json:"mcp_servers"`
	Container  json.RawMessage   `json:"container"`

	Thinking          json.RawMessage `json:"thinking"`
	ContextManagement json.RawMessage `json:"context_management"`
	OutputConfig      json.RawMessage `json:"output_config"`
	ServiceTier       json.RawMessage `json:"service_tier"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	// OutputConfig is Claude Code's per-turn effort on a message.
	OutputConfig json.RawMessage `json:"output_config"`
}

// wireBlock is any content block; Type says which fields are meaningful.
type wireBlock struct {
	Type         string          `json:"type"`
	Text         string          `json:"text"`
	ID           string          `json:"id"`
	Name         string          `json:"name"`
	Input        json.RawMessage `json:"input"`
	ToolUseID    string          `json:"tool_use_id"`
	Content      json.RawMessage `json:"content"`
	IsError      bool            `json:"is_error"`
	ToolName     string          `json:"tool_name"`
	Title        string          `json:"title"`
	Source       json.RawMessage `json:"source"`
	CacheControl json.RawMessage `json:"cache_control"`
}

type wireTool struct {
	Type         string          `json:"type"`
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	DeferLoading bool            `json:"defer_loading"`
	CacheControl json.RawMessage `json:"cache_control"`
}

type wireToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// Fields this protocol accepts but drops, as counted in
// poolgate_request_fields_ignored_total{protocol="messages"}.
const (
	dropThinking          = "thinking"
	dropContextManagement = "context_management"
	dropOutputConfig      = "output_config"
	dropServiceTier       = "service_tier"
	dropCacheControl      = "cache_control"
	dropBillingHeader     = "system.billing_header"
	dropThinkingBlocks    = "content.thinking"
	dropImages            = "content.image"
	dropDocuments         = "content.document"
	dropServerToolBlocks  = "content.server_tool"
	dropDeferredTools     = "tools.defer_loading"
	dropServerTools       = "tools.server"
)

// DroppedFields lists every field name the Messages decoder may report as
// dropped, so the counter can be pre-initialised.
var DroppedFields = []string{
	dropThinking, dropContextManagement, dropOutputConfig, dropServiceTier, dropCacheControl,
	dropBillingHeader, dropThinkingBlocks, dropImages, dropDocuments, dropServerToolBlocks,
	dropDeferredTools, dropServerTools,
}

// decoded is a validated Messages request: the wire body, the neutral
// request and the fields that were dropped on the way.
type decoded struct {
	wire    messagesRequest
	chat    chat.Request
	dropped httpx.Dropped
	// toolAt is the index in the wire tools of each neutral tool, once a
	// server or deferred tool is not offered; nil while the two line up.
	toolAt []int
}

// decodeMessages parses a Messages body into the neutral model and
// validates it.
// forCount relaxes the fields count_tokens does not take (max_tokens).
func decodeMessages(body []byte, forCount bool) (*decoded, error) {
	d := &decoded{}
	in, out := &d.wire, &d.chat
	if err := json.Unmarshal(body, in); err != nil {
		return nil, apierr.BadRequest("invalid JSON body: %v", err)
	}
	if err := in.checkFields(forCount); err != nil {
		return nil, err
	}
	in.dropTopLevel(&d.dropped)
	out.Model, out.Stop, out.Stream = in.Model, in.StopSequences, in.Stream
	out.Temperature, out.TopP, out.TopK = in.Temperature, in.TopP, in.TopK
	if in.MaxTokens != nil {
		out.MaxTokens = *in.MaxTokens
	}
	if in.Metadata != nil {
		out.AffinityHint = sessionHint(in.Metadata.UserID)
	}
	sys, err := decodeSystem(in.System, "system", &d.dropped)
	if err != nil {
		return nil, err
	}
	if sys != "" {
		out.Messages = append(out.Messages, chat.Message{Role: chat.RoleSystem, Content: sys})
	}
	mc := messageContext{dropped: &d.dropped, current: currentTurn(in.Messages)}
	for i := range in.Messages {
		if out.Messages, err = mc.appendMessage(out.Messages, i, &in.Messages[i]); err != nil {
			return nil, err
		}
	}
	if out.Tools, d.toolAt, err = decodeTools(in.Tools, in.ToolChoice, mc.referenced, &d.dropped); err != nil {
		return nil, err
	}
	if out.ToolChoice, err = decodeToolChoice(in.ToolChoice); err != nil {
		return nil, err
	}
	if err := apierr.Validate(out, d.param); err != nil {
		return nil, err
	}
	return d, nil
}

// param is this protocol's name for a neutral field: its tools and stop
// sequences by their place on the wire. Messages are named as a whole, as
// the decoder has checked each one already.
func (d *decoded) param(ve *chat.ValidationError) string {
	switch ve.Field {
	case "tools":
		switch {
		case ve.Index < 0:
		case d.toolAt == nil:
			return fmt.Sprintf("tools.%d.%s", ve.Index, ve.Member)
		case ve.Index < len(d.toolAt):
			return fmt.Sprintf("tools.%d.%s", d.toolAt[ve.Index], ve.Member)
		}
	case "stop":
		if ve.Index >= 0 {
			return fmt.Sprintf("stop_sequences.%d", ve.Index)
		}
		return "stop_sequences"
	case "tool_choice":
		if d.chat.ToolChoice.Mode == chat.ToolNamed {
			return "tool_choice.name"
		}
	case "messages":
		return "messages"
	}
	return ve.Field
}

// checkFields checks the fields of this protocol only; what every protocol
// checks is chat.Validate's.
func (in *messagesRequest) checkFields(forCount bool) error {
	switch {
	case in.Model == "":
		return apierr.BadRequest("model: field required")
	case !forCount && in.MaxTokens == nil:
		return apierr.BadRequest("max_tokens: field required")
	case !forCount && *in.MaxTokens < 1:
		return apierr.BadRequest("max_tokens: must be greater than or equal to 1")
	case in.Temperature != nil && (*in.Temperature < 0 || *in.Temperature > 1):
		return apierr.BadRequest("temperature: must be between 0 and 1")
	case len(in.MCPServers) > 0:
		return apierr.BadRequest("mcp_servers: MCP connectors are not supported by this gateway")
	case !jsonx.IsNull(in.Container):
		return apierr.BadRequest("container: code execution containers are not supported by this gateway")
	}
	for i, s := range in.StopSequences {
		if strings.TrimSpace(s) == "" {
			return apierr.BadRequest("stop_sequences.%d: each stop sequence must contain non-whitespace", i)
		}
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		switch in.Messages[i].Role {
		case "system":
			continue
		case "assistant":
			return apierr.BadRequest("messages.%d: a final assistant message (prefill) is not supported by this gateway", i)
		}
		break
	}
	return nil
}

// dropTopLevel records the top-level fields a worker cannot honour: extended
// thinking, context editing, effort and service tiers change how Anthropic's
// own models work, not what a text-only worker can be asked.
func (in *messagesRequest) dropTopLevel(d *httpx.Dropped) {
	d.AddSet(dropThinking, in.Thinking)
	d.AddSet(dropContextManagement, in.ContextManagement)
	d.AddSet(dropOutputConfig, in.OutputConfig)
	d.AddSet(dropServiceTier, in.ServiceTier)
}

// sessionHint returns the conversation hint in metadata.user_id. Claude Code
// sends a JSON object as a string ({"device_id", "account_uuid",
// "session_id"}), older releases "user_<hash>_account_<uuid>_session_<uuid>";
// the session is the hint, since one device runs many conversations. Any
// other value is the hint as it is.
func sessionHint(userID string) string {
	if strings.HasPrefix(userID, "{") {
		var v struct {
			SessionID string `json:"session_id"`
		}
		if json.Unmarshal([]byte(userID), &v) == nil && v.SessionID != "" {
			return v.SessionID
		}
		return userID
	}
	if _, s, ok := strings.Cut(userID, "_session_"); ok && s != "" {
		return s
	}
	return userID
}

// billingHeader starts the system block Claude Code sends for Anthropic's
// billing: it changes from one request to the next and means nothing to a
// worker, so it is neither sent nor part of the conversation's identity.
const billingHeader = "x-anthropic-billing-header:"

// decodeSystem accepts a string or a list of text blocks (the top-level
// system, or a system message's content).
func decodeSystem(raw json.RawMessage, param string, d *httpx.Dropped) (string, error) {
	if jsonx.IsNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", apierr.BadRequest("%s: %v", param, err)
		}
		return s, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", apierr.BadRequest("%s: must be a string or a list of text blocks", param)
	}
	parts := make([]string, 0, len(blocks))
	for i, b := range blocks {
		if b.Type != "text" {
			return "", apierr.BadRequest("%s.%d: block type %q is not supported; only text blocks are", param, i, b.Type)
		}
		d.AddSet(dropCacheControl, b.CacheControl)
		if strings.HasPrefix(b.Text, billingHeader) {
			d.Add(dropBillingHeader)
			continue
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// currentTurn returns the index of the message the answer depends on: the
// last user message (system messages may follow it).
func currentTurn(msgs []wireMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return i
		}
	}
	return -1
}

// messageContext carries what translating the messages learns on the way.
type messageContext struct {
	dropped *httpx.Dropped
	// current is the index of the current turn's user message.
	current int
	// referenced names the deferred tools a tool_reference block loaded.
	referenced map[string]bool
	// names maps tool_use ids to tool names, so each result can be named in
	// one pass over the transcript (workers render results by name).
	names map[string]string
}

// appendMessage translates one wire message. A user message's tool_result
// blocks become RoleTool messages ahead of its text, which is the order the
// neutral transcript (and every worker) expects. A system message keeps its
// place in the transcript: Claude Code sends its environment that way.
func (mc *messageContext) appendMessage(dst []chat.Message, i int, m *wireMessage) ([]chat.Message, error) {
	mc.dropped.AddSet(dropOutputConfig, m.OutputConfig)
	switch m.Role {
	case "user", "assistant":
	case "system":
		s, err := decodeSystem(m.Content, fmt.Sprintf("messages.%d.content", i), mc.dropped)
		if err != nil || s == "" {
			return dst, err
		}
		return append(dst, chat.Message{Role: chat.RoleSystem, Content: s}), nil
	default:
		return nil, apierr.BadRequest("messages.%d.role: must be \"user\", \"assistant\" or \"system\", got %q", i, m.Role)
	}
	if jsonx.IsNull(m.Content) {
		return nil, apierr.BadRequest("messages.%d.content: field required", i)
	}
	if m.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(m.Content, &s); err != nil {
			return nil, apierr.BadRequest("messages.%d.content: %v", i, err)
		}
		return append(dst, chat.Message{Role: m.Role, Content: s}), nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, apierr.BadRequest("messages.%d.content: must be a string or a list of content blocks", i)
	}
	msg := chat.Message{Role: m.Role}
	var text textJoiner
	media, words, results := 0, 0, 0
	for j := range blocks {
		b := &blocks[j]
		mc.dropped.AddSet(dropCacheControl, b.CacheControl)
		switch b.Type {
		case "text":
			text.add(b.Text)
			if strings.TrimSpace(b.Text) != "" {
				words++
			}
		case "tool_use":
			if m.Role != "assistant" {
				return nil, apierr.BadRequest("messages.%d.content.%d: tool_use blocks belong in assistant messages", i, j)
			}
			call, err := toolUseCall(b, i, j)
			if err != nil {
				return nil, err
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
			if mc.names == nil {
				mc.names = make(map[string]string)
			}
			mc.names[call.ID] = call.Name
		case "tool_result":
			if m.Role != "user" {
				return nil, apierr.BadRequest("messages.%d.content.%d: tool_result blocks belong in user messages", i, j)
			}
			res, err := mc.toolResult(b, i, j)
			if err != nil {
				return nil, err
			}
			dst = append(dst, res)
			results++
		default:
			note, isMedia, err := mc.otherBlock(b, i, j)
			if err != nil {
				return nil, err
			}
			if note != "" {
				text.add(note)
			}
			if isMedia {
				media++
			}
		}
	}
	msg.Content = text.String()
	if i == mc.current && media > 0 && words == 0 && results == 0 {
		// Answering would mean pretending to have seen it.
		return nil, apierr.BadRequest("messages.%d: this turn is only images or documents, which the workers cannot read (they are text-only)", i)
	}
	if msg.Content == "" && len(msg.ToolCalls) == 0 {
		return dst, nil // a user turn made only of tool results
	}
	return append(dst, msg), nil
}

// otherBlock translates the blocks that are neither text nor tools. It
// returns the text that stands in for the block ("" when it is dropped) and
// whether the block was media the workers cannot see.
func (mc *messageContext) otherBlock(b *wireBlock, i, j int) (string, bool, error) {
	switch b.Type {
	case "thinking", "redacted_thinking":
		// Earlier turns' reasoning: the workers neither produce nor read it.
		mc.dropped.Add(dropThinkingBlocks)
		return "", false, nil
	case "image":
		mc.dropped.Add(dropImages)
		return imageNote, true, nil
	case "document":
		mc.dropped.Add(dropDocuments)
		return documentNote, true, nil
	case "tool_reference":
		return mc.toolReference(b), false, nil
	case "search_result":
		return searchResultText(b), false, nil
	case "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
		"bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "mcp_tool_use", "mcp_tool_result",
		"container_upload":
		// Results of tools Anthropic's servers ran; no worker can continue them.
		mc.dropped.Add(dropServerToolBlocks)
		return "", false, nil
	default:
		return "", false, apierr.BadRequest("messages.%d.content.%d: unsupported content block type %q", i, j, b.Type)
	}
}

// Notes that stand in for media the text-only workers cannot see, so the
// conversation reads on and the model knows something was there.
const (
	imageNote    = "[image omitted: the model cannot see images]"
	documentNote = "[document omitted: the model cannot read attached documents]"
)

// toolReference marks a deferred tool as loaded (Claude Code's tool search
// answers with tool_reference blocks) and says so in the text.
func (mc *messageContext) toolReference(b *wireBlock) string {
	name := b.ToolName
	if name == "" {
		name = b.Name
	}
	if name == "" {
		return ""
	}
	if mc.referenced == nil {
		mc.referenced = make(map[string]bool)
	}
	mc.referenced[name] = true
	return "Tool " + name + " is now available."
}

// searchResultText flattens a search_result block to its title and text.
func searchResultText(b *wireBlock) string {
	var src string
	_ = json.Unmarshal(b.Source, &src) // a source that isn't a string is left out
	var parts []wireBlock
	_ = json.Unmarshal(b.Content, &parts)
	var t textJoiner
	if b.Title != "" || src != "" {
		t.add(strings.TrimSpace(b.Title + " " + src))
	}
	for _, p := range parts {
		if p.Type == "text" {
			t.add(p.Text)
		}
	}
	return t.String()
}

// textJoiner joins text pieces with blank lines.
type textJoiner struct{ b strings.Builder }

func (t *textJoiner) add(s string) {
	if t.b.Len() > 0 {
		t.b.WriteString("\n\n")
	}
	t.b.WriteString(s)
}

func (t *textJoiner) String() string { return t.b.String() }

func toolUseCall(b *wireBlock, i, j int) (chat.ToolCall, error) {
	if b.ID == "" || b.Name == "" {
		return chat.ToolCall{}, apierr.BadRequest("messages.%d.content.%d: tool_use needs id and name", i, j)
	}
	args := "{}"
	if !jsonx.IsNull(b.Input) {
		if b.Input[0] != '{' {
			return chat.ToolCall{}, apierr.BadRequest("messages.%d.content.%d.input: must be an object", i, j)
		}
		args = string(b.Input)
	}
	return chat.ToolCall{ID: b.ID, Name: b.Name, Arguments: args}, nil
}

func (mc *messageContext) toolResult(b *wireBlock, i, j int) (chat.Message, error) {
	if b.ToolUseID == "" {
		return chat.Message{}, apierr.BadRequest("messages.%d.content.%d.tool_use_id: field required", i, j)
	}
	content, err := mc.toolResultContent(b.Content, i, j)
	if err != nil {
		return chat.Message{}, err
	}
	if b.IsError {
		// The neutral model has no error flag; say it in the text the worker reads.
		content = "Error: " + content
	}
	return chat.Message{Role: chat.RoleTool, ToolCallID: b.ToolUseID, Name: mc.names[b.ToolUseID], Content: content}, nil
}

// toolResultContent flattens a tool result's content (a string or blocks) to
// text; an image a tool returned (Claude Code's Read of a picture) becomes a
// note, so the model learns that the tool worked and what it can't see.
func (mc *messageContext) toolResultContent(raw json.RawMessage, i, j int) (string, error) {
	if jsonx.IsNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", apierr.BadRequest("messages.%d.content.%d.content: %v", i, j, err)
		}
		return s, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", apierr.BadRequest("messages.%d.content.%d.content: must be a string or a list of content blocks", i, j)
	}
	var text textJoiner
	for k := range blocks {
		b := &blocks[k]
		if b.Type == "text" {
			text.add(b.Text)
			continue
		}
		note, _, err := mc.otherBlock(b, i, j)
		if err != nil {
			return "", apierr.BadRequest("messages.%d.content.%d.content.%d: %s blocks are not supported in tool results", i, j, k, b.Type)
		}
		if note != "" {
			text.add(note)
		}
	}
	return text.String(), nil
}

// decodeTools returns the tools offered to the worker. Tools marked
// defer_loading are not offered until a tool_reference block has loaded them
// (or tool_choice names one), which is what Anthropic's tool search does;
// server tools (web search, code execution) run on Anthropic's side and no
// worker can run them, so they are dropped.
// It returns, with each tool offered, its index on the wire (nil when each
// tool is offered).
func decodeTools(in []wireTool, choice *wireToolChoice, referenced map[string]bool, d *httpx.Dropped) ([]chat.Tool, []int, error) {
	if len(in) == 0 {
		return nil, nil, nil
	}
	forced := ""
	if choice != nil && choice.Type == "tool" {
		forced = choice.Name
	}
	out := make([]chat.Tool, 0, len(in))
	var at []int // nil while every tool so far is offered
	skip := func() {
		if at == nil {
			at = make([]int, len(out), len(in))
			for j := range at {
				at[j] = j
			}
		}
	}
	for i := range in {
		t := &in[i]
		d.AddSet(dropCacheControl, t.CacheControl)
		if t.Type != "" && t.Type != "custom" {
			skip()
			if t.Name == "" {
				return nil, nil, apierr.BadRequest("tools.%d.name: field required", i)
			}
			if t.Name == forced {
				return nil, nil, apierr.BadRequest("tool_choice.name: %q is a server tool (%s), which this gateway's workers cannot run", t.Name, t.Type)
			}
			d.Add(dropServerTools)
			continue
		}
		if jsonx.IsNull(t.InputSchema) {
			return nil, nil, apierr.BadRequest("tools.%d.input_schema: field required", i)
		}
		if t.DeferLoading && t.Name != "" && !referenced[t.Name] && t.Name != forced {
			skip()
			d.Add(dropDeferredTools)
			continue
		}
		out = append(out, chat.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
		if at != nil {
			at = append(at, i)
		}
	}
	return out, at, nil
}

// decodeToolChoice reads tool_choice; whether the tools can satisfy it is
// for Validate.
func decodeToolChoice(tc *wireToolChoice) (chat.ToolChoice, error) {
	if tc == nil {
		return chat.ToolChoice{}, nil
	}
	switch tc.Type {
	case "auto":
		return chat.ToolChoice{Mode: chat.ToolAuto}, nil
	case "none":
		return chat.ToolChoice{Mode: chat.ToolNone}, nil
	case "any":
		return chat.ToolChoice{Mode: chat.ToolRequired}, nil
	case "tool":
		return chat.ToolChoice{Mode: chat.ToolNamed, Name: tc.Name}, nil
	default:
		return chat.ToolChoice{}, apierr.BadRequest("tool_choice.type: must be one of auto, any, tool, none; got %q", tc.Type)
	}
}
