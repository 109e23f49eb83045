package daemon

import (
	"time"

	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
	"github.com/poolgate/poolgate/pool/drivers"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session/bundle"
)

// plainFormat is the adapter of internal/pycompat/plainbundle's port: the
// session bundles' format (session/bundle) of one kind's logins, which that
// package, on the ground floor, cannot import.
type plainFormat bundle.Spec

var _ plainbundle.Format = plainFormat{}

func (f plainFormat) OpenPlain(raw []byte, account string) (plainbundle.Bundle, error) {
	b, err := bundle.OpenPlain(raw, bundle.Spec(f), bundle.Limits{}, account, time.Now())
	if err != nil {
		return nil, err // never a typed nil
	}
	return b, nil
}

func (f plainFormat) HasCredentials(workDir string) bool {
	return bundle.HasCredentials(workDir, bundle.Spec(f))
}

func (f plainFormat) CredentialDir() string { return f.Dir }

// PlainFormat is the login format of the driver's workers, for `poolgate
// migrate`; false when the driver keeps no login in its work dirs.
func PlainFormat(driver string) (plainbundle.Format, bool) {
	k, ok := worker.ByName(drivers.Kinds(), driver)
	if !ok || k.Credentials.Dir == "" {
		return nil, false
	}
	return plainFormat(k.Credentials), true
}
