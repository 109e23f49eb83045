// Package pycompat holds what poolgate keeps of the Python (FastAPI)
// gateway it replaces, in poolgate's own layers' terms: its plain session
// bundles (a base64 tar.gz of a work dir, with no seal) as the accounts
// carry them, and its error bodies ("detail" beside "error"), which
// python_compat adds. The daemon's wiring, the HTTP edge and `poolgate
// migrate` call it; it imports neither gin nor a protocol. The rest of the
// compatibility (its settings' names, its answers' shapes) sits where each
// is served, marked python_compat, and docs/migrating-from-the-python-gateway.md
// lists all of it.
package pycompat

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/session/bundle"
)

// PlainBundles opens the accounts' plain bundles (session_bundle_plain, or
// the Python gateway's LINGMA_ACCOUNTS session_bundle and
// LINGMA_SESSION_BUNDLE), by account name, so that a bad one stops the
// start with its account named. spec is the driver's credential layout.
func PlainBundles(cfg config.Config, spec bundle.Spec) (map[string]*bundle.Bundle, error) {
	out := map[string]*bundle.Bundle{}
	for _, acct := range cfg.Accounts {
		s := strings.TrimSpace(acct.SessionBundlePlain)
		if s == "" {
			continue
		}
		b, err := OpenPlain(s, acct.Name, spec)
		if err != nil {
			return nil, fmt.Errorf("account %s: session_bundle_plain: %w", acct.Name, err)
		}
		out[acct.Name] = b
	}
	return out, nil
}

// OpenPlain reads a plain bundle given as its base64 or as the Python
// gateway's export answer ({"bundle_b64": ...}), for account, whose
// credential files spec names.
func OpenPlain(s, account string, spec bundle.Spec) (*bundle.Bundle, error) {
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

// InstallPlain installs b into workDir unless it holds credentials
// already (the files spec names); it reports whether it did. A nil b
// installs nothing.
func InstallPlain(b *bundle.Bundle, workDir string, spec bundle.Spec) (bool, error) {
	if b == nil || bundle.HasCredentials(workDir, spec) {
		return false, nil
	}
	if err := b.Install(workDir); err != nil {
		return false, err
	}
	return true, nil
}

// WithDetail returns an error body {"error": X, ...} with the Python
// gateway's {"detail": {"error": X}} beside it: FastAPI wrapped every
// error of its routes in "detail", and its scripts read it there, while
// OpenAI's SDKs read "error". A body that is not such an object, Anthropic's
// shape ({"type": "error", ...}, which the Python gateway answered on its
// Messages routes too), or one with a "detail" already (a replica added
// it), comes back as it is.
func WithDetail(body []byte) []byte {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return body
	}
	e, ok := doc["error"]
	_, detailed := doc["detail"]
	_, anthropic := doc["type"]
	if !ok || detailed || anthropic {
		return body
	}
	trimmed := bytes.TrimRight(body, " \n\r\t")
	out := make([]byte, 0, len(trimmed)+len(e)+24)
	out = append(out, trimmed[:len(trimmed)-1]...) // up to the closing brace
	out = append(out, `,"detail":{"error":`...)
	out = append(out, e...)
	out = append(out, "}}"...)
	return append(out, body[len(trimmed):]...)
}
