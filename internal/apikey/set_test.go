package apikey

import (
	"testing"
)

func TestSetLookup(t *testing.T) {
	s := NewSet([]Key{{Name: "alice", Secret: "sk-a", RPM: 5}, {Name: "bob", Secret: "sk-b"}})
	for _, tt := range []struct {
		secret, want string
	}{{"sk-a", "alice"}, {"sk-b", "bob"}, {"sk-c", ""}, {"sk-", ""}, {"sk-aa", ""}, {"", ""}} {
		k, ok := s.Lookup(tt.secret)
		if got := ""; ok {
			got = k.Name
			if got != tt.want {
				t.Errorf("Lookup(%q) = %q, want %q", tt.secret, got, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("Lookup(%q) found nothing, want %q", tt.secret, tt.want)
		}
	}
	if k, _ := s.Lookup("sk-a"); !k.Limited() {
		t.Error("alice has an rpm limit")
	}
	if k, _ := s.Lookup("sk-b"); k.Limited() {
		t.Error("bob has no limit")
	}
	if _, ok := NewSet(nil).Lookup("anything"); ok {
		t.Error("the empty set accepted a key")
	}
}

func TestRegistrySwapKeepsAdmittedKeys(t *testing.T) {
	r := NewRegistry([]Key{{Name: "old", Secret: "sk-old"}})
	k, ok := r.Load().Lookup("sk-old")
	if !ok {
		t.Fatal("sk-old not accepted")
	}
	r.Store([]Key{{Name: "new", Secret: "sk-new"}})
	if _, ok := r.Load().Lookup("sk-old"); ok {
		t.Error("a revoked key is still accepted")
	}
	if _, ok := r.Load().Lookup("sk-new"); !ok {
		t.Error("an added key is not accepted")
	}
	if k.Name != "old" {
		t.Errorf("a key admitted before the swap is now %q, want old", k.Name)
	}
}
