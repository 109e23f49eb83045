package drivers

import (
	"testing"

	"github.com/poolgate/poolgate/pool/worker"
)

// TestKinds holds the table to what the daemon and cmd/poolgate rely on:
// every kind is named once and can make its driver, and a subcommand name
// belongs to one kind only (cmd/poolgate runs the first it finds).
func TestKinds(t *testing.T) {
	names, commands := map[string]bool{}, map[string]string{}
	for _, k := range Kinds() {
		if k.Name == "" || names[k.Name] {
			t.Errorf("kind name %q is empty or listed twice", k.Name)
		}
		names[k.Name] = true
		if k.New == nil {
			t.Errorf("kind %s has no New", k.Name)
		}
		for c, run := range k.Commands {
			if other, ok := commands[c]; ok || run == nil {
				t.Errorf("command %q of %s: nil, or also %s's", c, k.Name, other)
			}
			commands[c] = k.Name
		}
	}
	for _, tt := range []struct{ kind, command string }{
		{"lingma", "doctor"},
	} {
		k, ok := worker.ByName(Kinds(), tt.kind)
		if !ok || k.Commands[tt.command] == nil {
			t.Errorf("kind %s does not supply the %s command", tt.kind, tt.command)
		}
	}
	if !names["openai"] {
		t.Errorf("no openai kind in %v", names)
	}
}
