package session

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// One owner (one API key) can't fill Redis with stored responses: beyond its
// count or byte quota its oldest are dropped, and nobody else's are touched.
func TestResponseQuotaPerOwner(t *testing.T) { quotaSuite(t, testenv.Redis(t)) }

func quotaSuite(t *testing.T, srv testenv.RedisTarget) {
	tests := []struct {
		name      string
		cfg       RedisConfig
		saves     int
		size      int
		wantKept  int
		wantFirst bool // whether the first save survives
	}{
		{"count quota", RedisConfig{OwnerMaxResponses: 20}, 30, 100, 20, false},
		{"byte quota", RedisConfig{OwnerMaxResponseBytes: 10 * 1000}, 30, 1000, 10, false},
		{"under quota", RedisConfig{OwnerMaxResponses: 50}, 30, 100, 30, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := openTestRedis(t, srv, tt.cfg)
			raw := srv.Universal(t)
			ctx := context.Background()
			if err := r.SaveResponse(ctx, "other", "resp_other", make([]byte, tt.size), time.Hour); err != nil {
				t.Fatal(err)
			}
			for i := range tt.saves {
				if err := r.SaveResponse(ctx, "greedy", fmt.Sprintf("resp_%d", i), make([]byte, tt.size), time.Hour); err != nil {
					t.Fatalf("save %d: %v", i, err)
				}
			}
			kept := 0
			for i := range tt.saves {
				if n, _ := raw.Exists(ctx, r.responseKey(fmt.Sprintf("resp_%d", i))).Result(); n == 1 {
					kept++
				}
			}
			first, _ := raw.Exists(ctx, r.responseKey("resp_0")).Result()
			other, _ := raw.Exists(ctx, r.responseKey("resp_other")).Result()
			if kept != tt.wantKept || (first == 1) != tt.wantFirst || other != 1 {
				t.Errorf("kept %d (first: %v, the other owner's: %v), want %d (first: %v) and the other owner's kept",
					kept, first == 1, other == 1, tt.wantKept, tt.wantFirst)
			}
		})
	}
}

// The records a chained response builds on live as long as it: saving the
// newest extends them.
func TestSaveKeepsTheChainAlive(t *testing.T) { chainSuite(t, testenv.Redis(t)) }

func chainSuite(t *testing.T, srv testenv.RedisTarget) {
	r := openTestRedis(t, srv, RedisConfig{})
	raw := srv.Universal(t)
	ctx := context.Background()
	for _, id := range []string{"resp_a", "resp_b"} {
		if err := r.SaveResponse(ctx, "o", id, []byte("x"), 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.SaveResponse(ctx, "o", "resp_c", []byte("x"), time.Hour, "resp_a", "resp_b"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"resp_a", "resp_b"} {
		if ttl := raw.PTTL(ctx, r.responseKey(id)).Val(); ttl < 50*time.Minute {
			t.Errorf("%s lives %s more, want the hour of the response built on it", id, ttl)
		}
	}
	got, err := r.LoadResponses(ctx, []string{"resp_a", "resp_gone", "resp_c"})
	if err != nil || got[0] == nil || got[1] != nil || got[2] == nil {
		t.Errorf("LoadResponses = %q, %v; want a, nil, c", got, err)
	}
}
