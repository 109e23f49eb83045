package gemini

import (
	"net/http"
	"strings"
)

// The methods of a model the API serves, as the path names them after the
// model: models/{model}:{method}.
const (
	MethodGenerate = "generateContent"
	MethodStream   = "streamGenerateContent"
	MethodCount    = "countTokens"
)

// Action is what a path asks of a model.
type Action struct {
	Model, Method string
}

// ParseAction reads models/{model}:{method} at the end of path (under
// /v1beta or /v1); false when path names no model's method.
func ParseAction(path string) (Action, bool) {
	i := strings.LastIndex(path, "/models/")
	if i < 0 {
		return Action{}, false
	}
	model, method, ok := strings.Cut(path[i+len("/models/"):], ":")
	if !ok || model == "" || method == "" || strings.ContainsAny(model, "/:") {
		return Action{}, false
	}
	return Action{Model: model, Method: method}, true
}

// isRequest reports whether r speaks the Gemini API, so that errors outside
// its handler (a refused key, an unknown route, a body over its cap) come in
// its shape: anything under /v1beta, a model's method under /v1/models, and
// /v1/models itself when a Google client asks (its SDKs send
// x-goog-api-client; a key sent as Gemini clients send it says so too).
func isRequest(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1beta/"):
		return true
	case !strings.HasPrefix(p, "/v1/models"):
		return false
	case strings.HasPrefix(p, "/v1/models/") && strings.Contains(p, ":"):
		return true
	}
	return r.Header.Get("X-Goog-Api-Client") != "" || r.Header.Get(keyHeader) != "" || r.URL.Query().Has("key")
}

// keyHeader is the header Gemini clients send their API key in.
const keyHeader = "X-Goog-Api-Key"

// takeKey moves the API key of a Gemini request (x-goog-api-key, or the
// key query parameter) into Authorization, the one place the edge reads a
// caller's key from, unless the request already has one there. Both are
// removed from the request: nothing after the edge (a log line, a span,
// the hop to another replica) sees the key in a place no other protocol
// puts it, and no URL carries it on.
func takeKey(r *http.Request) {
	key := r.Header.Get(keyHeader)
	r.Header.Del(keyHeader)
	if q := r.URL.Query(); q.Has("key") {
		if key == "" {
			key = q.Get("key")
		}
		q.Del("key")
		r.URL.RawQuery = q.Encode()
		r.RequestURI = r.URL.RequestURI()
	}
	if key != "" && r.Header.Get("Authorization") == "" && r.Header.Get("X-Api-Key") == "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
}
