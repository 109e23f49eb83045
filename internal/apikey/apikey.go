// Package apikey owns how a caller's key is read from a request and checked
// against the accepted keys: a Bearer token, else an X-Api-Key header,
// compared in constant time. It holds the keys in force (a Registry a reload
// swaps; each Key with its name, role and limits). Who may call what is
// decided in internal/access. It knows nothing of routes, protocols,
// limits' state or error shapes; whoever refuses a caller writes the refusal
// in its own shape.
package apikey

import (
	"net/http"
	"strings"
)

// FromRequest returns the key r presents: its Authorization header's Bearer
// token, else its X-Api-Key header, trimmed; "" when it presents none.
func FromRequest(r *http.Request) string {
	auth := r.Header.Get("Authorization")
	if scheme, token, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "bearer") {
		return strings.TrimSpace(token)
	}
	return strings.TrimSpace(r.Header.Get("X-Api-Key"))
}
