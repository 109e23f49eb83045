package route

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
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
