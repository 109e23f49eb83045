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
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// A turn still running when its instance's fence passes is cut at the
// fence, by the admission room's own timer: the replica's lease may pass to
// another replica soon after, and nothing else is sure to stop the turn in
// time (the cluster's loop may wait on Redis, the worker's stop behind a
// health check; here nothing stops the worker at all). A fence moved on
// before it passed (a renewal) leaves the turn alone.
func TestFenceCutsTheTurnsStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		f.Start = slowWords(f)
		p, _ := startFake(t, Config{}, f, supervisortest.Configs(t, false, "w1"), nil)
		waitReady(t, p, "w1")
		r := NewRouter(RouterConfig{}, p, nil, nil, slog.New(slog.DiscardHandler))
		defer r.Wait()
		start := time.Now()
		p.Fence("w1", start.Add(2*time.Second))
		type ended struct {
			at  time.Time
			err error
		}
		turn := make(chan ended, 1)
		go func() {
			_, err := ask(r, strings.Repeat("word ", 500), true) // 50 s of words
			turn <- ended{time.Now(), err}
		}()
		time.Sleep(time.Second)
		if busy(p) != "w1" {
			t.Fatal("the turn is not in flight")
		}
		fence := start.Add(3 * time.Second)
		p.Fence("w1", fence) // renewed before the first fence passed
		time.Sleep(1500 * time.Millisecond)
		select {
		case e := <-turn:
			t.Fatalf("the turn ended at %s (%v), before its fence at 3s", e.at.Sub(start), e.err)
		default:
		}
		e := <-turn
		if got := e.at.Sub(start); got != 3*time.Second {
			t.Errorf("the turn ended %s after the start, want at its fence (3s)", got)
		}
		if !errors.Is(e.err, chat.ErrWorkerGone) {
			t.Errorf("the cut turn ended with %v, want chat.ErrWorkerGone", e.err)
		}
		synctest.Wait()
		if in := p.Snapshot().Instances[0]; in.Serving || in.InFlight != 0 {
			t.Errorf("after its fence w1 is %+v, want not serving, no turn in flight", in)
		}
	})
}

// Snapshot reports each instance's serving stretch: since when it has
// taken turns, or could, without a break. A fence that passed ends the
// stretch even when no snapshot saw it end, so a lease taken again later
// starts a new one; a turn in flight keeps it going past the fence until
// the turn ends.
func TestServingStretch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _, _ := testPool(t, Config{}, "w1")
		t0 := time.Now()
		var slot *turnSlot
		at := func(d time.Duration) time.Time { return t0.Add(d) }
		steps := []struct {
			name      string
			do        func()
			wantServe bool
			wantSince time.Time
		}{
			{name: "fenced in the past", do: func() { p.Fence("w1", time.Unix(1, 0)) }},
			{name: "leased until 2s", do: func() { time.Sleep(time.Second); p.Fence("w1", at(2*time.Second)) },
				wantServe: true, wantSince: at(time.Second)},
			{name: "renewed until 4s before 2s", do: func() { time.Sleep(500 * time.Millisecond); p.Fence("w1", at(4*time.Second)) },
				wantServe: true, wantSince: at(time.Second)},
			{name: "the fence passed, leased again at 5s", do: func() { time.Sleep(3500 * time.Millisecond); p.Fence("w1", at(7*time.Second)) },
				wantServe: true, wantSince: at(5 * time.Second)},
			{name: "a turn in flight past the fence", do: func() {
				var err error
				if slot, err = p.acquire(context.Background(), preference{}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(3 * time.Second)
			}, wantServe: true, wantSince: at(5 * time.Second)},
			{name: "the turn ended", do: func() { slot.release() }},
		}
		for _, st := range steps {
			st.do()
			in := p.Snapshot().Instances[0]
			var since time.Time
			if in.ServingSince != nil {
				since = *in.ServingSince
			}
			if in.Serving != st.wantServe || !since.Equal(st.wantSince) {
				t.Errorf("%s: serving %v since %v, want %v since %v", st.name, in.Serving, since.Sub(t0), st.wantServe, st.wantSince.Sub(t0))
			}
		}
	})
}
