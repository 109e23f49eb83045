package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
	"github.com/poolgate/poolgate/pool/worker"
)

// The self-fencing rule under a Redis that answers slowly or not at all:
// the holder stops serving an account by its own deadline (the start of its
// last confirmed renewal plus TTL minus the margin), whatever its loop is
// waiting for, so that no other replica can serve it while it still does.

// stalling is one replica's way to the shared store. While stalled, every
// call waits lag (bounded by its context) and then fails, as a call to a
// Redis that stopped answering times out (RedisStore's timeout); with fail
// unset it answers after lag, as a slow Redis does. It records when each
// account's last confirmed acquisition or renewal was sent.
type stalling struct {
	Store
	mu        sync.Mutex
	lag       time.Duration
	fail      bool
	confirmed map[string]time.Time
}

func newStalling(s Store) *stalling { return &stalling{Store: s, confirmed: map[string]time.Time{}} }

func (s *stalling) set(lag time.Duration, fail bool) {
	s.mu.Lock()
	s.lag, s.fail = lag, fail
	s.mu.Unlock()
}

// deadline is when the replica must have stopped serving account: its
// last confirmed renewal's start plus what it may trust of it.
func (s *stalling) deadline(account string, ttl time.Duration) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.confirmed[account].Add(ttl - ttl/5)
}

func (s *stalling) wait(ctx context.Context) error {
	s.mu.Lock()
	lag, fail := s.lag, s.fail
	s.mu.Unlock()
	select {
	case <-time.After(lag):
	case <-ctx.Done():
		return ctx.Err()
	}
	if fail {
		return errDown
	}
	return nil
}

func (s *stalling) confirm(account string, start time.Time) {
	s.mu.Lock()
	s.confirmed[account] = start
	s.mu.Unlock()
}

func (s *stalling) AcquireLease(ctx context.Context, a, holder string, ttl time.Duration) (Lease, bool, error) {
	start := time.Now()
	if err := s.wait(ctx); err != nil {
		return Lease{}, false, err
	}
	l, ok, err := s.Store.AcquireLease(ctx, a, holder, ttl)
	if ok && err == nil {
		s.confirm(a, start)
	}
	return l, ok, err
}

func (s *stalling) RenewLease(ctx context.Context, a, holder string, token int64, ttl time.Duration) (Lease, error) {
	start := time.Now()
	if err := s.wait(ctx); err != nil {
		return Lease{}, err
	}
	l, err := s.Store.RenewLease(ctx, a, holder, token, ttl)
	if err == nil {
		s.confirm(a, start)
	}
	return l, err
}

func (s *stalling) ReleaseLease(ctx context.Context, a, holder string, token int64) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.ReleaseLease(ctx, a, holder, token)
}

func (s *stalling) Leases(ctx context.Context, accounts []string) ([]Lease, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Leases(ctx, accounts)
}

func (s *stalling) Heartbeat(ctx context.Context, r Replica, ttl time.Duration) error {
	if err := s.wait(ctx); err != nil {
		return err
	}
	return s.Store.Heartbeat(ctx, r, ttl)
}

func (s *stalling) Replicas(ctx context.Context) ([]Replica, error) {
	if err := s.wait(ctx); err != nil {
		return nil, err
	}
	return s.Store.Replicas(ctx)
}

// stopClock records when the cluster asked for each worker's stop.
type stopClock struct {
	Workers
	mu      sync.Mutex
	stopped map[string]time.Time
}

func (s *stopClock) Stop(name string) error {
	s.mu.Lock()
	if _, ok := s.stopped[name]; !ok {
		s.stopped[name] = time.Now()
	}
	s.mu.Unlock()
	return s.Workers.Stop(name)
}

func (s *stopClock) at(name string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.stopped[name]
	return t, ok
}

// fenceReplica is a replica of one account over its own fake workers, its
// own router and its own way to the shared store.
type fenceReplica struct {
	id     string
	store  *stalling
	f      *supervisortest.Workers
	sup    *supervisor.Supervisor
	stops  *stopClock
	pool   *route.Pool
	router *route.Router
	cancel context.CancelFunc
	done   chan struct{}
	// starved makes the worker's health checks hang until they time out.
	starved atomic.Bool
}

func startFenceReplica(t *testing.T, shared Store, id, account string) *fenceReplica {
	f := supervisortest.New()
	f.Start = wordsUntilCut(f)
	wcs := supervisortest.Configs(t, true, account)
	wcs[0].HealthTimeout = time.Minute // a starved worker's check hangs that long
	log := slog.New(slog.DiscardHandler)
	p := route.New(route.Config{NoInstanceWait: time.Second}, nil, log)
	sup := supervisor.New(p.Watch(supervisor.Config{}), supervisortest.Drive(f, wcs), f, nil, log)
	r := &fenceReplica{id: id, store: newStalling(shared), f: f, sup: sup, pool: p,
		stops: &stopClock{Workers: sup, stopped: map[string]time.Time{}}, done: make(chan struct{})}
	c := New(Config{ID: id, URL: "http://" + id, LeaseTTL: balanceTTL}, r.stops, p, r.store, nil, log)
	sup.SubscribeMembers(c)
	f.Health = func(ctx context.Context, _ string) (worker.AuthState, error) {
		if r.starved.Load() {
			<-ctx.Done()
			return worker.AuthState{}, ctx.Err()
		}
		return worker.AuthState{LoggedIn: true}, nil
	}
	r.router = route.NewRouter(route.RouterConfig{}, p, nil, nil, log)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	sup.Start(ctx)
	go func() { c.Run(ctx); close(r.done) }()
	return r
}

