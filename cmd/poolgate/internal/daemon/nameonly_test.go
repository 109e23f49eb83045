package daemon

import (
	"net/http"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// An account configured by its name alone in a simulated pool has no login
// for the simulator to play: it starts logged in, as the demo accounts do,
// whatever its kind. (The simulator used to be handed the credentials ":",
// exit five times with `--accounts: ":" is not user:password`, and leave the
// account failed.)
func TestSimulatedAccountByNameOnlyStartsLoggedIn(t *testing.T) {
	for _, tt := range []struct {
		name     string
		accounts string
		model    string
	}{
		{"lingma", `[{"name":"s1"}]`, "kmodel"},
		{"every kind", `[{"name":"s1"},{"name":"s2","driver":"openai","args":["--model-keys=ms-small"]},` +
			`{"name":"s3","driver":"claude-code"},{"name":"s4","driver":"qoder"}]`, "ms-small"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := daemontest.StartDaemon(t, "POOLGATE_ACCOUNTS="+tt.accounts)
			testenv.WaitForNoError(t, 20*time.Second, "every account ready", func() error {
				for name, in := range instancesOf(t, d) {
					if in.State != supervisor.StateReady {
						return &notReady{name, string(in.State), in.LastError}
					}
				}
				return nil
			})
			if code, _, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(tt.model, "hello")); code != http.StatusOK {
				t.Errorf("%s: %d %s", tt.model, code, body)
			}
			// Each account serves a model of its own.
			for name, in := range instancesOf(t, d) {
				if len(in.Models) == 0 {
					t.Errorf("%s (%s) lists no models", name, in.Driver)
					continue
				}
				code, served, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(in.Models[0], "hello"))
				if code != http.StatusOK || in.Driver != "lingma" && served != name {
					t.Errorf("%s (%s): %d from %q: %s", in.Models[0], in.Driver, code, served, body)
				}
			}
		})
	}
}

type notReady struct{ name, state, lastErr string }

func (e *notReady) Error() string { return e.name + " is " + e.state + ": " + e.lastErr }
