package redisconn_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/redact"
	"github.com/poolgate/poolgate/internal/redisconn"
	"github.com/poolgate/poolgate/internal/testenv"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		give   redisconn.Config
		want   string // in the error; "" for none
		secret string // must not be in the error
	}{
		{name: "single", give: redisconn.Config{Mode: redisconn.Single, URL: "redis://127.0.0.1:6379/0"}},
		{name: "single, empty mode", give: redisconn.Config{URL: "rediss://user:pw@redis.example:6380/2"}},
		{name: "single with sentinel parameters", give: redisconn.Config{Mode: redisconn.Single, URL: "redis://s1:26379?master_name=m"}, want: "redis_mode single"},
		{name: "sentinel", give: redisconn.Config{Mode: redisconn.Sentinel, URL: "redis://s1:26379/0?master_name=m&addr=s2:26379&addr=s3:26379&password=pw"}},
		{name: "sentinel without master_name", give: redisconn.Config{Mode: redisconn.Sentinel, URL: "redis://s1:26379?addr=s2:26379"}, want: "master_name"},
		{name: "sentinel, bad addr", give: redisconn.Config{Mode: redisconn.Sentinel, URL: "redis://s1:26379?master_name=m&addr=s2"}, want: "addr"},
		{name: "cluster", give: redisconn.Config{Mode: redisconn.Cluster, URL: "redis://n1:6379?addr=n2:6379&addr=n3:6379"}},
		{name: "cluster, unknown parameter", give: redisconn.Config{Mode: redisconn.Cluster, URL: "redis://n1:6379?nodes=n2:6379"}, want: "redis_mode cluster"},
		{name: "unknown mode", give: redisconn.Config{Mode: "replicated", URL: "redis://n1:6379"}, want: "use single, sentinel or cluster"},
		{name: "empty url", give: redisconn.Config{Mode: redisconn.Cluster}, want: "redis_url is empty"},
		{name: "bad scheme", give: redisconn.Config{Mode: redisconn.Single, URL: "http://n1:6379"}, want: "redis_mode single"},

		// A password that does not parse is never quoted, in any mode.
		{name: "single, a bare % in the password", give: redisconn.Config{URL: "redis://:Zq%9kW@redis:6379/0"},
			want: "redis://REDACTED@redis:6379/0: its user name, password", secret: "Zq%9kW"},
		{name: "single, a bare / in the password", give: redisconn.Config{URL: "redis://:Zq/9kW@redis:6379/0"},
			want: "percent-encode", secret: "Zq/9kW"},
		{name: "sentinel, a bare % in the sentinels' password", give: redisconn.Config{Mode: redisconn.Sentinel,
			URL: "redis://:Zq%9kW@s1:26379?master_name=m"}, want: "REDACTED", secret: "Zq%9kW"},
		{name: "sentinel, a bare % in the primary's password", give: redisconn.Config{Mode: redisconn.Sentinel,
			URL: "redis://s1:26379?master_name=m&password=Zq%9kW"}, want: "password=REDACTED", secret: "Zq%9kW"},
		{name: "sentinel, a bare & in the primary's password", give: redisconn.Config{Mode: redisconn.Sentinel,
			URL: "redis://s1:26379?master_name=m&password=Zq&9kW"}, want: "password=REDACTED", secret: "9kW"},
		{name: "cluster, a bare % in the password", give: redisconn.Config{Mode: redisconn.Cluster,
			URL: "redis://:Zq%9kW@n1:6379?addr=n2:6379"}, want: "REDACTED@n1:6379", secret: "Zq%9kW"},
		{name: "cluster, a bare % in the password and a bad parameter", give: redisconn.Config{Mode: redisconn.Cluster,
			URL: "redis://:Zq%9kW@n1:6379?nodes=n2:6379"}, want: "unexpected option: nodes", secret: "Zq%9kW"},

		{name: "password in the URL and a file", give: redisconn.Config{URL: "redis://:pw@r:6379", PasswordFile: "redisconn_test.go"},
			want: "keep one of them"},
		{name: "sentinel's primary password in the URL and a file", give: redisconn.Config{Mode: redisconn.Sentinel,
			URL: "redis://s1:26379?master_name=m&password=pw", PasswordFile: "redisconn_test.go"}, want: "keep one of them"},
		{name: "the sentinels' password in the URL, the data servers' in a file", give: redisconn.Config{Mode: redisconn.Sentinel,
			URL: "redis://:spw@s1:26379?master_name=m", PasswordFile: "redisconn_test.go"}},
		{name: "password file missing", give: redisconn.Config{URL: "redis://r:6379", PasswordFile: "/nonexistent/pw"},
			want: "redis_password_file"},
		{name: "CA file without TLS", give: redisconn.Config{URL: "redis://r:6379", CAFile: "redisconn_test.go"},
			want: "holds no PEM certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := redisconn.Check(tt.give)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Check() = %v, want an error naming %q", err, tt.want)
			case tt.secret != "" && strings.Contains(err.Error(), tt.secret):
				t.Errorf("Check() = %v, which shows the password %q", err, tt.secret)
			}
		})
	}
}

