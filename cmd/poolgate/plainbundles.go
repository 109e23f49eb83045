package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/session/bundle"
)

// Plain bundles are the Python gateway's session bundles: base64 of a
// tar.gz of a whole work dir, unsealed. An account may carry one
// (session_bundle_plain, or the Python gateway's LINGMA_ACCOUNTS
// session_bundle and LINGMA_SESSION_BUNDLE); its credential files are
// installed into the account's work dir before a start when the dir has
// none, so the first start needs no login and no bundle_key.

// plainBundles opens the accounts' plain bundles (by account name), so a
// bad one stops the start with its account named.
func plainBundles(cfg config.Config) (map[string]*bundle.Bundle, error) {
	out := map[string]*bundle.Bundle{}
	for _, acct := range cfg.Accounts {
		s := strings.TrimSpace(acct.SessionBundlePlain)
		if s == "" {
			continue
		}
		b, err := openPlain(s, acct.Name)
		if err != nil {
			return nil, fmt.Errorf("account %s: session_bundle_plain: %w", acct.Name, err)
		}
		out[acct.Name] = b
	}
	return out, nil
}

// openPlain reads a plain bundle given as its base64 or as the Python
// gateway's export answer ({"bundle_b64": ...}).
func openPlain(s, account string) (*bundle.Bundle, error) {
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
	return bundle.OpenPlain(raw, bundle.LingmaSpec(), bundle.Limits{}, account, time.Now())
}

// installPlain installs b into workDir unless it holds credentials
// already; it reports whether it did.
func installPlain(b *bundle.Bundle, workDir string) (bool, error) {
	if b == nil || bundle.HasCredentials(workDir, bundle.LingmaSpec()) {
		return false, nil
	}
	if err := b.Install(workDir); err != nil {
		return false, err
	}
	return true, nil
}
