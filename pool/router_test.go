package pool

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// refusing is a fake worker script: each instance refuses its first n turns
// as a dead connection, then answers "ok".
type refusing struct {
	mu      sync.Mutex
	refused map[string]int
	n       int
}

func (r *refusing) chat(_ context.Context, instance string, _ *chat.Turn) (<-chan chat.Event, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused[instance] < r.n {
		r.refused[instance]++
		return nil, chat.ErrWorkerGone
	}
	return supervisortest.Answer("ok"), nil
}

// refusingPool is a pool of ready fake workers that each refuse n turns.
func refusingPool(t *testing.T, n int, names ...string) *Pool {
	f := supervisortest.New()
	f.Chat = (&refusing{refused: map[string]int{}, n: n}).chat
	p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, names...), nil)
	waitReady(t, p, names...)
	return p
}

func TestEveryInstanceRefusingOnceStillServes(t *testing.T) {
	p := refusingPool(t, 1, "a", "b", "c")
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
	p := refusingPool(t, 1000, "a", "b")
	r := NewRouter(RouterConfig{Retries: 1}, p, nil, nil, p.log)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := r.Chat(ctx, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}}); err == nil || ctx.Err() != nil {
		t.Fatalf("got %v (ctx %v), want the refusal returned well before the deadline", err, ctx.Err())
	}
}
