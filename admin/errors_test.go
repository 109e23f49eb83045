package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/session/bundle"
)

// fakePool knows one instance, "w1", which is always busy for a probe.
type fakePool struct{ restarted, imported []string }

func (f *fakePool) Snapshot() route.Snapshot {
	return route.Snapshot{Instances: []route.InstanceStatus{{Name: "w1", Account: "acct-1"}}}
}
func (f *fakePool) Ready() (bool, string) { return true, "" }

func (f *fakePool) Restart(name string) error {
	if name != "w1" {
		return supervisor.ErrUnknownInstance
	}
	f.restarted = append(f.restarted, name)
	return nil
}
func (f *fakePool) Drain(name string) error { return f.Restart(name) }
func (f *fakePool) ClearCooldown(string) (bool, error) {
	return false, nil
}
func (f *fakePool) Probe(_ context.Context, name string) (route.ProbeResult, error) {
	if name != "w1" {
		return route.ProbeResult{}, supervisor.ErrUnknownInstance
	}
	return route.ProbeResult{}, fmt.Errorf("%w: instance w1 has 1 turns in flight", route.ErrBusy)
}

func (f *fakePool) Export(context.Context, string) (string, []byte, error) {
	return "", nil, errors.New("not in this test")
}

func (f *fakePool) ExportPlain(context.Context, string) (bundle.Home, []byte, error) {
	return bundle.Home{}, nil, errors.New("not in this test")
}

func (f *fakePool) Import(_ context.Context, instance string, _ []byte) error {
	f.imported = append(f.imported, instance)
	return nil
}

func (f *fakePool) ImportPlain(_ context.Context, instance, _ string, _ io.Reader) error {
	f.imported = append(f.imported, instance)
	return nil
}

// fakeHolders says w1 is held by the replica at url ("" when by no one).
type fakeHolders struct{ url string }

func (h fakeHolders) Holder(string) (bool, string) { return false, h.url }
func (h fakeHolders) ID() string                   { return "r1" }

// adminServer serves the /internal API as the daemon wires it, with body timeout
// bodyTimeout (httpx.Deadlines around the engine); holders, when set,
// makes it a replica that holds nothing.
func adminServer(t *testing.T, holders Holders, bodyTimeout time.Duration) (*httptest.Server, *fakePool) {
	t.Helper()
	gin.SetMode(gin.TestMode)
	p := &fakePool{}
	cr := &access.Credentials{Keys: apikey.NewRegistry(nil), AdminToken: "adm"}
	var cfg Config
	if holders != nil {
		cr.Hops = testHops(t, holders.ID(), "http://r1:8080")
		cfg.Cluster = &ClusterConfig{Holders: holders, Hop: &cluster.Proxy{Hops: cr.Hops}, Forward: true}
	}
	a := New(cfg, p, p, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	e := gin.New()
	e.Use(handlers.Authorize(cr, WriteError))
	in := a.Register(e)
	a.RegisterSession(in, nil)
	a.RegisterBundles(in, p)
	srv := httptest.NewServer(httpx.Deadlines(e, bodyTimeout))
	t.Cleanup(srv.Close)
	return srv, p
}

// request is a request with the token, when given, as its Bearer.
func request(method, url, token string, body io.Reader) *http.Request {
	req := httptest.NewRequest(method, url, body)
	req.RequestURI = "" // a client's request, not a server's
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// roundTrip sends req and returns the answer with its whole body.
func roundTrip(t *testing.T, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// checkError holds an answer to the admin error shape: the status, exactly
// {"error": {"code", "message"}} with the code, and a message saying what.
func checkError(t *testing.T, res *http.Response, body []byte, status int, code, inMessage string) {
	t.Helper()
	if res.StatusCode != status {
		t.Errorf("status %d, want %d (%s)", res.StatusCode, status, body)
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("Content-Type %q, want JSON", ct)
	}
	var shape map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&shape); err != nil || len(shape) != 1 || len(shape["error"]) != 2 {
		t.Fatalf("body %s is not {\"error\": {\"code\", \"message\"}}: %v", body, err)
	}
	var eb ErrorBody
	_ = json.Unmarshal(body, &eb)
	if eb.Error.Code != code || !strings.Contains(eb.Error.Message, inMessage) {
		t.Errorf("error %+v, want code %q and a message with %q", eb.Error, code, inMessage)
	}
}

func TestErrorShape(t *testing.T) {
	srv, p := adminServer(t, nil, time.Minute)
	tests := []struct {
		name, method, path, token string
		body                      string
		status                    int
		code, inMessage           string
	}{
		{"no token", "GET", "/internal/pool", "", "", 401, CodeUnauthorized, "admin credential required"},
		{"wrong token", "GET", "/internal/pool", "nope", "", 401, CodeUnauthorized, "admin credential required"},
		{"unknown instance", "POST", "/internal/pool/ghost/restart", "adm", "", 404, CodeUnknownInstance, "unknown instance ghost"},
		{"busy", "POST", "/internal/pool/w1/probe", "adm", "", 409, CodeBusy, "turns in flight"},
		{"unknown probe", "POST", "/internal/pool/ghost/probe", "adm", "", 404, CodeUnknownInstance, "ghost"},
		{"bad body", "DELETE", "/internal/session/affinity", "adm", `{"key": 1}`, 400, CodeBadRequest, `{"api_key": "..."}`},
		{"body too large", "DELETE", "/internal/session/affinity", "adm", `{"api_key": "` + strings.Repeat("k", 5<<20) + `"}`,
			413, CodeBodyTooLarge, "bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body := roundTrip(t, request(tt.method, srv.URL+tt.path, tt.token, strings.NewReader(tt.body)))
			checkError(t, res, body, tt.status, tt.code, tt.inMessage)
		})
	}
	if len(p.restarted) != 0 {
		t.Errorf("restarted %v on failed calls", p.restarted)
	}
}

func TestSlowBodyIsABodyTimeout(t *testing.T) {
	srv, _ := adminServer(t, nil, 200*time.Millisecond)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte(`{"api_key"`)) }() // and never the rest
	req := request("DELETE", srv.URL+"/internal/session/affinity", "adm", pr)
	req.ContentLength = 100
	res, body := roundTrip(t, req)
	checkError(t, res, body, http.StatusRequestTimeout, CodeBodyTimeout, "did not arrive in time")
}

