package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"
)

// AffinityFlusher removes conversation affinity entries.
type AffinityFlusher interface {
	// FlushAffinity removes the entries of one owner (access.Owner's
	// Affinity of an API key), or all entries for owner "".
	FlushAffinity(ctx context.Context, owner string) (int, error)
}

// RegisterSession adds the session endpoints to the /internal group.
func (a *Admin) RegisterSession(r gin.IRouter, store AffinityFlusher) {
	r.DELETE("/session/affinity", func(c *gin.Context) {
		// The key travels in the body, never in the query string, which
		// would land in access logs.
		var body struct {
			APIKey *string `json:"api_key"`
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 64<<10)
		raw, ok := readBody(c, `body over 64 KiB; it is {"api_key": "..."} or empty`)
		if !ok {
			return
		}
		if len(raw) > 0 {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
				writeError(c, http.StatusBadRequest, CodeBadRequest, `body must be {"api_key": "..."} or empty: `+err.Error())
				return
			}
		}
		owner, scope := "", "all"
		if body.APIKey != nil {
			owner, scope = a.cfg.Owners.Of(*body.APIKey).Affinity, "api_key"
		}
		n, err := store.FlushAffinity(c.Request.Context(), owner)
		if err != nil {
			writeError(c, http.StatusInternalServerError, CodeInternal, "flush affinity: "+err.Error())
			return
		}
		a.log.Info("admin action", "action", "flush_affinity", "scope", scope, "removed", n, "by", who(c))
		c.JSON(http.StatusOK, gin.H{"flushed": n, "scope": scope})
	})
}
