package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
)

// TestReusePolicies: which follow-ups continue their upstream session,
// through the whole gateway, per lingma.reuse. The controlled policy (the
// default) continues plain and emulated-tool conversations, but not one in
// which the worker ran its own tools; chat-only continues only plain
// conversations without tools.
func TestReusePolicies(t *testing.T) {
	tools := map[string]any{"tools": []any{tool("get_weather")}}
	tests := []struct {
		name  string
		env   []string
		extra map[string]any
		want  bool // the follow-up continued the session
	}{
		{"controlled plain", nil, nil, true},
		{"controlled with tools", nil, tools, true},
		{"controlled, the worker runs its own tools", []string{"POOLGATE_WORKER_ARGS=--builtin-tool=read_file"}, tools, false},
		{"chat-only plain", []string{"POOLGATE_LINGMA_REUSE=chat-only"}, nil, true},
		{"chat-only with tools", []string{"POOLGATE_LINGMA_REUSE=chat-only"}, tools, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := daemontest.StartDaemon(t, append([]string{"POOLGATE_API_KEYS=sk-1"}, tt.env...)...)
			d.WaitReady(t, 15*time.Second)
			var msgs []any
			var w whoami
			for _, text := range []string{"[[sim:whoami]] one", "[[sim:whoami]] two"} {
				msgs = append(msgs, map[string]any{"role": "user", "content": text})
				body := chatBody("m", "", tt.extra)
				body["messages"] = msgs
				got := content(t, send(t, d, "/v1/chat/completions", "sk-1", body))
				msgs = append(msgs, map[string]any{"role": "assistant", "content": got})
				// The worker's own tool calls leave a line after the answer.
				w = parseWhoami(t, strings.SplitN(got, "\n", 2)[0])
			}
			if w.reply != tt.want {
				t.Errorf("follow-up %+v, want the session continued: %v", w, tt.want)
			}
		})
	}
}