func testHops(t *testing.T, self, url string) *access.Hops {
	t.Helper()
	h, err := access.NewHops("cluster-secret", self, url)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// holderServer is replica r2's edge, serving the actions as seen: it
// verifies the hop and answers with the path, the body, who acted and
// whether any credential came along.
func holderServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	e := gin.New()
	e.Use(handlers.Authorize(&access.Credentials{Keys: apikey.NewRegistry(nil), AdminToken: "adm",
		Hops: testHops(t, "r2", "http://"+srv.Listener.Addr().String())}, WriteError))
	e.GET(access.ProofPath, gin.WrapF(testHops(t, "r2", "http://"+srv.Listener.Addr().String()).ServeProof))
	echo := func(c *gin.Context) {
		body, _ := io.ReadAll(c.Request.Body)
		c.JSON(http.StatusAccepted, gin.H{"path": c.Request.URL.RequestURI(), "body": string(body),
			"by": access.From(c.Request.Context()).Name(), "from": access.From(c.Request.Context()).Replica,
			"credential": c.GetHeader("Authorization") + c.GetHeader("X-Api-Key")})
	}
	e.POST("/internal/pool/:instance/drain", echo)
	e.POST("/internal/session/import", echo)
	srv.Config.Handler = e
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// A replica that does not hold an instance's lease forwards the action to
// the holder (a hop signed for the admin token's caller, without the token)
// and relays its answer, refuses a forwarded one, and refuses in the admin
// shape when the holder can't be reached.
func TestActionsFollowTheLease(t *testing.T) {
	holder := holderServer(t)
	srv, p := adminServer(t, fakeHolders{url: holder.URL}, time.Minute)

	res, body := roundTrip(t, request("POST", srv.URL+"/internal/pool/w1/drain?x=1", "adm", strings.NewReader(`{"a":1}`)))
	want := `{"body":"{\"a\":1}","by":"admin-token","credential":"","from":"r1","path":"/internal/pool/w1/drain?x=1"}`
	if res.StatusCode != http.StatusAccepted || string(body) != want {
		t.Errorf("forwarded drain: %d %s, want %s", res.StatusCode, body, want)
	}
	if len(p.restarted) != 0 {
		t.Errorf("the non-holder acted itself: %v", p.restarted)
	}

	// A hop from r2, whose view was stale: refused, not forwarded again.
	body0 := access.NewHopBody(nil)
	signed, err := testHops(t, "r2", "http://r2:8080").Sign("r1", "POST", "/internal/pool/w1/drain", body0,
		access.Caller{Token: "admin-token", Role: access.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	req := request("POST", srv.URL+"/internal/pool/w1/drain", "", nil)
	req.Header.Set(access.HopHeader, signed.Header)
	res, body = roundTrip(t, req)
	checkError(t, res, body, http.StatusConflict, CodeNotLeaseHolder, "does not drive w1")

	// An import that names its instance only in the body is checked against
	// that instance's lease too: it goes to the holder, body and all, and
	// nothing is imported here.
	res, body = roundTrip(t, request("POST", srv.URL+"/internal/session/import", "adm",
		strings.NewReader(`{"instance":"w1","bundle":"AAAA"}`)))
	if res.StatusCode != http.StatusAccepted || string(body) != `{"body":"{\"instance\":\"w1\",\"bundle\":\"AAAA\"}",`+
		`"by":"admin-token","credential":"","from":"r1","path":"/internal/session/import"}` {
		t.Errorf("forwarded import: %d %s", res.StatusCode, body)
	}
	if len(p.imported) != 0 {
		t.Errorf("the non-holder imported itself: %v", p.imported)
	}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	srv, _ = adminServer(t, fakeHolders{url: gone.URL}, time.Minute)
	res, body = roundTrip(t, request("POST", srv.URL+"/internal/pool/w1/restart", "adm", nil))
	checkError(t, res, body, http.StatusConflict, CodeNotLeaseHolder, "could not be reached")
}
