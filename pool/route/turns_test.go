package route

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// Turns and the worker lives under them, with fake workers in a synctest
// bubble: a worker that dies mid-turn, a drain and a stop of a busy worker.

// slowWords is a fake worker script: each turn says "You said: <prompt>"
// a word every 100 ms, and ends with chat.ErrWorkerGone when its worker's
// process exits first.
func slowWords(f *supervisortest.Workers) func(ctx context.Context, instance string, t *chat.Turn) (chat.Answer, error) {
	return func(ctx context.Context, instance string, t *chat.Turn) (chat.Answer, error) {
		exited := f.Exited(instance)
		words := strings.Fields("You said: " + t.Messages[len(t.Messages)-1].Content)
		feed := chattest.NewFeed(ctx, 0)
		go func() {
			for i, w := range words {
				if i > 0 {
					w = " " + w
				}
				select {
				case <-time.After(100 * time.Millisecond):
				case <-exited:
					feed.Send(chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone})
					return
				case <-ctx.Done():
					return
				}
				if !feed.Send(chat.Event{Type: chat.EventText, Text: w}) {
					return
				}
			}
			feed.Send(chat.Event{Type: chat.EventDone, Finish: chat.FinishStop})
		}()
		return feed, nil
	}
}

// ask runs one turn through r and returns its text and how it ended.
func ask(r *Router, prompt string, stream bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := open(ctx, r, &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser, Content: prompt}}, Stream: stream})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, ev := range chattest.Collect(s) {
		switch ev.Type {
		case chat.EventText:
			b.WriteString(ev.Text)
		case chat.EventError:
			return b.String(), ev.Err
		}
	}
	return b.String(), nil
}

// busy returns the instance a turn runs on, "" when none.
func busy(p *Pool) string {
	for _, in := range p.Snapshot().Instances {
		if in.InFlight > 0 {
			return in.Name
		}
	}
	return ""
}

// A non-streamed answer reaches the client only whole, but a worker that
// dies mid-answer is not a reason to run the turn again on another: the
// turn may be what killed it (issue 45). The client gets one error, and
// the other worker never sees the turn.
func TestNonStreamTurnDiesWithItsWorker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		turns := 0
		words := slowWords(f)
		f.Start = func(ctx context.Context, instance string, t *chat.Turn) (chat.Answer, error) {
			turns++
			return words(ctx, instance, t)
		}
		p, _ := startFake(t, Config{}, f, supervisortest.Configs(t, false, "w1", "w2"), nil)
		waitReady(t, p, "w1", "w2")
		r := NewRouter(RouterConfig{Retries: 2}, p, nil, nil, slog.New(slog.DiscardHandler))
		defer r.Wait()
		done := make(chan error, 1)
		go func() {
			_, err := ask(r, "slow and steady wins the race", false)
			done <- err
		}()
		time.Sleep(250 * time.Millisecond) // mid-answer
		victim := busy(p)
		if victim == "" {
			t.Fatal("no turn in flight")
		}
		f.Crash(victim)
		if err := <-done; !errors.Is(err, chat.ErrWorkerGone) {
			t.Fatalf("the turn ended with %v, want chat.ErrWorkerGone", err)
		}
		if turns != 1 {
			t.Errorf("%d turns started, want 1: the turn was tried on another worker", turns)
		}
	})
}

// A stop sent while a drain waits for a turn (the lease was lost meanwhile)
// is not lost behind the drain: the worker stops at once, cutting the turn,
// instead of waiting out the drain.
func TestStopDuringDrainIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		f.Start = slowWords(f)
		p := New(Config{}, nil, slog.New(slog.DiscardHandler))
		sup := supervisor.New(p.Watch(supervisor.Config{DrainTimeout: time.Minute}), supervisortest.Drive(f, supervisortest.Configs(t, false, "w1")), f, nil, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		sup.Start(ctx)
		defer func() { cancel(); sup.Shutdown() }()
		waitReady(t, p, "w1")
		r := NewRouter(RouterConfig{}, p, nil, nil, slog.New(slog.DiscardHandler))
		defer r.Wait()
		turn := make(chan error, 1)
		go func() {
			_, err := ask(r, strings.Repeat("word ", 500), true) // 50 s of words
			turn <- err
		}()
		time.Sleep(time.Second)
		if busy(p) != "w1" {
			t.Fatal("the turn is not in flight")
		}
		w, _ := sup.Worker("w1")
		w.Drain()
		time.Sleep(time.Second)
		if st := w.Status().State; st != supervisor.StateDraining {
			t.Fatalf("w1 is %s, want draining while its turn runs", st)
		}
		start := time.Now()
		w.Stop()
		if !sup.WaitStopped("w1", start.Add(10*time.Second)) {
			t.Fatal("not stopped within 10s: the stop waited behind the drain")
		}
		if err := <-turn; err == nil {
			t.Error("the turn survived a hard stop")
		}
	})
}
