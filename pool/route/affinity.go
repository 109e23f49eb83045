package route

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strings"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
)

// Affinity says where a conversation's upstream session lives: the instance
// that served its earlier turns and the session id that instance returned.
// The affinity stores keep it as JSON; the short names keep Redis entries
// small and must not change, or entries stored before an upgrade are lost.
type Affinity struct {
	Instance  string `json:"i"`
	SessionID string `json:"s"`
	Model     string `json:"m,omitempty"`
	// Kind is the instance's kind of worker when the turn ran: a session
	// is never continued on a worker of another kind (the account's
	// driver changed by a reload). "" (entries from before it existed)
	// matches any.
	Kind string `json:"k,omitempty"`
	// At is when the turn that wrote the entry finished (Unix ms, the
	// writing replica's clock): of two entries for one conversation the
	// newer wins when a replica writes back what it kept while Redis was
	// away. 0 (entries from before it existed) is older than any.
	At int64 `json:"t,omitempty"`
	// Conv is the conversation's name (names.go), so that a follow-up
	// that finds the entry need not compute it again.
	Conv string `json:"c,omitempty"`
}

// SameSession reports whether a and b name the same upstream session:
// writing one over the other abandons nothing.
func (a Affinity) SameSession(b Affinity) bool {
	return a.Instance == b.Instance && a.SessionID == b.SessionID
}

// AffinityStore keeps conversation -> (instance, upstream session) entries:
// the router's port, owned here, which package session's stores (Memory,
// Redis) adapt to from the floor above. Take is get-and-delete, so two
// concurrent turns can never continue one upstream session; the finishing
// turn writes the next entry back. Any error of Take means "no entry".
type AffinityStore interface {
	TakeAffinity(ctx context.Context, key AffinityKey) (Affinity, error)
	PutAffinity(ctx context.Context, key AffinityKey, a Affinity) error
}

// AffinityKey names a conversation's affinity entry, "<owner>:<conversation>":
// owner is the caller's access.Owner.Affinity, a keyed digest of its API key (so two
// keys never share a session, and one key's entries can be flushed alone),
// conversation a hash of the model given (the router gives none, keyModel:
// an entry names its model and kind, kinds.go) and the canonical
// transcript. Only this package makes one (newAffinityKey); the stores keep
// it as it is and read its owner (OwnedBy).
type AffinityKey string

// OwnedBy reports whether k is one of owner's entries; the empty owner owns
// every entry.
func (k AffinityKey) OwnedBy(owner string) bool {
	return owner == "" || len(k) > len(owner) && k[len(owner)] == ':' && strings.HasPrefix(string(k), owner)
}

// The conversation part of a key. Canonical means what survives a client's round trip: trimmed
// text without agents' reminder blocks, tool calls by name and key-sorted
// arguments, no call ids (clients may re-mint them). The tools offered are
// not part of it: every prompt carries the tools anew, so an upstream
// session is not tied to a tool set, and agents change theirs mid-way (a
// tool search loads one, an MCP server connects).

// newAffinityKey hashes msgs under model. It feeds
// the canonical transcript to the hash through one pooled buffer of fixed
// size, so it neither allocates per message (it runs twice per follow-up
// turn) nor copies a large transcript: the key of a 10 MB prompt costs no
// 10 MB. The bytes hashed, and so the keys, are those of one buffer holding
// the whole canonical transcript.
func newAffinityKey(owner, model string, msgs []chat.Message, extra *chat.Message) AffinityKey {
	k := keyHashers.Get().(*keyHasher)
	k.h.Reset()
	k.b = k.b[:0]
	k.field(model)
	for i := range msgs {
		k.message(&msgs[i])
	}
	if extra != nil {
		k.message(extra)
	}
	k.flush()
	var sum [sha256.Size]byte
	k.h.Sum(sum[:0])
	keyHashers.Put(k)
	var out [64]byte
	n := copy(out[:], owner)
	out[n] = ':'
	hex.Encode(out[n+1:], sum[:16])
	return AffinityKey(out[:n+33])
}

// keyHasher feeds a conversation's canonical bytes to sha256 through b.
type keyHasher struct {
	h hash.Hash
	b []byte
}

