package usage

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

var t0 = time.Date(2026, 11, 20, 22, 30, 0, 0, time.UTC)

// stores runs f on the memory store and on two Redis stores (two replicas)
// sharing one real redis-server, then a three-primary Redis Cluster, whose
// writes must add up.
func stores(t *testing.T, now func() time.Time, f func(t *testing.T, add func(...Record), s Store)) {
	t.Run("memory", func(t *testing.T) {
		m := NewMemory(30*24*time.Hour, now)
		f(t, func(rs ...Record) {
			if err := m.Add(context.Background(), 0, rs); err != nil {
				t.Fatal(err)
			}
		}, m)
	})
	for name, start := range testenv.StoreTargets() {
		t.Run(name, func(t *testing.T) {
			srv := start(t)
			var replicas []*Redis
			for range 2 {
				replicas = append(replicas, NewRedis(conn(t, srv.Universal(t)), RedisConfig{Retention: 30 * 24 * time.Hour, Now: now}))
			}
			n := 0
			f(t, func(rs ...Record) {
				n++
				if err := replicas[n%2].Add(context.Background(), uint64(n), rs); err != nil {
					t.Fatal(err)
				}
			}, replicas[0])
		})
	}
}

func TestCountsByKeyAccountHourAndDay(t *testing.T) {
	now := func() time.Time { return t0.Add(3 * time.Hour) }
	stores(t, now, func(t *testing.T, add func(...Record), s Store) {
		add(Record{Time: t0, Key: "alice", Account: "acct-1", InputTokens: 10, OutputTokens: 5},
			Record{Time: t0.Add(time.Minute), Key: "alice", Account: "acct-1", InputTokens: 1, OutputTokens: 2, Reused: true})
		add(Record{Time: t0.Add(2 * time.Hour), Key: "alice", Account: "acct-2", Error: true}, // the next day
			Record{Time: t0, Key: "bob", Account: "acct-1", InputTokens: 7})
		ctx := context.Background()

		days, err := s.Query(ctx, Query{Key: "alice"})
		if err != nil {
			t.Fatal(err)
		}
		want := []Row{
			{Bucket: "2026-11-20", Key: "alice", Account: "acct-1", Totals: Totals{Requests: 2, InputTokens: 11, OutputTokens: 7, Reused: 1}},
			{Bucket: "2026-11-21", Key: "alice", Account: "acct-2", Totals: Totals{Requests: 1, Errors: 1}},
		}
		if !equalRows(days, want) {
			t.Errorf("alice by day = %+v\nwant %+v", days, want)
		}
		hours, _ := s.Query(ctx, Query{Account: "acct-1", Hourly: true})
		if len(hours) != 2 || hours[0].Bucket != "2026-11-20T22" || hours[0].Key != "alice" || hours[1].Key != "bob" {
			t.Errorf("acct-1 by hour = %+v", hours)
		}
		if got := Sum(hours); got.Requests != 3 || got.InputTokens != 18 {
			t.Errorf("acct-1 totals %+v", got)
		}
		late, _ := s.Query(ctx, Query{From: t0.Add(90 * time.Minute)})
		if len(late) != 1 || late[0].Bucket != "2026-11-21" {
			t.Errorf("from the next day = %+v", late)
		}
		early, _ := s.Query(ctx, Query{To: t0, Hourly: true})
		if Sum(early).Requests != 3 {
			t.Errorf("up to the first hour = %+v", early)
		}
	})
}

func TestRetention(t *testing.T) {
	clock := t0
	m := NewMemory(48*time.Hour, func() time.Time { return clock })
	ctx := context.Background()
	_ = m.Add(ctx, 0, []Record{{Time: t0, Key: "k", Account: "a"}})
	clock = t0.Add(72 * time.Hour)
	_ = m.Add(ctx, 0, []Record{{Time: clock, Key: "k", Account: "a"}})
	rows, _ := m.Query(ctx, Query{From: t0.Add(-time.Hour)})
	if len(rows) != 1 || rows[0].Bucket != clock.Format(dayLayout) {
		t.Errorf("after the retention: %+v, want today's row only", rows)
	}

	srv := testenv.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	r := NewRedis(conn(t, rdb), RedisConfig{Retention: 48 * time.Hour})
	_ = r.Add(ctx, 1, []Record{{Time: t0, Key: "k", Account: "a"}})
	ttl := rdb.TTL(ctx, "pg:usage:d:2026-11-20").Val()
	if ttl < 71*time.Hour || ttl > 72*time.Hour {
		t.Errorf("day hash TTL %s, want the retention plus a day", ttl)
	}
}

