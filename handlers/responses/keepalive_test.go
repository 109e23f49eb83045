package responses_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/handlers/relay"
	rsp "github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/testenv"
)

func TestQuietStreamGetsKeepAlives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(rsp.Config{Options: relay.Options{KeepAlive: 10 * time.Second}}, &chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "a"}, {Type: chat.EventDone, Finish: chat.FinishStop}}, Pause: 25 * time.Second}, newStore())
		rec := httptest.NewRecorder()
		h.Create(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"model":"m","input":"hi","stream":true}`)))
		if got := strings.Count(rec.Body.String(), ": keep-alive\n\n"); got != 2 {
			t.Errorf("keep-alives = %d, want 2:\n%s", got, rec.Body.String())
		}
		if !strings.Contains(rec.Body.String(), "event: response.completed\n") {
			t.Errorf("no response.completed:\n%s", rec.Body.String())
		}
	})
}

func TestDeadlineMidStreamEndsWithFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newStore()
		h := newHandler(rsp.Config{}, &chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "a"}, {Type: chat.EventDone, Finish: chat.FinishStop}}, Pause: time.Hour}, store)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rec := httptest.NewRecorder()
		h.Create(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"model":"m","input":"hi","stream":true}`)).WithContext(ctx))
		body := rec.Body.String()
		if strings.Count(body, "event: response.failed\n") != 1 || strings.Contains(body, "response.completed") {
			t.Errorf("want exactly one response.failed:\n%s", body)
		}
		if store.Saves() != 1 {
			t.Errorf("saves = %d, want 1 (saved despite the ended request)", store.Saves())
		}
	})
}

// A request that waits for its answer to start opens the stream with
// response.created and keeps it alive; a failure after that is
// response.failed, while a quick failure is still a JSON status.
func TestSlowStartOpensTheStreamEarly(t *testing.T) {
	tests := []struct {
		name       string
		give       *chattest.Source
		wantStatus int
		want       []string // in order
	}{
		{"answer after a wait", &chattest.Source{Delay: 25 * time.Second, Events: chattest.TextEvents("hi")}, 200,
			[]string{"event: response.created\n", "event: response.in_progress\n", ": keep-alive\n", "hi", "event: response.completed\n"}},
		{"overloaded after a wait", &chattest.Source{Delay: 25 * time.Second, Err: &chat.OverloadedError{RetryAfter: time.Second}}, 200,
			[]string{"event: response.created\n", ": keep-alive\n", "event: response.failed\n"}},
		{"overloaded at once", &chattest.Source{Err: &chat.OverloadedError{RetryAfter: time.Second}}, 429,
			[]string{`"type":"rate_limit_error"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHandler(rsp.Config{Options: relay.Options{KeepAlive: 10 * time.Second}}, tt.give, newStore())
				rec := httptest.NewRecorder()
				h.Create(rec, httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(`{"model":"m","input":"hi","stream":true}`)))
				if body := rec.Body.String(); rec.Code != tt.wantStatus || !testenv.InOrder(body, tt.want) {
					t.Errorf("got %d\n%s\nwant %d with %q in order", rec.Code, body, tt.wantStatus, tt.want)
				}
			})
		})
	}
}
