package redisconn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// opLog records OnError calls.
type opLog struct{ ops []string }

func (l *opLog) add(op string, err error) { l.ops = append(l.ops, op+": "+err.Error()) }

// A failed call marks Redis down: calls are skipped (reported, not run)
// for one retry interval, then one call probes; its success brings Redis
// back and is reported once to TakeRecovered.
func TestConnHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log opLog
		c := NewConn(ConnConfig{RetryInterval: time.Second, OnError: log.add,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
		ctx := context.Background()
		ran := 0
		call := func(err error) func(context.Context, Client) error {
			return func(context.Context, Client) error { ran++; return err }
		}
		boom := errors.New("connection refused")

		if err := c.Do(ctx, "op_a", call(boom)); !errors.Is(err, boom) {
			t.Fatalf("Do(failing) = %v, want %v", err, boom)
		}
		if c.Healthy() {
			t.Errorf("Healthy() after a failure = true, want false")
		}
		if err := c.Do(ctx, "op_b", call(nil)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("Do() while down = %v, want ErrUnavailable", err)
		}
		if err := c.DoNow(ctx, "op_c", call(boom)); !errors.Is(err, boom) {
			t.Errorf("DoNow() while down = %v, want it run and %v", err, boom)
		}
		if ran != 2 {
			t.Errorf("fn ran %d times, want 2 (the skipped call never runs)", ran)
		}
		time.Sleep(time.Second) // the retry interval
		if err := c.Do(ctx, "op_d", call(nil)); err != nil {
			t.Errorf("Do() after the retry interval = %v, want the probe to run", err)
		}
		if !c.Healthy() || !c.TakeRecovered() || c.TakeRecovered() {
			t.Errorf("after the probe: Healthy() = %v; want true, and TakeRecovered() true once", c.Healthy())
		}
		want := []string{"op_a: connection refused", "op_b: redis marked down", "op_c: connection refused"}
		if len(log.ops) != len(want) {
			t.Fatalf("OnError calls = %q, want %q", log.ops, want)
		}
		for i := range want {
			if log.ops[i] != want[i] {
				t.Errorf("OnError call %d = %q, want %q", i, log.ops[i], want[i])
			}
		}
	})
}

// A call that failed because its caller gave up says nothing about Redis.
func TestConnCallerCancelIsNoOutage(t *testing.T) {
	var log opLog
	c := NewConn(ConnConfig{OnError: log.add}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Do(ctx, "op", func(ctx context.Context, _ Client) error { return ctx.Err() })
	if !errors.Is(err, context.Canceled) || !c.Healthy() || len(log.ops) != 0 {
		t.Errorf("Do(cancelled) = %v, Healthy() = %v, OnError calls %q; want context.Canceled, true, none",
			err, c.Healthy(), log.ops)
	}
}

func TestConnKey(t *testing.T) {
	tests := []struct {
		name string
		give ConnConfig
		want string
	}{
		{name: "default prefix", want: "poolgate:{bundle:a}"},
		{name: "own prefix", give: ConnConfig{Prefix: "p:"}, want: "p:{bundle:a}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NewConn(tt.give, nil).Key("{bundle:a}"); got != tt.want {
				t.Errorf("Key() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConnectedReplicas(t *testing.T) {
	tests := []struct {
		give string
		want int
	}{
		{give: "# Replication\r\nrole:master\r\nconnected_slaves:2\r\nslave0:ip=...\r\n", want: 2},
		{give: "# Replication\r\nrole:master\r\nconnected_slaves:0\r\n", want: 0},
		{give: "", want: 0},
	}
	for _, tt := range tests {
		if got := connectedReplicas(tt.give); got != tt.want {
			t.Errorf("connectedReplicas(%q) = %d, want %d", tt.give, got, tt.want)
		}
	}
}