var keyHashers = sync.Pool{New: func() any { return &keyHasher{h: sha256.New(), b: make([]byte, 0, 16<<10)} }}

// write adds s, through the buffer: a long s is hashed a buffer at a time.
func (k *keyHasher) write(s string) {
	for len(s) > 0 {
		if len(k.b) == cap(k.b) {
			k.flush()
		}
		n := min(len(s), cap(k.b)-len(k.b))
		k.b = append(k.b, s[:n]...)
		s = s[n:]
	}
}

func (k *keyHasher) byte(c byte) {
	if len(k.b) == cap(k.b) {
		k.flush()
	}
	k.b = append(k.b, c)
}

func (k *keyHasher) flush() {
	_, _ = k.h.Write(k.b) // a hash.Hash never fails
	k.b = k.b[:0]
}

func (k *keyHasher) field(s string) {
	k.write(s)
	k.byte(0)
}

func (k *keyHasher) message(m *chat.Message) {
	k.byte(0x1e)
	k.field(m.Role)
	k.text(m.Content)
	for _, tc := range m.ToolCalls {
		k.byte(0x1f)
		k.field(tc.Name)
		k.canonical(tc.Arguments)
	}
}

// Coding agents put <system-reminder> blocks into the transcript (the date,
// the files that changed, the skills on offer) and rewrite them from one
// turn to the next, also in messages the upstream session already holds. They
// are context for the model, not the conversation: leaving them out of the
// key lets a follow-up find its session after the agent rewrote them.
const (
	reminderOpen  = "<system-reminder>"
	reminderClose = "</system-reminder>"
)

// text adds text trimmed and without reminder blocks.
func (k *keyHasher) text(s string) {
	s = strings.TrimSpace(s)
	for {
		i := strings.Index(s, reminderOpen)
		if i < 0 {
			break
		}
		j := strings.Index(s[i:], reminderClose)
		if j < 0 {
			break
		}
		k.write(strings.TrimSpace(s[:i]))
		s = strings.TrimSpace(s[i+j+len(reminderClose):])
	}
	k.write(s)
}

// canonical adds tool arguments re-encoded with sorted keys and no spaces,
// so a client that re-encodes a call's arguments (the Anthropic SDKs send
// them back as objects) doesn't split the conversation; invalid JSON is
// added trimmed.
func (k *keyHasher) canonical(args string) {
	args = strings.TrimSpace(args)
	if args == "" || args == "{}" {
		k.write(args)
		return
	}
	c, ok := canonicalArgs.get(args)
	if !ok {
		c = string(canonicalize(nil, args))
		canonicalArgs.put(args, c)
	}
	k.write(c)
}

func canonicalize(b []byte, args string) []byte {
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return append(b, args...)
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return append(b, args...)
	}
	return append(b, out...)
}

// lastAssistant returns the index of the newest assistant message, -1 if none:
// everything up to it is the part of the transcript an upstream session can
// already hold; what follows is the new turn.
func lastAssistant(msgs []chat.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chat.RoleAssistant {
			return i
		}
	}
	return -1
}

// affinityHint returns a stable hint for spreading new conversations: the
// hash of the client's hint, else of the system prompt, else of the first
// message (0: none).
func affinityHint(req *chat.Request) uint64 {
	if req.AffinityHint != "" {
		return textHint("u:", req.AffinityHint)
	}
	for _, m := range req.Messages {
		if m.Role == chat.RoleSystem && m.Content != "" {
			return textHint("s:", m.Content)
		}
	}
	if len(req.Messages) > 0 {
		return textHint("f:", req.Messages[0].Content)
	}
	return 0
}

// argsCache remembers canonical tool arguments: a conversation's calls come
// back with every later turn, so each is canonicalized once, not per turn.
type argsCache struct {
	mu sync.Mutex
	m  map[string]string
}

// canonicalArgs is process-wide like keyHashers: a pure function's memo, with
// no state a caller could observe.
var canonicalArgs = &argsCache{m: map[string]string{}}

const argsCacheMax = 8192

func (c *argsCache) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *argsCache) put(k, v string) {
	if len(k) > 4096 {
		return // big payloads are rare and not worth the memory
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= argsCacheMax {
		clear(c.m)
	}
	c.m[k] = v
}
