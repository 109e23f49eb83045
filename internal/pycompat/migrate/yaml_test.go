package migrate

import (
	"fmt"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/pycompat"
)

// The written configuration holds the keys that differ from the
// defaults, each under its own name: a driver's section (whole) under the
// section's name.
func TestConfigYAML(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want map[string]any
	}{
		{"top-level keys", []string{"DEFAULT_MODEL=qwen", "GATEWAY_QUEUE_TIMEOUT_SEC=5"},
			map[string]any{"default_model": "qwen", "queue_timeout": "5s"}},
		{"section keys", []string{"DEFAULT_ASK_MODE=Agent", "LINGMA_RPC_TIMEOUT=7"},
			map[string]any{"lingma": map[string]any{"ask_mode": "agent", "rpc_timeout": "7s"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := config.Load("", append([]string{"POOLGATE_SIMULATE=true"}, tt.env...), pycompat.ReadSettings)
			if err != nil {
				t.Fatal(err)
			}
			b, err := configYAML(cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := yaml.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			delete(got, "simulate")
			if len(got) != len(tt.want) {
				t.Errorf("configYAML:\n%s\nhas keys %v, want %v", b, got, tt.want)
			}
			for k, want := range tt.want {
				sub, isSection := want.(map[string]any)
				if !isSection {
					if fmt.Sprint(got[k]) != fmt.Sprint(want) {
						t.Errorf("configYAML:\n%s\n%s is %v, want %v", b, k, got[k], want)
					}
					continue
				}
				section, _ := got[k].(map[string]any)
				for sk, sv := range sub {
					if fmt.Sprint(section[sk]) != fmt.Sprint(sv) {
						t.Errorf("configYAML:\n%s\n%s.%s is %v, want %v", b, k, sk, section[sk], sv)
					}
				}
			}
		})
	}
}
