package route

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// affinityMap is an in-memory AffinityStore.
type affinityMap struct {
	mu sync.Mutex
	m  map[AffinityKey]Affinity
}

func (s *affinityMap) TakeAffinity(_ context.Context, key AffinityKey) (Affinity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.m[key]
	if !ok {
		return Affinity{}, errors.New("no entry")
	}
	delete(s.m, key)
	return a, nil
}

func (s *affinityMap) PutAffinity(_ context.Context, key AffinityKey, a Affinity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = a
	return nil
}

// A backend with a reuse policy decides whether a follow-up continues the
// conversation's upstream session: a turn it refuses goes out whole, in a
// new session.
func TestBackendDecidesReuse(t *testing.T) {
	f := supervisortest.New()
	var seen []chat.Turn
	f.Start = func(ctx context.Context, _ string, turn *chat.Turn) (chat.Answer, error) {
		seen = append(seen, *turn)
		return chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "ok"},
			chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, SessionID: "s-1"}), nil
	}
	f.Continues = func(_ string, turn *chat.Turn) bool { return !turn.Agent }
	p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, "a"), nil)
	waitReady(t, p, "a")
	r := NewRouter(RouterConfig{Count: func(s string) int { return len(s) }}, p, &affinityMap{m: map[AffinityKey]Affinity{}}, nil, slog.New(slog.DiscardHandler))
	msgs := []chat.Message{{Role: chat.RoleUser, Content: "one"}}
	tests := []struct {
		tools       []chat.Tool
		wantSession string
		wantSent    int
	}{
		{wantSession: "", wantSent: 1},
		{wantSession: "s-1", wantSent: 1},
		{tools: []chat.Tool{{Name: "t"}}, wantSession: "", wantSent: 5},
	}
	for i, tt := range tests {
		if i > 0 {
			msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, Content: "ok"}, chat.Message{Role: chat.RoleUser, Content: "more"})
		}
		o, err := r.Open(context.Background(), Call{Request: &chat.Request{Messages: msgs, Tools: tt.tools}})
		if err != nil {
			t.Fatalf("turn %d: %v", i, err)
		}
		chattest.Read(t, o.Answer, 5*time.Second)
		o.Answer.Close()
		got := seen[len(seen)-1]
		if got.SessionID != tt.wantSession || len(got.Messages) != tt.wantSent || o.Answer.Served().Reused != (tt.wantSession != "") {
			t.Errorf("turn %d went with session %q and %d messages (reused %v), want %q and %d", i, got.SessionID,
				len(got.Messages), o.Answer.Served().Reused, tt.wantSession, tt.wantSent)
		}
	}
	r.Wait()
}

// slowStore is an affinity store whose writes take a second, as a Redis
// that answers slowly does.
type slowStore struct{ affinityMap }

func (s *slowStore) PutAffinity(ctx context.Context, key AffinityKey, a Affinity) error {
	time.Sleep(time.Second)
	return s.affinityMap.PutAffinity(ctx, key, a)
}

// The affinity write-back of a clean finish is off the client's path: the
// answer's last event reaches the caller at once, however slow the store,
// and the entry is written when the caller closes the answer.
func TestAffinityWriteBackAfterTheLastEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		f.Start = func(ctx context.Context, _ string, _ *chat.Turn) (chat.Answer, error) {
			return chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "ok"},
				chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, SessionID: "s-1"}), nil
		}
		p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, "a"), nil)
		waitReady(t, p, "a")
		store := &slowStore{affinityMap{m: map[AffinityKey]Affinity{}}}
		r := NewRouter(RouterConfig{Count: func(s string) int { return len(s) }}, p, store, nil, slog.New(slog.DiscardHandler))
		start := time.Now()
		s, err := open(context.Background(), r, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi"}}})
		if err != nil {
			t.Fatal(err)
		}
		last := time.Duration(-1)
		for ev, ok := s.Next(); ok; ev, ok = s.Next() {
			if ev.Type == chat.EventDone {
				last = time.Since(start)
			}
		}
		if last != 0 {
			t.Errorf("the last event came %v after the request, behind the affinity write", last)
		}
		s.Close()
		if n := len(store.m); n != 1 || time.Since(start) < time.Second {
			t.Errorf("%d entries written by Close after %v, want the one, written then", n, time.Since(start))
		}
		r.Wait()
	})
}
