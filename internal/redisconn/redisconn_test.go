package redisconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/testenv"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		mode redisconn.Mode
		url  string
		want string // in the error; "" for none
	}{
		{name: "single", mode: redisconn.Single, url: "redis://127.0.0.1:6379/0"},
		{name: "single, empty mode", url: "rediss://user:pw@redis.example:6380/2"},
		{name: "single with sentinel parameters", mode: redisconn.Single, url: "redis://s1:26379?master_name=m", want: "redis_mode single"},
		{name: "sentinel", mode: redisconn.Sentinel, url: "redis://s1:26379/0?master_name=m&addr=s2:26379&addr=s3:26379&password=pw"},
		{name: "sentinel without master_name", mode: redisconn.Sentinel, url: "redis://s1:26379?addr=s2:26379", want: "master_name"},
		{name: "sentinel, bad addr", mode: redisconn.Sentinel, url: "redis://s1:26379?master_name=m&addr=s2", want: "addr"},
		{name: "cluster", mode: redisconn.Cluster, url: "redis://n1:6379?addr=n2:6379&addr=n3:6379"},
		{name: "cluster, unknown parameter", mode: redisconn.Cluster, url: "redis://n1:6379?nodes=n2:6379", want: "redis_mode cluster"},
		{name: "unknown mode", mode: "replicated", url: "redis://n1:6379", want: "use single, sentinel or cluster"},
		{name: "empty url", mode: redisconn.Cluster, want: "redis_url is empty"},
		{name: "bad scheme", mode: redisconn.Single, url: "http://n1:6379", want: "redis_mode single"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := redisconn.Check(tt.mode, tt.url)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Check() = %v, want an error naming %q", err, tt.want)
			}
		})
	}
}

// A cluster client reaches the replica promoted after its primary died, by
// itself and within seconds: go-redis alone would keep dialing the dead
// primary until its next periodic reload of the slot map.
func TestClusterClientFollowsAFailover(t *testing.T) {
	set := testenv.RedisCluster(t, 3, 1, 2*time.Second)
	c, err := redisconn.Dial(redisconn.Cluster, set.URL(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	const key = "k"
	if err := c.Set(ctx, key, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	victim := set.PrimaryOf(t, key)
	victim.Kill()
	testenv.WaitForNoError(t, 30*time.Second, "a write through the promoted replica", func() error {
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return c.Set(cctx, key, 2, 0).Err()
	})
	if now := set.PrimaryOf(t, key); now == victim {
		t.Errorf("the write landed, but the killed server %s still serves the slot", victim.Addr())
	}
}

func TestBeside(t *testing.T) {
	tests := []struct {
		give   string
		want   string
		wantOK bool
	}{
		{give: "poolgate:requests", want: "{poolgate:requests}:seq", wantOK: true},
		{give: "{pg}:requests", want: "{pg}:requests:seq", wantOK: true},
		{give: "a{}b:requests", wantOK: false, want: "a{}b:requests:seq"}, // an empty tag is none
		{give: "a}b:requests", wantOK: false, want: "a}b:requests:seq"},
	}
	for _, tt := range tests {
		got, ok := redisconn.Beside(tt.give, ":seq")
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("Beside(%q) = %q, %v; want %q, %v", tt.give, got, ok, tt.want, tt.wantOK)
		}
	}
}