func (r *fenceReplica) stop() {
	r.store.set(0, false)
	now, stop := context.WithCancel(context.Background())
	stop()
	r.pool.Shutdown(now)
	r.sup.Shutdown()
	r.cancel()
	<-r.done
	r.router.Wait()
}

// serving reports whether the replica serves the account now, by its own
// admission room.
func (r *fenceReplica) serving(account string) bool {
	in, ok := r.pool.Snapshot().Instance(account)
	return ok && in.Serving
}

// wordsUntilCut is a fake worker's turn: a word every 100 ms for as long as
// its context lasts; it ends with chat.ErrWorkerGone when the worker's
// process exits, as a real turn does.
func wordsUntilCut(f *supervisortest.Workers) func(context.Context, string, *chat.Turn) (chat.Answer, error) {
	return func(ctx context.Context, instance string, _ *chat.Turn) (chat.Answer, error) {
		exited := f.Exited(instance)
		feed := chattest.NewFeed(ctx, 0)
		go func() {
			for {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-exited:
					feed.Send(chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone})
					return
				case <-ctx.Done():
					return
				}
				if !feed.Send(chat.Event{Type: chat.EventText, Text: "word "}) {
					return
				}
			}
		}()
		return feed, nil
	}
}

// turnEnd is when and how a turn ended.
type turnEnd struct {
	at  time.Time
	err error
}

// longTurn starts a streamed turn on the replica and reads it to its end;
// the channel gets when and how it ended.
func (r *fenceReplica) longTurn(t *testing.T) <-chan turnEnd {
	t.Helper()
	out := make(chan turnEnd, 1)
	o, err := r.router.Open(context.Background(), route.Call{Request: &chat.Request{Stream: true,
		Messages: []chat.Message{{Role: chat.RoleUser, Content: "talk until stopped"}}}})
	if err != nil {
		t.Fatalf("open a turn on %s: %v", r.id, err)
	}
	go func() {
		defer o.Answer.Close()
		for {
			ev, ok := o.Answer.Next()
			if !ok || ev.Type == chat.EventDone {
				out <- turnEnd{at: time.Now()}
				return
			}
			if ev.Type == chat.EventError {
				out <- turnEnd{at: time.Now(), err: ev.Err}
				return
			}
		}
	}()
	return out
}

// A Redis that stops answering (each call hangs for the store's timeout)
// after a spell of slow answers: the cluster asks for the worker's stop at
// its deadline, not when a tick stuck on Redis comes back to look.
func TestClusterStopsAtItsDeadlineWhileRedisHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r1 := startFenceReplica(t, newFakeCluster(), "r1", "acct-1")
		defer r1.stop()
		time.Sleep(balanceTTL / 2)
		if !r1.serving("acct-1") {
			t.Fatal("r1 does not serve acct-1")
		}
		r1.store.set(100*time.Millisecond, false) // slow: renewals land late in the tick
		time.Sleep(2 * balanceTTL / 5)
		r1.store.set(500*time.Millisecond, true) // gone: every call times out
		deadline := r1.store.deadline("acct-1", balanceTTL)
		time.Sleep(time.Until(deadline))
		synctest.Wait()
		at, ok := r1.stops.at("acct-1")
		switch {
		case !ok:
			t.Fatalf("no stop of acct-1's worker at its deadline")
		case at.After(deadline):
			t.Errorf("acct-1's worker stopped %s after its deadline", at.Sub(deadline))
		}
		if r1.serving("acct-1") {
			t.Errorf("r1 still serves acct-1 at its deadline")
		}
	})
}

// Two replicas, one account: r1 serves it with a long turn in flight when
// it loses Redis (a partition: its calls hang and fail) and its worker
// starves (health checks hang, so the worker's loop takes no stop). The
// lease runs out in Redis and r2 takes the account over. At no instant may
// both serve it (each by its own admission room: able to take a turn, or
// with one running); r1's turn ends at r1's deadline.
func TestClusterNeverServesAnAccountTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := newFakeCluster()
		r1 := startFenceReplica(t, shared, "r1", "acct-1")
		defer r1.stop()
		time.Sleep(balanceTTL / 2)
		r2 := startFenceReplica(t, shared, "r2", "acct-1") // ticks 1.5 s after r1
		defer r2.stop()
		time.Sleep(balanceTTL / 2)
		if !r1.serving("acct-1") || r2.serving("acct-1") {
			t.Fatalf("acct-1 serving on r1 %v, r2 %v; want r1 only", r1.serving("acct-1"), r2.serving("acct-1"))
		}
		turn := r1.longTurn(t)
		time.Sleep(time.Second)

		r1.starved.Store(true)
		r1.store.set(100*time.Millisecond, true)
		deadline := r1.store.deadline("acct-1", balanceTTL)

		var both []time.Duration
		for end := time.Now().Add(3 * balanceTTL); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if r1.serving("acct-1") && r2.serving("acct-1") {
				both = append(both, time.Until(deadline))
			}
		}
		if len(both) > 0 {
			t.Errorf("acct-1 served on r1 and r2 at once in %d samples (the first %s after r1's deadline)",
				len(both), -both[0])
		}
		if !r2.serving("acct-1") {
			t.Errorf("r2 did not take acct-1 over")
		}
		select {
		case e := <-turn:
			if e.at.After(deadline) || !errors.Is(e.err, chat.ErrWorkerGone) {
				t.Errorf("r1's turn ended %s after r1's deadline with %v, want by then with chat.ErrWorkerGone",
					e.at.Sub(deadline), e.err)
			}
		default:
			t.Errorf("r1's turn still runs %s after r1's deadline", time.Since(deadline))
		}
		r1.starved.Store(false)
	})
}
