package route

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// mapStore is an affinity store in a map that counts its takes.
type mapStore struct {
	mu    sync.Mutex
	m     map[AffinityKey]Affinity
	takes int
}

func (s *mapStore) TakeAffinity(_ context.Context, key AffinityKey) (Affinity, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	a, ok := s.m[key]
	if !ok {
		return Affinity{}, context.Canceled // any error means "no entry"
	}
	delete(s.m, key)
	return a, nil
}

func (s *mapStore) PutAffinity(_ context.Context, key AffinityKey, a Affinity) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = a
	return nil
}

func (s *mapStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// A one-shot request (an agent's side request that quotes its
// conversation) neither takes the conversation's entry nor writes one: the
// follow-up after it still continues the conversation's session.
func TestOneShotLeavesAffinityAlone(t *testing.T) {
	f := supervisortest.New()
	f.Start = func(ctx context.Context, _ string, t *chat.Turn) (chat.Answer, error) {
		return chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "ok"},
			chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, SessionID: "sess"}), nil
	}
	p, _ := startFake(t, Config{QueueTimeout: 5 * time.Second}, f, supervisortest.Configs(t, false, "a"), nil)
	waitReady(t, p, "a")
	store := &mapStore{m: map[AffinityKey]Affinity{}}
	r := NewRouter(RouterConfig{Count: func(s string) int { return len(s) }}, p, store, nil, p.log)
	hi := chat.Message{Role: chat.RoleUser, Content: "hi"}
	ok := chat.Message{Role: chat.RoleAssistant, Content: "ok"}
	turn := func(oneShot bool, msgs ...chat.Message) Served {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := open(ctx, r, &chat.Request{Messages: msgs, OneShot: oneShot})
		if err != nil {
			t.Fatal(err)
		}
		chattest.Collect(s)
		return s.Served()
	}
	turn(false, hi)
	if store.len() != 1 {
		t.Fatalf("%d entries after the first turn, want 1", store.len())
	}
	takes := store.takes
	side := turn(true, hi, ok, chat.Message{Role: chat.RoleUser, Content: "score it"})
	if side.Reused || store.takes != takes || store.len() != 1 {
		t.Errorf("one-shot: reused %v, takes %d -> %d, entries %d; want no reuse, no take, the one entry", side.Reused, takes, store.takes, store.len())
	}
	if got := turn(false, hi, ok, chat.Message{Role: chat.RoleUser, Content: "more"}); !got.Reused {
		t.Errorf("the follow-up after a one-shot request did not reuse the conversation's session")
	}
	r.Wait()
}
