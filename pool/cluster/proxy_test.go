package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
)

const clusterToken = "ct"

// seen is a request as a listener received it.
type seen struct {
	method, uri, body string
	length            int64
	te                string
	header            http.Header
	caller            access.Caller
}

// listener records what reaches it.
type listener struct {
	mu   sync.Mutex
	reqs []seen
}

func (l *listener) record(r *http.Request) seen {
	b, _ := io.ReadAll(r.Body)
	s := seen{method: r.Method, uri: r.URL.RequestURI(), body: string(b), length: r.ContentLength,
		te: strings.Join(r.TransferEncoding, ","), header: r.Header.Clone(), caller: access.From(r.Context())}
	l.mu.Lock()
	l.reqs = append(l.reqs, s)
	l.mu.Unlock()
	return s
}

func (l *listener) all() []seen {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seen(nil), l.reqs...)
}

// holder is a stand-in for the replica a hop goes to: a real server on
// loopback that proves the cluster key on access.ProofPath and verifies
// every other request with internal/access as a replica's edge does (a
// refusal is a 401 without the answer's signature), then records it and
// answers in two flushed pieces.
type holder struct {
	*httptest.Server
	listener
	mu   sync.Mutex
	hops *access.Hops
}

func newReplica(t *testing.T, self string) *holder {
	t.Helper()
	rp := &holder{}
	rp.Server = httptest.NewUnstartedServer(http.HandlerFunc(rp.serve))
	rp.setRun(t, self)
	rp.Start()
	t.Cleanup(rp.Close)
	return rp
}

// setRun makes the replica a new run, self, at the same URL (a restart).
func (rp *holder) setRun(t *testing.T, self string) {
	t.Helper()
	h, err := access.NewHops(clusterToken, self, "http://"+rp.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rp.mu.Lock()
	rp.hops = h
	rp.mu.Unlock()
}

func (rp *holder) serve(w http.ResponseWriter, r *http.Request) {
	rp.mu.Lock()
	hops := rp.hops
	rp.mu.Unlock()
	if r.URL.Path == access.ProofPath {
		hops.ServeProof(w, r)
		return
	}
	cr := &access.Credentials{Keys: apikey.NewRegistry(nil), Hops: hops}
	caller, v, ok := cr.Identify(r)
	access.StripHop(r)
	if !ok {
		http.Error(w, v.Message, v.Status)
		return
	}
	defer r.Body.Close()
	w.Header().Set(access.AnswerHeader, caller.HopAnswer())
	rp.record(r.WithContext(access.WithCaller(r.Context(), caller)))
	w.Header().Set("X-Request-Id", "the holder's own")
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, "data: one\n\n")
	w.(http.Flusher).Flush()
	_, _ = io.WriteString(w, "data: two\n\n")
}

// bob as the sending edge named him.
var bob = access.Caller{Key: &apikey.Key{Name: "bob", Secret: "sk-bob", RPM: 5}, Role: access.RoleUser,
	Owner: access.OwnerOf("sk-bob")}

func sender(t *testing.T) *Proxy {
	t.Helper()
	h, err := access.NewHops(clusterToken, "r1", "http://r1:8080")
	if err != nil {
		t.Fatal(err)
	}
	return &Proxy{Hops: h}
}

// clientRequest is a client's request as the sending edge passes it on:
// with its credentials and other headers, and bob as its caller.
func clientRequest(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	for k, v := range map[string]string{"Authorization": "Bearer sk-bob", "X-Api-Key": "sk-bob", "X-Goog-Api-Key": "sk-bob",
		"Cookie": "s=sk-bob", "Proxy-Authorization": "Basic c2stYm9i", "X-Poolgate-Cluster-Token": clusterToken,
		"X-Poolgate-Forwarded-By": "r0", access.HopHeader: "v1.forged.x", "Connection": "close",
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "Anthropic-Version": "2023-06-01"} {
		r.Header.Set(k, v)
	}
	return r.WithContext(access.WithCaller(r.Context(), bob))
}

// credentials are what must never reach another replica.
var credentials = []string{"sk-bob", clusterToken, "c2stYm9i"}

// noCredential fails the test if any header of h holds a credential, or a
// header of the client's or older versions' hops.
func noCredential(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, vs := range h {
		for _, v := range vs {
			for _, c := range credentials {
				if strings.Contains(v, c) {
					t.Errorf("%s: header %s carries %q", what, k, c)
				}
			}
		}
		if k == "Authorization" || k == "X-Api-Key" || k == "X-Goog-Api-Key" || k == "Cookie" || k == "Proxy-Authorization" ||
			k == "X-Poolgate-Forwarded-By" || k == "X-Poolgate-Cluster-Token" {
			t.Errorf("%s: header %s was carried", what, k)
		}
	}
}

