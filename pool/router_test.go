package pool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// flakyBackend refuses its first n turns as a dead connection, then answers.
type flakyBackend struct {
	mu      sync.Mutex
	refuse  int
	started int
}

func (b *flakyBackend) Status(context.Context) (AuthState, error) {
	return AuthState{LoggedIn: true}, nil
}
func (b *flakyBackend) Close() error { return nil }

func (b *flakyBackend) Chat(ctx context.Context, _ *chat.Turn) (<-chan chat.Event, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.refuse > 0 {
		b.refuse--
		return nil, chat.ErrWorkerGone
	}
	b.started++
	ch := make(chan chat.Event, 2)
	ch <- chat.Event{Type: chat.EventText, Text: "ok"}
	ch <- chat.Event{Type: chat.EventDone, Finish: chat.FinishStop}
	close(ch)
	return ch, nil
}

func TestEveryInstanceRefusingOnceStillServes(t *testing.T) {
	p := testPool(t, Config{QueueTimeout: 5 * time.Second}, "a", "b", "c")
	for _, w := range p.workers {
		w.backend = &flakyBackend{refuse: 1}
	}
	r := NewRouter(RouterConfig{Retries: 0}, p, nil, nil, p.log)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ch, err := r.Chat(ctx, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatalf("every instance refused once, then the request failed: %v", err)
	}
	var text string
	for ev := range ch {
		text += ev.Text
	}
	if text != "ok" {
		t.Errorf("answer %q", text)
	}
	r.Wait()
}

func TestRefusalsAreBounded(t *testing.T) {
	p := testPool(t, Config{QueueTimeout: 5 * time.Second}, "a", "b")
	for _, w := range p.workers {
		w.backend = &flakyBackend{refuse: 1000}
	}
	r := NewRouter(RouterConfig{Retries: 1}, p, nil, nil, p.log)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := r.Chat(ctx, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}}); err == nil || ctx.Err() != nil {
		t.Fatalf("got %v (ctx %v), want the refusal returned well before the deadline", err, ctx.Err())
	}
}
