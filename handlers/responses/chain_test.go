package responses_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rsp "github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// create posts one turn and returns the response id and status.
func create(t *testing.T, h handler, body string) (string, int) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.Create(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body)))
	var out struct{ ID string }
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return out.ID, rec.Code
}

// A previous_response_id chain is stored by reference: each turn adds about
// its own size, not the whole conversation again, and a follow-up still
// reaches the worker with every earlier message.
func TestChainsAreStoredByReference(t *testing.T) {
	var seen []int
	chat := &chattest.Source{Script: func(req *chat.Request) ([]chat.Event, error) {
		seen = append(seen, len(req.Messages))
		return chattest.TextEvents(strings.Repeat("answer ", 50)), nil
	}}
	store := newStore()
	h := newHandler(rsp.Config{}, chat, store)
	turn := fmt.Sprintf(`"input":%q`, strings.Repeat("question ", 50))
	prev, _ := create(t, h, `{"model":"m",`+turn+`}`)
	bytesAt := map[int]int{}
	for n := 2; n <= 60; n++ {
		id, code := create(t, h, `{"model":"m","previous_response_id":"`+prev+`",`+turn+`}`)
		if code != http.StatusOK {
			t.Fatalf("turn %d: status %d", n, code)
		}
		prev = id
		bytesAt[n] = store.Bytes()
	}
	if got, want := seen[len(seen)-1], 2*60-1; got != want {
		t.Errorf("the 60th turn reached the worker with %d messages, want %d", got, want)
	}
	// Linear growth doubles from 30 to 60 turns (the records' id lists
	// add a little); storing the conversation again with every turn would
	// quadruple it.
	if ratio := float64(bytesAt[60]) / float64(bytesAt[30]); ratio > 2.5 {
		t.Errorf("stored bytes grew %.1fx from turn 30 to 60 (%d -> %d), want about 2x", ratio, bytesAt[30], bytesAt[60])
	}
}

// A chain whose earlier link is gone (deleted, expired or evicted) can't be
// continued: a 404 naming previous_response_id, not a silently shorter
// conversation.
func TestBrokenChainIsNotFound(t *testing.T) {
	h := newHandler(rsp.Config{}, &chattest.Source{Events: chattest.TextEvents("ok")}, newStore())
	first, _ := create(t, h, `{"model":"m","input":"one"}`)
	second, _ := create(t, h, `{"model":"m","input":"two","previous_response_id":"`+first+`"}`)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodDelete, "/v1/responses/"+first, nil)
	req.SetPathValue("id", first)
	h.Delete(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("delete: %d", rec.Code)
	}
	if _, code := create(t, h, `{"model":"m","input":"three","previous_response_id":"`+second+`"}`); code != http.StatusNotFound {
		t.Errorf("continuing a chain with a deleted link: %d, want 404", code)
	}
}
