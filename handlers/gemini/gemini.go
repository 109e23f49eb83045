// Package gemini serves the Gemini API's generateContent family on plain
// net/http: models/{model}:generateContent, :streamGenerateContent (server-
// sent events with alt=sse, else one JSON array written as it comes) and
// :countTokens, under /v1beta and /v1, and the model list in its shape. It
// decodes the wire JSON into a neutral chat.Request (decode.go,
// contents.go, schema.go), encodes the answer as Gemini's responses
// (encode.go) and names errors in Google's shape (errors.go); these are
// pure code, knowing nothing of the pool. This file is the codec the edge
// runs (relay.Protocol: its endpoints, the requests it claims, the key its
// clients send, Decode; relay.Counter and relay.Lister: its token count
// and model listings); the relay keeps streams alive and ends them, apierr
// classifies errors. It never sees another protocol's types.
package gemini

import (
	"log/slog"
	"net/http"
	"strconv"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/chat"
)

// Config tunes the Gemini handler.
type Config struct {
	relay.Options
}

// protocol is this package's label in metrics and logs.
const protocol = "gemini"

// Handler serves the Gemini API. It is safe for concurrent use.
type Handler struct {
	relay.Codec
}

var (
	_ relay.Protocol = (*Handler)(nil)
	_ relay.Counter  = (*Handler)(nil)
	_ relay.Lister   = (*Handler)(nil)
)

// New returns a Handler. A nil log discards.
func New(cfg Config, log *slog.Logger) *Handler {
	return &Handler{Codec: relay.NewCodec(relay.Config{Options: cfg.Options, Protocol: protocol, WriteError: WriteProblem,
		Dropped: DroppedFields}, log)}
}

// Endpoints are a model's methods and the model listings, under /v1beta
// and /v1 (relay.Protocol). A method's path puts it after a colon in the
// last segment (models/gemini-2.5-pro:generateContent), which gin cannot
// route on, so one catch-all under models/ takes them and Accept reads the
// method. The listings on /v1 are OpenAI's path too: a Google client's
// request is claimed here.
func (h *Handler) Endpoints() []relay.Endpoint {
	var eps []relay.Endpoint
	for _, v := range []string{"/v1beta", "/v1"} {
		eps = append(eps, relay.Endpoint{Method: http.MethodPost, Path: v + "/models/*action", Serves: relay.ServeNone},
			relay.Endpoint{Method: http.MethodGet, Path: v + "/models", Serves: relay.ServeModels},
			relay.Endpoint{Method: http.MethodGet, Path: v + "/models/*name", Serves: relay.ServeModels})
	}
	return eps
}

// Claims reports whether r speaks the Gemini API (relay.Protocol): see
// isRequest.
func (h *Handler) Claims(r *http.Request) bool { return isRequest(r) }

// Accept moves the key a Gemini client sends into Authorization, and reads
// a model's method from the path once: generateContent and
// streamGenerateContent run a turn, countTokens counts, any other is no
// route (relay.Protocol). The model and the method go into r's path values
// for Decode. A replica's hop is left as it arrived: the replica that
// signed it took the client's key out already, and its query is checked
// against the signature as it is.
func (h *Handler) Accept(r *http.Request) relay.Serving {
	if r.Header.Get(access.HopHeader) == "" {
		takeKey(r)
	}
	if r.Method != http.MethodPost {
		return relay.AsEndpoint
	}
	a, ok := ParseAction(r.URL.Path)
	if !ok {
		return relay.AsEndpoint
	}
	r.SetPathValue("model", a.Model)
	r.SetPathValue("method", a.Method)
	switch a.Method {
	case MethodGenerate, MethodStream:
		return relay.ServeTurn
	case MethodCount:
		return relay.ServeCount
	}
	return relay.ServeNone
}

// Decode decodes a models/{model}:generateContent request into its turn,
// and :streamGenerateContent into a streamed one: server-sent events
// (alt=sse) or a JSON array (relay.Protocol).
func (h *Handler) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	model, stream := r.PathValue("model"), r.PathValue("method") == MethodStream
	d, err := decodeGenerate(body, model, stream)
	if err != nil {
		return nil, err
	}
	h.Report(r.Context(), &d.dropped)
	t := &relay.Decoded{Request: &d.chat}
	if !stream {
		t.Body = newReply(model)
		return t, nil
	}
	raw := r.URL.Query().Get("alt") != "sse"
	if raw {
		t.ContentType = "application/json; charset=UTF-8"
	}
	t.Stream = func(s *relay.SSE) relay.Encoder { return newStreamEncoder(s, model, raw) }
	return t, nil
}

// DecodeCount decodes models/{model}:countTokens as generateContent
// decodes its request (relay.Counter).
func (h *Handler) DecodeCount(r *http.Request, body []byte) (*chat.Request, error) {
	d, err := decodeCount(body, r.PathValue("model"))
	if err != nil {
		return nil, err
	}
	return &d.chat, nil
}

// WriteCount answers countTokens as {"totalTokens": n} (relay.Counter).
func (h *Handler) WriteCount(w http.ResponseWriter, n int) {
	b := strconv.AppendInt(append(make([]byte, 0, 32), `{"totalTokens":`...), int64(n), 10)
	httpx.WriteJSON(w, http.StatusOK, append(b, '}'))
}
