package access

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/apikey"
)

func testHops(t *testing.T, self string) *Hops {
	t.Helper()
	h, err := NewHops("ct", self, "http://"+self+":8080/")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// alice as r1's edge named her.
var alice = Caller{Key: &apikey.Key{Name: "alice", Secret: "sk-a", RPM: 3, Concurrency: 2, TokensPerDay: 1000},
	Role: RoleUser, Owner: OwnerOf("sk-a")}

// hopRequest is the request r1 forwards to r2: POST target with body, signed
// by from for the audience to.
func hopRequest(t *testing.T, from *Hops, to, target, body string) (*http.Request, Signed) {
	t.Helper()
	s, err := from.Sign(to, http.MethodPost, target, NewHopBody([]byte(body)), alice)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	r.Header.Set(HopHeader, s.Header)
	return r, s
}

// A hop names its caller on the replica it was signed for, and only there,
// only for the request it was signed for, only once, only in time.
func TestHopIsBoundToItsRequest(t *testing.T) {
	const target, body = "/v1/chat/completions?x=1", `{"model":"m"}`
	tests := []struct {
		name  string
		alter func(t *testing.T, r *http.Request, r2 *Hops)
		want  string // in the refusal; "" for admitted
	}{
		{name: "as signed"},
		{name: "another body of the same length", want: "body is not the one signed", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			r.Body = io.NopCloser(strings.NewReader(`{"model":"x"}`))
		}},
		{name: "a longer body", want: "length", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body+" ")), int64(len(body)+1)
		}},
		{name: "a body longer than declared", want: "body is not the one signed", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			r.Body = io.NopCloser(strings.NewReader(body + " "))
		}},
		{name: "another path", want: "another request", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			r.RequestURI = "/v1/messages?x=1"
		}},
		{name: "another query", want: "another request", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			r.RequestURI = "/v1/chat/completions?x=2"
		}},
		{name: "another method", want: "another request", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			r.Method = http.MethodPut
		}},
		{name: "expired", want: "expired", alter: func(_ *testing.T, _ *http.Request, r2 *Hops) {
			r2.Now = func() time.Time { return time.Now().Add(hopLifetime + time.Second) }
		}},
		{name: "from a clock far ahead", want: "too far ahead", alter: func(_ *testing.T, _ *http.Request, r2 *Hops) {
			r2.Now = func() time.Time { return time.Now().Add(-maxSkew - 2*time.Second) }
		}},
		{name: "signed with another key", want: "signature", alter: func(t *testing.T, r *http.Request, _ *Hops) {
			other, err := NewHops("not-ct", "r1", "http://r1:8080")
			if err != nil {
				t.Fatal(err)
			}
			s, _ := other.Sign("r2", http.MethodPost, target, NewHopBody([]byte(body)), alice)
			r.Header.Set(HopHeader, s.Header)
		}},
		{name: "claims altered", want: "signature", alter: func(_ *testing.T, r *http.Request, _ *Hops) {
			v, p, _ := strings.Cut(r.Header.Get(HopHeader), ".")
			payload, sig, _ := strings.Cut(p, ".")
			r.Header.Set(HopHeader, v+"."+payload[:len(payload)-2]+"x"+payload[len(payload)-1:]+"."+sig)
		}},
		{name: "for another replica", want: "addressed to replica r3", alter: func(t *testing.T, r *http.Request, _ *Hops) {
			r1 := testHops(t, "r1")
			s, _ := r1.Sign("r3", http.MethodPost, target, NewHopBody([]byte(body)), alice)
			r.Header.Set(HopHeader, s.Header)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r1, r2 := testHops(t, "r1"), testHops(t, "r2")
			cr := &Credentials{Keys: apikey.NewRegistry(nil), Hops: r2}
			r, signed := hopRequest(t, r1, "r2", target, body)
			if tt.alter != nil {
				tt.alter(t, r, r2)
			}
			c, v, ok := cr.Identify(r)
			if tt.want != "" {
				if ok || v.Status != http.StatusUnauthorized || !strings.Contains(v.Message, tt.want) {
					t.Errorf("Identify = %+v, %v, %+v; want a 401 saying %q", c, ok, v, tt.want)
				}
				return
			}
			got, _ := io.ReadAll(r.Body)
			if !ok || c.Replica != "r1" || c.KeyName() != "alice" || c.Role != RoleUser || c.Key.Secret != "" ||
				c.Key.RPM != 3 || c.Key.Concurrency != 2 || c.Key.TokensPerDay != 1000 || c.Owner != OwnerOf("sk-a") ||
				c.HopAnswer() != signed.Answer || string(got) != body {
				t.Errorf("Identify = %+v (key %+v), %v, %+v, body %q; want alice from r1, her limits and owner, no secret",
					c, c.Key, ok, v, got)
			}
		})
	}
}

