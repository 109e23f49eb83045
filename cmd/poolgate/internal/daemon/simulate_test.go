package daemon

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The bundled simulator answers "You said: ..." to anyone. It starts only
// when nothing marks a deployment: with any account, key, token or a
// public listener and no worker binary, the daemon refuses to start,
// naming what to set, and no worker process is spawned.
func TestNoAccidentalSimulator(t *testing.T) {
	accounts := `[{"name":"acct-1","username":"u1","password":"pw"}]`
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"an API key", []string{"POOLGATE_API_KEYS=sk-1"}, "POOLGATE_SIMULATE=true"},
		{"the Python gateway's API keys", []string{"API_KEYS=sk-1"}, "set: api_keys"},
		{"an admin token", []string{"ADMIN_TOKEN=adm"}, "set: admin_token"},
		{"public metrics", []string{"METRICS_PUBLIC=true"}, "set: metrics_public"},
		{"a bundle key", []string{"POOLGATE_BUNDLE_KEY=" + strings.Repeat("A", 43) + "="}, "set: bundle_key"},
		{"accounts", []string{"POOLGATE_ACCOUNTS=" + accounts}, "POOLGATE_WORKER_BIN"},
		{"the Python gateway's accounts", []string{"LINGMA_ACCOUNTS=" + accounts}, "LINGMA_BIN"},
		{"a public listener", []string{"POOLGATE_LISTEN=0.0.0.0:0", "POOLGATE_INSECURE=true", "POOLGATE_ADMIN_LISTEN=127.0.0.1:0"}, "listen (not loopback)"},
		{"simulate=false", []string{"POOLGATE_SIMULATE=false"}, "worker_bin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			data := t.TempDir()
			env := append([]string{"POOLGATE_LISTEN=127.0.0.1:0", "POOLGATE_DATA_DIR=" + data}, tt.give...)
			err := serve(ctx, Options{}, func() []string { return env }, nil, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run = %v, want a refusal mentioning %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(data, "workers")); !os.IsNotExist(err) {
				t.Errorf("a worker dir was made (%v): a worker started", err)
			}
		})
	}
}
