// Package openaichat serves OpenAI's POST /v1/chat/completions: it decodes
// the wire JSON into a neutral chat.Request and encodes the answer as one
// chat.completion body or as chat.completion.chunk SSE frames. Opening the
// answer is the edge's; keep-alives, the stream's ending and errors are
// the relay's; the error shape is openaierr's. It imports no web
// framework.
//
// Stream framing: the SSE headers go out with the first event (or the first
// keep-alive), so a failure before that is a JSON error with its real status.
// A failure after it is one data frame holding {"error":{...}} (the shape of
// an error body, which OpenAI's SDKs raise as an error), and the stream then
// closes WITHOUT "data: [DONE]": [DONE] means the answer is complete, so a
// client that ignores the error frame still sees a truncated stream.
package openaichat

import (
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
)

// Config tunes the handler. The zero value is usable.
type Config struct {
	// Options: a keep-alive before the first event commits the stream,
	// so an error after it is an in-stream error, not a JSON status.
	relay.Options
	// Extra, when set, adds another gateway's fields to a non-stream
	// completion, which that gateway's clients read: given the body, the
	// instance that served it and the milliseconds to its first text and to
	// its end, it returns the body to send (internal/pycompat's served_by
	// and latency). Nil: OpenAI's shape alone (the X-Poolgate-Instance
	// header names the instance).
	Extra func(body []byte, instance string, firstMS, totalMS int64) []byte
}

// protocol is this package's label in metrics and logs.
const protocol = "chat"

// Handler serves chat completions. It is safe for concurrent use.
type Handler struct {
	relay.Codec
	extra func(body []byte, instance string, firstMS, totalMS int64) []byte
	// now and newID are replaced by tests for stable transcripts.
	now     func() time.Time
	newID   func(prefix string) string
	created int64 // the models' creation time, which workers don't report
}

var (
	_ relay.Protocol = (*Handler)(nil)
	_ relay.Lister   = (*Handler)(nil)
)

// New returns a handler. A nil log discards logs.
func New(cfg Config, log *slog.Logger) *Handler {
	return &Handler{Codec: relay.NewCodec(relay.Config{Options: cfg.Options, Protocol: protocol, WriteError: openaierr.Write,
		Dropped: DroppedFields}, log), extra: cfg.Extra, now: time.Now, newID: randomID, created: time.Now().Unix()}
}

// idChars are the characters of generated ids, like OpenAI's.
const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomID returns prefix plus 24 random characters. The ids only need to be
// unique, not secret, so the fast non-crypto generator is enough.
func randomID(prefix string) string {
	var b [24]byte
	for i := range b {
		b[i] = idChars[rand.N(len(idChars))]
	}
	return prefix + string(b[:])
}

// Endpoints are the chat completions route, its path without /v1 for
// clients whose base URL has none, and OpenAI's model list and retrieve,
// which answer anyone no other protocol claims (relay.Protocol).
func (h *Handler) Endpoints() []relay.Endpoint {
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/chat/completions", Serves: relay.ServeTurn},
		{Method: http.MethodPost, Path: "/chat/completions", Serves: relay.ServeTurn},
		{Method: http.MethodGet, Path: "/v1/models", Serves: relay.ServeModels},
		{Method: http.MethodGet, Path: "/v1/models/*name", Serves: relay.ServeModels}}
}

// Claims claims every request (relay.Protocol): OpenAI's shape is the
// default of API clients, so chat completions, last in the table, answers
// whatever no protocol before it claims.
func (h *Handler) Claims(*http.Request) bool { return true }

// Decode decodes a POST /v1/chat/completions request into its turn
// (relay.Protocol).
func (h *Handler) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	req, opt, err := decodeRequest(body)
	if err != nil {
		return nil, err
	}
	h.Report(r.Context(), &opt.dropped)
	id, created := h.newID("chatcmpl-"), h.now().Unix()
	t := &relay.Decoded{Request: req}
	if opt.stream {
		t.Stream = func(sse *relay.SSE) relay.Encoder {
			return &stream{w: sse, enc: newStreamEncoder(id, req.Model, created, opt.includeUsage), newID: h.newID}
		}
		return t, nil
	}
	rp := &reply{c: completion{ID: id, Object: "chat.completion", Created: created, Model: req.Model}, newID: h.newID}
	if h.extra != nil {
		rp.extra = &extras{add: h.extra, start: time.Now()}
	}
	t.Body = rp
	return t, nil
}

// model is a model in OpenAI's shape.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Name    string `json:"name,omitempty"`
	// Driver is poolgate's own field, in every protocol's listing: the
	// kind of worker that serves the model (chat.Model.Driver).
	Driver string `json:"driver,omitempty"`
}

// WriteModels answers GET /v1/models with the pool's models in OpenAI's
// list shape, and GET /v1/models/{id}, OpenAI's models.retrieve, with the
// model of that id or a 404 (relay.Lister).
func (h *Handler) WriteModels(w http.ResponseWriter, r *http.Request, ms []chat.Model) {
	if name := r.PathValue("name"); name != "" {
		id := name[1:]
		for _, m := range ms {
			if m.ID == id {
				b, _ := json.Marshal(model{ID: m.ID, Object: "model", Created: h.created, OwnedBy: "poolgate", Name: m.Name, Driver: m.Driver})
				httpx.WriteJSON(w, http.StatusOK, b)
				return
			}
		}
		p := apierr.ForStatus(http.StatusNotFound, "model "+id+" is not one of the pool's models (GET /v1/models lists them)")
		h.Relay().WriteProblem(w, &p)
		return
	}
	data := make([]model, 0, len(ms))
	for _, m := range ms {
		data = append(data, model{ID: m.ID, Object: "model", Created: h.created, OwnedBy: "poolgate", Name: m.Name, Driver: m.Driver})
	}
	b, _ := json.Marshal(struct {
		Data   []model `json:"data"`
		Object string  `json:"object"`
	}{data, "list"}) // plain strings: cannot fail
	httpx.WriteJSON(w, http.StatusOK, b)
}
