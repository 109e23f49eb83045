package admin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/usage"
)

func TestParseWhen(t *testing.T) {
	day := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		give    string
		end     bool
		want    time.Time
		wantErr error
	}{
		{give: "", want: time.Time{}},
		{give: "", end: true, want: time.Time{}},
		{give: "2026-11-23", want: day},
		{give: "2026-11-23", end: true, want: day.Add(24*time.Hour - time.Nanosecond)},
		{give: "2026-11-23T19", want: day.Add(19 * time.Hour)},
		{give: "2026-11-23T19", end: true, want: day.Add(20*time.Hour - time.Nanosecond)},
		{give: "2026-11-23T19:30:00+02:00", want: day.Add(17*time.Hour + 30*time.Minute)},
		{give: "2026-11-23T19:30:00Z", end: true, want: day.Add(19*time.Hour + 30*time.Minute)},
		{give: "yesterday", wantErr: errInvalidWhen},
		{give: "2026-13-01", wantErr: errInvalidWhen},
		{give: "2026-11-23T24", wantErr: errInvalidWhen},
		{give: "2026-11-23 19:30:00", wantErr: errInvalidWhen},
		{give: "1763924400", wantErr: errInvalidWhen},
	}
	for _, tt := range tests {
		got, err := parseWhen(tt.give, tt.end)
		if !got.Equal(tt.want) || got.Location() != time.UTC || !errors.Is(err, tt.wantErr) {
			t.Errorf("parseWhen(%q, %v) = %v (%v), %v; want %v, %v", tt.give, tt.end, got, got.Location(), err, tt.want, tt.wantErr)
		}
	}
}

