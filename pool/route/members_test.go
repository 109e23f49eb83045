package route

import (
	"context"
	"testing"

	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// TestPoolFollowsTheSupervisorsSet: an account added to the running
// supervisor becomes pickable; a removed one stops taking turns at once,
// keeps its member while its turn runs (the drain counts it), and is gone
// from the view once the turn released its slot.
func TestPoolFollowsTheSupervisorsSet(t *testing.T) {
	p, sup, f := testPool(t, Config{}, "w1")
	slot, err := p.acquire(context.Background(), preference{Prefer: "w1"})
	if err != nil || slot.Instance() != "w1" {
		t.Fatalf("acquire on w1: %v", err)
	}

	wcs := supervisortest.Drive(f, supervisortest.Configs(t, false, "w2"))
	done := make(chan error, 1)
	go func() {
		_, err := sup.Apply(wcs) // adds w2, drains and removes w1
		done <- err
	}()
	waitReady(t, p, "w2")
	if p.Serves("w1") {
		t.Error("w1 still takes turns while it is being removed")
	}
	if _, ok := p.Snapshot().Instance("w1"); !ok {
		t.Error("w1 left the view while its turn runs")
	}
	other, err := p.acquire(context.Background(), preference{})
	if err != nil || other.Instance() != "w2" {
		t.Fatalf("a new turn went to %v (%v), want the added w2", other, err)
	}
	other.release()
	slot.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	snap := p.Snapshot()
	if _, ok := snap.Instance("w1"); ok || len(snap.Instances) != 1 || p.Size() != 1 {
		t.Errorf("view after the removal: %+v, want w2 alone", snap.Instances)
	}
}
