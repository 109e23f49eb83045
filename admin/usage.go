package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/usage"
)

// UsageSource answers usage queries.
type UsageSource interface {
	Query(ctx context.Context, q usage.Query) ([]usage.Row, error)
}

// RequestSource lists the request log.
type RequestSource interface {
	List(ctx context.Context, f requestlog.Filter) ([]requestlog.Entry, error)
}

// UsageAnswer is the body of GET /internal/usage.
type UsageAnswer struct {
	// By is "day" or "hour": what a row's bucket is.
	By string `json:"by"`
	// Rows are the totals of each key and account in each bucket, oldest
	// bucket first.
	Rows []usage.Row `json:"rows"`
	// Totals sums the rows.
	Totals usage.Totals `json:"totals"`
}

// RequestsAnswer is the body of GET /internal/requests.
type RequestsAnswer struct {
	// Requests are the matching entries, newest first.
	Requests []requestlog.Entry `json:"requests"`
}

// RegisterUsage serves the usage counters and the request log, each key's
// own to a key with role user, everyone's to viewers and admins (prompts and
// answers, when the log keeps them, to admins only):
//
//	GET /internal/usage?key=&account=&from=&to=&by=day|hour
//	GET /internal/requests?key=&account=&status=&limit=
//
// from and to are a day (2026-11-23), an hour (2026-11-23T19) or an RFC 3339
// time, UTC, both included; status is a code (429), a class (4xx, 5xx) or
// "errors" (400 and up).
func (a *Admin) RegisterUsage(r gin.IRouter, u UsageSource, l RequestSource) {
	r.GET("/usage", func(c *gin.Context) {
		q := usage.Query{Key: c.Query("key"), Account: c.Query("account")}
		if !ownScope(c, &q.Key) {
			return
		}
		var err error
		if q.From, err = parseWhen(c.Query("from"), false); err != nil {
			writeError(c, http.StatusBadRequest, CodeBadRequest, "from: "+err.Error())
			return
		}
		if q.To, err = parseWhen(c.Query("to"), true); err != nil {
			writeError(c, http.StatusBadRequest, CodeBadRequest, "to: "+err.Error())
			return
		}
		if !q.From.IsZero() && !q.To.IsZero() && q.To.Before(q.From) {
			writeError(c, http.StatusBadRequest, CodeBadRequest, "to is before from")
			return
		}
		by := c.DefaultQuery("by", "day")
		switch by {
		case "day":
		case "hour":
			q.Hourly = true
		default:
			writeError(c, http.StatusBadRequest, CodeBadRequest, `by must be "day" or "hour"`)
			return
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
		defer cancel()
		rows, err := u.Query(ctx, q)
		if err != nil {
			writeError(c, http.StatusServiceUnavailable, CodeUnavailable, "usage store: "+err.Error())
			return
		}
		if rows == nil {
			rows = []usage.Row{}
		}
		c.JSON(http.StatusOK, UsageAnswer{By: by, Rows: rows, Totals: usage.Sum(rows)})
	})
	r.GET("/requests", func(c *gin.Context) {
		f := requestlog.Filter{Key: c.Query("key"), Account: c.Query("account")}
		if !ownScope(c, &f.Key) {
			return
		}
		if err := parseStatus(c.Query("status"), &f); err != nil {
			writeError(c, http.StatusBadRequest, CodeBadRequest, "status: "+err.Error())
			return
		}
		if s := c.Query("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				writeError(c, http.StatusBadRequest, CodeBadRequest, "limit must be a positive integer")
				return
			}
			f.Limit = n
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), 5*time.Second)
		defer cancel()
		es, err := l.List(ctx, f)
		if err != nil {
			writeError(c, http.StatusServiceUnavailable, CodeUnavailable, "request log: "+err.Error())
			return
		}
		if es == nil {
			es = []requestlog.Entry{}
		}
		if !access.From(c.Request.Context()).SeesContent() {
			for i := range es {
				es[i].Prompt, es[i].Answer = "", ""
			}
		}
		c.JSON(http.StatusOK, RequestsAnswer{Requests: es})
	})
}

// ownScope holds a caller that sees only its own records (a key with role
// user) to its own key: key is set to its name, and asking for another's is
// refused (403). Viewers and admins see every key's.
func ownScope(c *gin.Context, key *string) bool {
	caller := access.From(c.Request.Context())
	if caller.SeesAll() {
		return true
	}
	own := caller.KeyName()
	if *key != "" && *key != own {
		writeError(c, http.StatusForbidden, CodeForbidden, "API key "+own+" reads only its own records (key="+own+")")
		return false
	}
	*key = own
	return true
}

// parseWhen reads a day, an hour or an RFC 3339 time (UTC). A bare day or
// hour as the end of a range means its last instant.
func parseWhen(s string, end bool) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, f := range []struct {
		layout string
		span   time.Duration
	}{{"2006-01-02", 24 * time.Hour}, {"2006-01-02T15", time.Hour}} {
		if t, err := time.ParseInLocation(f.layout, s, time.UTC); err == nil {
			if end {
				t = t.Add(f.span - time.Nanosecond)
			}
			return t, nil
		}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errInvalidWhen
	}
	return t.UTC(), nil
}

var errInvalidWhen = errors.New("want a day (2026-11-23), an hour (2026-11-23T19) or an RFC 3339 time")

// parseStatus reads the request log's status filter into f.
func parseStatus(s string, f *requestlog.Filter) error {
	switch {
	case s == "":
		return nil
	case s == "errors":
		f.Errors = true
		return nil
	case len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] >= '1' && s[0] <= '5':
		f.Class = int(s[0] - '0')
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return errInvalidStatus
	}
	f.Status = n
	return nil
}

var errInvalidStatus = errors.New(`want a status code (429), a class (4xx) or "errors"`)
