package access

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// TestOwnersAreKeyed: the digests depend on the key, so they are the same
// on every replica with the same key and say nothing to whoever lacks it;
// they are not the plain SHA-256 digests the store used to be named by.
func TestOwnersAreKeyed(t *testing.T) {
	a, b := NewOwners([]byte("key-a")), NewOwners([]byte("key-a"))
	other := NewOwners([]byte("key-b"))
	got := a.Of("sk-1")
	if got != b.Of("sk-1") {
		t.Errorf("one key made two digests of one secret: %+v, %+v", got, b.Of("sk-1"))
	}
	if got == other.Of("sk-1") || got == a.Of("sk-2") {
		t.Errorf("%+v: another key, or another secret, made the same digests", got)
	}
	plain := sha256.Sum256([]byte("sk-1"))
	prefixed := sha256.Sum256([]byte("poolgate-owner\x00sk-1"))
	if got.Responses == hex.EncodeToString(plain[:16]) || got.Affinity == hex.EncodeToString(prefixed[:8]) {
		t.Errorf("%+v: the plain SHA-256 digests", got)
	}
	if len(got.Affinity) != 16 || len(got.Responses) != 32 || strings.Trim(got.Affinity+got.Responses, "0123456789abcdef") != "" {
		t.Errorf("%+v: want 8 and 16 bytes of hex", got)
	}
	if none := a.Of(""); none.Responses != "" || none.Affinity == "" {
		t.Errorf("no secret: %+v, want an affinity digest of its own and no Responses", none)
	}
	var unset *Owners
	if unset.Of("sk-1") != OwnerOf("sk-1") {
		t.Error("a nil *Owners does not make OwnerOf's digests")
	}
}
