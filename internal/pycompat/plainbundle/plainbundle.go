// Package plainbundle reads the Python gateway's plain session bundles (a
// base64 tar.gz of a whole work dir, with no seal) as the accounts carry them
// (session_bundle_plain, or the gateway's LINGMA_ACCOUNTS session_bundle and
// LINGMA_SESSION_BUNDLE), and installs them into a work dir that has no
// login yet. The daemon and `poolgate migrate` use it.
//
// It sits on the ground floor, below the session bundles' format
// (session/bundle) it hands the tar.gz to, so it owns the port it needs of
// that format (Format) and the wiring gives the adapter
// (cmd/poolgate/internal/daemon's plainFormat, for the configured kind's
// credential layout).
package plainbundle

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/internal/config"
)

// Format is the session bundles' format of one kind of worker's login.
type Format interface {
	// OpenPlain reads raw, the tar.gz of a whole work dir, as account's
	// login.
	OpenPlain(raw []byte, account string) (Bundle, error)
	// HasCredentials reports whether workDir holds a login already.
	HasCredentials(workDir string) bool
	// CredentialDir is the credential directory of a work dir (one path
	// element).
	CredentialDir() string
}

// Bundle is a plain bundle, opened.
type Bundle interface {
	Install(workDir string) error
}

// Load opens the accounts' plain bundles (session_bundle_plain, or
// the Python gateway's LINGMA_ACCOUNTS session_bundle and
// LINGMA_SESSION_BUNDLE), by account name, so that a bad one stops the
// start with its account named.
func Load(cfg config.Config, f Format) (map[string]Bundle, error) {
	out := map[string]Bundle{}
	for _, acct := range cfg.Accounts {
		s := strings.TrimSpace(acct.SessionBundlePlain)
		if s == "" {
			continue
		}
		b, err := Open(s, acct.Name, f)
		if err != nil {
			return nil, fmt.Errorf("account %s: session_bundle_plain: %w", acct.Name, err)
		}
		out[acct.Name] = b
	}
	return out, nil
}

// Open reads a plain bundle given as its base64 or as the Python
// gateway's export answer ({"bundle_b64": ...}), for account.
func Open(s, account string, f Format) (Bundle, error) {
	if strings.HasPrefix(s, "{") {
		var exp struct {
			BundleB64 string `json:"bundle_b64"`
		}
		if err := json.Unmarshal([]byte(s), &exp); err != nil {
			return nil, err
		}
		s = exp.BundleB64
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not standard base64: %w", err)
	}
	return f.OpenPlain(raw, account)
}

// Install installs b into workDir unless it holds credentials
// already; it reports whether it did. A nil b installs nothing.
func Install(b Bundle, workDir string, f Format) (bool, error) {
	if b == nil || f.HasCredentials(workDir) {
		return false, nil
	}
	if err := b.Install(workDir); err != nil {
		return false, err
	}
	return true, nil
}
