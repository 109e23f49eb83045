package responses

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"

	"github.com/poolgate/poolgate/handlers/httpx"
)

// record is what the store keeps per response: the object as the client saw
// it, this turn's input items, and its part of the neutral transcript
// (without instructions, which OpenAI does not carry over), so a follow-up
// rebuilds the conversation and the router's transcript-based affinity sees
// the same prefix it saw before.
//
// A chain of previous_response_id turns is stored by reference: a record
// holds only its own turn (input and answer) and the ids of the records
// before it, read back in one batch. Storing the whole conversation again
// with every turn made its storage grow with the square of its length.
type record struct {
	// Owner is a hash of the API key that created it; other keys get 404.
	Owner    string          `json:"owner,omitempty"`
	Model    string          `json:"model"`
	Response json.RawMessage `json:"response"`
	Input    []item          `json:"input"`
	// Transcript is this turn's input and answer.
	Transcript []chat.Message `json:"transcript"`
	// Chain lists the records whose transcripts come before this one's,
	// oldest first.
	Chain []string `json:"chain,omitempty"`
}

// history rebuilds the transcript that record id ends: its chain's
// transcripts, then its own. It returns the chain a follow-up extends.
func (h *Handler) history(ctx context.Context, id string, rec *record, owner string) ([]chat.Message, []string, error) {
	sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	defer cancel()
	datas, err := h.store.LoadResponses(sctx, rec.Chain)
	if err != nil {
		return nil, nil, err
	}
	var msgs []chat.Message
	for i, data := range datas {
		link, err := decodeRecord(rec.Chain[i], data, owner)
		if err != nil {
			return nil, nil, err // a link that expired or was evicted breaks the chain
		}
		msgs = append(msgs, link.Transcript...)
	}
	return append(msgs, rec.Transcript...), append(rec.Chain[:len(rec.Chain):len(rec.Chain)], id), nil
}

// save stores a finished response when the request asked for it. It runs
// even if the client has gone (the answer is complete and may be continued);
// a failure is logged and degrades to "not stored".
func (h *Handler) save(ctx context.Context, t *turn, enc *streamEncoder, obj []byte) {
	if obj == nil || !t.resp.Store {
		return
	}
	rec := record{Owner: t.owner, Model: t.resp.Model, Response: obj, Input: t.d.items, Chain: t.chain,
		Transcript: append(append([]chat.Message(nil), t.d.input...), enc.answer())}
	data, err := json.Marshal(&rec)
	if err == nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.cfg.StoreTimeout)
		err = h.store.SaveResponse(sctx, t.owner, t.resp.ID, data, h.cfg.TTL, t.chain...)
		cancel()
	}
	if err != nil {
		h.Log.LogAttrs(ctx, slog.LevelWarn, "responses: storing the response failed",
			slog.String("request_id", httpx.RequestID(ctx)), slog.String("response_id", t.resp.ID), slog.Any("err", err))
	}
}

// load fetches a record owned by owner; another owner's record is
// ErrNotFound, so ids can't be probed across keys.
func (h *Handler) load(ctx context.Context, id, owner string) (*record, error) {
	sctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
	defer cancel()
	data, err := h.store.LoadResponse(sctx, id)
	if err != nil {
		return nil, err
	}
	return decodeRecord(id, data, owner)
}

// decodeRecord decodes a stored record owned by owner; a missing one (nil
// data) or another owner's is ErrNotFound.
func decodeRecord(id string, data []byte, owner string) (*record, error) {
	if data == nil {
		return nil, ErrNotFound
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("decode stored response %s: %w", id, err)
	}
	if rec.Owner != owner {
		return nil, ErrNotFound
	}
	return &rec, nil
}

// loadFor answers a lookup failure itself and returns nil then.
func (h *Handler) loadFor(w http.ResponseWriter, r *http.Request) *record {
	id := r.PathValue("id")
	rec, err := h.load(r.Context(), id, httpx.Owner(r.Context()).Responses)
	if isNotFound(err) {
		err = notFound("", id)
	}
	if err != nil {
		h.Relay().Fail(r.Context(), w, err)
		return nil
	}
	return rec
}

// Get serves GET /v1/responses/{id}; the id is r.PathValue("id").
func (h *Handler) Get(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("stream") == "true" {
		h.Relay().Fail(r.Context(), w, badParam("stream", "replaying a stored response as a stream is not supported"))
		return
	}
	if rec := h.loadFor(w, r); rec != nil {
		httpx.WriteJSON(w, http.StatusOK, rec.Response)
	}
}

// Delete serves DELETE /v1/responses/{id}; the id is r.PathValue("id").
func (h *Handler) Delete(w http.ResponseWriter, r *http.Request) {
	if h.loadFor(w, r) == nil {
		return
	}
	id := r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.StoreTimeout)
	defer cancel()
	err := h.store.DeleteResponse(ctx, id)
	if isNotFound(err) {
		err = notFound("", id) // deleted concurrently
	}
	if err != nil {
		h.Relay().Fail(r.Context(), w, err)
		return
	}
	b := append([]byte(`{"id":`), jsonx.AppendString(nil, id)...)
	httpx.WriteJSON(w, http.StatusOK, append(b, `,"object":"response.deleted","deleted":true}`...))
}

// InputItems serves GET /v1/responses/{id}/input_items with OpenAI's cursor
// pagination: limit (1..100, default 20), order (asc or desc, default desc)
// and after (an item id).
func (h *Handler) InputItems(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 100 {
			h.Relay().Fail(r.Context(), w, badParam("limit", "limit must be an integer between 1 and 100"))
			return
		}
		limit = n
	}
	order := q.Get("order")
	if order != "" && order != "asc" && order != "desc" {
		h.Relay().Fail(r.Context(), w, badParam("order", "order must be \"asc\" or \"desc\""))
		return
	}
	rec := h.loadFor(w, r)
	if rec == nil {
		return
	}
	items := rec.Input
	if order != "asc" {
		items = make([]item, len(rec.Input))
		for i, it := range rec.Input {
			items[len(items)-1-i] = it
		}
	}
	page, more, err := paginate(items, q.Get("after"), limit)
	if err != nil {
		h.Relay().Fail(r.Context(), w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, appendList(make([]byte, 0, 256), page, more))
}

func paginate(items []item, after string, limit int) ([]item, bool, error) {
	if after != "" {
		i := 0
		for i < len(items) && items[i].ID != after {
			i++
		}
		if i == len(items) {
			return nil, false, badParam("after", "no input item with id '"+after+"'")
		}
		items = items[i+1:]
	}
	if len(items) > limit {
		return items[:limit], true, nil
	}
	return items, false, nil
}

func appendList(b []byte, page []item, more bool) []byte {
	b = append(b, `{"object":"list","data":[`...)
	for i := range page {
		if i > 0 {
			b = append(b, ',')
		}
		b = page[i].wire(b)
	}
	b = append(b, `],"first_id":`...)
	if len(page) > 0 {
		b = jsonx.AppendString(b, page[0].ID)
		b = append(b, `,"last_id":`...)
		b = jsonx.AppendString(b, page[len(page)-1].ID)
	} else {
		b = append(b, `null,"last_id":null`...)
	}
	return append(b, `,"has_more":`+strconv.FormatBool(more)+`}`...)
}
