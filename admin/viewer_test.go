package admin

import (
	"testing"

	"github.com/poolgate/poolgate/login"
)

// TestForViewer: a viewer reads a login's status without the query and
// fragment of any address in it (the login page's state nonce), the rest
// as it is.
func TestForViewer(t *testing.T) {
	give := login.Status{Name: "a1", State: login.StateFailed,
		PageURL:     "https://login.example.com/authorize?state=n0nce&client_id=x#frag",
		LastError:   "step 2 (wait #username) on http://127.0.0.1:9/login?state=n0nce: context deadline exceeded",
		PageSnippet: "Sign in; continue at HTTPS://login.example.com/next?code=c0de. Thanks"}
	got := forViewer(give)
	want := login.Status{Name: "a1", State: login.StateFailed,
		PageURL:     "https://login.example.com/authorize?REDACTED",
		LastError:   "step 2 (wait #username) on http://127.0.0.1:9/login?REDACTED context deadline exceeded",
		PageSnippet: "Sign in; continue at HTTPS://login.example.com/next?REDACTED Thanks"}
	if got != want {
		t.Errorf("forViewer =\n%+v\nwant\n%+v", got, want)
	}
	plain := login.Status{Name: "a2", LastError: "login page says: Invalid username or password"}
	if forViewer(plain) != plain {
		t.Errorf("forViewer changed a status without addresses: %+v", forViewer(plain))
	}
}
