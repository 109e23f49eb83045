package keylimits

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/testenv"
)

// both runs f against the memory limiter and against two Redis limiters
// (two replicas) sharing one real redis-server, and then a three-primary
// Redis Cluster, alternating between them.
func both(t *testing.T, f func(t *testing.T, acquire func(Limits) (*Ticket, error))) {
	t.Run("memory", func(t *testing.T) {
		m := NewMemory(nil)
		f(t, func(l Limits) (*Ticket, error) { return m.Acquire(context.Background(), "alice", l) })
	})
	for name, start := range testenv.StoreTargets() {
		t.Run(name, func(t *testing.T) {
			srv := start(t)
			var reps []*Redis
			for range 2 {
				r := NewRedis(conn(srv.Universal(t), "pg:", time.Second), RedisConfig{})
				t.Cleanup(r.Wait)
				reps = append(reps, r)
			}
			n := 0
			f(t, func(l Limits) (*Ticket, error) {
				n++
				return reps[n%2].Acquire(context.Background(), "alice", l)
			})
		})
	}
}

// conn is the stores' connection on client under prefix, probing Redis
// again every retry after a failure.
func conn(client redisconn.Client, prefix string, retry time.Duration) *redisconn.Conn {
	return redisconn.NewConn(redisconn.ConnConfig{Prefix: prefix, RetryInterval: retry,
		Logger: slog.New(slog.DiscardHandler)}, client)
}

func deniedBy(t *testing.T, err error, limit string) *Denied {
	t.Helper()
	var d *Denied
	if !errors.As(err, &d) || d.Limit != limit {
		t.Fatalf("error %v, want a denial by %s", err, limit)
	}
	return d
}

func TestRPM(t *testing.T) {
	both(t, func(t *testing.T, acquire func(Limits) (*Ticket, error)) {
		l := Limits{RPM: 3}
		for i := range 3 {
			tk, err := acquire(l)
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			tk.Done(0)
		}
		_, err := acquire(l)
		d := deniedBy(t, err, LimitRPM)
		if d.RetryAfter < time.Second || d.RetryAfter > 2*time.Minute || d.Max != 3 {
			t.Errorf("denial %+v", d)
		}
	})
}

func TestConcurrency(t *testing.T) {
	both(t, func(t *testing.T, acquire func(Limits) (*Ticket, error)) {
		l := Limits{Concurrency: 2}
		a, err1 := acquire(l)
		b, err2 := acquire(l)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		_, err := acquire(l)
		deniedBy(t, err, LimitConcurrency)
		a.Done(0)
		a.Done(0) // twice is once
		c, err := acquire(l)
		if err != nil {
			t.Fatalf("after a slot freed: %v", err)
		}
		if _, err := acquire(l); err == nil {
			t.Fatal("a double Done freed two slots")
		}
		b.Done(0)
		c.Done(0)
	})
}

func TestTokensPerDay(t *testing.T) {
	both(t, func(t *testing.T, acquire func(Limits) (*Ticket, error)) {
		l := Limits{TokensPerDay: 100}
		tk, err := acquire(l)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(80)
		tk, err = acquire(l) // 80 used: still admitted, and may cross the quota
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(30)
		_, err = acquire(l)
		if d := deniedBy(t, err, LimitTokensPerDay); d.RetryAfter > 24*time.Hour {
			t.Errorf("retry after %s, want before tomorrow", d.RetryAfter)
		}
	})
}

// TestSlidingWindow: the previous minute weighs by how much of it is still
// within the last minute.
func TestSlidingWindow(t *testing.T) {
	clock := time.Date(2026, 11, 23, 10, 0, 10, 0, time.UTC)
	m := NewMemory(func() time.Time { return clock })
	l := Limits{RPM: 4}
	for range 4 {
		tk, err := m.Acquire(context.Background(), "k", l)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(0)
	}
	clock = clock.Add(80 * time.Second) // 10:01:30: the 4 weigh 2
	for i := range 2 {
		if _, err := m.Acquire(context.Background(), "k", l); err != nil {
			t.Fatalf("request %d half a minute on: %v", i+1, err)
		}
	}
	_, err := m.Acquire(context.Background(), "k", l)
	d := deniedBy(t, err, LimitRPM)
	// 2 + 4*(1-f) + 1 <= 4 once f >= 0.75: at 10:01:45, 15 s away.
	if d.RetryAfter < 14*time.Second || d.RetryAfter > 16*time.Second {
		t.Errorf("retry after %s, want 15s", d.RetryAfter)
	}
}

