package access

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/apikey"
)

// A request one replica forwards to another (a client's turn to the
// replica that holds its conversation, an admin action to the holder of an
// instance's lease) carries no credential of the client's, nor the admin
// token, nor the cluster token: it carries the caller as the sending edge
// established it, signed with a key derived from the cluster token and
// bound to the request (method, path and query, the body's digest and
// length), to the receiving replica's run, to a short expiry and to a nonce
// the receiver remembers until then. The receiver's edge verifies it
// (Credentials.Identify) before anything trusts it, and signs its answer
// with the nonce, so the sender never relays an answer that did not come
// from a replica of its cluster. Before it sends anything, the sender has
// the replica at a URL prove that it holds the key (ProofPath): a URL read
// from Redis is not trusted for being there.
const (
	// HopHeader carries the signed hop.
	HopHeader = "X-Poolgate-Hop"
	// AnswerHeader carries the receiver's signature of a hop's answer.
	AnswerHeader = "X-Poolgate-Hop-Answer"
	// ProofPath is the route a replica proves it holds the cluster key
	// on: GET ProofPath?challenge=C answers a Proof.
	ProofPath = "/cluster/proof"
)

// Headers of the hops of older versions, which carried the cluster token
// itself: refused wherever they appear, so a client can never pass for a
// replica with them, and removed at the edge.
const (
	legacyHopHeader   = "X-Poolgate-Forwarded-By"
	legacyTokenHeader = "X-Poolgate-Cluster-Token"
)

const (
	// hopLifetime is how long a hop is valid after it was signed: it is
	// sent at once, so this covers the sending itself and the clocks of
	// two replicas of one network.
	hopLifetime = 30 * time.Second
	// maxSkew is how far ahead of the receiver's clock a sender's may be.
	maxSkew = 30 * time.Second
	// MaxHopBody bounds a forwarded request's body: above the largest
	// body any route takes (a plain bundle import).
	MaxHopBody = 128 << 20
)

// Hops signs and verifies this replica's hops. Its keys are derived from
// the cluster token (HKDF-SHA256), one per use, so a signature of one kind
// is never accepted as another. It remembers the nonces of the hops it
// accepted until they expire. It is safe for concurrent use.
type Hops struct {
	// Self is this replica's run id (unique per process start), the
	// audience of the hops sent to it; URL is its advertised URL.
	Self, URL string
	// Now is the clock hops are signed and checked by (nil: time.Now).
	Now func() time.Time

	sign, proof, answer []byte
	nonces              *nonces
}

// NewHops derives the hop keys from the cluster token for the replica run
// self, advertised at url.
func NewHops(clusterToken, self, url string) (*Hops, error) {
	if clusterToken == "" || self == "" {
		return nil, errors.New("hops need the cluster token and this replica's id")
	}
	h := &Hops{Self: self, URL: strings.TrimRight(url, "/"), nonces: newNonces(maxNonces)}
	for _, k := range []struct {
		to   *[]byte
		info string
	}{{&h.sign, "poolgate hop v1: request"}, {&h.proof, "poolgate hop v1: peer proof"}, {&h.answer, "poolgate hop v1: answer"}} {
		key, err := hkdf.Key(sha256.New, []byte(clusterToken), []byte("poolgate cluster"), k.info, sha256.Size)
		if err != nil {
			return nil, err
		}
		*k.to = key
	}
	return h, nil
}

// HopCaller is the caller as the sending edge established it: what the
// receiver needs to scope and account the request without the caller's
// credential. The limits are the ones the sender admitted it under.
type HopCaller struct {
	HasKey       bool   `json:"has_key,omitempty"`
	Key          string `json:"key,omitempty"` // the key's name
	Role         Role   `json:"role,omitempty"`
	Token        string `json:"token,omitempty"`
	Open         bool   `json:"open,omitempty"`
	RPM          int    `json:"rpm,omitempty"`
	Concurrency  int    `json:"concurrency,omitempty"`
	TokensPerDay int64  `json:"tokens_per_day,omitempty"`
	Owner        Owner  `json:"owner"`
}

// hopClaims is what a hop's signature covers.
type hopClaims struct {
	From    string    `json:"from"`
	To      string    `json:"to"`
	Method  string    `json:"method"`
	URI     string    `json:"uri"`
	Body    string    `json:"body"` // hex SHA-256
	Length  int64     `json:"length"`
	Expires int64     `json:"exp"` // Unix milliseconds
	Nonce   string    `json:"nonce"`
	Caller  HopCaller `json:"caller"`
}

// hopCaller is c as a hop carries it.
func hopCaller(c Caller) HopCaller {
	hc := HopCaller{Role: c.Role, Token: c.Token, Open: c.Open, Owner: c.Owner}
	if k := c.Key; k != nil {
		hc.HasKey, hc.Key, hc.RPM, hc.Concurrency, hc.TokensPerDay = true, k.Name, k.RPM, k.Concurrency, k.TokensPerDay
	}
	return hc
}

