package route

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// A pool of several kinds over fake workers: each account of a kind, with
// the models its configuration names.

// kindAccount is one fake account of a kind serving models.
type kindAccount struct {
	name, kind string
	models     []string
}

// kindPool runs the accounts over f, ready.
func kindPool(t testing.TB, cfg Config, f *supervisortest.Workers, accounts ...kindAccount) *Pool {
	t.Helper()
	var names []string
	for _, a := range accounts {
		names = append(names, a.name)
	}
	wcs := supervisortest.Configs(t, false, names...)
	for i, a := range accounts {
		wcs[i].Kind = a.kind
		for _, id := range a.models {
			wcs[i].Models = append(wcs[i].Models, chat.Model{ID: id})
		}
	}
	p, _ := startFake(t, cfg, f, wcs, nil)
	waitReady(t, p, names...)
	return p
}

var twoKinds = []kindAccount{
	{"lm-1", "lingma", []string{"lm-coder", "lm-chat"}},
	{"lm-2", "lingma", []string{"lm-coder", "lm-chat"}},
	{"ms-1", "openai", []string{"ms-large"}},
}

// The rule of docs/routing.md, case by case.
func TestResolveModel(t *testing.T) {
	p := kindPool(t, Config{}, supervisortest.New(), twoKinds...)
	single := kindPool(t, Config{}, supervisortest.New(), twoKinds[:2]...)
	cfg := RouterConfig{Aliases: map[string]string{"sonnet": "ms-large"}, DefaultNames: []string{"claude-*", "gpt-*"},
		KindAgentModels: map[string][]string{"lingma": {"lingma-agent"}}}
	tests := []struct {
		name  string
		pool  *Pool
		give  string
		want  target
		isErr bool
	}{
		{"a model's id", p, "ms-large", target{model: "ms-large", listed: true}, false},
		{"an alias", p, "sonnet", target{model: "ms-large", listed: true}, false},
		{"one kind: any other name takes the default", single, "whatever", target{model: "lm-coder", listed: true, defaulted: true}, false},
		{"an agent's name takes the default", p, "claude-sonnet-4-5", target{model: "lm-coder", listed: true, defaulted: true}, false},
		{"a kind's agent name goes to its kind", p, "lingma-agent", target{model: "lm-coder", kinds: []string{"lingma"}, defaulted: true}, false},
		{"any other name is unknown", p, "no-such-model", target{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRouter(cfg, tt.pool, nil, nil, slog.New(slog.DiscardHandler))
			got, err := r.resolve(tt.give)
			var unknown *chat.UnknownModelError
			if tt.isErr {
				if !errors.As(err, &unknown) || unknown.Model != tt.give || !slices.Equal(unknown.Models, []string{"lm-coder", "lm-chat", "ms-large"}) {
					t.Errorf("resolve(%q) = %+v, %v; want an UnknownModelError naming the three models", tt.give, got, err)
				}
				return
			}
			if err != nil || got.model != tt.want.model || got.listed != tt.want.listed || !slices.Equal(got.kinds, tt.want.kinds) ||
				got.defaulted != tt.want.defaulted {
				t.Errorf("resolve(%q) = %+v, %v; want %+v", tt.give, got, err, tt.want)
			}
		})
	}
}

// The default model chooses the kind agents' own names go to; a kind
// whose accounts listed nothing yet may serve an unknown name, so a pool
// that is starting answers no 404.
func TestResolveDefaultAndUnlistedKinds(t *testing.T) {
	p := kindPool(t, Config{}, supervisortest.New(), twoKinds...)
	r := NewRouter(RouterConfig{DefaultModel: "ms-large", DefaultNames: []string{"claude-*"}}, p, nil, nil, slog.New(slog.DiscardHandler))
	if got, err := r.resolve("claude-haiku-4-5"); err != nil || got.model != "ms-large" || !got.listed {
		t.Errorf("claude-haiku-4-5 with default_model ms-large: %+v, %v", got, err)
	}
	// A kind none of whose accounts listed a model: the fakes list none.
	q := kindPool(t, Config{}, supervisortest.New(), kindAccount{"lm-1", "lingma", []string{"lm-coder"}}, kindAccount{"cc-1", "claude-code", nil})
	r = NewRouter(RouterConfig{}, q, nil, nil, slog.New(slog.DiscardHandler))
	if got, err := r.resolve("opus"); err != nil || got.model != "opus" || !slices.Equal(got.kinds, []string{"claude-code"}) {
		t.Errorf("opus with claude-code unlisted: %+v, %v; want it sent to the claude-code accounts", got, err)
	}
}