func TestProxyForward(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		body     string
		bodyless bool // the client sent no body at all
		wantLen  int64
	}{
		{name: "an API turn's body", method: http.MethodPost, body: `{"model":"m"}`, wantLen: 13},
		{name: "an admin action without a body", method: http.MethodPost, bodyless: true, wantLen: 0},
		{name: "a read", method: http.MethodGet, bodyless: true, wantLen: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rp := newReplica(t, "r2")
			var in io.Reader = strings.NewReader(tt.body)
			if tt.bodyless {
				in = nil
			}
			r := clientRequest(tt.method, "/v1/chat/completions?x=1", in)
			rec := httptest.NewRecorder()
			rec.Header().Set("X-Request-Id", "req_1")
			body, err := access.ReadHopBody(r.Body, access.MaxHopBody)
			if err != nil {
				t.Fatal(err)
			}
			if err := sender(t).Forward(context.Background(), rec, r, body, rp.URL+"/"); err != nil {
				t.Fatal(err)
			}
			got := rp.all()
			if len(got) != 1 {
				t.Fatalf("the holder got %d hops, want 1", len(got))
			}
			h := got[0]
			if h.method != tt.method || h.uri != "/v1/chat/completions?x=1" || h.body != tt.body || h.length != tt.wantLen || h.te != "" {
				t.Errorf("holder got %s %s %q (length %d, transfer-encoding %q), want %s with %q of length %d",
					h.method, h.uri, h.body, h.length, h.te, tt.method, tt.body, tt.wantLen)
			}
			if h.caller.Replica != "r1" || h.caller.KeyName() != "bob" || h.caller.Key.RPM != 5 || h.caller.Owner != bob.Owner {
				t.Errorf("the holder's caller %+v, want bob from r1 with his limits and owner", h.caller)
			}
			noCredential(t, "the hop", h.header)
			if h.header.Get("X-Request-Id") != "req_1" || h.header.Get("Traceparent") == "" || h.header.Get("Anthropic-Version") == "" ||
				h.header.Get("Connection") != "" {
				t.Errorf("hop headers %v: want the request id, the trace and protocol headers, no hop-by-hop", h.header)
			}
			if rec.Code != http.StatusAccepted || rec.Body.String() != "data: one\n\ndata: two\n\n" ||
				rec.Header().Get("X-Request-Id") != "req_1" || rec.Header().Get("Content-Type") != "text/event-stream" ||
				rec.Header().Get(access.AnswerHeader) != "" {
				t.Errorf("client got %d %q %v", rec.Code, rec.Body, rec.Header())
			}
		})
	}
}

// A replica that cannot be reached is an error with nothing written, so the
// caller can still answer.
func TestProxyUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	rec := httptest.NewRecorder()
	r := clientRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
	err := sender(t).Forward(context.Background(), rec, r, access.NewHopBody([]byte("{}")), url)
	if err == nil || rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Errorf("got %v, %d bytes, headers %v; want an error and nothing written", err, rec.Body.Len(), rec.Header())
	}
}

