// Package redact takes the secrets out of a setting's value before an error
// or a log line shows it: the user info of a URL (a Redis password, an
// OTLP collector's credentials) and the values of query parameters that
// carry a password or token. It is a leaf: config, redisconn and
// cmd/poolgate/internal/daemon use it wherever they echo a URL.
package redact

import "strings"

// Mask stands in for what was taken out.
const Mask = "REDACTED"

// URL returns raw with its user info and the values of its secret query
// parameters replaced by Mask. It works on text, not on a parsed URL,
// because the values it matters most for are the ones that do not parse (a
// password with a bare '%', '/' or '#' in it) and whose parse errors would
// quote the password. It errs on the side of hiding: everything between
// "://" and the last '@' is user info, and a secret parameter's value runs
// to the next '&', taking any following piece without '=' with it (a
// password with a bare '&').
func URL(raw string) string {
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 {
		start = i + 3
	}
	if at := strings.LastIndex(raw, "@"); at >= start {
		raw = raw[:start] + Mask + raw[at:]
	}
	q := strings.IndexByte(raw[start:], '?')
	if q < 0 {
		return raw
	}
	q += start
	var b strings.Builder
	b.WriteString(raw[:q+1])
	inSecret, first := false, true
	for part := range strings.SplitSeq(raw[q+1:], "&") {
		name, _, hasValue := strings.Cut(part, "=")
		switch {
		case !hasValue && inSecret:
			continue // the rest of a secret value that held a bare '&'
		case hasValue && secretParam(name):
			part, inSecret = name+"="+Mask, true
		default:
			inSecret = false
		}
		if !first {
			b.WriteByte('&')
		}
		b.WriteString(part)
		first = false
	}
	return b.String()
}

// secretParam reports whether a query parameter's value is a secret: a
// password (Redis Sentinel's password=, sentinel_password=), a token or a
// key.
func secretParam(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"pass", "pwd", "secret", "token", "key", "auth", "credential"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}
