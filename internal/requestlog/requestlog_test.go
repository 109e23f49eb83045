package requestlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/testenv"
)

func logs(t *testing.T, cfg Config, f func(t *testing.T, l Log)) {
	t.Run("memory", func(t *testing.T) { f(t, NewMemory(cfg)) })
	t.Run("redis", func(t *testing.T) { f(t, NewRedis(conn(testenv.Redis(t).Universal(t), "pg:"), cfg)) })
	t.Run("cluster", func(t *testing.T) {
		f(t, NewRedis(conn(testenv.RedisCluster(t, 3, 0, 5*time.Second).Universal(t), "pg:"), cfg))
	})
}

// conn is the stores' connection on client under prefix.
func conn(client redisconn.Client, prefix string) *redisconn.Conn {
	return redisconn.NewConn(redisconn.ConnConfig{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)}, client)
}

// A batch tried again under its number is stored once; another writer's
// numbers are its own. On a Cluster the marks share the list's slot,
// with a prefix that has a hash tag of its own too.
func TestRetriedBatchStoredOnce(t *testing.T) {
	for name, start := range testenv.StoreTargets() {
		for _, prefix := range []string{"pg:", "{pg}:"} {
			t.Run(name+"/"+prefix, func(t *testing.T) {
				client := start(t).Universal(t)
				a, b := NewRedis(conn(client, prefix), Config{}), NewRedis(conn(client, prefix), Config{})
				ctx := context.Background()
				for i, step := range []struct {
					l   *Redis
					seq uint64
				}{{a, 1}, {a, 1}, {a, 2}, {a, 1}, {b, 1}, {a, 0}, {a, 0}} {
					if err := step.l.Add(ctx, step.seq, []Entry{entry(i, "k", 200)}); err != nil {
						t.Fatal(err)
					}
				}
				all, err := a.List(ctx, Filter{})
				if err != nil {
					t.Fatal(err)
				}
				if got, want := ids(all), "req-6 req-5 req-4 req-2 req-0"; got != want {
					t.Errorf("stored %s, want %s (the tries again of a's batch 1 are not)", got, want)
				}
			})
		}
	}
}

func entry(i int, key string, status int) Entry {
	return Entry{Time: time.Unix(int64(i), 0).UTC(), RequestID: fmt.Sprint("req-", i), Key: key, Account: "acct-1",
		Status: status, Prompt: "secret prompt", Answer: "secret answer"}
}

func TestNewestFirstFilteredAndBounded(t *testing.T) {
	logs(t, Config{MaxEntries: 5}, func(t *testing.T, l Log) {
		ctx := context.Background()
		for i := range 8 {
			key, status := "alice", 200
			if i%2 == 1 {
				key, status = "bob", 429
			}
			if err := l.Add(ctx, 0, []Entry{entry(i, key, status)}); err != nil {
				t.Fatal(err)
			}
		}
		all, _ := l.List(ctx, Filter{})
		if len(all) != 5 || all[0].RequestID != "req-7" || all[4].RequestID != "req-3" {
			t.Errorf("kept %v, want req-7..req-3", ids(all))
		}
		if all[0].Prompt != "" || all[0].Answer != "" {
			t.Error("prompt and answer kept without the debug switch")
		}
		bob, _ := l.List(ctx, Filter{Key: "bob", Limit: 2})
		if got := ids(bob); got != "req-7 req-5" {
			t.Errorf("bob's last two = %s", got)
		}
		errs, _ := l.List(ctx, Filter{Errors: true})
		ok, _ := l.List(ctx, Filter{Status: 200, Account: "acct-1"})
		if len(errs) != 3 || len(ok) != 2 {
			t.Errorf("errors %s, 200s %s", ids(errs), ids(ok))
		}
		// One batch longer than what is kept goes round the bound.
		var batch []Entry
		for i := 8; i < 15; i++ {
			batch = append(batch, entry(i, "carol", 200))
		}
		if err := l.Add(ctx, 0, batch); err != nil {
			t.Fatal(err)
		}
		if all, _ := l.List(ctx, Filter{}); ids(all) != "req-14 req-13 req-12 req-11 req-10" {
			t.Errorf("after a long batch kept %s, want req-14..req-10", ids(all))
		}
	})
}

func TestBytesBoundAndDebug(t *testing.T) {
	huge := strings.Repeat("é", 100_000)
	logs(t, Config{MaxEntries: 1000, MaxBytes: 64 << 10, Debug: true}, func(t *testing.T, l Log) {
		ctx := context.Background()
		for i := range 50 {
			e := entry(i, "k", 500)
			e.Prompt, e.Answer, e.Error = huge, huge, huge
			if err := l.Add(ctx, 0, []Entry{e}); err != nil {
				t.Fatal(err)
			}
		}
		all, _ := l.List(ctx, Filter{})
		total := 0
		for _, e := range all {
			b, _ := json.Marshal(e)
			total += len(b)
		}
		if want := (Config{MaxBytes: 64 << 10, Debug: true}).Kept(); len(all) != want || total > 64<<10 {
			t.Errorf("kept %d entries of %d bytes, want %d within 64 KiB", len(all), total, want)
		}
		if e := all[0]; len(e.Prompt) > FieldBytes+4 || len(e.Error) > ErrorBytes+4 || !strings.HasPrefix(e.Prompt, "é") {
			t.Errorf("cut to %d/%d bytes", len(e.Prompt), len(e.Error))
		}
	})
}

func ids(es []Entry) string {
	var s []string
	for _, e := range es {
		s = append(s, e.RequestID)
	}
	return strings.Join(s, " ")
}

// BenchmarkMemoryAdd adds batches to a full log, as a busy gateway does.
func BenchmarkMemoryAdd(b *testing.B) {
	m := NewMemory(Config{})
	ctx := context.Background()
	batch := make([]Entry, 16)
	for i := range batch {
		batch[i] = entry(i, "alice", 200)
	}
	for range m.keep/len(batch) + 1 {
		_ = m.Add(ctx, 0, batch)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = m.Add(ctx, 0, batch)
	}
}
