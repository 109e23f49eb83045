package admin

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/session/bundle"
)

// BundleService exports and imports sealed session bundles
// (*bundle.Service).
type BundleService interface {
	// Export seals the named instance's credentials. Errors:
	// supervisor.ErrUnknownInstance, bundle.ErrNoCredentials (not logged in),
	// bundle.ErrNoKey.
	Export(ctx context.Context, instance string) (account string, sealed []byte, err error)
	// ExportPlain packs the named instance's credential files unsealed, in
	// the Python gateway's form. Errors: supervisor.ErrUnknownInstance,
	// bundle.ErrNoCredentials.
	ExportPlain(ctx context.Context, instance string) (bundle.Home, []byte, error)
	// Import verifies and installs a sealed bundle for the instance, then
	// restarts its worker; a rejected bundle leaves the worker alone. Errors:
	// supervisor.ErrUnknownInstance, bundle.ErrNoKey, bundle.ErrSeal,
	// bundle.ErrChecksum, bundle.ErrMalformed, bundle.ErrWrongAccount.
	Import(ctx context.Context, instance string, sealed []byte) error
	// ImportPlain installs an unsealed bundle (a tar.gz of a work dir, as
	// the Python gateway exported it) after the same checks. Errors:
	// supervisor.ErrUnknownInstance, bundle.ErrMalformed, bundle.ErrWrongAccount.
	ImportPlain(ctx context.Context, instance, account string, payload io.Reader) error
}

// maxBundleBody caps an import request body, in bytes: a sealed bundle is at
// most 1 MiB, 1.4 MiB in base64.
const maxBundleBody = 2 << 20

// bundleJSON is the export answer and the import body; an import takes an
// export's answer back verbatim.
type bundleJSON struct {
	Instance string `json:"instance,omitempty"`
	Account  string `json:"account,omitempty"`
	// Bundle is the sealed bundle in standard base64.
	Bundle string `json:"bundle,omitempty"`
	// Bytes is the length of the sealed bundle (decoded).
	Bytes *int `json:"bytes,omitempty"`
	// BundleB64 and RawBytes are the Python gateway's export: an unsealed
	// tar.gz of the work dir and its length (imported behind
	// Config.BundleImportPlain, exported behind Config.BundleExportPlain).
	BundleB64 string `json:"bundle_b64,omitempty"`
	RawBytes  *int   `json:"raw_bytes,omitempty"`
	// Picked: the export request named no instance, so this one was
	// picked (the first ready one).
	Picked bool `json:"picked,omitempty"`
}

// RegisterBundles adds the session bundle endpoints to r, the authenticated
// /internal group:
//
//	POST /session/export?instance=NAME -> {"instance","account","bundle","bytes"}
//	POST /session/import?instance=NAME  <- that JSON -> {"instance","account","imported":true}
func (a *Admin) RegisterBundles(r gin.IRouter, svc BundleService) {
	r.POST("/session/export", func(c *gin.Context) { a.exportBundle(c, svc) })
	r.POST("/session/import", func(c *gin.Context) { a.importBundle(c, svc) })
}

func (a *Admin) exportBundle(c *gin.Context, svc BundleService) {
	name, picked := instanceParam(c), pickedInstance(c)
	if name == "" {
		writeError(c, http.StatusBadRequest, CodeBadRequest, "instance is required (?instance=NAME)")
		return
	}
	plain, ok := a.exportFormat(c)
	if !ok {
		return
	}
	if plain {
		a.exportPlain(c, svc, name, picked)
		return
	}
	account, sealed, err := svc.Export(c.Request.Context(), name)
	if err != nil {
		a.log.Warn("admin action failed", "action", "session_export", "instance", name, "by", who(c), "err", err)
		if errors.Is(err, bundle.ErrNoKey) {
			writeError(c, http.StatusServiceUnavailable, CodeUnavailable, bundle.ErrNoKey.Error()+
				"; or, to move a login back to the Python gateway, POOLGATE_BUNDLE_EXPORT_PLAIN=true answers its unsealed form (bundle_b64)")
			return
		}
		writeBundleError(c, name, err)
		return
	}
	n := len(sealed)
	a.log.Info("admin action", "action", "session_export", "instance", name, "account", account, "bytes", n, "by", who(c))
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, bundleJSON{Instance: name, Account: account, Bundle: base64.StdEncoding.EncodeToString(sealed), Bytes: &n, Picked: picked})
}

