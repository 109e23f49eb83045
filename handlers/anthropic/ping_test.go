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
	"github.com/poolgate/poolgate/pool"
)

// pausingChatter sends one text event, goes quiet for Pause, then finishes.
type pausingChatter struct{ Pause time.Duration }

func (c pausingChatter) Chat(ctx context.Context, _ *pool.ChatRequest) (<-chan pool.Event, error) {
	ch := make(chan pool.Event)
	go func() {
		defer close(ch)
		for i, ev := range []pool.Event{{Type: pool.EventText, Text: "a"}, {Type: pool.EventDone, Finish: pool.FinishStop}} {
			if i > 0 {
				select {
				case <-time.After(c.Pause):
				case <-ctx.Done():
					return
				}
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func TestQuietStreamGetsPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := anthropic.New(anthropic.Config{PingInterval: 10 * time.Second}, pausingChatter{Pause: 25 * time.Second}, nil)
		rec := httptest.NewRecorder()
		h.Messages(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)))
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
		h := anthropic.New(anthropic.Config{}, pausingChatter{Pause: time.Hour}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.Messages(rec, httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader(streamBody)).WithContext(ctx))
		}()
		synctest.Wait()
		cancel()
		<-done
		if strings.Contains(rec.Body.String(), "event: error") || strings.Contains(rec.Body.String(), "message_stop") {
			t.Errorf("a cancelled stream got a closing frame:\n%s", rec.Body.String())
		}
	})
}
