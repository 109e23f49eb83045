package anthropic

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
)

// A request shaped like Claude Code's: every field it sends routinely is
// accepted and mapped to what a text-only worker can honour, and each field
// that cannot be honoured is reported as dropped.
func TestClaudeCodeShapes(t *testing.T) {
	body := `{"model":"claude-opus-5-5","max_tokens":100,
	"system":[{"type":"text","text":"x-anthropic-billing-header: cc_version=2.1.328.661; cc_entrypoint=sdk-cli;"},
	          {"type":"text","text":"You are an agent.","cache_control":{"type":"ephemeral","ttl":"1h"}}],
	"messages":[
	  {"role":"user","content":[{"type":"text","text":"<system-reminder>r</system-reminder>"},{"type":"text","text":"hello"}]},
	  {"role":"system","content":[{"type":"text","text":"# Environment","cache_control":{"type":"ephemeral"}}],"output_config":{"effort":"medium"}},
	  {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"redacted_thinking","data":"x"},
	    {"type":"text","text":"Let me search."},{"type":"tool_use","id":"t1","name":"ToolSearch","input":{"query":"select:WebFetch"}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"tool_reference","tool_name":"WebFetch"}]},
	    {"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}},{"type":"text","text":"what now?"}]},
	  {"role":"system","content":"Today is Monday."}],
	"tools":[{"name":"ToolSearch","input_schema":{"type":"object"}},
	         {"name":"DeferredToolPlaceholder","defer_loading":true,"input_schema":{"type":"object"}},
	         {"name":"WebFetch","defer_loading":true,"input_schema":{"type":"object"},"cache_control":{"type":"ephemeral"}},
	         {"name":"CronList","defer_loading":true,"input_schema":{"type":"object"}},
	         {"type":"web_search_20250305","name":"web_search"}],
	"thinking":{"type":"adaptive","display":"omitted"},"context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
	"output_config":{"effort":"high"},"stream":true,
	"metadata":{"user_id":"{\"device_id\":\"d\",\"account_uuid\":\"\",\"session_id\":\"sess-1\"}"}}`
	d, err := decodeMessages([]byte(body), false)
	if err != nil {
		t.Fatal(err)
	}
	wantMsgs := []chat.Message{
		{Role: chat.RoleSystem, Content: "You are an agent."},
		{Role: chat.RoleUser, Content: "<system-reminder>r</system-reminder>\n\nhello"},
		{Role: chat.RoleSystem, Content: "# Environment"},
		{Role: chat.RoleAssistant, Content: "Let me search.", ToolCalls: []chat.ToolCall{{ID: "t1", Name: "ToolSearch", Arguments: `{"query":"select:WebFetch"}`}}},
		{Role: chat.RoleTool, ToolCallID: "t1", Name: "ToolSearch", Content: "Tool WebFetch is now available."},
		{Role: chat.RoleUser, Content: imageNote + "\n\nwhat now?"},
		{Role: chat.RoleSystem, Content: "Today is Monday."},
	}
	if !reflect.DeepEqual(d.chat.Messages, wantMsgs) {
		t.Errorf("messages:\n got %+v\nwant %+v", d.chat.Messages, wantMsgs)
	}
	var tools []string
	for _, tl := range d.chat.Tools {
		tools = append(tools, tl.Name)
	}
	if want := []string{"ToolSearch", "WebFetch"}; !slices.Equal(tools, want) {
		t.Errorf("tools offered = %v, want %v (deferred ones only once referenced, no server tools)", tools, want)
	}
	if d.chat.AffinityHint != "sess-1" {
		t.Errorf("hint = %q, want the session id from metadata.user_id", d.chat.AffinityHint)
	}
	testenv.SameFields(t, d.dropped.Fields(), []string{dropThinking, dropContextManagement, dropOutputConfig, dropCacheControl,
		dropBillingHeader, dropThinkingBlocks, dropImages, dropDeferredTools, dropServerTools}, DroppedFields)
}

func TestSessionHint(t *testing.T) {
	tests := []struct{ give, want string }{
		{`{"device_id":"d","account_uuid":"","session_id":"984fab5e"}`, "984fab5e"},
		{`{"device_id":"d"}`, `{"device_id":"d"}`},
		{"user_abc_account_def_session_1234-5678", "1234-5678"},
		{"alice", "alice"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := sessionHint(tt.give); got != tt.want {
			t.Errorf("sessionHint(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// A forced tool that is deferred is offered all the same: the caller asked
// for it by name.
func TestForcedDeferredToolIsOffered(t *testing.T) {
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"go"}],
	"tools":[{"name":"Late","defer_loading":true,"input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"Late"}}`
	d, err := decodeMessages([]byte(body), false)
	if err != nil {
		t.Fatal(err)
	}
	want := chat.ToolChoice{Mode: chat.ToolNamed, Name: "Late"}
	if len(d.chat.Tools) != 1 || d.chat.ToolChoice != want {
		t.Errorf("tools %+v choice %+v, want Late offered and forced", d.chat.Tools, d.chat.ToolChoice)
	}
}

// count_tokens takes no worker slot, so it has its own bound: with every
// slot busy a request waits a moment, then gets a 429 in Anthropic's shape.
func TestCountTokensIsAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, slots := New(Config{}, nil), httpx.NewSlots(1, 2*time.Second)
		count := relaytest.Count(h, slots)
		slots.Take(t.Context()) // the one slot is busy
		rec := httptest.NewRecorder()
		body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
		count(rec, httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens", strings.NewReader(body)))
		if rec.Code != http.StatusTooManyRequests || !strings.Contains(rec.Body.String(), `"rate_limit_error"`) {
			t.Errorf("busy: got %d %s, want 429 rate_limit_error", rec.Code, rec.Body.String())
		}
		slots.Release()
		rec = httptest.NewRecorder()
		count(rec, httptest.NewRequest(http.MethodPost, "/v1/messages/count_tokens", strings.NewReader(body)))
		if rec.Code != http.StatusOK || slots.Held() != 0 {
			t.Errorf("free: got %d %s with %d slots held, want 200 and the slot given back", rec.Code, rec.Body.String(), slots.Held())
		}
	})
}