// A URL from the registry whose listener does not prove the cluster key
// gets the challenge and nothing else: no credential, no signed hop, no
// body; its answer never reaches the client. Relaying the challenge to a
// real replica does not help it.
func TestProxyRefusesAnUnprovenListener(t *testing.T) {
	real := newReplica(t, "r2")
	tests := []struct {
		name  string
		proof func(w http.ResponseWriter, r *http.Request)
	}{
		{"answers anything", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, `{"replica":"r2","url":"x","proof":"x"}`)
		}},
		{"relays the challenge to a real replica", func(w http.ResponseWriter, r *http.Request) {
			resp, err := http.Get(real.URL + r.URL.RequestURI())
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer resp.Body.Close()
			_, _ = io.Copy(w, resp.Body)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var evil listener
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				evil.record(r)
				if r.URL.Path == access.ProofPath {
					tt.proof(w, r)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"EVIL"}}]}`)
			}))
			defer srv.Close()
			for _, method := range []string{http.MethodPost, http.MethodGet} {
				rec := httptest.NewRecorder()
				r := clientRequest(method, "/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				err := sender(t).Forward(context.Background(), rec, r, access.NewHopBody([]byte(`{"model":"m"}`)), srv.URL)
				if !errors.Is(err, ErrUnproven) || rec.Body.Len() != 0 || len(rec.Header()) != 0 {
					t.Errorf("%s: got %v, %q, %v; want ErrUnproven and nothing written", method, err, rec.Body, rec.Header())
				}
			}
			for _, s := range evil.all() {
				if s.method != http.MethodGet || !strings.HasPrefix(s.uri, access.ProofPath+"?challenge=") || s.body != "" ||
					s.header.Get(access.HopHeader) != "" {
					t.Errorf("the listener got %s %s %q %v: want only the challenge", s.method, s.uri, s.body, s.header)
				}
				noCredential(t, "the challenge", s.header)
			}
			if len(evil.all()) == 0 {
				t.Error("the listener was not even challenged")
			}
		})
	}
}

// An answer that does not carry the receiver's signature for the hop is
// not relayed, even from a URL whose listener proved itself: nothing is
// written, the caller answers.
func TestProxyRelaysOnlySignedAnswers(t *testing.T) {
	var hops *access.Hops
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == access.ProofPath {
			hops.ServeProof(w, r) // as if the key had leaked to the listener, but not the answers
			return
		}
		_, _ = io.WriteString(w, "EVIL")
	}))
	defer srv.Close()
	var err error
	if hops, err = access.NewHops(clusterToken, "r2", srv.URL); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r := clientRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
	err = sender(t).Forward(context.Background(), rec, r, access.NewHopBody([]byte("{}")), srv.URL)
	if err == nil || !strings.Contains(err.Error(), "not signed") || rec.Body.Len() != 0 {
		t.Errorf("got %v, %q; want an unsigned answer refused, nothing written", err, rec.Body)
	}
}

// A proof names the replica's run; a replica restarted at the same URL is
// a new run, which refuses hops for the old one: the proxy proves it again
// and the request goes through.
func TestProxyProvesAgainAfterARestart(t *testing.T) {
	rp := newReplica(t, "r2-a")
	p := sender(t)
	for i, run := range []string{"r2-a", "r2-b"} {
		rp.setRun(t, run)
		rec := httptest.NewRecorder()
		r := clientRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
		if err := p.Forward(context.Background(), rec, r, access.NewHopBody([]byte("{}")), rp.URL); err != nil || rec.Code != http.StatusAccepted {
			t.Fatalf("hop %d (to %s): %v, %d", i, run, err, rec.Code)
		}
	}
	if got := rp.all(); len(got) != 2 {
		t.Errorf("the replica served %d hops, want 2", len(got))
	}
}

// A replica URL outside the peer networks is not dialed at all.
func TestProxyDialsOnlyPeerNetworks(t *testing.T) {
	rp := newReplica(t, "r2")
	p := sender(t)
	p.Client = &http.Client{Transport: &http.Transport{
		DialContext: PeerNetworks{netip.MustParsePrefix("10.0.0.0/8")}.Dialer(time.Second).DialContext}}
	rec := httptest.NewRecorder()
	r := clientRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
	err := p.Forward(context.Background(), rec, r, access.NewHopBody([]byte("{}")), rp.URL)
	if err == nil || !strings.Contains(err.Error(), "cluster_peer_networks") || rec.Body.Len() != 0 {
		t.Errorf("got %v, %q; want a refusal naming cluster_peer_networks", err, rec.Body)
	}
	if len(rp.all()) != 0 {
		t.Error("the replica outside the peer networks was reached")
	}
	for _, url := range []string{"http://user:pw@" + rp.Listener.Addr().String(), rp.URL + "/prefix", rp.URL + "?x=1", "ftp://h:1"} {
		if err := sender(t).Forward(context.Background(), httptest.NewRecorder(), r, access.NewHopBody(nil), url); err == nil ||
			!strings.Contains(err.Error(), "not an http(s) URL") {
			t.Errorf("replica URL %s: %v, want it refused", url, err)
		}
	}
}

// A client that stops reading a relayed answer ends the hop within the
// proxy's write timeout: the relay's write fails, the holder's answer is
// closed, and the holder's own write to the hop fails in turn, so neither
// replica keeps the answer. Before, the relay waited on the client for as
// long as it held the connection.
func TestProxyRelayHasAWriteDeadline(t *testing.T) {
	var hops *access.Hops
	holderDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == access.ProofPath {
			hops.ServeProof(w, r)
			return
		}
		caller, _, ok := (&access.Credentials{Keys: apikey.NewRegistry(nil), Hops: hops}).Identify(r)
		if !ok {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		defer close(holderDone)
		w.Header().Set(access.AnswerHeader, caller.HopAnswer())
		chunk := []byte(strings.Repeat("x", 32<<10))
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	var err error
	if hops, err = access.NewHops(clusterToken, "r2", srv.URL); err != nil {
		t.Fatal(err)
	}
	p := sender(t)
	p.WriteTimeout = 200 * time.Millisecond
	forwarded := make(chan error, 1)
	edge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r := clientRequest(http.MethodPost, "/v1/messages", strings.NewReader("{}"))
		forwarded <- p.Forward(context.Background(), w, r, access.NewHopBody([]byte("{}")), srv.URL)
	}))
	defer edge.Close()
	c, err := net.Dial("tcp", edge.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-forwarded:
		if err != nil {
			t.Fatalf("Forward: %v, want the answer relayed until the client stopped reading", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay still waits on a client that does not read, 10s on")
	}
	select {
	case <-holderDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder still writes its answer to the hop, 10s on")
	}
}

// A URL whose listener failed its proof is not challenged again for a
// while: a rogue registry entry costs the hops to it one challenge (and its
// wait), not one each.
func TestProxyRemembersAFailedProof(t *testing.T) {
	var evil listener
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		evil.record(r)
		_, _ = io.WriteString(w, `{"replica":"r2","url":"x","proof":"x"}`)
	}))
	defer srv.Close()
	p := sender(t)
	for i := range 3 {
		rec := httptest.NewRecorder()
		r := clientRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
		if err := p.Forward(context.Background(), rec, r, access.NewHopBody([]byte(`{}`)), srv.URL); !errors.Is(err, ErrUnproven) {
			t.Fatalf("hop %d: %v, want ErrUnproven", i, err)
		}
	}
	if n := len(evil.all()); n != 1 {
		t.Errorf("%d challenges for three hops, want 1", n)
	}
}
