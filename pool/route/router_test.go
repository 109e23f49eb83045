package route

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// refusing is a fake worker script: each instance refuses its first n turns
// as a connection that had already ended (nothing was sent), then answers
// "ok".
type refusing struct {
	mu      sync.Mutex
	refused map[string]int
	n       int
}

func (r *refusing) start(ctx context.Context, instance string, _ *chat.Turn) (chat.Answer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused[instance] < r.n {
		r.refused[instance]++
		return nil, fmt.Errorf("%w: %w", chat.ErrWorkerGone, chat.ErrNotSent)
	}
	return chattest.Text(ctx, "ok"), nil
}

// refusingPool is a pool of ready fake workers that each refuse n turns.
func refusingPool(t *testing.T, n int, names ...string) *Pool {
	f := supervisortest.New()
	f.Start = (&refusing{refused: map[string]int{}, n: n}).start
	p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, names...), nil)
	waitReady(t, p, names...)
	return p
}

func TestEveryInstanceRefusingOnceStillServes(t *testing.T) {
	p := refusingPool(t, 1, "a", "b", "c")
	r := NewRouter(RouterConfig{Retries: 0}, p, nil, nil, p.log)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := open(ctx, r, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatalf("every instance refused once, then the request failed: %v", err)
	}
	var text string
	for _, ev := range chattest.Collect(s) {
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
	if _, err := open(ctx, r, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}}); err == nil || ctx.Err() != nil {
		t.Fatalf("got %v (ctx %v), want the refusal returned well before the deadline", err, ctx.Err())
	}
}

// open runs req through r as a client's request on a single replica.
func open(ctx context.Context, r *Router, req *chat.Request) (*turnStream, error) {
	o, err := r.Open(ctx, Call{Request: req})
	if err != nil {
		return nil, err
	}
	return o.Answer.(*turnStream), nil
}
