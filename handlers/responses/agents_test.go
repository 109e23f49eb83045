package responses

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
)

// codexBody is shaped like Codex CLI's requests: developer messages, a
// namespace of functions, a custom (freeform) tool, a hosted tool, and the
// items it replays in later turns.
const codexBody = `{"model":"gpt-5-codex","stream":true,"store":false,"tool_choice":"auto","parallel_tool_calls":true,
"reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"],"prompt_cache_key":"thread-1",
"client_metadata":{"session_id":"thread-1"},"text":{"verbosity":"low"},
"tools":[
  {"type":"function","name":"exec_command","description":"Runs a command.","strict":false,"parameters":{"type":"object","properties":{"cmd":{"type":"string"}}}},
  {"type":"namespace","name":"multi_agent_v1","description":"Sub-agents.","tools":[
    {"type":"function","name":"close_agent","description":"Close one.","parameters":{"type":"object","properties":{"id":{"type":"string"}}}}]},
  {"type":"custom","name":"apply_patch","description":"Edit files.","format":{"type":"grammar","syntax":"lark","definition":"start: patch"}},
  {"type":"web_search","external_web_access":false}],
"input":[
  {"type":"message","role":"developer","content":[{"type":"input_text","text":"You are Codex."}]},
  {"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]},
  {"type":"reasoning","summary":[],"encrypted_content":"gAAA"},
  {"type":"function_call","namespace":"multi_agent_v1","name":"close_agent","arguments":"{\"id\":\"a1\"}","call_id":"c1"},
  {"type":"function_call_output","call_id":"c1","output":"closed"},
  {"type":"custom_tool_call","status":"completed","call_id":"c2","name":"apply_patch","input":"*** Begin Patch"},
  {"type":"custom_tool_call_output","call_id":"c2","output":[{"type":"input_text","text":"Done"},{"type":"input_image","image_url":"data:x"}]},
  {"type":"compaction","encrypted_content":"gBBB"},
  {"type":"web_search_call","status":"completed","action":{"type":"search","query":"q"}},
  {"type":"message","role":"user","content":[{"type":"input_text","text":"and now?"}]}]}`

func TestCodexShapes(t *testing.T) {
	d, err := decodeCreate([]byte(codexBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	nameToolResults(nil, d.input)
	wantMsgs := []chat.Message{
		{Role: chat.RoleSystem, Content: "You are Codex."},
		{Role: chat.RoleUser, Content: "fix it"},
		{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{
			{ID: "c1", Name: "multi_agent_v1__close_agent", Arguments: `{"id":"a1"}`}}},
		{Role: chat.RoleTool, ToolCallID: "c1", Name: "multi_agent_v1__close_agent", Content: "closed"},
		{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{
			{ID: "c2", Name: "apply_patch", Arguments: `{"input":"*** Begin Patch"}`}}},
		{Role: chat.RoleTool, ToolCallID: "c2", Name: "apply_patch", Content: "Done\n\n" + imageNote},
		{Role: chat.RoleUser, Content: "and now?"},
	}
	if !reflect.DeepEqual(d.input, wantMsgs) {
		t.Errorf("input:\n got %+v\nwant %+v", d.input, wantMsgs)
	}
	var names []string
	for _, tl := range d.chat.Tools {
		names = append(names, tl.Name)
	}
	if want := []string{"exec_command", "multi_agent_v1__close_agent", "apply_patch"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	if desc := d.chat.Tools[1].Description; desc != "Sub-agents.\n\nClose one." {
		t.Errorf("namespaced description = %q, want the namespace's first", desc)
	}
	if p := d.chat.Tools[2]; !strings.Contains(p.Description, "start: patch") || string(p.Parameters) != string(customParams) {
		t.Errorf("custom tool = %+v, want one string input and the grammar in its description", p)
	}
	if d.chat.AffinityHint != "thread-1" {
		t.Errorf("hint = %q, want prompt_cache_key", d.chat.AffinityHint)
	}
	testenv.SameFields(t, d.dropped.Fields(), []string{dropReasoning, dropInclude, dropVerbosity, dropHostedTools,
		dropReasoningItems, dropCompaction, dropHostedCalls, dropImages}, DroppedFields)
}

// The worker's calls go back in the client's terms: a namespaced function
// with its namespace, a custom tool as custom_tool_call with its input; and
// the stored transcript holds them under the worker's names again.
func TestCallsInClientTerms(t *testing.T) {
	d, err := decodeCreate([]byte(codexBody), nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &namesWriter{}
	enc := newStreamEncoder(w, &responseObject{ID: "resp_x", Output: []wireItem{}}, d.refs, endingOf(nil))
	calls := []chat.ToolCall{
		{ID: "k1", Name: "multi_agent_v1__close_agent", Arguments: `{"id":"a2"}`},
		{ID: "k2", Name: "apply_patch", Arguments: `{"input":"*** Begin Patch\n*** End Patch"}`},
		{ID: "k3", Name: "exec_command", Arguments: `{"cmd":"ls"}`},
	}
	for i := range calls {
		if err := enc.toolCall(&calls[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := []wireItem{
		{Type: "function_call", Status: "completed", CallID: "k1", Namespace: "multi_agent_v1", Name: "close_agent", Arguments: `{"id":"a2"}`},
		{Type: "custom_tool_call", Status: "completed", CallID: "k2", Name: "apply_patch", Input: "*** Begin Patch\n*** End Patch"},
		{Type: "function_call", Status: "completed", CallID: "k3", Name: "exec_command", Arguments: `{"cmd":"ls"}`},
	}
	got := enc.resp.Output
	for i := range got {
		got[i].ID = ""
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("output:\n got %+v\nwant %+v", got, want)
	}
	if !slices.Contains(w.events, "response.custom_tool_call_input.done") {
		t.Errorf("events %v lack response.custom_tool_call_input.done", w.events)
	}
	if ans := enc.answer(); !reflect.DeepEqual(ans.ToolCalls, calls) {
		t.Errorf("stored answer calls = %+v, want the worker's %+v", ans.ToolCalls, calls)
	}
}

// namesWriter records the names of the events written.
type namesWriter struct{ events []string }

func (w *namesWriter) Event(name string, _ []byte) error {
	w.events = append(w.events, name)
	return nil
}

func (w *namesWriter) Comment(string) error { return nil }