func TestParseStatus(t *testing.T) {
	tests := []struct {
		give    string
		want    requestlog.Filter
		wantErr error
	}{
		{give: "", want: requestlog.Filter{}},
		{give: "errors", want: requestlog.Filter{Errors: true}},
		{give: "1xx", want: requestlog.Filter{Class: 1}},
		{give: "4xx", want: requestlog.Filter{Class: 4}},
		{give: "5xx", want: requestlog.Filter{Class: 5}},
		{give: "100", want: requestlog.Filter{Status: 100}},
		{give: "429", want: requestlog.Filter{Status: 429}},
		{give: "599", want: requestlog.Filter{Status: 599}},
		{give: "0xx", wantErr: errInvalidStatus},
		{give: "6xx", wantErr: errInvalidStatus},
		{give: "4XX", wantErr: errInvalidStatus},
		{give: "xx", wantErr: errInvalidStatus},
		{give: "99", wantErr: errInvalidStatus},
		{give: "600", wantErr: errInvalidStatus},
		{give: "-429", wantErr: errInvalidStatus},
		{give: "error", wantErr: errInvalidStatus},
	}
	for _, tt := range tests {
		var got requestlog.Filter
		err := parseStatus(tt.give, &got)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("parseStatus(%q) = %+v, %v; want %+v, %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

// fakeStores answers usage and request-log queries with fixed data, or
// err, and remembers what it was asked.
type fakeStores struct {
	rows    []usage.Row
	entries []requestlog.Entry
	err     error

	mu      sync.Mutex
	queries []usage.Query
	filters []requestlog.Filter
}

var (
	_ UsageSource   = (*fakeStores)(nil)
	_ RequestSource = (*fakeStores)(nil)
)

func (f *fakeStores) Query(_ context.Context, q usage.Query) ([]usage.Row, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries = append(f.queries, q)
	return f.rows, f.err
}

func (f *fakeStores) List(_ context.Context, flt requestlog.Filter) ([]requestlog.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.filters = append(f.filters, flt)
	return f.entries, f.err
}

func (f *fakeStores) asked() ([]usage.Query, []requestlog.Filter) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries, f.filters
}

// usageServer serves /internal with the usage endpoints over f.
func usageServer(t *testing.T, f *fakeStores) *httptest.Server {
	t.Helper()
	gin.SetMode(gin.TestMode)
	p := &fakePool{}
	a := New(Config{}, p, p, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	e := gin.New()
	e.Use(Edge("adm"))
	a.RegisterUsage(a.Register(e), f, f)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv
}

// Wrong parameters are a 400 in the admin error shape, and the store is
// not asked; a failing store is a 503; no token is a 401.
func TestUsageBadRequests(t *testing.T) {
	f := &fakeStores{}
	srv := usageServer(t, f)
	tests := []struct {
		give, token     string
		status          int
		code, inMessage string
	}{
		{"/internal/usage?from=yesterday", "adm", 400, CodeBadRequest, "from: want a day"},
		{"/internal/usage?to=2026-11-23T24", "adm", 400, CodeBadRequest, "to: want a day"},
		{"/internal/usage?from=2026-11-23&to=2026-11-22", "adm", 400, CodeBadRequest, "to is before from"},
		{"/internal/usage?from=2026-11-23T19&to=2026-11-23T18", "adm", 400, CodeBadRequest, "to is before from"},
		{"/internal/usage?by=week", "adm", 400, CodeBadRequest, `by must be "day" or "hour"`},
		{"/internal/requests?status=6xx", "adm", 400, CodeBadRequest, "status: want a status code"},
		{"/internal/requests?status=oops", "adm", 400, CodeBadRequest, "status: want a status code"},
		{"/internal/requests?limit=0", "adm", 400, CodeBadRequest, "limit must be a positive integer"},
		{"/internal/requests?limit=-3", "adm", 400, CodeBadRequest, "limit must be a positive integer"},
		{"/internal/requests?limit=ten", "adm", 400, CodeBadRequest, "limit must be a positive integer"},
		{"/internal/usage", "", 401, CodeUnauthorized, "admin credential required"},
		{"/internal/requests", "nope", 401, CodeUnauthorized, "admin credential required"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			res, body := roundTrip(t, request("GET", srv.URL+tt.give, tt.token, nil))
			checkError(t, res, body, tt.status, tt.code, tt.inMessage)
		})
	}
	if qs, fs := f.asked(); len(qs) != 0 || len(fs) != 0 {
		t.Errorf("the stores were asked %+v and %+v for refused requests", qs, fs)
	}

	down := usageServer(t, &fakeStores{err: errors.New("redis: connection refused")})
	for _, path := range []string{"/internal/usage", "/internal/requests"} {
		res, body := roundTrip(t, request("GET", down.URL+path, "adm", nil))
		checkError(t, res, body, http.StatusServiceUnavailable, CodeUnavailable, "connection refused")
	}
}

// Good parameters reach the stores as queries, and the answers carry the
// rows, their totals and the entries (empty lists, never null).
func TestUsageQueries(t *testing.T) {
	rows := []usage.Row{
		{Bucket: "2026-11-22", Key: "alice", Account: "sim-1", Totals: usage.Totals{Requests: 2, InputTokens: 10, OutputTokens: 4, Errors: 1}},
		{Bucket: "2026-11-23", Key: "alice", Account: "", Totals: usage.Totals{Requests: 1, Errors: 1, Reused: 0}},
		{Bucket: "2026-11-23", Key: "alice", Account: "sim-2", Totals: usage.Totals{Requests: 3, InputTokens: 6, OutputTokens: 9, Reused: 2}},
	}
	entries := []requestlog.Entry{{RequestID: "r2", Key: "alice", Status: 429}, {RequestID: "r1", Key: "alice", Status: 200}}
	f := &fakeStores{rows: rows, entries: entries}
	srv := usageServer(t, f)
	day := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

	var hourly, u UsageAnswer
	getJSON(t, srv.URL+"/internal/usage?key=alice&account=sim-2&from=2026-11-20&to=2026-11-23T19&by=hour", &hourly)
	if hourly.By != "hour" {
		t.Errorf("by = %q, want %q", hourly.By, "hour")
	}
	getJSON(t, srv.URL+"/internal/usage?from=2026-11-20T06:00:00%2B02:00", &u)
	want := UsageAnswer{By: "day", Rows: rows, Totals: usage.Totals{Requests: 6, InputTokens: 16, OutputTokens: 13, Errors: 2, Reused: 2}}
	if !reflect.DeepEqual(u, want) {
		t.Errorf("usage answer = %+v, want %+v", u, want)
	}
	var r RequestsAnswer
	getJSON(t, srv.URL+"/internal/requests?key=alice&account=sim-1&status=4xx&limit=5", &r)
	getJSON(t, srv.URL+"/internal/requests?status=errors", &r)
	getJSON(t, srv.URL+"/internal/requests?status=429", &r)
	if !reflect.DeepEqual(r.Requests, entries) {
		t.Errorf("requests answer = %+v, want %+v", r.Requests, entries)
	}

	qs, fs := f.asked()
	wantQs := []usage.Query{
		{Key: "alice", Account: "sim-2", From: day, To: day.Add(3*24*time.Hour + 20*time.Hour - time.Nanosecond), Hourly: true},
		{From: day.Add(4 * time.Hour)},
	}
	if !reflect.DeepEqual(qs, wantQs) {
		t.Errorf("usage queries = %+v, want %+v", qs, wantQs)
	}
	wantFs := []requestlog.Filter{{Key: "alice", Account: "sim-1", Class: 4, Limit: 5}, {Errors: true}, {Status: 429}}
	if !reflect.DeepEqual(fs, wantFs) {
		t.Errorf("request log filters = %+v, want %+v", fs, wantFs)
	}

	empty := usageServer(t, &fakeStores{})
	tests := []struct{ give, want string }{
		{"/internal/usage", `{"by":"day","rows":[],"totals":{"requests":0,"input_tokens":0,"output_tokens":0,"errors":0,"reused":0}}`},
		{"/internal/requests", `{"requests":[]}`},
	}
	for _, tt := range tests {
		_, body := roundTrip(t, request("GET", empty.URL+tt.give, "adm", nil))
		if string(body) != tt.want {
			t.Errorf("GET %s with nothing stored = %s, want %s", tt.give, body, tt.want)
		}
	}
}

// getJSON GETs url with the admin token and decodes a 200's body into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	res, body := roundTrip(t, request("GET", url, "adm", nil))
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %d %s, want 200", url, res.StatusCode, body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
}
