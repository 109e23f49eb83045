// Package pycompat holds what poolgate keeps of the Python (FastAPI)
// gateway it replaces, all of it, so that it can be found here, and one day
// deleted: this folder, and the wiring's pycompat.go
// (cmd/poolgate/internal/daemon) with the lines that call it. The rest of
// the house reaches it only through small hooks of its own, which say
// "another gateway's" and name no Python:
//
//   - the settings' old names (ReadSettings, config.Load's Legacy), read
//     whether python_compat is on or not;
//   - the error bodies' "detail" beside "error" (Errors, around each
//     listener, and WithDetail);
//   - the answer APIs' shapes (Shapes: relay.Options.Status's 401 for a
//     logged-out pool, openaichat's served_by and latency, the Responses
//     API's forms and endings; handlers/protocols' Compat);
//   - the auto-login routes' answers (LoginStart, LoginStatus;
//     admin.LoginCompat);
//   - the plain session bundles the accounts carry (plainbundle) and
//     `poolgate migrate` (migrate).
//
// It sits on the ground floor with the rest of internal/: it imports
// nothing above internal/, so where it needs something of a floor above
// (the session bundles' format, the table of kinds, the login runner and
// the pool behind the login answers) it owns the port and the wiring's
// pycompat.go holds the adapter. Only its tests start the house (the
// daemon, through cmd/poolgate/daemontest) to check it end to end. What
// stays outside is poolgate's own that the Python gateway's format shares:
// session/bundle's plain reader (the bundle import route's too) and the
// python_compat setting. docs/migrating-from-the-python-gateway.md lists
// all of it.
package pycompat

import (
	"bytes"
	"encoding/json"
)

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
