package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/pool/lingma"
)

// A driver's section reads from its own yaml mapping, from its flat keys
// of before sections (with a note naming the new key) and from
// POOLGATE_<SECTION>_<KEY>; a bare number for a duration is seconds there
// too; Section hands the value to the driver by the kind's name.
func TestDriverSectionIsRead(t *testing.T) {
	tests := []struct {
		name, file string
		env        []string
		want       func(lingma.Settings) bool
		note       string
	}{
		{"nested", "lingma:\n  ask_mode: agent\n  turn_timeout: 90\n", nil,
			func(s lingma.Settings) bool { return s.AskMode == "agent" && s.TurnTimeout == 90*time.Second }, ""},
		{"flat", "lingma_ask_mode: chat\nlingma_turn_timeout: 60\n", nil,
			func(s lingma.Settings) bool { return s.AskMode == "chat" && s.TurnTimeout == time.Minute }, "config key lingma_ask_mode read as lingma.ask_mode"},
		{"flat beside nested", "lingma_ask_mode: chat\nlingma:\n  reuse: chat-only\n", nil,
			func(s lingma.Settings) bool { return s.AskMode == "chat" && s.Reuse == "chat-only" }, "lingma_ask_mode"},
		{"environment", "", []string{"POOLGATE_LINGMA_TOOL_MODE=native", "POOLGATE_LINGMA_RECORD_KEEP=7"},
			func(s lingma.Settings) bool { return s.ToolMode == "native" && s.RecordKeep == 7 }, ""},
		{"defaults", "", nil, func(s lingma.Settings) bool { return s == lingma.DefaultSettings() }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = filepath.Join(t.TempDir(), "c.yaml")
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			cfg, warnings, err := Load(path, append([]string{sim}, tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := cfg.Section("lingma").(lingma.Settings)
			if !ok || !tt.want(got) {
				t.Errorf("section %+v (%v), not as configured", got, ok)
			}
			joined := strings.Join(warnings, "\n")
			if tt.note != "" && !strings.Contains(joined, tt.note) {
				t.Errorf("warnings %q, want one mentioning %q", warnings, tt.note)
			}
			if strings.Contains(joined, "python_compat") {
				t.Errorf("warnings %q: a flat section key is no Python gateway setting", warnings)
			}
			if tt.note == "" && joined != "" {
				t.Errorf("warnings %q, want none", warnings)
			}
		})
	}
	if s := Defaults().Section("nope"); s != nil {
		t.Errorf("Section(nope) = %v, want nil", s)
	}
}