// conn is the stores' connection on client, under the prefix "pg:".
func conn(t *testing.T, client redisconn.Client) *redisconn.Conn {
	t.Helper()
	return redisconn.NewConn(redisconn.ConnConfig{Prefix: "pg:", Logger: slog.New(slog.DiscardHandler)}, client)
}

// A batch tried again under its number counts once, on every hash it
// touches, also when it reached only some of them before; a second
// writer's numbers are its own.
func TestRetriedBatchCountsOnce(t *testing.T) {
	for name, start := range testenv.StoreTargets() {
		t.Run(name, func(t *testing.T) {
			client := start(t).Universal(t)
			now := func() time.Time { return t0.Add(time.Hour) }
			a := NewRedis(conn(t, client), RedisConfig{Retention: 30 * 24 * time.Hour, Now: now})
			b := NewRedis(conn(t, client), RedisConfig{Retention: 30 * 24 * time.Hour, Now: now})
			ctx := context.Background()
			rec := []Record{{Time: t0, Key: "alice", Account: "acct-1", InputTokens: 10, OutputTokens: 1}}
			// Batch 1 reached the hour's hash only, then the connection broke.
			if err := addScript.Run(ctx, client, []string{a.hashKey(true, t0.Format(hourLayout))},
				a.sums(rec, 1)[a.hashKey(true, t0.Format(hourLayout))]...).Err(); err != nil {
				t.Fatal(err)
			}
			for _, step := range []struct {
				s   *Redis
				seq uint64
			}{{a, 1}, {a, 1}, {a, 2}, {a, 1}, {b, 1}} {
				if err := step.s.Add(ctx, step.seq, rec); err != nil {
					t.Fatal(err)
				}
			}
			for _, q := range []Query{{}, {Hourly: true}} {
				rows, err := a.Query(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if got := Sum(rows); got.Requests != 3 || got.InputTokens != 30 || len(rows) != 1 {
					t.Errorf("Query(hourly %v) = %+v, want one row of 3 requests, 30 input tokens (a's batches 1 and 2, b's 1)", q.Hourly, rows)
				}
			}
		})
	}
}

// On a primary with a replica a batch counts as written only once the
// replica has it: with the replica frozen Add fails, and the same batch
// tried after the thaw counts once (the primary had it already).
func TestAddWaitsForTheReplica(t *testing.T) {
	set := testenv.RedisSentinel(t, 5*time.Second)
	s := NewRedis(conn(t, set.Universal(t)), RedisConfig{Retention: 30 * 24 * time.Hour,
		Now: func() time.Time { return t0.Add(time.Hour) }})
	ctx := context.Background()
	rec := []Record{{Time: t0, Key: "alice", Account: "acct-1", OutputTokens: 7}}
	set.Replica.Freeze()
	if err := s.Add(ctx, 1, rec); !errors.Is(err, redisconn.ErrNotReplicated) {
		t.Errorf("Add() with the replica frozen = %v, want ErrNotReplicated", err)
	}
	set.Replica.Thaw()
	testenv.WaitForNoError(t, 30*time.Second, "the batch acknowledged by the replica", func() error {
		return s.Add(ctx, 1, rec)
	})
	rows, err := s.Query(ctx, Query{})
	if err != nil {
		t.Fatal(err)
	}
	if got := Sum(rows); got.Requests != 1 || got.OutputTokens != 7 {
		t.Errorf("after the retry: %+v, want 1 request, 7 output tokens", got)
	}
}

func equalRows(a, b []Row) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
