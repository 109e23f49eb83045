package cluster

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/access"
)

// Proxy carries a request to another replica: the one hop a request may
// make, for the API (a turn another replica holds) and the admin API (an
// action on an account another replica drives) alike. A replica's URL
// comes from Redis, which is not trusted for it: before anything is sent
// there, the replica at the URL proves it holds the cluster key
// (access.ProofPath), and its answer is relayed only when the receiver
// signed it for this hop. The hop itself carries the caller, signed
// (access.Hops), never the client's credentials, the admin token or the
// cluster token; it keeps the request id and the trace headers. It is safe
// for concurrent use.
type Proxy struct {
	// Hops signs the hops and checks the peers' proofs.
	Hops *access.Hops
	// Client sends the hops and the challenges (nil: http.DefaultClient).
	// Its transport should dial only the peer networks (PeerNetworks);
	// the proxy never follows a redirect.
	Client *http.Client
	// WriteTimeout bounds each write of the holder's answer to the client
	// (default 30s): a client that stops reading ends the hop, which lets
	// go of the holder's answer on both replicas.
	WriteTimeout time.Duration

	mu     sync.Mutex
	peers  map[string]peer      // proven replicas by URL
	failed map[string]time.Time // URLs whose proof failed, until when that stands
}

// peer is a replica that proved it holds the cluster key at a URL.
type peer struct {
	id    string
	until time.Time
}

const (
	// proofTTL is how long a proof is taken for the replica at a URL: a
	// hop within it goes without a new challenge. The answer of every hop
	// is signed anyway.
	proofTTL = 30 * time.Second
	// proofTimeout bounds a challenge.
	proofTimeout = 5 * time.Second
	// maxPeers bounds the proofs kept, and the failures: registry
	// entries an attacker wrote could otherwise grow the maps.
	maxPeers = 64
	// failedTTL is how long a URL whose proof failed is not challenged
	// again: a registry entry pointing at a listener that cannot prove
	// itself (or never answers) costs one challenge, not one per hop.
	failedTTL = 10 * time.Second
)

// hopByHop headers describe one connection, not the request, so they are
// not carried over (nor is the length, which the body sets again).
var hopByHop = map[string]bool{"Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true}

// credentialHeaders are the client's credentials: never carried to
// another replica, which learns the caller from the signed hop.
var credentialHeaders = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "X-Api-Key": true,
	"X-Goog-Api-Key": true, "Cookie": true}

// requestIDHeader carries the request id across the hop.
const requestIDHeader = "X-Request-Id"

// Forward sends r, with body, to the replica at base, as the caller the
// edge put into r's context, and copies its answer to w as it comes,
// flushing each piece. It returns an error only when nothing was written
// to w (the replica could not be reached, did not prove it holds the
// cluster key, or answered without the hop's signature), so the caller may
// still answer the request itself. The request id is the one already set
// on w's headers.
func (p *Proxy) Forward(ctx context.Context, w http.ResponseWriter, r *http.Request, body *access.HopBody, base string) error {
	base = strings.TrimRight(base, "/")
	if err := checkBase(base); err != nil {
		return err
	}
	for retried := false; ; retried = true {
		id, fresh, err := p.peer(ctx, base)
		if err != nil {
			return err
		}
		resp, answer, err := p.send(ctx, w, r, body, base, id)
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare([]byte(resp.Header.Get(access.AnswerHeader)), []byte(answer)) == 1 {
			relay(w, resp, cmp.Or(p.WriteTimeout, 30*time.Second))
			return nil
		}
		_ = resp.Body.Close()
		p.forget(base)
		// A proof taken before the replica restarted names its old run,
		// which refuses the hop: prove again, once.
		if fresh || retried {
			return fmt.Errorf("hop to %s: its answer (%d) is not signed by the replica that proved itself there", base, resp.StatusCode)
		}
	}
}

// checkBase refuses a replica URL that is not a plain http(s) base URL: no
// user info, path, query or fragment (a registry entry is not trusted).
func checkBase(base string) error {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("hop: replica URL %q is not an http(s) URL of a host and port", base)
	}
	return nil
}

// send sends one hop of r to the replica run id at base and returns its
// answer and the answer signature it must carry.
func (p *Proxy) send(ctx context.Context, w http.ResponseWriter, r *http.Request, body *access.HopBody, base, id string) (*http.Response, string, error) {
	var rd io.Reader = http.NoBody
	if body.Len() > 0 {
		rd = body.Reader()
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, base+r.URL.RequestURI(), rd)
	if err != nil {
		return nil, "", err
	}
	req.ContentLength = body.Len()
	for k, vs := range r.Header {
		if !hopByHop[k] && !credentialHeaders[k] && !strings.HasPrefix(k, "X-Poolgate-") {
			req.Header[k] = vs
		}
	}
	if reqID := w.Header().Get(requestIDHeader); reqID != "" {
		req.Header.Set(requestIDHeader, reqID)
	}
	signed, err := p.Hops.Sign(id, req.Method, req.URL.RequestURI(), body, access.From(r.Context()))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set(access.HopHeader, signed.Header)
	resp, err := p.client().Do(req)
	if err != nil {
		return nil, "", fmt.Errorf("hop to %s: %w", base, err)
	}
	return resp, signed.Answer, nil
}