// The same hop twice is a replay, refused even when the first was.
func TestHopReplayedIsRefused(t *testing.T) {
	r1, r2 := testHops(t, "r1"), testHops(t, "r2")
	cr := &Credentials{Keys: apikey.NewRegistry(nil), Hops: r2}
	r, _ := hopRequest(t, r1, "r2", "/v1/messages", "{}")
	header := r.Header.Get(HopHeader)
	if _, v, ok := cr.Identify(r); !ok {
		t.Fatalf("the hop: %+v", v)
	}
	again := httptest.NewRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
	again.Header.Set(HopHeader, header)
	if _, v, ok := cr.Identify(again); ok || v.Status != http.StatusUnauthorized || !strings.Contains(v.Message, "replayed") {
		t.Errorf("the same hop again: %v %+v, want a 401 naming the replay", ok, v)
	}
}

// A body above the memory bound goes through a temporary file, which the
// body's Close removes.
func TestHopLargeBody(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	r1, r2 := testHops(t, "r1"), testHops(t, "r2")
	cr := &Credentials{Keys: apikey.NewRegistry(nil), Hops: r2}
	body := strings.Repeat("x", spoolAbove+12345)
	r, _ := hopRequest(t, r1, "r2", "/internal/session/import", body)
	if _, v, ok := cr.Identify(r); !ok {
		t.Fatalf("the hop: %+v", v)
	}
	files, _ := filepath.Glob(filepath.Join(os.TempDir(), "poolgate-hop-*"))
	if len(files) != 1 {
		t.Errorf("temporary files %v, want the body's", files)
	}
	if got, _ := io.ReadAll(r.Body); string(got) != body {
		t.Errorf("the body read back has %d bytes, want %d", len(got), len(body))
	}
	if err := r.Body.Close(); err != nil {
		t.Fatal(err)
	}
	if files, _ := filepath.Glob(filepath.Join(os.TempDir(), "poolgate-hop-*")); len(files) != 0 {
		t.Errorf("temporary files left: %v", files)
	}
}

// A replica proves it holds the key for the URL it is at; a proof relayed
// from another replica, or made without the key, does not pass.
func TestPeerProof(t *testing.T) {
	r1, r2 := testHops(t, "r1"), testHops(t, "r2")
	other, err := NewHops("not-ct", "r2", "http://r2:8080")
	if err != nil {
		t.Fatal(err)
	}
	c := Challenge()
	fromR2, _ := r2.Prove(c)
	forged, _ := other.Prove(c)
	stale, _ := r2.Prove(Challenge())
	tests := []struct {
		name string
		url  string
		give Proof
		want bool
	}{
		{"r2 at its URL", "http://r2:8080", fromR2, true},
		{"r2 at its URL with a slash", "http://r2:8080/", fromR2, true},
		{"r2's proof relayed by a listener elsewhere", "http://evil:8080", fromR2, false},
		{"without the key", "http://r2:8080", forged, false},
		{"an answer to another challenge", "http://r2:8080", stale, false},
		{"another URL claimed", "http://evil:8080", Proof{Replica: "r2", URL: "http://evil:8080", Proof: fromR2.Proof}, false},
	}
	for _, tt := range tests {
		if got := r1.CheckProof(c, tt.url, tt.give); got != tt.want {
			t.Errorf("%s: CheckProof = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The nonce memory is bounded: full of hops that have not expired, it
// refuses more (503) rather than forget one; expired ones make room,
// wherever they sit.
func TestNonceMemoryIsBounded(t *testing.T) {
	n := newNonces(3)
	steps := []struct {
		nonce    string
		exp, now int64
		want     error
	}{
		{"a", 100, 0, nil},
		{"b", 50, 0, nil}, // a sender whose clock is behind
		{"c", 100, 0, nil},
		{"d", 100, 10, errTooManyHop},
		{"a", 200, 20, errReplayed},
		{"d", 100, 60, nil}, // b expired, behind a
		{"e", 200, 100, nil},
		{"a", 300, 100, nil}, // a expired: a nonce of its own again
	}
	for i, s := range steps {
		if got := n.add(s.nonce, s.exp, s.now); got != s.want {
			t.Errorf("step %d, add %s at %d: %v, want %v", i, s.nonce, s.now, got, s.want)
		}
	}
	if len(n.seen) > 3 {
		t.Errorf("remembers %d nonces, bound 3", len(n.seen))
	}
}
