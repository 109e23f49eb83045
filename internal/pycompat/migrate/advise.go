package migrate

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"

	"github.com/poolgate/poolgate/internal/config"
)

// advise says what migrate set for the old scripts, and prints the lines it
// did not write: each gives some caller a power over the accounts, which is
// the operator's to grant.
func (m *migration) advise(cfg config.Config, env []string) {
	w := m.report
	if m.compatSet {
		fmt.Fprintln(w, "python_compat: true is set: the Python gateway's answer shapes for its scripts and clients (served_by and latency, "+
			"output_text and data: [DONE], detail in errors, 401 when no account is logged in, its auto-login answers); "+
			"turn it off once nothing reads them")
	}
	lines := m.linesToAdd(cfg, env)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "\nLines to add to the configuration (migrate did not write them: each lets some caller do more; the values are fresh random ones):")
	for _, l := range lines {
		fmt.Fprintf(w, "\n# %s\n%s\n", l.why, l.line)
	}
}

// addLine is one suggested setting and the reason for it.
type addLine struct{ line, why string }

func (m *migration) linesToAdd(cfg config.Config, env []string) []addLine {
	var out []addLine
	if cfg.BundleKey == "" {
		out = append(out, addLine{"bundle_key: " + secret(32),
			"Session exports are sealed with it: without it POST /internal/session/export answers 503 (the Python gateway answered an unsealed " +
				"bundle_b64), and with Redis it keeps each login for other replicas and a fresh volume. Keep it: what it sealed opens with it only."})
	}
	if cfg.MetricsToken == "" && !cfg.MetricsPublic && len(cfg.APIKeys) > 0 {
		out = append(out, addLine{"metrics_token: " + secret(24),
			"The Python gateway let any API key scrape /metrics; poolgate takes this token (or a viewer or admin key): put it in the Prometheus job's authorization."})
	}
	if cfg.AdminToken == "" && len(cfg.APIKeys) > 0 && !cfg.APIKeys.AdminKeys() {
		out = append(out, addLine{"admin_token: " + secret(24),
			"Without ADMIN_TOKEN the Python gateway let any API key use /internal/*; poolgate's admin API answers 403 to a user's key: give the " +
				"admin scripts this token (or make their key role: admin in api_keys)."})
	}
	if _, set := lookup(env, "POOLGATE_BUNDLE_EXPORT_PLAIN"); !set {
		out = append(out, addLine{"# bundle_export_plain: true",
			"Only while moving a login back to the Python gateway: POST /internal/session/export then answers its unsealed bundle_b64 " +
				"(its LINGMA_SESSION_BUNDLE takes it), to admin callers. The answer is the login in the clear: turn it off after."})
	}
	return out
}

// secret is n random bytes in standard base64.
func secret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.StdEncoding.EncodeToString(b)
}
