package lingmarpc

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
)

// Redacted starts every placeholder Redact leaves. A replay takes a
// recorded value that starts with it as matching any value.
const Redacted = "<redacted"

// secretWords mark a key whose value is a credential, wherever it is.
var secretWords = []string{"token", "cookie", "password", "passwd", "secret", "authorization", "apikey", "api_key",
	"credential", "nonce", "encrypt", "cosykey", "signature"}

// accountKeys of auth/status's answer that are kept: the rest names or
// identifies the account.
var accountKeys = map[string]bool{"status": true, "userType": true, "cloudType": true, "privacyPolicyAgreed": true,
	"whitelist": true}

// Redact returns a copy of body, one JSON-RPC message, with what must not
// leave the host replaced by placeholders: every credential (a key that
// names a token, a cookie, a password, a nonce, ...), the query values of
// URLs, who the account is (auth/status's names and ids) and, unless
// prompts is set (debug capture), the prompt text (chat/ask's questionText
// and chatContext, the session title made from it). method names the
// message's method; for a response, the method of the request it answers.
// Empty values stay empty: they say something a replay needs (logged out).
// A body that is not JSON comes back as one placeholder.
func Redact(body []byte, method string, prompts bool) []byte {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return []byte(`"` + Redacted + ` unreadable message>"`)
	}
	walk(m)
	if params, ok := m["params"].(map[string]any); ok && !prompts {
		redactPrompt(method, params)
	}
	if res, ok := m["result"].(map[string]any); ok && method == "auth/status" {
		for k, v := range res {
			if s, ok := v.(string); ok && s != "" && !accountKeys[k] {
				res[k] = Redacted + ">"
			}
		}
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(m) // decoded JSON always encodes
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

// walk redacts credentials and URL queries throughout v.
func walk(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			switch {
			case secret(k):
				if s, ok := val.(string); !ok || s != "" {
					x[k] = Redacted + ">"
				}
			case isString(val):
				x[k] = redactURL(val.(string))
			default:
				walk(val)
			}
		}
	case []any:
		for i, val := range x {
			if s, ok := val.(string); ok {
				x[i] = redactURL(s)
			} else {
				walk(val)
			}
		}
	}
}

func secret(key string) bool {
	k := strings.ToLower(key)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

func isString(v any) bool { _, ok := v.(string); return ok }

// redactURL keeps an http(s) URL's scheme, host and path and the names of
// its query parameters, and redacts their values (a login URL's state, a
// callback's auth and token).
func redactURL(s string) string {
	if !strings.HasPrefix(s, "http://") && !strings.HasPrefix(s, "https://") || !strings.Contains(s, "?") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil {
		return Redacted + " url>"
	}
	q := u.Query()
	for k := range q {
		q[k] = []string{Redacted + ">"}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// redactPrompt replaces the prompt text in the params of method.
func redactPrompt(method string, params map[string]any) {
	prompt := func(k string, m map[string]any) {
		if s, ok := m[k].(string); ok && s != "" {
			m[k] = Redacted + ":prompt " + strconv.Itoa(len(s)) + " bytes>"
		}
	}
	switch method {
	case "chat/ask":
		prompt("questionText", params)
		if cc, ok := params["chatContext"].(map[string]any); ok {
			prompt("text", cc)
		}
	case "session/title/update":
		prompt("sessionTitle", params)
	}
}
