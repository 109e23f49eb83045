package login

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLaunchWhoseConnectionFails: a browser that started but whose DevTools
// connection could not be made (here a fake Chromium whose DevTools
// endpoint refuses the WebSocket; under load, the attempt's deadline cut
// the connection)
// ends in an error, its process killed and its profile removed. It used to
// be closed over a connection that never existed, a nil dereference that
// took the whole daemon down.
func TestLaunchWhoseConnectionFails(t *testing.T) {
	devtools := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/json/version" {
			fmt.Fprintf(w, `{"webSocketDebuggerUrl": "ws://%s/devtools/browser/none"}`, r.Host)
			return
		}
		http.NotFound(w, r) // no WebSocket here
	}))
	defer devtools.Close()
	dir := t.TempDir()
	fake := filepath.Join(dir, "chromium")
	script := "#!/bin/sh\necho 'DevTools listening on ws://" + devtools.Listener.Addr().String() +
		"/devtools/browser/none' >&2\nexec sleep 30\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	profiles := filepath.Join(dir, "profiles")
	if err := os.Mkdir(profiles, 0o700); err != nil {
		t.Fatal(err)
	}
	headless := true
	cfg := &Config{Chromium: fake, Headless: &headless, TempDir: profiles, Env: []string{"PATH=/usr/bin:/bin"}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	br, err := launch(ctx, cfg, slog.New(slog.DiscardHandler))
	if err == nil {
		br.close()
		t.Fatal("launch connected to a browser that listens nowhere")
	}
	if !strings.Contains(err.Error(), "connect to chromium") {
		t.Errorf("launch = %v, want the connection's failure", err)
	}
	if left, _ := os.ReadDir(profiles); len(left) != 0 {
		t.Errorf("profile dirs left behind: %v", left)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("launch took %s: the fake browser was waited for, not killed", d)
	}
}
