package pycompat_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/pycompat"
)

// python_compat changes one status: a logged-out account is the Python
// gateway's 401.
func TestStatus(t *testing.T) {
	tests := []struct {
		give       error
		wantKind   apierr.Class
		wantStatus int
	}{
		{fmt.Errorf("%w: %w", chat.ErrNoInstance, chat.ErrNotLoggedIn), apierr.Unauthorized, 401},
		{chat.ErrNotLoggedIn, apierr.Unauthorized, 401},
		{chat.ErrNoInstance, apierr.Unavailable, 503},
		{&chat.OverloadedError{}, apierr.RateLimited, 429},
	}
	for _, tt := range tests {
		t.Run(tt.give.Error(), func(t *testing.T) {
			var got apierr.Problem
			rl := relay.New(relay.Config{Options: relay.Options{Status: pycompat.Shapes{Enabled: true}.Status},
				WriteError: func(_ http.ResponseWriter, p *apierr.Problem) { got = *p }}, nil)
			p := apierr.Classify(tt.give)
			rl.WriteProblem(httptest.NewRecorder(), &p)
			if got.Class != tt.wantKind || got.Status != tt.wantStatus {
				t.Errorf("got %v %d, want %v %d", got.Class, got.Status, tt.wantKind, tt.wantStatus)
			}
		})
	}
}
