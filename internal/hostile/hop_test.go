package hostile_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/cluster"
)

// What the hops between replicas are held to, against a real replica on a
// real redis-server: whoever can write to Redis gets no credential by
// pointing a replica's registry entry at a listener of its own, and no hop
// can be replayed or altered.

// rogue is the listener of someone who wrote to Redis: it records every
// request and answers each as a model would, so an answer of its that
// reached a client would show.
type rogue struct {
	mu   sync.Mutex
	seen []string // each request: method, URI, headers and body
}

func (g *rogue) record(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s\n", r.Method, r.URL.RequestURI())
	for k, vs := range r.Header {
		fmt.Fprintf(&sb, "%s: %s\n", k, strings.Join(vs, ", "))
	}
	sb.Write(b)
	g.mu.Lock()
	g.seen = append(g.seen, sb.String())
	g.mu.Unlock()
}

func (g *rogue) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.seen...)
}

// rogueAnswer is what the rogue listener answers to anything but a
// challenge.
const rogueAnswer = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"EVIL"}}]}`

// hopSecrets are the credentials of the hop test's deployment.
var hopSecrets = []string{userKey, opsKey, matrixAdmin, clusterToken}

func TestRogueRegistryEntryGetsNoCredential(t *testing.T) {
	redis := testenv.Redis(t)
	// The rogue holds the only account's lease and advertises spare
	// capacity, so the replica has no instance of its own: every turn
	// would go to the rogue's URL, and so would every admin action on the
	// account.
	plantRogue := func(t *testing.T, prefix, url string) {
		t.Helper()
		store := cluster.NewRedisStore(cluster.RedisConfig{Prefix: prefix}, redis.Client(t))
		ctx := context.Background()
		if err := store.Heartbeat(ctx, cluster.Replica{ID: "evil", URL: url, Capacity: 100, Accounts: []string{"acct-1"}}, time.Minute); err != nil {
			t.Fatal(err)
		}
		testenv.WaitForNoError(t, 15*time.Second, "the rogue to take acct-1's lease", func() error {
			l, ok, err := store.AcquireLease(ctx, "acct-1", "evil", time.Second) // a short first call: a short quarantine
			switch {
			case err != nil:
				return err
			case !ok:
				return fmt.Errorf("lease held by %q", l.Holder)
			}
			_, err = store.RenewLease(ctx, "acct-1", "evil", l.Token, time.Minute)
			return err
		})
	}
	tests := []struct {
		name  string
		proof func(d *daemontest.Daemon) http.HandlerFunc
	}{
		{"a listener that answers anything", func(*daemontest.Daemon) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) {
				_, _ = io.WriteString(w, `{"replica":"evil","url":"http://evil","proof":"x"}`)
			}
		}},
		{"a listener that relays the challenge to the real replica", func(d *daemontest.Daemon) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				resp, err := http.Get(d.URL + r.URL.RequestURI())
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadGateway)
					return
				}
				defer resp.Body.Close()
				_, _ = io.Copy(w, resp.Body)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := testenv.KeyPrefix(t)
			g := &rogue{}
			var d *daemontest.Daemon
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				g.record(r)
				if r.URL.Path == access.ProofPath {
					tt.proof(d)(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, rogueAnswer)
			}))
			defer srv.Close()
			plantRogue(t, prefix, srv.URL)
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			d = daemontest.StartDaemon(t, matrixKeys, `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"u1","password":"pw"}]`,
				"POOLGATE_ADMIN_TOKEN="+matrixAdmin, "POOLGATE_REDIS_URL="+redis.URL(), "POOLGATE_REDIS_PREFIX="+prefix,
				"POOLGATE_CLUSTER_TOKEN="+clusterToken, "POOLGATE_LEASE_TTL=3s", "POOLGATE_QUEUE_TIMEOUT=2s",
				"POOLGATE_LISTEN="+addr, "POOLGATE_ADVERTISE_URL=http://"+addr, "POOLGATE_REPLICA_ID=r1")
			testenv.WaitFor(t, 20*time.Second, "the replica to see the rogue's registry entry", func() bool {
				var c struct {
					Replicas []struct{ ID string } `json:"replicas"`
				}
				jsonDo(t, "GET", d.URL+"/internal/cluster", matrixAdmin, "", &c)
				return len(c.Replicas) == 2
			})
			requests := []struct {
				method, path, token, body string
			}{
				{"POST", "/v1/chat/completions", userKey, `{"model":"m","messages":[{"role":"user","content":"the plan"}]}`},
				{"POST", "/v1/chat/completions", opsKey, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
				{"POST", "/internal/pool/acct-1/restart", matrixAdmin, ""},
				{"POST", "/internal/pool/acct-1/drain", opsKey, ""},
				{"POST", "/internal/session/import", matrixAdmin, `{"instance":"acct-1","bundle":"AAAA"}`},
			}
			for _, rq := range requests {
				code, body := sendAs(t, rq.method, d.URL+rq.path, rq.token, rq.body)
				if strings.Contains(body, "EVIL") || code < 400 {
					t.Errorf("%s %s: %d %s, want a refusal, never the rogue's answer", rq.method, rq.path, code, clip([]byte(body)))
				}
			}
			seen := g.requests()
			if len(seen) == 0 {
				t.Fatal("the rogue's listener got nothing: the replica did not try it, so this test proves nothing")
			}
			for _, s := range seen {
				if !strings.HasPrefix(s, "GET "+access.ProofPath+"?challenge=") || strings.Contains(s, access.HopHeader) {
					t.Errorf("the rogue's listener got more than a challenge:\n%s", s)
				}
				for _, secret := range hopSecrets {
					if strings.Contains(s, secret) {
						t.Errorf("the rogue's listener got %q:\n%s", secret, s)
					}
				}
			}
		})
	}
}

// sendAs sends a request with token as its Bearer and returns the answer.
func sendAs(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := matrixClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A hop is honoured once, for the request it was signed for, on the
// replica it was signed for, in time, and only with this cluster's key; the
// cluster token itself opens nothing. The hops are signed here, as another
// replica of the cluster would sign them.
func TestAlteredHopsAreRefused(t *testing.T) {
	redis := testenv.Redis(t)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	d := daemontest.StartDaemon(t, matrixKeys, `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"u1","password":"pw"}]`,
		"POOLGATE_ADMIN_TOKEN="+matrixAdmin, "POOLGATE_REDIS_URL="+redis.URL(), "POOLGATE_REDIS_PREFIX="+testenv.KeyPrefix(t),
		"POOLGATE_CLUSTER_TOKEN="+clusterToken, "POOLGATE_LEASE_TTL=3s", "POOLGATE_LISTEN="+addr,
		"POOLGATE_ADVERTISE_URL=http://"+addr, "POOLGATE_REPLICA_ID=r1")
	d.WaitReady(t, 60*time.Second)
	self := replicaID(t, d.URL)
	alice := access.Caller{Key: &apikey.Key{Name: "alice"}, Role: access.RoleUser, Owner: access.OwnerOf(userKey)}
	admin := access.Caller{Token: "admin-token", Role: access.RoleAdmin, Owner: access.OwnerOf("")}
	const chatPath, body = "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	// A hop is checked against its query as it arrived: a key= a client's
	// Gemini request would carry is not taken out of a hop first.
	const geminiCount, geminiBody = "/v1beta/models/m:countTokens", `{"contents":[{"parts":[{"text":"hi"}]}]}`
	sender := func(token string, clock time.Duration) *access.Hops {
		h, err := access.NewHops(token, "r-test", "http://r-test:8080")
		if err != nil {
			t.Fatal(err)
		}
		h.Now = func() time.Time { return time.Now().Add(clock) }
		return h
	}
	sign := func(h *access.Hops, to, method, path, body string, c access.Caller) string {
		s, err := h.Sign(to, method, path, access.NewHopBody([]byte(body)), c)
		if err != nil {
			t.Fatal(err)
		}
		return s.Header
	}
	hop := func(method, path, body string, header map[string]string) (int, string) {
		req, err := http.NewRequest(method, d.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body == "" {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, err := matrixClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	valid := sign(sender(clusterToken, 0), self, "POST", chatPath, body, alice)
	tests := []struct {
		name         string
		method, path string
		body         string
		header       map[string]string
		status       int
		want         string // in the answer
	}{
		{"a hop as signed", "POST", chatPath, body, map[string]string{access.HopHeader: valid}, 200, `"choices"`},
		{"the same hop again", "POST", chatPath, body, map[string]string{access.HopHeader: valid}, 401, "replayed"},
		{"another body", "POST", chatPath, strings.Replace(body, "hi", "ho", 1),
			map[string]string{access.HopHeader: sign(sender(clusterToken, 0), self, "POST", chatPath, body, alice)}, 401, "body"},
		{"another path", "POST", "/v1/messages", body,
			map[string]string{access.HopHeader: sign(sender(clusterToken, 0), self, "POST", chatPath, body, alice)}, 401, "another request"},
		{"expired", "POST", chatPath, body,
			map[string]string{access.HopHeader: sign(sender(clusterToken, -time.Minute), self, "POST", chatPath, body, alice)}, 401, "expired"},
		{"another key", "POST", chatPath, body,
			map[string]string{access.HopHeader: sign(sender("not-"+clusterToken, 0), self, "POST", chatPath, body, alice)}, 401, "signature"},
		{"another replica's", "POST", chatPath, body,
			map[string]string{access.HopHeader: sign(sender(clusterToken, 0), "r-other", "POST", chatPath, body, alice)}, 401, "addressed"},
		{"a Gemini key added to its query", "POST", geminiCount + "?key=" + userKey, geminiBody,
			map[string]string{access.HopHeader: sign(sender(clusterToken, 0), self, "POST", geminiCount, geminiBody, alice)}, 401, "another request"},
		{"the admin token's caller, on an admin read", "GET", "/internal/pool", "",
			map[string]string{access.HopHeader: sign(sender(clusterToken, 0), self, "GET", "/internal/pool", "", admin)}, 200, `"instances"`},
		{"a user's, on an admin read", "GET", "/internal/pool", "",
			map[string]string{access.HopHeader: sign(sender(clusterToken, 0), self, "GET", "/internal/pool", "", alice)}, 403, "role"},
		{"the cluster token, as older versions sent it", "GET", "/internal/pool", "",
			map[string]string{"X-Poolgate-Forwarded-By": "r2", "X-Poolgate-Cluster-Token": clusterToken, "Authorization": "Bearer " + opsKey},
			401, "not credentials"},
		{"the cluster token as a Bearer", "GET", "/internal/pool", "",
			map[string]string{"Authorization": "Bearer " + clusterToken}, 401, "admin credential required"},
	}
	for _, tt := range tests {
		if code, got := hop(tt.method, tt.path, tt.body, tt.header); code != tt.status || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %d %s, want %d with %q", tt.name, code, clip([]byte(got)), tt.status, tt.want)
		}
	}
}
