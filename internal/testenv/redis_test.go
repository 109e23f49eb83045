package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestRedisKillRestart(t *testing.T) {
	s := Redis(t)
	if err := ping(s.Addr(), nil); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
	s.Kill()
	if err := ping(s.Addr(), nil); err == nil {
		t.Fatalf("ping after Kill succeeded, want an error")
	}
	s.Restart()
	if err := ping(s.Addr(), nil); err != nil {
		t.Fatalf("ping after Restart: %v", err)
	}
}

func TestFreePort(t *testing.T) {
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Errorf("FreePort() = %d, want a port in 1..65535", p)
	}
}

func TestRedisURL(t *testing.T) {
	s := Redis(t)
	if got, want := s.URL(), "redis://"+s.Addr()+"/0"; got != want {
		t.Errorf("URL() = %q, want %q", got, want)
	}
}

func TestRedisSentinelAndCluster(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		give func(t *testing.T) RedisTarget
	}{
		{name: "sentinel", give: func(t *testing.T) RedisTarget { return RedisSentinel(t, time.Second) }},
		{name: "cluster", give: func(t *testing.T) RedisTarget { return RedisCluster(t, 3, 0, 2*time.Second) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := tt.give(t)
			c := target.Universal(t)
			for i := range 20 {
				k := fmt.Sprintf("k%d", i)
				if err := c.Set(ctx, k, i, 0).Err(); err != nil {
					t.Fatalf("SET %s: %v", k, err)
				}
				if got, err := c.Get(ctx, k).Int(); err != nil || got != i {
					t.Fatalf("GET %s = %d, %v, want %d", k, got, err, i)
				}
			}
		})
	}
}
