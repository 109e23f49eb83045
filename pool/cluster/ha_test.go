package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// The lease and registry suites pass on a three-primary Redis Cluster (the
// lease table is one slot) and on a Sentinel set, where every lease write
// waits for the replica.
func TestLeaseStoreOnClusterAndSentinel(t *testing.T) {
	tests := []struct {
		name  string
		start func(t *testing.T) testenv.RedisTarget
	}{
		{name: "cluster", start: func(t *testing.T) testenv.RedisTarget { return testenv.RedisCluster(t, 3, 0, 5*time.Second) }},
		{name: "sentinel", start: func(t *testing.T) testenv.RedisTarget { return testenv.RedisSentinel(t, 5*time.Second) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := tt.start(t)
			t.Run("Lifecycle", func(t *testing.T) { leaseLifecycle(t, srv) })
			t.Run("Quarantine", func(t *testing.T) { leaseQuarantine(t, srv) })
			t.Run("ConcurrentAcquire", func(t *testing.T) { leaseConcurrentAcquire(t, srv) })
			t.Run("Registry", func(t *testing.T) { replicaRegistry(t, srv) })
		})
	}
}

// A lease write that the replica does not acknowledge does not count: with
// the replica frozen, acquire and renew fail within the store's timeout with
// ErrNotReplicated, and the holder keeps its old deadline; once the replica
// answers again they succeed.
func TestLeaseWaitsForTheReplica(t *testing.T) {
	set := testenv.RedisSentinel(t, 5*time.Second)
	r, _ := openLeaseRedis(t, set, RedisConfig{Timeout: 500 * time.Millisecond})
	ctx := context.Background()
	// On a loaded machine the replica may take longer than the timeout to
	// acknowledge even a healthy write: the first lease is taken once it
	// does (the same call again: its holder may take its lease up again).
	var l Lease
	testenv.WaitForNoError(t, 30*time.Second, "a first lease the replica acknowledges", func() error {
		var ok bool
		var err error
		if l, ok, err = r.AcquireLease(ctx, "acct-1", "a", 10*time.Second); err == nil && !ok {
			err = errors.New("lease not granted")
		}
		return err
	})

	set.Replica.Freeze()
	start := time.Now()
	if _, _, err := r.AcquireLease(ctx, "acct-2", "a", 10*time.Second); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("AcquireLease() with the replica frozen = %v, want ErrNotReplicated", err)
	}
	if _, err := r.RenewLease(ctx, "acct-1", "a", l.Token, 10*time.Second); !errors.Is(err, ErrNotReplicated) {
		t.Errorf("RenewLease() with the replica frozen = %v, want ErrNotReplicated", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("two calls with the replica frozen took %s, want each within the 500ms timeout", d)
	}
	set.Replica.Thaw()

	testenv.WaitForNoError(t, 30*time.Second, "a renewal the replica acknowledges", func() error {
		_, err := r.RenewLease(ctx, "acct-1", "a", l.Token, 10*time.Second)
		return err
	})
	// acct-2's lease was written on the primary before the wait failed:
	// its holder may take it up again with the same call.
	if l2, ok, err := r.AcquireLease(ctx, "acct-2", "a", 10*time.Second); err != nil || !ok || l2.Holder != "a" {
		t.Errorf("AcquireLease(acct-2) after the thaw = %+v, %v, %v; want a's lease", l2, ok, err)
	}
}
