package daemon

import (
	"context"
	"time"
)

// The dashboard's live series: an hour of 10 s steps, up to 512 accounts
// kept apart (more share one series), the queue sampled every 2 s.
const (
	liveStep     = 10 * time.Second
	liveSteps    = 360
	liveAccounts = 512
	liveSample   = 2 * time.Second
)

// sampleLive notes the queue depth and the turns in flight, in total and
// per account, until ctx ends.
func (a *app) sampleLive(ctx context.Context) {
	t := time.NewTicker(liveSample)
	defer t.Stop()
	per := map[string]int{}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			snap := a.pool.Snapshot()
			clear(per)
			for _, in := range snap.Instances {
				per[in.Account] += in.InFlight
			}
			a.live.Sample(now, snap.Waiting, snap.InFlight, per)
		}
	}
}
