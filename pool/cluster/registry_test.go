package cluster

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/testenv"
)

func TestReplicaRegistry(t *testing.T) { replicaRegistry(t, testenv.Redis(t)) }

func replicaRegistry(t *testing.T, srv testenv.RedisTarget) {
	r := openStore(t, srv, RedisConfig{})
	raw := srv.Universal(t)
	ctx := context.Background()
	seen := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	rep := func(id string, inFlight int) Replica {
		return Replica{ID: id, URL: "http://" + id + ":8081", Accounts: []string{id + "-acct"},
			InFlight: inFlight, Capacity: 8, Queue: 1, Seen: seen}
	}
	heartbeat := func(reps ...Replica) func(t *testing.T) {
		return func(t *testing.T) {
			t.Helper()
			for _, rp := range reps {
				if err := r.Heartbeat(ctx, rp, 10*time.Second); err != nil {
					t.Fatalf("Heartbeat(%s) = %v", rp.ID, err)
				}
			}
		}
	}
	tests := []struct {
		name string
		give func(t *testing.T)
		want []Replica
	}{
		{name: "empty", give: func(*testing.T) {}, want: nil},
		{name: "two replicas, sorted by id", give: heartbeat(rep("r2", 0), rep("r1", 0)),
			want: []Replica{rep("r1", 0), rep("r2", 0)}},
		{name: "a heartbeat replaces the record", give: heartbeat(rep("r2", 5)),
			want: []Replica{rep("r1", 0), rep("r2", 5)}},
		{name: "an expired heartbeat drops out", give: func(t *testing.T) {
			heartbeat(rep("r3", 0))(t)
			if err := raw.Del(ctx, r.replicaKey("r3")).Err(); err != nil { // as its PX would
				t.Fatal(err)
			}
		}, want: []Replica{rep("r1", 0), rep("r2", 5)}},
		{name: "leave", give: func(t *testing.T) {
			if err := r.LeaveCluster(ctx, "r1"); err != nil {
				t.Fatalf("LeaveCluster() = %v", err)
			}
		}, want: []Replica{rep("r2", 5)}},
		{name: "leave twice", give: func(t *testing.T) {
			if err := r.LeaveCluster(ctx, "r1"); err != nil {
				t.Fatalf("LeaveCluster() = %v", err)
			}
		}, want: []Replica{rep("r2", 5)}},
	}
	for _, tt := range tests {
		tt.give(t)
		got, err := r.Replicas(ctx)
		if err != nil || !replicasEqual(got, tt.want) {
			t.Errorf("%s: Replicas() = %+v, %v; want %+v", tt.name, got, err, tt.want)
		}
	}
	// Listing pruned r3's index entry; leaving removed r1's.
	if ids := raw.ZRange(ctx, r.replicaIndexKey(), 0, -1).Val(); !reflect.DeepEqual(ids, []string{"r2"}) {
		t.Errorf("index = %v, want [r2]", ids)
	}
}

// replicasEqual compares replica lists, Seen by instant.
func replicasEqual(a, b []Replica) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.Seen.Equal(y.Seen) {
			return false
		}
		x.Seen, y.Seen = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func TestHeartbeatExpiry(t *testing.T) {
	srv := testenv.Redis(t)
	r := openStore(t, srv, RedisConfig{})
	raw := srv.Client(t)
	ctx := context.Background()
	const ttl = 200 * time.Millisecond

	// A member left behind by a replica that died long ago.
	if err := raw.ZAdd(ctx, r.replicaIndexKey(), redis.Z{Score: 0, Member: "ghost"}).Err(); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := r.Heartbeat(ctx, Replica{ID: "r1"}, ttl); err != nil {
		t.Fatalf("Heartbeat() = %v", err)
	}
	if pttl := raw.PTTL(ctx, r.replicaKey("r1")).Val(); pttl <= 0 || pttl > ttl {
		t.Errorf("record PTTL = %v, want in (0, %v]", pttl, ttl)
	}
	if ids := raw.ZRange(ctx, r.replicaIndexKey(), 0, -1).Val(); !reflect.DeepEqual(ids, []string{"r1"}) {
		t.Errorf("index after heartbeat = %v, want [r1] (ghost pruned)", ids)
	}
	got, err := r.Replicas(ctx)
	if err != nil || len(got) != 1 {
		t.Fatalf("Replicas() = %+v, %v; want r1", got, err)
	}
	if got[0].Seen.Before(before.Add(-time.Second)) || got[0].Seen.After(time.Now().Add(time.Second)) {
		t.Errorf("Seen = %v, want stamped at the heartbeat (%v)", got[0].Seen, before)
	}
}
