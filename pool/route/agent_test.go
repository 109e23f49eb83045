package route

import (
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

// A turn asks for the worker's agent mode when it has tools or tool
// history, or names one of the driver's agent models (any case); with a
// driver that names none, the model name alone never does.
func TestWantsAgent(t *testing.T) {
	driverModels := []string{"special-agent", "agent"}
	tests := []struct {
		name   string
		req    chat.Request
		models []string
		want   bool
	}{
		{"plain", chat.Request{Model: "m"}, driverModels, false},
		{"a driver's agent model", chat.Request{Model: "special-agent"}, driverModels, true},
		{"in another case", chat.Request{Model: "Agent"}, driverModels, true},
		{"a driver without agent models", chat.Request{Model: "agent"}, nil, false},
		{"tools", chat.Request{Model: "m", Tools: []chat.Tool{{Name: "t"}}}, nil, true},
		{"tool history", chat.Request{Model: "m", Messages: []chat.Message{{Role: chat.RoleTool}}}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := wantsAgent(&tt.req, tt.models); got != tt.want {
				t.Errorf("wantsAgent(%q, %q) = %v, want %v", tt.req.Model, tt.models, got, tt.want)
			}
		})
	}
}
