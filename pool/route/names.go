package route

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
)

// Conversation names. A conversation is named by what stays the same for
// all its turns: its owner, its model and its transcript up to and
// including the first user message (canonical, as for affinity keys). So
// every turn of it carries the same name, whether or not it found its
// upstream session, and two conversations that open alike (the same system
// prompt and first question, from one key) share a name.
//
// The name is an HMAC under a key of the deployment, cut to 48 bits: it
// cannot be reversed, and without the key it cannot be recomputed from a
// guessed prompt. Replicas given the same key name a conversation alike,
// so its turns can be followed across them.

// nameBytes is how much of the HMAC a name keeps (12 hex digits).
const nameBytes = 6

// namer computes conversation names under one key.
type namer struct {
	macs sync.Pool // of hash.Hash: HMAC-SHA256 under the key
}

// newNamer returns a namer under key; an empty key is replaced by a random
// one, good for this process only.
func newNamer(key []byte) *namer {
	if len(key) == 0 {
		key = make([]byte, 32)
		_, _ = rand.Read(key) // never fails (crypto/rand)
	}
	key = append([]byte(nil), key...)
	return &namer{macs: sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

// name returns the name of the conversation msgs belong to.
func (n *namer) name(owner, model string, msgs []chat.Message) string {
	end := len(msgs)
	for i := range msgs {
		if msgs[i].Role == chat.RoleUser {
			end = i + 1
			break
		}
	}
	mac := n.macs.Get().(hash.Hash)
	mac.Reset()
	k := keyHashers.Get().(*keyHasher)
	plain := k.h
	k.h, k.b = mac, k.b[:0]
	k.field(owner)
	k.field(model)
	for i := range msgs[:end] {
		k.message(&msgs[i])
	}
	k.flush()
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	k.h = plain
	keyHashers.Put(k)
	n.macs.Put(mac)
	return hex.EncodeToString(sum[:nameBytes])
}