// caller is the Caller a verified hop from replica from names.
func (hc HopCaller) caller(from string) Caller {
	c := Caller{Role: hc.Role, Token: hc.Token, Open: hc.Open, Replica: from, Owner: hc.Owner}
	if hc.HasKey {
		c.Key = &apikey.Key{Name: hc.Key, Role: string(hc.Role), RPM: hc.RPM, Concurrency: hc.Concurrency,
			TokensPerDay: hc.TokensPerDay}
	}
	return c
}

// Signed is one signed hop, ready to go out.
type Signed struct {
	// Header is HopHeader's value.
	Header string
	// Answer is AnswerHeader's value an answer from the receiver carries.
	Answer string
}

// Sign signs a hop of the request method uri (as it goes on the wire) with
// body to the replica run to, for caller.
func (h *Hops) Sign(to, method, uri string, body *HopBody, caller Caller) (Signed, error) {
	var n [16]byte
	_, _ = rand.Read(n[:])
	claims := hopClaims{From: h.Self, To: to, Method: method, URI: uri, Body: body.Digest(), Length: body.Len(),
		Expires: h.now().Add(hopLifetime).UnixMilli(), Nonce: base64.RawURLEncoding.EncodeToString(n[:]),
		Caller: hopCaller(caller)}
	b, err := json.Marshal(claims)
	if err != nil {
		return Signed{}, err
	}
	payload := base64.RawURLEncoding.EncodeToString(b)
	return Signed{Header: "v1." + payload + "." + mac(h.sign, "v1."+payload),
		Answer: mac(h.answer, to+"\n"+claims.Nonce)}, nil
}

func (h *Hops) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func mac(key []byte, msg string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// ErrHop is the error (wrapped) of every hop this replica refuses.
var ErrHop = errors.New("hop refused")

// verify checks the hop r carries, header only: signature, audience,
// request, expiry and nonce (remembered from here on). The body is
// checked against the claims by readBody.
func (h *Hops) verify(r *http.Request) (hopClaims, error) {
	var c hopClaims
	version, rest, _ := strings.Cut(r.Header.Get(HopHeader), ".")
	payload, sig, ok := strings.Cut(rest, ".")
	if version != "v1" || !ok || !hmac.Equal([]byte(sig), []byte(mac(h.sign, "v1."+payload))) {
		return c, fmt.Errorf("%w: its signature is not this cluster's", ErrHop)
	}
	b, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, fmt.Errorf("%w: it does not decode", ErrHop)
	}
	now := h.now()
	exp := time.UnixMilli(c.Expires)
	switch {
	case c.To != h.Self:
		return c, fmt.Errorf("%w: it is addressed to replica %s, this is %s", ErrHop, c.To, h.Self)
	case c.Method != r.Method || c.URI != r.RequestURI:
		return c, fmt.Errorf("%w: it was signed for another request", ErrHop)
	case !now.Before(exp):
		return c, fmt.Errorf("%w: it expired %s ago (are the replicas' clocks in sync?)", ErrHop, now.Sub(exp).Round(time.Millisecond))
	case exp.After(now.Add(hopLifetime + maxSkew)):
		return c, fmt.Errorf("%w: it expires too far ahead (are the replicas' clocks in sync?)", ErrHop)
	case c.Length < 0 || c.Length > MaxHopBody || r.ContentLength != c.Length:
		return c, fmt.Errorf("%w: its body's length is not the one signed", ErrHop)
	}
	if err := h.nonces.add(c.Nonce, c.Expires, now.UnixMilli()); err != nil {
		return c, fmt.Errorf("%w: %w", ErrHop, err)
	}
	return c, nil
}

// answerFor is AnswerHeader's value for an accepted hop's answer.
func (h *Hops) answerFor(c hopClaims) string { return mac(h.answer, h.Self+"\n"+c.Nonce) }

// Proof is a replica's answer on ProofPath: its run id and advertised URL,
// signed with the challenge.
type Proof struct {
	Replica string `json:"replica"`
	URL     string `json:"url"`
	Proof   string `json:"proof"`
}

// maxChallenge bounds a challenge a replica signs.
const maxChallenge = 128

// Prove answers challenge as this replica.
func (h *Hops) Prove(challenge string) (Proof, error) {
	if challenge == "" || len(challenge) > maxChallenge {
		return Proof{}, fmt.Errorf("a challenge is 1 to %d characters", maxChallenge)
	}
	return Proof{Replica: h.Self, URL: h.URL, Proof: mac(h.proof, challenge+"\n"+h.Self+"\n"+h.URL)}, nil
}

// Challenge returns a fresh challenge for a peer.
func Challenge() string { return rand.Text() }

// CheckProof reports whether p answers challenge from a replica of this
// cluster advertised at url, the URL the challenge was sent to: a proof
// that another replica gave (a listener relaying the challenge) names that
// replica's URL, not the one asked.
func (h *Hops) CheckProof(challenge, url string, p Proof) bool {
	want := mac(h.proof, challenge+"\n"+p.Replica+"\n"+p.URL)
	return p.Replica != "" && strings.TrimRight(url, "/") == p.URL && hmac.Equal([]byte(p.Proof), []byte(want))
}

// ServeProof is ProofPath's handler.
func (h *Hops) ServeProof(w http.ResponseWriter, r *http.Request) {
	p, err := h.Prove(r.URL.Query().Get("challenge"))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	_ = json.NewEncoder(w).Encode(p)
}
