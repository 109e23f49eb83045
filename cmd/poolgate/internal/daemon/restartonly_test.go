package daemon

import (
	"slices"
	"testing"

	"github.com/poolgate/poolgate/internal/config"
)

// restartOnly names a changed driver section by its key, as it names a
// changed setting, and leaves out the settings a reload applies.
func TestRestartOnly(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		want []string
	}{
		{"nothing changed", nil, []string{}},
		{"reloadable only", []string{`POOLGATE_ACCOUNTS=[{"name":"a"}]`, "POOLGATE_API_KEYS=sk-1"}, []string{}},
		{"a setting", []string{"POOLGATE_RETRIES=5"}, []string{"retries"}},
		{"a section's key", []string{"POOLGATE_LINGMA_ASK_MODE=agent", "POOLGATE_RETRIES=5"}, []string{"lingma", "retries"}},
	}
	cur, _, err := config.Load("", []string{"POOLGATE_SIMULATE=true"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next, _, err := config.Load("", append([]string{"POOLGATE_SIMULATE=true"}, tt.env...))
			if err != nil {
				t.Fatal(err)
			}
			if got := restartOnly(cur, next); !slices.Equal(got, tt.want) {
				t.Errorf("restartOnly = %q, want %q", got, tt.want)
			}
		})
	}
}
