package hostile_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/testenv"
)

// The authorization matrix: every route x every caller, against a single
// node, two replicas sharing a real redis-server, and the keyless demo, each
// cell as docs/security.md's tables say. The tables are the one source: this
// test reads them, and TestAuthzTableIsTheRouteTable holds them to
// access.Routes.

const (
	userKey      = "sk-user-alice"
	viewerKey    = "sk-viewer-vic"
	opsKey       = "sk-admin-ops"
	matrixAdmin  = "adm-matrix"
	metricsToken = "met-matrix"
	clusterToken = "ct-matrix"
)

// matrixKeys are the keys of the keyed deployments: a user, a viewer, an
// admin, and a second user.
var matrixKeys = `POOLGATE_API_KEYS=[{"name":"alice","key":"` + userKey + `"},{"name":"vic","key":"` + viewerKey +
	`","role":"viewer"},{"name":"ops","key":"` + opsKey + `","role":"admin"},{"name":"bob","key":"sk-user-bob"}]`

const matrixAccounts = `POOLGATE_ACCOUNTS=[{"name":"acct-1","username":"u1","password":"pw"},{"name":"acct-2","username":"u2","password":"pw"}]`

// callerHeaders are the headers each column of the tables sends.
func callerHeaders(column string) map[string]string {
	bearer := func(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }
	switch column {
	case "none":
		return nil
	case "user":
		return bearer(userKey)
	case "viewer":
		return bearer(viewerKey)
	case "admin key":
		return bearer(opsKey)
	case "admin token":
		return bearer(matrixAdmin)
	case "metrics token":
		return bearer(metricsToken)
	case "forged hop": // and a hop signed with another key (signHop)
		return map[string]string{"Authorization": "Bearer " + userKey}
	case "replica": // a hop signed with the cluster's key, naming no caller (signHop)
		return nil
	case "cross-site":
		return map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	}
	panic("unknown column " + column)
}

// authzTable is one table of docs/security.md: the callers, and each
// route's cells.
type authzTable struct {
	columns []string
	rows    []authzRow
}

type authzRow struct {
	method, path string
	note         string
	cells        map[string]string
}

func repoFile(t testing.TB, rel string) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..", rel)
}

// readAuthzTable parses the table after <!-- authz:NAME --> in
// docs/security.md.
func readAuthzTable(t testing.TB, name string) authzTable {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "docs/security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- authz:"+name+" -->")
	if !ok {
		t.Fatalf("docs/security.md has no <!-- authz:%s --> table", name)
	}
	rest, _, _ = strings.Cut(rest, "<!-- /authz -->")
	var tab authzTable
	for _, line := range strings.Split(strings.TrimSpace(rest), "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case tab.columns == nil:
			tab.columns = cells[1:]
			continue
		case strings.HasPrefix(cells[0], "---"):
			continue
		}
		route, note, _ := strings.Cut(strings.Trim(cells[0], " "), "` ")
		method, path, ok := strings.Cut(strings.Trim(route, "`"), " ")
		if !ok || len(cells) != len(tab.columns)+1 {
			t.Fatalf("docs/security.md: malformed row %q", line)
		}
		row := authzRow{method: method, path: path, note: note, cells: map[string]string{}}
		for i, c := range tab.columns {
			row.cells[c] = cells[i+1]
		}
		tab.rows = append(tab.rows, row)
	}
	if len(tab.rows) == 0 {
		t.Fatalf("docs/security.md: the %s table is empty", name)
	}
	return tab
}

// target is where a row's request goes.
type target struct {
	api, pprof string
	clustered  bool
	self       string // the replica's run id (clustered)
}