// Admission picks only among the accounts of the request's model: with
// them all busy the request waits for them, not for the others, and gets
// its 429 from their capacity; with them all gone it gets ErrNoInstance
// while the other kind serves.
func TestAdmissionWithinTheModelsAccounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		p := kindPool(t, Config{QueueTimeout: 3 * time.Second, NoInstanceWait: 2 * time.Second}, f, twoKinds...)
		r := NewRouter(RouterConfig{}, p, nil, nil, slog.New(slog.DiscardHandler))
		ms, _ := r.resolve("ms-large")
		lm, _ := r.resolve("lm-coder")
		for range 5 {
			s, err := p.acquire(context.Background(), preference{Target: &lm})
			if err != nil || s.m.kind != "lingma" {
				t.Fatalf("lm-coder slot on %v: %v", s, err)
			}
			s.release()
		}
		held, err := p.acquire(context.Background(), preference{Target: &ms})
		if err != nil || held.Instance() != "ms-1" {
			t.Fatalf("ms-large slot: %v, %v", held, err)
		}
		start := time.Now()
		_, err = p.acquire(context.Background(), preference{Target: &ms})
		var over *chat.OverloadedError
		if !errors.As(err, &over) || time.Since(start) != 3*time.Second {
			t.Errorf("a second ms-large turn with ms-1 busy: %v after %s, want a 429 after the queue timeout", err, time.Since(start))
		}
		if s, err := p.acquire(context.Background(), preference{Target: &lm}); err != nil || s.m.kind != "lingma" {
			t.Errorf("lm-coder while ms-1 is busy: %v, %v", s, err)
		} else {
			s.release()
		}
		held.release()

		f.Crash("ms-1")
		f.FailLaunches("ms-1", true)
		synctest.Wait()
		start = time.Now()
		if _, err := p.acquire(context.Background(), preference{Target: &ms}); !errors.Is(err, chat.ErrNoInstance) ||
			time.Since(start) < 2*time.Second || time.Since(start) > 3*time.Second {
			t.Errorf("ms-large with ms-1 gone: %v after %s, want ErrNoInstance after the no-instance wait", err, time.Since(start))
		}
		if s, err := p.acquire(context.Background(), preference{Target: &lm}); err != nil {
			t.Errorf("lm-coder with ms-1 gone: %v", err)
		} else {
			s.release()
		}
	})
}

// checkedDriver is a fake driver whose workers take turns of at most
// limit messages (worker.TurnChecker).
type checkedDriver struct {
	*supervisortest.Workers
	limit int
}

func (d checkedDriver) CheckTurn(t *chat.Turn) error {
	if len(t.Messages) > d.limit {
		return &chat.TooLargeError{Size: int64(len(t.Messages)), Limit: int64(d.limit)}
	}
	return nil
}

// Each kind keeps its own bound on a turn: a turn too large for the kind
// its model goes to is refused before admission; the same turn for the
// other kind goes through.
func TestEachKindBoundsItsTurns(t *testing.T) {
	f := supervisortest.New()
	wcs := supervisortest.Configs(t, false, "small-1", "big-1")
	wcs[0].Kind, wcs[0].Models, wcs[0].Driver = "small", []chat.Model{{ID: "s"}}, checkedDriver{f, 2}
	wcs[1].Kind, wcs[1].Models, wcs[1].Driver = "big", []chat.Model{{ID: "b"}}, f
	p, _ := startFake(t, Config{}, f, wcs, nil)
	waitReady(t, p, "small-1", "big-1")
	r := NewRouter(RouterConfig{Count: func(s string) int { return len(s) }}, p, nil, nil, slog.New(slog.DiscardHandler))
	msgs := []chat.Message{{Role: chat.RoleUser, Content: "a"}, {Role: chat.RoleAssistant, Content: "b"}, {Role: chat.RoleUser, Content: "c"}}
	var tooLarge *chat.TooLargeError
	if _, err := r.Open(context.Background(), Call{Request: &chat.Request{Model: "s", Messages: msgs}}); !errors.As(err, &tooLarge) {
		t.Errorf("three messages for the small kind: %v, want a TooLargeError", err)
	}
	o, err := r.Open(context.Background(), Call{Request: &chat.Request{Model: "b", Messages: msgs}})
	if err != nil {
		t.Fatalf("three messages for the big kind: %v", err)
	}
	chattest.Read(t, o.Answer, 5*time.Second)
	o.Answer.Close()
}

