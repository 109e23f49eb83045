package relay

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func TestAwait(t *testing.T) {
	errGone := errors.New("client gone")
	tests := []struct {
		name      string
		take      time.Duration // how long call runs
		tickErr   error
		wantTicks int
		wantErr   error
		wantStop  bool
	}{
		{"quick answer, no tick", 5 * time.Second, nil, 0, nil, false},
		{"slow answer ticks every interval", 35 * time.Second, nil, 3, nil, false},
		{"a failed tick stops the call", time.Hour, errGone, 1, errGone, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				stopped, ticks := false, 0
				got, err := await(10*time.Second, func() { stopped = true; cancel() },
					func() (int, error) {
						select {
						case <-time.After(tt.take):
							return 7, nil
						case <-ctx.Done():
							return 0, ctx.Err()
						}
					},
					func() error { ticks++; return tt.tickErr })
				if ticks != tt.wantTicks || !errors.Is(err, tt.wantErr) || stopped != tt.wantStop || (err == nil && got != 7) {
					t.Errorf("ticks %d err %v stopped %v value %d; want %d, %v, %v, 7", ticks, err, stopped, got, tt.wantTicks, tt.wantErr, tt.wantStop)
				}
			})
		})
	}
}
