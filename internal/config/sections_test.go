package config

import (
	"errors"
	"go/build"
	"os"
	"path/filepath"
	"slices"
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
			if strings.Contains(joined, "Python gateway") {
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

// testSection is a driver section this package knows nothing of, to show
// that any registered section reads like the Lingma one.
type testSection struct {
	Wait  time.Duration `yaml:"wait"`  // how long
	Level int           `yaml:"level"` // how much
}

func (s testSection) Validate() []error {
	if s.Level < 0 {
		return []error{errors.New("testdrv.level must be 0 or more")}
	}
	return nil
}

// A section is whatever the kinds register: its keys read from the file
// (nested and flat), from the environment, are listed by Keys, are set by
// setSectionKey and validated by the section's own Validate.
func TestRegisteredSection(t *testing.T) {
	Register("testdrv", func() any { return &testSection{Wait: time.Second, Level: 1} })
	t.Cleanup(func() { unregister("testdrv") })
	if !slices.Contains(Keys(), "testdrv.wait") || !slices.Contains(Keys(), "testdrv.level") {
		t.Fatalf("Keys() = %v, want the testdrv keys", Keys())
	}
	tests := []struct {
		name, file string
		env        []string
		want       testSection
		err        string
	}{
		{"defaults", "", nil, testSection{Wait: time.Second, Level: 1}, ""},
		{"nested", "testdrv:\n  wait: 90\n", nil, testSection{Wait: 90 * time.Second, Level: 1}, ""},
		{"flat", "testdrv_level: 3\n", nil, testSection{Wait: time.Second, Level: 3}, ""},
		{"environment", "", []string{"POOLGATE_TESTDRV_WAIT=2m"}, testSection{Wait: 2 * time.Minute, Level: 1}, ""},
		{"unknown key", "testdrv:\n  nope: 1\n", nil, testSection{}, "field nope not found in type config.testSection"},
		{"invalid", "", []string{"POOLGATE_TESTDRV_LEVEL=-1"}, testSection{}, "testdrv.level must be 0 or more"},
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
			cfg, _, err := Load(path, append([]string{sim}, tt.env...))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Section("testdrv"); got != tt.want {
				t.Errorf("section %+v, want %+v", got, tt.want)
			}
		})
	}
	cfg := Defaults()
	if err := cfg.SetSectionKey("testdrv.level", 5); err != nil || cfg.Section("testdrv").(testSection).Level != 5 {
		t.Errorf("setSectionKey: %v, section %+v", err, cfg.Section("testdrv"))
	}
	if err := cfg.SetSectionKey("absent.level", 5); err == nil {
		t.Error("setSectionKey on an unregistered section: no error")
	}
}

// The configuration names no driver: the drivers register their sections
// (pool/drivers does), so this package imports none of pool/.
func TestNoDriverImported(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.HasPrefix(imp, "github.com/poolgate/poolgate/pool/") {
			t.Errorf("internal/config imports %s: a driver's settings are its registered section", imp)
		}
	}
}
