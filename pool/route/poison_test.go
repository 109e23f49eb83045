package route

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// failingFirst is a fake worker script: the first turn of the whole pool
// fails as fail says, every later one answers "ok"; it counts the turns.
type failingFirst struct {
	mu    sync.Mutex
	turns int
	fail  func(ctx context.Context) (chat.Answer, error)
}

func (f *failingFirst) start(ctx context.Context, _ string, _ *chat.Turn) (chat.Answer, error) {
	f.mu.Lock()
	f.turns++
	first := f.turns == 1
	f.mu.Unlock()
	if first {
		return f.fail(ctx)
	}
	return chattest.Text(ctx, "ok"), nil
}

func (f *failingFirst) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.turns
}

// TestPoisonTurnIsNotRetried: a turn whose worker went away or went silent
// after the turn reached it (the poison: a frame over the worker's
// limit drops its connection; a worker that acknowledged the turn and then
// died of it, issue 45) is not tried on a second worker; a turn is tried
// again only with evidence the failure was not the turn's doing.
func TestPoisonTurnIsNotRetried(t *testing.T) {
	gone := func(context.Context) (chat.Answer, error) {
		return nil, fmt.Errorf("write chat/ask: %w", chat.ErrWorkerGone)
	}
	after := func(err error) func(ctx context.Context) (chat.Answer, error) {
		return func(ctx context.Context) (chat.Answer, error) {
			return chattest.NewScript(ctx, chat.Event{Type: chat.EventError, Err: err}), nil
		}
	}
	tests := []struct {
		name      string
		give      func(ctx context.Context) (chat.Answer, error)
		wantTurns int
		wantErr   error // nil: served by a second worker
	}{
		{"gone while the turn was sent", gone, 1, chat.ErrWorkerGone},
		{"too large for the worker", func(context.Context) (chat.Answer, error) {
			return nil, &chat.TooLargeError{Size: 2, Limit: 1}
		}, 1, &chat.TooLargeError{}},
		{"connection gone before the turn", func(context.Context) (chat.Answer, error) {
			return nil, fmt.Errorf("%w: %w", chat.ErrNotSent, chat.ErrWorkerGone)
		}, 2, nil},
		{"gone after the worker took the turn", after(chat.ErrWorkerGone), 1, chat.ErrWorkerGone},
		{"no acknowledgement in time", func(context.Context) (chat.Answer, error) {
			return nil, fmt.Errorf("chat/ask: %w", context.DeadlineExceeded)
		}, 1, context.DeadlineExceeded},
		{"silent after the worker took the turn", after(fmt.Errorf("no message for 2m: %w", context.DeadlineExceeded)),
			1, context.DeadlineExceeded},
		{"cut when the lease ended", after(errFenced), 2, nil},
		{"the worker's own error", func(context.Context) (chat.Answer, error) {
			return nil, &chat.UpstreamError{Status: 500, Message: "boom"}
		}, 2, nil},
		{"the worker's own error after it took the turn", after(&chat.UpstreamError{Status: 500, Message: "boom"}), 2, nil},
		{"refused: logged out", func(context.Context) (chat.Answer, error) {
			return nil, fmt.Errorf("chat/ask: %w", chat.ErrNotLoggedIn)
		}, 2, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			script := &failingFirst{fail: tt.give}
			f := supervisortest.New()
			f.Start = script.start
			p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, "a", "b"), nil)
			waitReady(t, p, "a", "b")
			r := NewRouter(RouterConfig{Retries: 2}, p, nil, nil, p.log)
			defer r.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := open(ctx, r, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
			if s != nil {
				chattest.Collect(s)
			}
			if got := script.count(); got != tt.wantTurns || !sameError(err, tt.wantErr) {
				t.Errorf("%d turns, error %v; want %d turns, error %v", got, err, tt.wantTurns, tt.wantErr)
			}
		})
	}
}

func sameError(err, want error) bool {
	var tooLarge *chat.TooLargeError
	switch {
	case want == nil:
		return err == nil
	case errors.As(want, &tooLarge):
		return errors.As(err, &tooLarge)
	}
	return errors.Is(err, want)
}

// takes counts the affinity entries taken.
type takes struct {
	mu sync.Mutex
	n  int
}

func (s *takes) TakeAffinity(context.Context, AffinityKey) (Affinity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return Affinity{}, errors.New("none")
}

func (s *takes) PutAffinity(context.Context, AffinityKey, Affinity) error { return nil }

// TestOversizedTurnTouchesNothing: a turn the driver's bound refuses is
// refused before its affinity entry is taken and before admission: no
// slot, no worker.
func TestOversizedTurnTouchesNothing(t *testing.T) {
	f := supervisortest.New()
	started := 0
	f.Start = func(ctx context.Context, _ string, _ *chat.Turn) (chat.Answer, error) {
		started++
		return chattest.Text(ctx, "ok"), nil
	}
	p, _ := startFake(t, Config{}, f, supervisortest.Configs(t, false, "a"), nil)
	waitReady(t, p, "a")
	store := &takes{}
	var checked *chat.Turn
	r := NewRouter(RouterConfig{CheckTurn: func(t *chat.Turn) error {
		checked = t
		return &chat.TooLargeError{Size: 10, Limit: 1}
	}}, p, store, nil, p.log)
	defer r.Wait()
	req := &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "q"}, {Role: chat.RoleAssistant, Content: "a"},
		{Role: chat.RoleUser, Content: "follow-up"}}}
	_, err := open(context.Background(), r, req)
	var tooLarge *chat.TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("Open = %v, want a *chat.TooLargeError", err)
	}
	if checked == nil || len(checked.Messages) != 3 {
		t.Errorf("the bound was asked of %+v, want the whole transcript", checked)
	}
	if store.n != 0 || started != 0 || p.Snapshot().InFlight != 0 {
		t.Errorf("%d affinity entries taken, %d turns started, %d in flight; want none", store.n, started, p.Snapshot().InFlight)
	}
}