// relay copies the holder's answer to w as it comes, each write within
// timeout.
func relay(w http.ResponseWriter, resp *http.Response, timeout time.Duration) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		// This replica's request id is set already: the same id.
		if !hopByHop[k] && k != requestIDHeader && k != access.AnswerHeader {
			w.Header()[k] = vs
		}
	}
	rc := http.NewResponseController(w)
	// Not every ResponseWriter supports deadlines (a test's recorder); the
	// listeners' connections also give a write of their own a deadline.
	_ = rc.SetWriteDeadline(time.Now().Add(timeout))
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(timeout))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return // the client went away or stopped reading; closing the body ends the holder's answer
			}
			_ = rc.Flush()
		}
		if rerr != nil {
			return
		}
	}
}

// client is the hop's HTTP client, which never follows a redirect: a
// redirect would take the signed hop somewhere unproven.
func (p *Proxy) client() *http.Client {
	c := http.DefaultClient
	if p.Client != nil {
		c = p.Client
	}
	nc := *c
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &nc
}

// peer returns the run id of the replica that proved it holds the cluster
// key at base, challenging it when no proof is at hand (fresh is then
// true).
func (p *Proxy) peer(ctx context.Context, base string) (id string, fresh bool, err error) {
	p.mu.Lock()
	pr, ok := p.peers[base]
	failedUntil := p.failed[base]
	p.mu.Unlock()
	now := time.Now()
	if ok && now.Before(pr.until) {
		return pr.id, false, nil
	}
	if now.Before(failedUntil) {
		return "", false, fmt.Errorf("hop to %s: %w (a challenge failed %s ago)", base, ErrUnproven,
			failedTTL-failedUntil.Sub(now).Round(time.Second))
	}
	id, err = p.challenge(ctx, base)
	p.mu.Lock()
	defer p.mu.Unlock()
	now = time.Now()
	if err != nil {
		if ctx.Err() == nil { // the caller's own end says nothing of the peer
			p.failed = keep(p.failed, base, now.Add(failedTTL), func(t time.Time) bool { return now.Before(t) })
		}
		return "", false, err
	}
	delete(p.failed, base)
	p.peers = keep(p.peers, base, peer{id: id, until: now.Add(proofTTL)}, func(pr peer) bool { return now.Before(pr.until) })
	return id, true, nil
}

// keep puts v at k in m (made when nil), first making room when m holds
// maxPeers entries: those no longer live go, then any.
func keep[V any](m map[string]V, k string, v V, live func(V) bool) map[string]V {
	if m == nil {
		m = map[string]V{}
	}
	if len(m) >= maxPeers {
		for u, e := range m {
			if !live(e) {
				delete(m, u)
			}
		}
		for u := range m {
			if len(m) < maxPeers {
				break
			}
			delete(m, u)
		}
	}
	m[k] = v
	return m
}

// forget drops the proof of the replica at base.
func (p *Proxy) forget(base string) {
	p.mu.Lock()
	delete(p.peers, base)
	p.mu.Unlock()
}

// ErrUnproven is returned (wrapped) by Forward when the replica at a URL
// did not prove it holds the cluster key: nothing was sent there but the
// challenge.
var ErrUnproven = errors.New("the replica did not prove it holds the cluster key")

// challenge asks the replica at base to prove it holds the cluster key,
// and returns its run id. The challenge carries nothing but itself.
func (p *Proxy) challenge(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, proofTimeout)
	defer cancel()
	c := access.Challenge()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+access.ProofPath+"?challenge="+url.QueryEscape(c), nil)
	if err != nil {
		return "", err
	}
	resp, err := p.client().Do(req)
	if err != nil {
		return "", fmt.Errorf("hop to %s: %w", base, err)
	}
	defer resp.Body.Close()
	var proof access.Proof
	err = json.NewDecoder(io.LimitReader(resp.Body, 4<<10)).Decode(&proof)
	if resp.StatusCode != http.StatusOK || err != nil || !p.Hops.CheckProof(c, base, proof) {
		return "", fmt.Errorf("hop to %s: %w (answered %d)", base, ErrUnproven, resp.StatusCode)
	}
	return proof.Replica, nil
}
