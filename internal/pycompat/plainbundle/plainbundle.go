// Package plainbundle reads the Python gateway's plain session bundles (a
// base64 tar.gz of a whole work dir, with no seal) as the accounts carry them
// (session_bundle_plain, or the gateway's LINGMA_ACCOUNTS session_bundle and
// LINGMA_SESSION_BUNDLE), and installs them into a work dir that has no
// login yet. The daemon and `poolgate migrate` use it.
package plainbundle

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/session/bundle"
)

// Load opens the accounts' plain bundles (session_bundle_plain, or
// the Python gateway's LINGMA_ACCOUNTS session_bundle and
// LINGMA_SESSION_BUNDLE), by account name, so that a bad one stops the
// start with its account named. spec is the driver's credential layout.
func Load(cfg config.Config, spec bundle.Spec) (map[string]*bundle.Bundle, error) {
	out := map[string]*bundle.Bundle{}
	for _, acct := range cfg.Accounts {
		s := strings.TrimSpace(acct.SessionBundlePlain)
		if s == "" {
			continue
		}
		b, err := Open(s, acct.Name, spec)
		if err != nil {
			return nil, fmt.Errorf("account %s: session_bundle_plain: %w", acct.Name, err)
		}
		out[acct.Name] = b
	}
	return out, nil
}

// Open reads a plain bundle given as its base64 or as the Python
// gateway's export answer ({"bundle_b64": ...}), for account, whose
// credential files spec names.
func Open(s, account string, spec bundle.Spec) (*bundle.Bundle, error) {
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
	return bundle.OpenPlain(raw, spec, bundle.Limits{}, account, time.Now())
}

// Install installs b into workDir unless it holds credentials
// already (the files spec names); it reports whether it did. A nil b
// installs nothing.
func Install(b *bundle.Bundle, workDir string, spec bundle.Spec) (bool, error) {
	if b == nil || bundle.HasCredentials(workDir, spec) {
		return false, nil
	}
	if err := b.Install(workDir); err != nil {
		return false, err
	}
	return true, nil
}