func (a *Admin) importBundle(c *gin.Context, svc BundleService) {
	// The operator names the target in the query, which the lease gate
	// already checked; a bundle's own instance field names only where it
	// came from. Such an import streams (importstream.go).
	if name := instanceParam(c); name != "" {
		a.importNamed(c, svc, name)
		return
	}
	// Without a query the body names the target (small: the admin body
	// cap), and the lease is checked for that name here, with the body put
	// back should the action go to the holder.
	body, raw, payload, ok := decodeImport(c, a.cfg.BundleImportPlain)
	if !ok {
		return
	}
	name := body.Instance
	if name == "" {
		writeError(c, http.StatusBadRequest, CodeBadRequest, "instance is required (?instance=NAME)")
		return
	}
	if _, ok := a.pool.Snapshot().Instance(name); !ok {
		// An export from the Python gateway names its own instance, which
		// may be no instance here: say which ones there are, not guess.
		writeError(c, http.StatusNotFound, CodeUnknownInstance, "the body names instance "+name+
			", which this gateway does not have ("+strings.Join(instanceNames(a.pool), ", ")+"): name the target with ?instance=NAME")
		return
	}
	c.Request.Body, c.Request.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
	if !a.onHolder(c, name) {
		return
	}
	action, format := "session_import", "sealed"
	var err error
	if body.BundleB64 != "" {
		action, format = "session_import_plain", "plain"
		err = svc.ImportPlain(c.Request.Context(), name, cmp.Or(body.Account, c.Query("account")), bytes.NewReader(payload))
	} else {
		err = svc.Import(c.Request.Context(), name, payload)
	}
	a.imported(c, name, body, action, format, int64(len(payload)), err)
}

// imported logs an import and answers it.
func (a *Admin) imported(c *gin.Context, name string, body bundleJSON, action, format string, n int64, err error) {
	if err != nil {
		a.log.Warn("admin action failed", "action", action, "instance", name, "from_instance", body.Instance,
			"bytes", n, "by", who(c), "err", err)
		writeBundleError(c, name, err)
		return
	}
	account := instanceAccount(a.pool, name)
	a.log.Info("admin action", "action", action, "instance", name, "from_instance", body.Instance, "account", account,
		"bytes", n, "by", who(c))
	c.JSON(http.StatusOK, gin.H{"instance": name, "account": account, "imported": true, "format": format})
}

// decodeImport reads the import body (capped) and its base64 bundle, or
// writes the error: 413 over the cap, 400 for bad JSON or base64, 403 for a
// plain bundle when plain imports are off.
func decodeImport(c *gin.Context, plain bool) (body bundleJSON, raw, bundle []byte, ok bool) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBundleBody)
	raw, ok = readBody(c, "body over "+strconv.Itoa(maxBundleBody)+" bytes; a sealed bundle is at most 1 MiB")
	if !ok {
		return body, nil, nil, false
	}
	body, bundle, ok = decodeBundleBody(c, raw, plain)
	return body, raw, bundle, ok
}

