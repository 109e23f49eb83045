// Package pycompat holds what poolgate keeps of the Python (FastAPI)
// gateway it replaces, so that all of it can be found, and one day deleted,
// from here. This package has the error bodies' "detail" beside "error",
// which python_compat adds (WithDetail, applied by the HTTP edge); its
// sub-packages have the rest that is compatibility alone: plainbundle (the
// gateway's plain session bundles, a base64 tar.gz of a work dir with no
// seal, as the accounts carry them) and migrate (`poolgate migrate`, which
// moves a deployment over). What remains outside is reached through small
// switches and is marked python_compat where it is served: the
// gateway's answers' shapes on the edge (handlers, handlers/responses) and
// the login routes (admin), its settings' old names (internal/config's
// legacy table and the .env reader) and the unsealed bundle format
// (session/bundle's plain reader, which the import route shares).
// docs/migrating-from-the-python-gateway.md lists all of it.
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
