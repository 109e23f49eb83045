package cluster

import (
	"testing"
	"time"
)

// The status counts an account's changes of holder (a free lease between
// two holders is one hand-over) and dates the current holder's lease from
// when it was first seen.
func TestStatusHandoversAndLeaseAge(t *testing.T) {
	c := &Cluster{seen: map[string]seenLease{}, leases: map[string]Lease{}}
	t0 := time.Unix(1_800_000_000, 0)
	steps := []struct {
		holder    string
		token     int64
		handovers int
		since     time.Time
	}{
		{"r1", 1, 0, t0},
		{"r1", 1, 0, t0}, // renewed: same lease
		{"", 0, 0, time.Time{}},
		{"r2", 2, 1, t0.Add(3 * time.Second)},
		{"r2", 3, 1, t0.Add(4 * time.Second)}, // r2 again with a new token: not a hand-over
		{"r1", 4, 2, t0.Add(5 * time.Second)},
	}
	for i, st := range steps {
		now := t0.Add(time.Duration(i) * time.Second)
		l := Lease{Account: "a", Holder: st.holder, Token: st.token}
		c.leases["a"] = l
		c.noteLease("a", l, now)
		s := c.Status()
		if s.Handovers["a"] != st.handovers || !s.LeaseSince["a"].Equal(st.since) {
			t.Errorf("step %d (%s/%d): handovers %d since %v, want %d and %v", i, st.holder, st.token,
				s.Handovers["a"], s.LeaseSince["a"], st.handovers, st.since)
		}
	}
}