// decodeBundleBody reads the import body's JSON and its base64 bundle, or
// writes the error.
func decodeBundleBody(c *gin.Context, raw []byte, plain bool) (bundleJSON, []byte, bool) {
	var body bundleJSON
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] != '{' {
		writeError(c, http.StatusBadRequest, CodeBadRequest,
			"a bare bundle (the base64 that LINGMA_SESSION_BUNDLE held) names no instance: add ?instance=NAME")
		return body, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeError(c, http.StatusBadRequest, CodeBadRequest,
			`body must be the export's JSON {"instance", "account", "bundle": "<base64>", "bytes"}: `+err.Error())
		return body, nil, false
	}
	if body.BundleB64 != "" {
		return decodePlain(c, body, plain)
	}
	if body.RawBytes != nil {
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"raw_bytes" goes with "bundle_b64" (a plain bundle); a sealed "bundle" has "bytes"`)
		return body, nil, false
	}
	if body.Bundle == "" {
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"bundle" is required (standard base64 of the sealed bundle)`)
		return body, nil, false
	}
	sealed, err := base64.StdEncoding.DecodeString(body.Bundle)
	if err != nil {
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"bundle" is not standard base64: `+err.Error())
		return body, nil, false
	}
	if body.Bytes != nil && *body.Bytes != len(sealed) {
		writeError(c, http.StatusBadRequest, CodeBadRequest,
			`"bytes" says `+strconv.Itoa(*body.Bytes)+" but the bundle decodes to "+strconv.Itoa(len(sealed))+" bytes (truncated copy?)")
		return body, nil, false
	}
	return body, sealed, true
}

// decodePlain decodes the Python gateway's export {"instance", "account",
// "raw_bytes", "bundle_b64"}.
func decodePlain(c *gin.Context, body bundleJSON, plain bool) (bundleJSON, []byte, bool) {
	switch {
	case !plain:
		writeError(c, http.StatusForbidden, CodeForbidden,
			"unsealed bundles (bundle_b64) are not accepted: set POOLGATE_BUNDLE_IMPORT_PLAIN=true to import the Python gateway's exports")
		return body, nil, false
	case body.Bundle != "":
		writeError(c, http.StatusBadRequest, CodeBadRequest, `send either "bundle" (sealed) or "bundle_b64" (plain), not both`)
		return body, nil, false
	}
	raw, err := base64.StdEncoding.DecodeString(body.BundleB64)
	if err != nil {
		writeError(c, http.StatusBadRequest, CodeBadRequest, `"bundle_b64" is not standard base64: `+err.Error())
		return body, nil, false
	}
	if body.RawBytes != nil && *body.RawBytes != len(raw) {
		writeError(c, http.StatusBadRequest, CodeBadRequest,
			`"raw_bytes" says `+strconv.Itoa(*body.RawBytes)+" but the bundle decodes to "+strconv.Itoa(len(raw))+" bytes (truncated copy?)")
		return body, nil, false
	}
	return body, raw, true
}

// writeBundleError maps the bundle service's errors to HTTP.
func writeBundleError(c *gin.Context, name string, err error) {
	status, code, msg := http.StatusInternalServerError, CodeInternal, err.Error()
	switch {
	case errors.Is(err, supervisor.ErrUnknownInstance):
		status, code, msg = http.StatusNotFound, CodeUnknownInstance, "unknown instance "+name
	case errors.Is(err, cluster.ErrNotHolder):
		status, code = http.StatusConflict, CodeNotLeaseHolder
	case errors.Is(err, bundle.ErrNoKey):
		status, code, msg = http.StatusServiceUnavailable, CodeUnavailable, bundle.ErrNoKey.Error()
	case errors.Is(err, bundle.ErrNoCredentials):
		status, code, msg = http.StatusConflict, CodeNotLoggedIn, "instance "+name+" is not logged in: "+msg
	case errors.Is(err, bundle.ErrWrongAccount):
		status, code = http.StatusConflict, CodeWrongAccount
	case errors.Is(err, bundle.ErrNoAccount):
		status, code = http.StatusBadRequest, CodeBadRequest
		msg += `: name the account it is for, "account" in the body (the instance's account name or username), or ?account= with a bare bundle`
	case errors.Is(err, bundle.ErrSeal), errors.Is(err, bundle.ErrChecksum):
		status, code = http.StatusUnprocessableEntity, CodeBundleRejected
	case errors.Is(err, bundle.ErrMalformed):
		status, code = http.StatusBadRequest, CodeBadRequest
	}
	writeError(c, status, code, msg)
}

// instanceNames lists the pool's instances, in config order.
func instanceNames(p Pool) []string {
	snap := p.Snapshot()
	out := make([]string, 0, len(snap.Instances))
	for _, in := range snap.Instances {
		out = append(out, in.Name)
	}
	return out
}

// instanceAccount names the account of an instance, for the answer.
func instanceAccount(p Pool, name string) string {
	for _, in := range p.Snapshot().Instances {
		if in.Name == name {
			return in.Account
		}
	}
	return ""
}

// exportFormat reads ?format= (sealed or plain; default plain when plain
// exports are allowed, else sealed), or answers why it can't be had.
func (a *Admin) exportFormat(c *gin.Context) (plain, ok bool) {
	switch c.Query("format") {
	case "":
		return a.cfg.BundleExportPlain, true
	case "sealed":
		return false, true
	case "plain":
		if !a.cfg.BundleExportPlain {
			writeError(c, http.StatusForbidden, CodeForbidden, "unsealed exports are off: set POOLGATE_BUNDLE_EXPORT_PLAIN=true "+
				"for the time it takes to move a login back to the Python gateway (the answer is the account's login in the clear)")
			return false, false
		}
		return true, true
	}
	writeError(c, http.StatusBadRequest, CodeBadRequest, "format is sealed or plain, not "+c.Query("format"))
	return false, false
}

// exportPlain answers the Python gateway's export: {"instance", "account"
// (the username, as it named accounts), "raw_bytes", "bundle_b64"}, whose
// bundle_b64 its LINGMA_SESSION_BUNDLE takes and poolgate's import takes
// back (with bundle_import_plain).
func (a *Admin) exportPlain(c *gin.Context, svc BundleService, name string, picked bool) {
	home, payload, err := svc.ExportPlain(c.Request.Context(), name)
	if err != nil {
		a.log.Warn("admin action failed", "action", "session_export_plain", "instance", name, "by", who(c), "err", err)
		writeBundleError(c, name, err)
		return
	}
	n := len(payload)
	account := home.Username
	if account == "" {
		account = home.Account
	}
	a.log.Warn("admin action: session exported unsealed", "action", "session_export_plain", "instance", name,
		"account", home.Account, "bytes", n, "by", who(c))
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, bundleJSON{Instance: name, Account: account, RawBytes: &n,
		BundleB64: base64.StdEncoding.EncodeToString(payload), Picked: picked})
}