// signHop makes req a hop to tg's replica signed with a key from token,
// carrying no caller: as the replica column's request (token is the
// cluster's) or the forged hop's (another).
func signHop(t *testing.T, tg target, req *http.Request, token string) {
	t.Helper()
	var body []byte
	if req.Body != nil {
		body = []byte("{}") // as matrixRequest writes it
	}
	to := tg.self
	if to == "" {
		to = "r-other"
	}
	h, err := access.NewHops(token, "r-matrix", "http://r-matrix:8080")
	if err != nil {
		t.Fatal(err)
	}
	s, err := h.Sign(to, req.Method, req.URL.RequestURI(), access.NewHopBody(body), access.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(access.HopHeader, s.Header)
}

// replicaID asks the replica at url for its run id.
func replicaID(t *testing.T, url string) string {
	t.Helper()
	var c struct {
		Self string `json:"self"`
	}
	if code := jsonDo(t, "GET", url+"/internal/cluster", matrixAdmin, "", &c); code != http.StatusOK || c.Self == "" {
		t.Fatalf("GET /internal/cluster: %d %+v", code, c)
	}
	return c.Self
}

// matrixRequest builds a row's request from a caller: harmless for every
// route (unknown instances and ids, empty bodies), so an admitted caller
// changes nothing.
func matrixRequest(t *testing.T, tg target, row authzRow, headers map[string]string) *http.Request {
	t.Helper()
	base := tg.api
	if strings.HasPrefix(row.path, "/debug/pprof") {
		base = tg.pprof
	}
	path := strings.NewReplacer(":instance", "nope", ":id", "resp_nope", "*action", "g:countTokens", "*name", "nope").Replace(row.path)
	switch row.path {
	case "/internal/session/export", "/internal/session/import", "/internal/auto-login/start",
		"/internal/auto-login/url", "/internal/models/raw":
		path += "?instance=nope"
	}
	var body io.Reader
	if row.method == "POST" || row.method == "DELETE" {
		body = strings.NewReader("{}")
	}
	req, err := http.NewRequest(row.method, base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req
}

// expected is the cell's answer on tg: on a single node the replica column
// is a forged hop (it has no cluster token), and a replicas-only route does
// not exist there (404 for whoever the edge lets through).
func expected(tg target, row authzRow, column string) string {
	if !tg.clustered && column == "replica" {
		column = "forged hop"
	}
	if !tg.clustered && strings.Contains(row.note, "replicas only") && column != "forged hop" {
		return "404"
	}
	return row.cells[column]
}

var matrixClient = &http.Client{Timeout: 15 * time.Second}

// checkCell sends one cell's request and holds the answer to the table.
func checkCell(t *testing.T, tg target, row authzRow, column string) {
	t.Helper()
	want := expected(tg, row, column)
	req := matrixRequest(t, tg, row, callerHeaders(column))
	switch column {
	case "forged hop":
		signHop(t, tg, req, "not-the-token")
	case "replica":
		signHop(t, tg, req, clusterToken)
	}
	res, err := matrixClient.Do(req)
	if err != nil {
		t.Errorf("%s %s as %s: %v", row.method, row.path, column, err)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	res.Body.Close()
	got := res.StatusCode
	denied := got == http.StatusUnauthorized || got == http.StatusForbidden
	switch want {
	case "ok", "own":
		if denied {
			t.Errorf("%s %s as %s: %d %s, want admitted", row.method, row.path, column, got, clip(body))
		}
	case "401", "403", "404":
		if fmt.Sprint(got) != want {
			t.Errorf("%s %s as %s: %d %s, want %s", row.method, row.path, column, got, clip(body), want)
		} else if want != "404" && row.method != "HEAD" && !bytes.Contains(body, []byte(`"error"`)) {
			t.Errorf("%s %s as %s: %d without an error body: %s", row.method, row.path, column, got, clip(body))
		}
	default:
		t.Fatalf("docs/security.md: cell %q of %s %s, %s", want, row.method, row.path, column)
	}
}

func runMatrix(t *testing.T, tg target, tab authzTable) {
	t.Helper()
	for _, row := range tab.rows {
		for _, column := range tab.columns {
			checkCell(t, tg, row, column)
		}
	}
}

func TestAuthorizationMatrix(t *testing.T) {
	keyed, open := readAuthzTable(t, "keyed"), readAuthzTable(t, "open")
	redis := testenv.Redis(t)

	t.Run("single node", func(t *testing.T) {
		pprof := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
		d := daemontest.StartDaemon(t, matrixKeys, matrixAccounts, "POOLGATE_ADMIN_TOKEN="+matrixAdmin,
			"POOLGATE_METRICS_TOKEN="+metricsToken, "POOLGATE_PPROF_LISTEN="+pprof)
		runMatrix(t, target{api: d.URL, pprof: "http://" + pprof}, keyed)
		// The admin log names who acted, never a secret.
		testenv.WaitFor(t, 5*time.Second, "the admin log to name the key that reloaded", func() bool {
			return strings.Contains(d.Log(), "action=reload by=key:ops") && strings.Contains(d.Log(), "action=reload by=admin-token")
		})
		if strings.Contains(d.Log(), opsKey) || strings.Contains(d.Log(), matrixAdmin) {
			t.Error("the daemon logged a secret")
		}
	})
	t.Run("keys without an admin credential", func(t *testing.T) {
		d := daemontest.StartDaemon(t, matrixKeys[:strings.Index(matrixKeys, `,{"name":"vic"`)]+"]", matrixAccounts)
		for _, r := range access.Routes {
			if r.Need != access.Admin && r.Need != access.Viewer || r.Clustered {
				continue
			}
			res, err := matrixClient.Do(matrixRequest(t, target{api: d.URL}, authzRow{method: r.Method, path: r.Path},
				callerHeaders("user")))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden || !bytes.Contains(body, []byte("POOLGATE_ADMIN_TOKEN")) ||
				!bytes.Contains(body, []byte("role: admin")) {
				t.Errorf("%s %s: %d %s, want 403 naming the settings that make an admin", r.Method, r.Path, res.StatusCode, clip(body))
			}
		}
		testenv.WaitFor(t, 5*time.Second, "the start-up warning", func() bool {
			return strings.Contains(d.Log(), "no admin credential")
		})
	})
	t.Run("two replicas", func(t *testing.T) {
		env := []string{matrixKeys, matrixAccounts, "POOLGATE_ADMIN_TOKEN=" + matrixAdmin,
			"POOLGATE_METRICS_TOKEN=" + metricsToken, "POOLGATE_REDIS_URL=" + redis.URL(),
			"POOLGATE_REDIS_PREFIX=" + testenv.KeyPrefix(t), "POOLGATE_CLUSTER_TOKEN=" + clusterToken,
			"POOLGATE_LEASE_TTL=3s"}
		for i := range 2 {
			addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			pprof := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
			d := daemontest.StartDaemon(t, append(env, "POOLGATE_LISTEN="+addr, "POOLGATE_ADVERTISE_URL=http://"+addr,
				fmt.Sprintf("POOLGATE_REPLICA_ID=r%d", i+1), "POOLGATE_PPROF_LISTEN="+pprof)...)
			t.Run(fmt.Sprintf("replica %d", i+1), func(t *testing.T) {
				runMatrix(t, target{api: d.URL, pprof: "http://" + pprof, clustered: true, self: replicaID(t, d.URL)}, keyed)
			})
		}
	})
	t.Run("keyless demo", func(t *testing.T) {
		d := daemontest.StartDaemon(t, matrixAccounts)
		runMatrix(t, target{api: d.URL}, open)
	})
}

// The tables show every route poolgate serves, with the callers its rule
// admits (routes): a route added to the code and not to the doc (or the
// other way round) fails here.
func TestAuthzTableIsTheRouteTable(t *testing.T) {
	keyed := readAuthzTable(t, "keyed")
	want := map[access.Need]map[string]string{
		access.APIUser: {"none": "401", "user": "ok", "viewer": "ok", "admin key": "ok", "admin token": "401"},
		access.Public:  {"none": "ok", "user": "ok", "viewer": "ok", "admin key": "ok", "admin token": "ok"},
		access.Own:     {"none": "401", "user": "own", "viewer": "ok", "admin key": "ok", "admin token": "ok"},
		access.Viewer:  {"none": "401", "user": "403", "viewer": "ok", "admin key": "ok", "admin token": "ok"},
		access.Admin:   {"none": "401", "user": "403", "viewer": "403", "admin key": "ok", "admin token": "ok"},
		access.Metrics: {"none": "401", "user": "403", "viewer": "ok", "admin key": "ok", "admin token": "ok"},
	}
	inDoc := map[string]authzRow{}
	for _, row := range keyed.rows {
		inDoc[row.method+" "+row.path] = row
	}
	for _, r := range routes() {
		row, ok := inDoc[r.Method+" "+r.Path]
		if !ok {
			t.Errorf("docs/security.md does not show %s %s", r.Method, r.Path)
			continue
		}
		delete(inDoc, r.Method+" "+r.Path)
		for column, cell := range want[r.Need] {
			if row.cells[column] != cell {
				t.Errorf("docs/security.md: %s %s, %s is %q; its access rule says %q", r.Method, r.Path, column,
					row.cells[column], cell)
			}
		}
		if r.Clustered != strings.Contains(row.note, "replicas only") {
			t.Errorf("docs/security.md: %s %s: replicas only is %v in the code", r.Method, r.Path, r.Clustered)
		}
	}
	for route := range inDoc {
		if !strings.HasPrefix(route, "GET /debug/pprof") {
			t.Errorf("docs/security.md shows %s, which no route rule names", route)
		}
	}
	open := readAuthzTable(t, "open")
	for _, r := range routes() {
		found := r.Clustered
		for _, row := range open.rows {
			found = found || row.method == r.Method && row.path == r.Path
		}
		if !found {
			t.Errorf("docs/security.md's keyless table does not show %s %s", r.Method, r.Path)
		}
	}
}

// jsonDo sends a JSON request with a Bearer token and decodes the answer.
func jsonDo(t *testing.T, method, url, token, body string, out any) int {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := matrixClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && json.Unmarshal(b, out) != nil && res.StatusCode < 300 {
		t.Fatalf("%s %s: %d %s is not JSON", method, url, res.StatusCode, clip(b))
	}
	return res.StatusCode
}

// A key sees its own usage and request log, never another key's; viewers
// see everyone's without prompts; prompts kept with request_log_debug are
// for admins only, and are gone after a start with it off.
func TestCallersSeeTheirOwn(t *testing.T) {
	redis := testenv.Redis(t)
	env := []string{matrixKeys, matrixAccounts, "POOLGATE_ADMIN_TOKEN=" + matrixAdmin, "POOLGATE_REDIS_URL=" + redis.URL(),
		"POOLGATE_REDIS_PREFIX=" + testenv.KeyPrefix(t)}
	d := daemontest.StartDaemon(t, append(env, "POOLGATE_REQUEST_LOG_DEBUG=true")...)
	d.WaitReady(t, 30*time.Second)
	for _, key := range []string{userKey, "sk-user-bob"} {
		body := `{"model":"m","messages":[{"role":"user","content":"the plan of ` + key + `"}]}`
		if code := jsonDo(t, "POST", d.URL+"/v1/chat/completions", key, body, nil); code != 200 {
			t.Fatalf("chat as %s: %d", key, code)
		}
	}
	type entries struct {
		Requests []struct {
			Key    string `json:"key"`
			Prompt string `json:"prompt"`
		} `json:"requests"`
	}
	list := func(token, query string) (int, entries) {
		var got entries
		code := jsonDo(t, "GET", d.URL+"/internal/requests"+query, token, "", &got)
		return code, got
	}
	testenv.WaitFor(t, 10*time.Second, "both requests in the log", func() bool {
		_, got := list(matrixAdmin, "")
		return len(got.Requests) == 2
	})
	code, got := list(userKey, "")
	if code != 200 || len(got.Requests) != 1 || got.Requests[0].Key != "alice" || got.Requests[0].Prompt != "" {
		t.Errorf("alice's log: %d %+v, want her one request without its prompt", code, got)
	}
	if code, _ := list(userKey, "?key=bob"); code != http.StatusForbidden {
		t.Errorf("alice asking for bob's log: %d, want 403", code)
	}
	var usage struct {
		Rows []struct {
			Key string `json:"key"`
		} `json:"rows"`
	}
	if code := jsonDo(t, "GET", d.URL+"/internal/usage", userKey, "", &usage); code != 200 || len(usage.Rows) == 0 {
		t.Errorf("alice's usage: %d %+v", code, usage)
	}
	for _, r := range usage.Rows {
		if r.Key != "alice" {
			t.Errorf("alice's usage shows key %q", r.Key)
		}
	}
	if code, got := list(viewerKey, ""); code != 200 || len(got.Requests) != 2 || got.Requests[0].Prompt != "" || got.Requests[1].Prompt != "" {
		t.Errorf("the viewer's log: %d %+v, want both requests without prompts", code, got)
	}
	if code, got := list(opsKey, ""); code != 200 || len(got.Requests) != 2 || !strings.Contains(got.Requests[0].Prompt, "the plan of") {
		t.Errorf("the admin's log: %d %+v, want both requests with their prompts", code, got)
	}
	d.Stop(t, 20*time.Second)

	// The same log after a start with the switch off: no prompt is left.
	d = daemontest.StartDaemon(t, env...)
	testenv.WaitFor(t, 15*time.Second, "the captured prompts scrubbed, and the start saying so", func() bool {
		code, got := list(matrixAdmin, "")
		return code == 200 && len(got.Requests) == 2 && got.Requests[0].Prompt == "" && got.Requests[1].Prompt == "" &&
			strings.Contains(d.Log(), "scrubbed the prompts")
	})
}

// The shipped example configuration is the secure one: loaded as it stands,
// a user key gets 403 on every admin route, and its admin key gets in.
func TestExampleConfigGivesUsersNoAdmin(t *testing.T) {
	path, env := testenv.ExampleConfig(t)
	// Loopback and memory instead of the compose network's names: the rest
	// of the file as shipped.
	// The file names a worker_bin this machine does not have, which would
	// refuse the start: any program stands in for it (no worker is needed
	// here), and no simulator runs.
	d := daemontest.StartDaemonArgs(t, []string{"-config", path}, append(env, "POOLGATE_REDIS_URL=", "POOLGATE_SIMULATE=auto",
		"POOLGATE_WORKER_BIN="+testenv.PoolgateBin(t))...)
	tg := target{api: d.URL}
	for _, r := range access.Routes {
		if r.Need != access.Admin && r.Need != access.Viewer || r.Clustered {
			continue
		}
		row := authzRow{method: r.Method, path: r.Path}
		for _, key := range []string{"sk-alice", "sk-bob", "sk-ci"} {
			res, err := matrixClient.Do(matrixRequest(t, tg, row, map[string]string{"Authorization": "Bearer " + key}))
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s with the example's user key %s: %d, want 403", r.Method, r.Path, key, res.StatusCode)
			}
		}
		res, err := matrixClient.Do(matrixRequest(t, tg, row, map[string]string{"Authorization": "Bearer sk-ops"}))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
			t.Errorf("%s %s with the example's admin key: %d", r.Method, r.Path, res.StatusCode)
		}
	}
}
