package access

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// Owner tells the caller's conversations (affinity) and stored Responses
// apart from every other caller's: digests of the secret it presented,
// never the secret, computed by the edge that saw it and carried on a hop.
// They name keys in Redis (an affinity entry, a key's quota of stored
// Responses) and sit in stored records, so they are keyed (Owners): who
// reads Redis learns nothing of the API keys from them, nor can test a
// guessed key against them.
type Owner struct {
	Affinity  string `json:"affinity"`
	Responses string `json:"responses"`
}

// Owners makes the Owner of a secret with HMAC-SHA256 under a key every
// replica of a deployment shares (the daemon derives it from the cluster
// token, or keeps one in a single node's data dir), so the replicas name a
// caller alike. It is safe for concurrent use; a nil *Owners makes the
// digests under the empty key (OwnerOf).
type Owners struct {
	macs sync.Pool // hash.Hash: HMAC-SHA256 under the key
}

// NewOwners returns the Owners of key.
func NewOwners(key []byte) *Owners {
	key = append([]byte(nil), key...)
	return &Owners{macs: sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

// unkeyed makes OwnerOf's digests; like route's hash pools it is a pure
// function's memo, holding nothing a caller could observe.
var unkeyed = NewOwners(nil)

// OwnerOf is the Owner of secret under the empty key, as a nil *Owners
// makes it: for tests, which need the digests a default edge computes.
func OwnerOf(secret string) Owner { return unkeyed.Of(secret) }

// Of is the Owner of the caller that presented secret ("" for none: an
// Affinity of its own, no Responses).
func (o *Owners) Of(secret string) Owner {
	if o == nil {
		o = unkeyed
	}
	out := Owner{Affinity: o.digest("poolgate-owner\x00", secret, 8)}
	if secret != "" {
		out.Responses = o.digest("poolgate-responses\x00", secret, 16)
	}
	return out
}

// digest is the hex of the first n bytes of the MAC of purpose and secret.
func (o *Owners) digest(purpose, secret string, n int) string {
	m := o.macs.Get().(hash.Hash)
	m.Reset()
	_, _ = m.Write([]byte(purpose))
	_, _ = m.Write([]byte(secret))
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	o.macs.Put(m)
	return hex.EncodeToString(sum[:n])
}
