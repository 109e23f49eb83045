package anthropic_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/testenv"
)

func TestQuietStreamGetsPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := messages(anthropic.Config{Options: relay.Options{KeepAlive: 10 * time.Second}}, &chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "a"}, {Type: chat.EventDone, Finish: chat.FinishStop}}, Pause: 25 * time.Second})
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)))
		// One ping after the first block start, two more during the pause.
		if got := strings.Count(rec.Body.String(), "event: ping\n"); got != 3 {
			t.Errorf("pings = %d, want 3:\n%s", got, rec.Body.String())
		}
		if !strings.HasSuffix(rec.Body.String(), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
			t.Errorf("stream does not end with message_stop:\n%s", rec.Body.String())
		}
	})
}

func TestClientGoneStopsStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := messages(anthropic.Config{}, &chattest.Source{Events: []chat.Event{{Type: chat.EventText, Text: "a"}, {Type: chat.EventDone, Finish: chat.FinishStop}}, Pause: time.Hour})
		ctx, cancel := context.WithCancel(context.Background())
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)).WithContext(ctx))
		}()
		synctest.Wait()
		cancel()
		<-done
		if strings.Contains(rec.Body.String(), "event: error") || strings.Contains(rec.Body.String(), "message_stop") {
			t.Errorf("a cancelled stream got a closing frame:\n%s", rec.Body.String())
		}
	})
}

// A request that waits for its answer to start (in the queue, or while the
// answer is held back) opens the stream with message_start and pings, so the
// client sees a live connection; a failure after that is an error event.
func TestSlowStartOpensTheStreamEarly(t *testing.T) {
	tests := []struct {
		name  string
		give  *chattest.Source
		want  []string // in order
		avoid string
	}{
		{"answer after a wait", &chattest.Source{Delay: 25 * time.Second, Events: chattest.TextEvents("hi")},
			[]string{"event: message_start\n", "event: ping\n", "event: ping\n", "event: content_block_start\n", "hi", "event: message_stop\n"}, "event: error"},
		{"overloaded after a wait", &chattest.Source{Delay: 25 * time.Second, Err: &chat.OverloadedError{RetryAfter: time.Second}},
			[]string{"event: message_start\n", "event: ping\n", "event: error\n", `"type":"overloaded_error"`}, "message_stop"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := messages(anthropic.Config{Options: relay.Options{KeepAlive: 10 * time.Second}}, tt.give)
				rec := httptest.NewRecorder()
				h(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)))
				body := rec.Body.String()
				if rec.Code != http.StatusOK || !testenv.InOrder(body, tt.want) || strings.Contains(body, tt.avoid) {
					t.Errorf("got %d\n%s\nwant 200 with %q in order and no %q", rec.Code, body, tt.want, tt.avoid)
				}
			})
		})
	}
}

// A quick failure is still a JSON error with its own status.
func TestQuickFailureIsAStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := messages(anthropic.Config{Options: relay.Options{KeepAlive: 10 * time.Second}}, &chattest.Source{Delay: time.Second, Err: &chat.OverloadedError{RetryAfter: 2 * time.Second}})
		rec := httptest.NewRecorder()
		h(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)))
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" {
			t.Errorf("got %d %v %s, want 429 with Retry-After 2", rec.Code, rec.Header(), rec.Body.String())
		}
	})
}