// TestDeadReplicaFreesItsSlots: a slot whose replica stopped renewing it
// expires after the slot TTL; a live one is renewed past it.
func TestDeadReplicaFreesItsSlots(t *testing.T) {
	srv := testenv.Redis(t)
	dead := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	live := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer live.Close()
	a := NewRedis(conn(dead, "pg:", time.Second), RedisConfig{SlotTTL: 600 * time.Millisecond})
	b := NewRedis(conn(live, "pg:", time.Second), RedisConfig{SlotTTL: 600 * time.Millisecond})
	l := Limits{Concurrency: 1}
	held, err := b.Acquire(context.Background(), "live", l)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := a.Acquire(context.Background(), "dead", l)
	if err != nil {
		t.Fatal(err)
	}
	dead.Close() // the replica is gone: no renewals, no Done
	testenv.WaitFor(t, 5*time.Second, "the dead replica's slot to expire", func() bool {
		tk, err := b.Acquire(context.Background(), "dead", l)
		tk.Done(0)
		return err == nil
	})
	time.Sleep(time.Second) // past the TTL: the live slot was renewed
	if _, err := b.Acquire(context.Background(), "live", l); err == nil {
		t.Error("a renewed slot expired")
	}
	held.Done(0)
	gone.Done(0) // stops its renewals (which, like this release, fail)
	b.Wait()
	a.Wait()
}

func TestRetryMath(t *testing.T) {
	if got := rpmRetry(10, 0, 10, 20*time.Second); got < 45*time.Second || got > 47*time.Second {
		t.Errorf("full minute at 0:20: retry %s, want about 46s", got)
	}
	if got := untilTomorrow(time.Date(2026, 1, 1, 23, 59, 59, 500e6, time.UTC)); got != time.Second {
		t.Errorf("half a second to midnight: %s, want the 1 s floor", got)
	}
}

// Tokens charged without an admission (a request another replica admitted)
// count against the quota like a ticket's.
func TestCharge(t *testing.T) {
	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	r := NewRedis(conn(rdb, testenv.KeyPrefix(t), time.Second), RedisConfig{})
	t.Cleanup(func() { r.Wait(); rdb.Close() })
	for name, lim := range map[string]Limiter{"memory": NewMemory(nil), "redis": r} {
		t.Run(name, func(t *testing.T) {
			ctx, l := context.Background(), Limits{TokensPerDay: 100}
			if err := lim.Charge(ctx, "bob", 60); err != nil {
				t.Fatal(err)
			}
			tk, err := lim.Acquire(ctx, "bob", l)
			if err != nil {
				t.Fatalf("60 of 100 used: %v", err)
			}
			tk.Done(0)
			if err := lim.Charge(ctx, "bob", 40); err != nil {
				t.Fatal(err)
			}
			_, err = lim.Acquire(ctx, "bob", l)
			deniedBy(t, err, LimitTokensPerDay)
			if err := lim.Charge(ctx, "bob", 0); err != nil {
				t.Errorf("charging nothing: %v", err)
			}
		})
	}
}

// While Redis does not answer, a key's limits hold on this replica alone
// (its rate, and a quota Redis said was spent), and the tokens of the
// requests served meanwhile are held; once Redis answers they are charged
// there, so another replica sees the day's whole total.
func TestRedisAwayLimitsLocallyAndChargesLater(t *testing.T) {
	srv := testenv.Redis(t)
	a := NewRedis(conn(srv.Client(t), "pg:", 200*time.Millisecond), RedisConfig{Timeout: 200 * time.Millisecond})
	b := NewRedis(conn(srv.Client(t), "pg:", 200*time.Millisecond), RedisConfig{})
	t.Cleanup(func() { a.Wait(); b.Wait() })
	ctx, l := context.Background(), Limits{RPM: 2, TokensPerDay: 100}
	if err := a.Charge(ctx, "spent", 100); err != nil {
		t.Fatal(err)
	}
	_, err := a.Acquire(ctx, "spent", l)
	deniedBy(t, err, LimitTokensPerDay)

	srv.Freeze()
	for i, tokens := range []int64{60, 30} {
		tk, err := a.Acquire(ctx, "alice", l)
		if err != nil {
			t.Fatalf("request %d with Redis away: %v, want it admitted here", i+1, err)
		}
		tk.Done(tokens)
	}
	_, err = a.Acquire(ctx, "alice", l)
	deniedBy(t, err, LimitRPM)
	_, err = a.Acquire(ctx, "spent", l)
	deniedBy(t, err, LimitTokensPerDay)
	if err := a.Charge(ctx, "alice", 5); err != nil {
		t.Errorf("Charge() with Redis away = %v, want it held", err)
	}
	if got := a.Held(); got != 3 {
		t.Errorf("Held() = %d, want 3 (two tickets, one charge)", got)
	}
	srv.Thaw()

	testenv.WaitFor(t, 30*time.Second, "the held tokens charged in Redis", func() bool {
		a.Flush(ctx)
		return a.Held() == 0
	})
	quota := Limits{TokensPerDay: 100}
	tk, err := b.Acquire(ctx, "alice", quota)
	if err != nil {
		t.Fatalf("95 of 100 tokens used: %v", err)
	}
	tk.Done(5)
	_, err = b.Acquire(ctx, "alice", quota)
	deniedBy(t, err, LimitTokensPerDay)
}
