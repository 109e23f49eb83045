package anthropic

// What the edge asks of the protocol beyond a turn: the token count, whose
// counting is the edge's (relay.Count), and the model listing.

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// DecodeCount decodes POST /v1/messages/count_tokens like Messages decodes
// its body, minus max_tokens, so a request count_tokens accepts is one
// Messages accepts (relay.Counter).
func (h *Handler) DecodeCount(r *http.Request, body []byte) (*chat.Request, error) {
	d, err := h.decode(r, body, true)
	if err != nil {
		return nil, err
	}
	return &d.chat, nil
}

// WriteCount answers count_tokens as {"input_tokens": n} (relay.Counter).
func (h *Handler) WriteCount(w http.ResponseWriter, n int) {
	b := strconv.AppendInt(append(make([]byte, 0, 32), `{"input_tokens":`...), int64(n), 10)
	httpx.WriteJSON(w, http.StatusOK, append(b, '}'))
}

// model is a model in Anthropic's list shape.
type model struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
	// Driver is poolgate's own: the kind of worker that serves the model.
	Driver string `json:"driver,omitempty"`
}

// WriteModels answers the Anthropic SDK's models.list with the pool's
// models, on one page (relay.Lister).
func (h *Handler) WriteModels(w http.ResponseWriter, _ *http.Request, ms []chat.Model) {
	data := make([]model, 0, len(ms))
	for _, m := range ms {
		data = append(data, model{Type: "model", ID: m.ID, DisplayName: m.Name, CreatedAt: h.created, Driver: m.Driver})
	}
	var first, last *string
	if len(data) > 0 {
		first, last = &data[0].ID, &data[len(data)-1].ID
	}
	b, _ := json.Marshal(struct {
		Data    []model `json:"data"`
		FirstID *string `json:"first_id"`
		HasMore bool    `json:"has_more"`
		LastID  *string `json:"last_id"`
	}{data, first, false, last}) // plain strings: cannot fail
	httpx.WriteJSON(w, http.StatusOK, b)
}
