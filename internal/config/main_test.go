package config

import (
	"os"
	"slices"
	"testing"

	"github.com/poolgate/poolgate/pool/claudecode"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/qoder"
)

// TestMain registers the kinds' sections, as the table of kinds
// (pool/drivers, which imports this package) does for the daemon: the
// tests here read and document its keys.
func TestMain(m *testing.M) {
	Register(lingma.Kind.Name, lingma.Kind.Section)
	Register(claudecode.Kind.Name, claudecode.Kind.Section)
	Register(qoder.Kind.Name, qoder.Kind.Section)
	os.Exit(m.Run())
}

// unregister removes the section name (for tests).
func unregister(name string) {
	registered.Lock()
	defer registered.Unlock()
	delete(registered.make, name)
	registered.names = slices.DeleteFunc(registered.names, func(n string) bool { return n == name })
}