// A conversation stays on its kind; when its model moves to another kind
// it starts a new session there and says why, and the entry it found is
// left for the conversation's branch under the old model.
func TestConversationMovesKind(t *testing.T) {
	f := supervisortest.New()
	f.Start = func(ctx context.Context, instance string, turn *chat.Turn) (chat.Answer, error) {
		return chattest.NewScript(ctx, chat.Event{Type: chat.EventText, Text: "ok"},
			chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, SessionID: "s-" + instance}), nil
	}
	p := kindPool(t, Config{}, f, twoKinds...)
	store := &affinityMap{m: map[AffinityKey]Affinity{}}
	r := NewRouter(RouterConfig{}, p, store, nil, slog.New(slog.DiscardHandler))
	msgs := []chat.Message{{Role: chat.RoleUser, Content: "one"}}
	turn := func(model string) (*request, Served) {
		t.Helper()
		rq, err := r.newRequest(Call{Request: &chat.Request{Model: model, Messages: msgs}})
		if err != nil {
			t.Fatal(err)
		}
		o, err := r.Open(context.Background(), Call{Request: &chat.Request{Model: model, Messages: msgs}})
		if err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		chattest.Read(t, o.Answer, 5*time.Second)
		o.Answer.Close()
		msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, Content: "ok"}, chat.Message{Role: chat.RoleUser, Content: "more"})
		return rq, o.Answer.Served()
	}
	_, first := turn("lm-coder")
	_, second := turn("lm-coder")
	if !second.Reused || second.Instance != first.Instance {
		t.Fatalf("the follow-up on lm-coder: %+v after %+v, want the session reused", second, first)
	}
	// The third turn moves to the model server; look it up as Open does
	// to see what it found and why it starts fresh.
	rq, err := r.newRequest(Call{Request: &chat.Request{Model: "ms-large", Messages: msgs}})
	if err != nil {
		t.Fatal(err)
	}
	r.lookup(context.Background(), rq)
	if rq.hasHit || rq.fresh != freshKindChanged {
		t.Errorf("a follow-up moved to ms-large: hit %v, fresh %q; want no hit, %q", rq.hasHit, rq.fresh, freshKindChanged)
	}
	if len(store.m) != 1 {
		t.Errorf("the entry was not left for the conversation under lm-coder: %v", store.m)
	}
	_, third := turn("ms-large")
	if third.Instance != "ms-1" || third.Reused {
		t.Errorf("the turn moved to ms-large: %+v, want ms-1, a new session", third)
	}
	for _, a := range store.m {
		if a.Instance == "ms-1" && a.Kind != "openai" {
			t.Errorf("the entry of ms-1's turn names kind %q, want openai", a.Kind)
		}
	}
}

// A member's snapshot names its kind and models (for /internal/pool).
func TestSnapshotNamesTheKind(t *testing.T) {
	p := kindPool(t, Config{}, supervisortest.New(), twoKinds...)
	in, _ := p.Snapshot().Instance("ms-1")
	if in.Driver != "openai" || !slices.Equal(in.Models, []string{"ms-large"}) || in.State != supervisor.StateReady {
		t.Errorf("ms-1 in the snapshot: %+v", in)
	}
	if got := p.Models(); len(got) != 3 || got[2] != (chat.Model{ID: "ms-large", Driver: "openai"}) {
		t.Errorf("the pool's models: %v", got)
	}
}