// A Redis that takes a password and speaks TLS only, in each mode: the
// password comes from the URL or the password file, the CA from the CA
// file; without either, Dial's client is refused.
func TestDialLocked(t *testing.T) {
	lock := testenv.NewRedisLock(t)
	tests := []struct {
		name  string
		start func(t *testing.T) testenv.RedisTarget
	}{
		{name: "single", start: func(t *testing.T) testenv.RedisTarget { return testenv.RedisLocked(t, lock) }},
		{name: "sentinel", start: func(t *testing.T) testenv.RedisTarget { return testenv.RedisSentinelLocked(t, time.Second, lock) }},
		{name: "cluster", start: func(t *testing.T) testenv.RedisTarget {
			return testenv.RedisClusterLocked(t, 3, 0, 2*time.Second, lock)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := tt.start(t)
			mode := redisconn.Mode(target.Mode())
			withPassword := target.URL()
			// The same URL without the password (the sentinels' and the
			// data servers'): the file gives it.
			bare := strings.Replace(withPassword, "&password="+url.QueryEscape(lock.Password), "", 1)
			bare = strings.Replace(bare, ":"+strings.NewReplacer("%", "%25", "@", "%40").Replace(lock.Password)+"@", "", 1)
			if bare == withPassword {
				t.Fatalf("the password is not in the URL %s", withPassword)
			}
			works := []redisconn.Config{
				{Mode: mode, URL: withPassword, CAFile: lock.CAFile},
				{Mode: mode, URL: bare, PasswordFile: lock.PasswordFile, CAFile: lock.CAFile},
			}
			for _, cfg := range works {
				if err := setGet(t, cfg); err != nil {
					t.Errorf("%s with the CA and %s: %v", tt.name, password(cfg), err)
				}
			}
			fails := []redisconn.Config{
				{Mode: mode, URL: bare, CAFile: lock.CAFile},
				{Mode: mode, URL: withPassword},
			}
			for _, cfg := range fails {
				if err := setGet(t, cfg); err == nil {
					t.Errorf("%s with CA file %q and %s: served, want refused", tt.name, cfg.CAFile, password(cfg))
				}
			}
		})
	}
}

func password(cfg redisconn.Config) string {
	if cfg.PasswordFile != "" {
		return "the password file"
	}
	return "the URL " + redact.URL(cfg.URL)
}

// setGet writes and reads a key through a client Dial made of cfg.
func setGet(t *testing.T, cfg redisconn.Config) error {
	t.Helper()
	c, err := redisconn.Dial(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		return err
	}
	if got, err := c.Get(ctx, "k").Result(); err != nil || got != "v" {
		return fmt.Errorf("GET k = %q, %v", got, err)
	}
	return nil
}

// A cluster client reaches the replica promoted after its primary died, by
// itself and within seconds: go-redis alone would keep dialing the dead
// primary until its next periodic reload of the slot map.
func TestClusterClientFollowsAFailover(t *testing.T) {
	set := testenv.RedisCluster(t, 3, 1, 2*time.Second)
	c, err := redisconn.Dial(redisconn.Config{Mode: redisconn.Cluster, URL: set.URL()})
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
