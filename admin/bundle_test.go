package admin_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session/bundle"
)

// bundleEnv is an admin API over a pool of one real simworker ("w1",
// account "acct") and a bundle service on an in-memory store.
type bundleEnv struct {
	sup     *supervisor.Supervisor
	pool    *route.Pool
	store   *bundle.MemoryStore
	handler http.Handler
	workDir string
}

func bundleLog() *slog.Logger {
	if os.Getenv("POOLGATE_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func bundleKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, bundle.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// newBundleEnv builds the pool; start runs real workers (logged in when
// loggedIn), otherwise the pool is never started.
func newBundleEnv(t *testing.T, key []byte, cfg admin.Config, edge gin.HandlerFunc, start, loggedIn bool) *bundleEnv {
	t.Helper()
	gin.SetMode(gin.TestMode)
	var extra []string
	if loggedIn {
		extra = []string{"--logged-in"}
	}
	var cmd []string
	if start {
		cmd = []string{testenv.PoolgateBin(t), "simworker"}
	}
	wc := supervisor.WorkerConfig{Name: "w1", Account: worker.Account{Name: "acct", Env: []string{"SIMWORKER_ACCOUNTS=u-acct:pw"}},
		WorkDir: t.TempDir(), StartTimeout: 10 * time.Second, HealthInterval: 200 * time.Millisecond,
		HealthTimeout: time.Second, BackoffMin: 100 * time.Millisecond, BackoffMax: time.Second, StopGrace: 2 * time.Second}
	launcher := &supervisor.ExecLauncher{}
	p := route.New(route.Config{}, nil, bundleLog())
	sup := supervisor.New(p.Watch(supervisor.Config{}), supervisortest.Drive(lingma.New(lingma.Config{Command: cmd, ExtraArgs: extra}), []supervisor.WorkerConfig{wc}), launcher, nil, bundleLog())
	if start {
		ctx, cancel := context.WithCancel(context.Background())
		sup.Start(ctx)
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			p.Shutdown(sctx)
			sup.Shutdown()
			cancel()
			launcher.Close()
		})
	}
	store := bundle.NewMemoryStore()
	svc := bundle.New(bundle.Config{Key: key, Spec: bundle.Spec(lingma.Kind.Credentials)}, homes{sup}, store, bundleLog())
	a := admin.New(cfg, p, sup, prometheus.NewRegistry(), bundleLog())
	r := gin.New()
	r.Use(edge)
	a.RegisterBundles(a.Register(r), svc)
	return &bundleEnv{sup: sup, pool: p, store: store, handler: r, workDir: wc.WorkDir}
}

// homes shows the bundle service the supervisor's instances.
type homes struct{ *supervisor.Supervisor }

func (h homes) Home(name string) (bundle.Home, error) {
	if w, ok := h.Worker(name); ok {
		return bundle.Home{Account: w.Account(), Username: w.Username(), WorkDir: w.WorkDir(),
			LoggedOut: w.Status().State == supervisor.StateNeedsLogin}, nil
	}
	return bundle.Home{}, supervisor.ErrUnknownInstance
}

func (e *bundleEnv) status(t *testing.T) route.InstanceStatus {
	t.Helper()
	for _, in := range e.pool.Snapshot().Instances {
		if in.Name == "w1" {
			return in
		}
	}
	t.Fatal("instance w1 missing from the snapshot")
	return route.InstanceStatus{}
}

func (e *bundleEnv) waitState(t *testing.T, want supervisor.State, cond func(route.InstanceStatus) bool) route.InstanceStatus {
	t.Helper()
	var in route.InstanceStatus
	testenv.WaitForNoError(t, 20*time.Second, "w1 "+string(want), func() error {
		if in = e.status(t); in.State == want && (cond == nil || cond(in)) {
			return nil
		}
		return fmt.Errorf("w1 is %s (last error %q)", in.State, in.LastError)
	})
	return in
}

// do sends one admin request; token "" sends no credentials.
func (e *bundleEnv) do(t *testing.T, path, token string, body []byte) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	e.handler.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

func importBody(t *testing.T, sealed []byte) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{"instance": "w1", "account": "acct",
		"bundle": base64.StdEncoding.EncodeToString(sealed), "bytes": len(sealed)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loginPageHits asks the running simworker how often its login page was
// served.
func loginPageHits(t *testing.T, p *supervisor.Supervisor) int {
	t.Helper()
	port, err := p.LoginPort("w1")
	if err != nil || port == 0 {
		t.Fatalf("LoginPort() = %d, %v", port, err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 5 * time.Second}
	resp, err := client.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/sim/stats")
	if err != nil {
		t.Fatalf("sim stats: %v", err)
	}
	defer resp.Body.Close()
	var st struct {
		LoginPageHits int `json:"login_page_hits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("sim stats: %v", err)
	}
	return st.LoginPageHits
}

func TestBundleExportImportLogsInWithoutABrowser(t *testing.T) {
	key := bundleKey(t)
	src := newBundleEnv(t, key, admin.Config{}, admin.Edge(""), true, true)
	dst := newBundleEnv(t, key, admin.Config{}, admin.Edge(""), true, false)
	src.waitState(t, supervisor.StateReady, nil)
	before := dst.waitState(t, supervisor.StateNeedsLogin, nil)

	code, exp := src.do(t, "/internal/session/export?instance=w1", "", nil)
	if code != http.StatusOK {
		t.Fatalf("export = %d %v, want 200", code, exp)
	}
	sealed, err := base64.StdEncoding.DecodeString(fmt.Sprint(exp["bundle"]))
	if err != nil || exp["instance"] != "w1" || exp["account"] != "acct" || exp["bytes"] != float64(len(sealed)) {
		t.Fatalf("export answer = %v (bundle decode: %v)", exp, err)
	}
	if bytes.HasPrefix(sealed, []byte{0x1f, 0x8b}) || bytes.Contains(sealed, []byte("u-acct")) {
		t.Fatal("export handed out a readable gzip, not a sealed bundle")
	}
	if stored, err := src.store.LoadBundle(context.Background(), "acct"); err != nil || !bytes.Equal(stored, sealed) {
		t.Errorf("store after export = %d bytes, %v; want the exported bundle", len(stored), err)
	}

	body, _ := json.Marshal(exp) // the export's answer, verbatim
	code, imp := dst.do(t, "/internal/session/import?instance=w1", "", body)
	if code != http.StatusOK || imp["imported"] != true || imp["instance"] != "w1" || imp["account"] != "acct" {
		t.Fatalf("import = %d %v, want 200 imported", code, imp)
	}
	after := dst.waitState(t, supervisor.StateReady, func(in route.InstanceStatus) bool { return in.Restarts > before.Restarts })
	if after.PID == before.PID {
		t.Errorf("pid %d unchanged: the worker was not restarted", after.PID)
	}
	want, _ := os.ReadFile(filepath.Join(src.workDir, "cache", "user"))
	got, _ := os.ReadFile(filepath.Join(dst.workDir, "cache", "user"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Errorf("imported cache/user = %q, want %q", got, want)
	}
	if n := loginPageHits(t, dst.sup); n != 0 {
		t.Errorf("login page served %d times, want 0: no browser login", n)
	}
	if _, err := dst.store.LoadBundle(context.Background(), "acct"); err != nil {
		t.Errorf("store after import: %v, want the bundle saved", err)
	}
}

// craftTarGz builds a tar.gz whose first entry is a plausible manifest and
// then the given entries.
func craftTarGz(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	man := []byte(`{"version":1,"account":"acct","dir":"cache","files":[]}`)
	all := append([]*tar.Header{{Name: "manifest.json", Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(man))}}, entries...)
	for i, h := range all {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		data := man
		if i > 0 {
			data = bytes.Repeat([]byte{'x'}, int(h.Size))
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBundleImportRejectsBadBundlesAndLeavesTheWorkerAlone(t *testing.T) {
	key := bundleKey(t)
	src := newBundleEnv(t, key, admin.Config{}, admin.Edge(""), false, false)
	if err := os.MkdirAll(filepath.Join(src.workDir, "cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"id": "machine-x", "user": `{"username":"u-acct","token":"t"}`} {
		if err := os.WriteFile(filepath.Join(src.workDir, "cache", name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	good, _, err := bundle.Pack(src.workDir, bundle.Spec(lingma.Kind.Credentials), "acct", key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherAcct, _, err := bundle.Pack(src.workDir, bundle.Spec(lingma.Kind.Credentials), "someone-else", key, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	seal := func(payload []byte) []byte {
		s, err := bundle.Seal(key, payload)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x01
	huge := make([]byte, 1<<20+1)
	_, _ = rand.Read(huge)
	traversal := craftTarGz(t, &tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o600, Size: 1})
	bomb := craftTarGz(t, &tar.Header{Name: "cache/big", Typeflag: tar.TypeReg, Mode: 0o600, Size: 5 << 20})
	symlink := craftTarGz(t, &tar.Header{Name: "cache/user", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow"})
	okJSON := importBody(t, good)

	dst := newBundleEnv(t, key, admin.Config{}, admin.Edge(""), true, false)
	before := dst.waitState(t, supervisor.StateNeedsLogin, nil)
	hash := testenv.TreeHash(t, dst.workDir)

	tests := []struct {
		name    string
		path    string
		give    []byte
		want    int
		wantMsg string
	}{
		{name: "flipped byte", give: importBody(t, flipped), want: http.StatusUnprocessableEntity, wantMsg: "seal"},
		{name: "wrong key", give: importBody(t, mustPackOther(t, src.workDir)), want: http.StatusUnprocessableEntity, wantMsg: "seal"},
		{name: "path traversal", give: importBody(t, seal(traversal)), want: http.StatusBadRequest, wantMsg: "disallowed path"},
		{name: "symlink", give: importBody(t, seal(symlink)), want: http.StatusBadRequest, wantMsg: "regular files only"},
		{name: "zip bomb", give: importBody(t, seal(bomb)), want: http.StatusBadRequest, wantMsg: "limit"},
		{name: "oversized sealed", give: importBody(t, huge), want: http.StatusBadRequest, wantMsg: "limit"},
		{name: "body over 2 MiB", give: importBody(t, append(huge, huge...)), want: http.StatusRequestEntityTooLarge, wantMsg: "body over"},
		{name: "other account", give: importBody(t, otherAcct), want: http.StatusConflict, wantMsg: "someone-else"},
		{name: "bad base64", give: []byte(`{"bundle":"%%%"}`), want: http.StatusBadRequest, wantMsg: "base64"},
		{name: "bad json", give: []byte(`{"bundle":`), want: http.StatusBadRequest, wantMsg: "body must be"},
		{name: "unknown field", give: []byte(`{"bundle":"AAAA","sha":3}`), want: http.StatusBadRequest, wantMsg: "unknown field"},
		{name: "plain length on a sealed bundle", give: []byte(`{"bundle":"AAAA","raw_bytes":3}`), want: http.StatusBadRequest, wantMsg: `"raw_bytes" goes with "bundle_b64"`},
		{name: "plain bundles off", give: []byte(`{"bundle_b64":"AAAA"}`), want: http.StatusForbidden, wantMsg: "POOLGATE_BUNDLE_IMPORT_PLAIN"},
		{name: "bytes mismatch", give: bytes.Replace(okJSON, []byte(`"bytes":`), []byte(`"bytes":1`), 1), want: http.StatusBadRequest, wantMsg: "truncated"},
		{name: "the query names the target, not the body", path: "/internal/session/import?instance=w2", give: okJSON, want: http.StatusNotFound, wantMsg: "unknown instance w2"},
		{name: "unknown instance", path: "/internal/session/import", give: []byte(`{"instance":"nope","bundle":"AAAA"}`), want: http.StatusNotFound, wantMsg: "the body names instance nope"},
		{name: "export not logged in", path: "/internal/session/export?instance=w1", want: http.StatusConflict, wantMsg: "not logged in"},
		{name: "export unknown", path: "/internal/session/export?instance=nope", want: http.StatusNotFound, wantMsg: "unknown instance nope"},
		{name: "export no instance picks the first", path: "/internal/session/export", want: http.StatusConflict, wantMsg: "instance w1 is not logged in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = "/internal/session/import?instance=w1"
			}
			code, out := dst.do(t, path, "", tt.give)
			msg := fmt.Sprint(out["error"])
			if code != tt.want || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("status %d %s, want %d with %q", code, msg, tt.want, tt.wantMsg)
			}
			if got := testenv.TreeHash(t, dst.workDir); got != hash {
				t.Errorf("work dir changed:\n%s\nwant:\n%s", got, hash)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // a restart would show by now
	if in := dst.status(t); in.PID != before.PID || in.Restarts != before.Restarts || in.State != supervisor.StateNeedsLogin {
		t.Errorf("worker after rejected imports: pid %d restarts %d %s; want pid %d restarts %d needs_login",
			in.PID, in.Restarts, in.State, before.PID, before.Restarts)
	}
}

// mustPackOther seals dir's credentials under a key of its own.
func mustPackOther(t *testing.T, dir string) []byte {
	t.Helper()
	s, _, err := bundle.Pack(dir, bundle.Spec(lingma.Kind.Credentials), "acct", bundleKey(t), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestBundleRoutesNeedTheAdminToken(t *testing.T) {
	e := newBundleEnv(t, bundleKey(t), admin.Config{}, admin.Edge("admin-secret", apikey.Key{Name: "k", Secret: "api-key"}), false, false)
	tests := []struct {
		name  string
		path  string
		token string
		want  int
	}{
		{name: "export without token", path: "/internal/session/export?instance=nope", want: http.StatusUnauthorized},
		{name: "export with an api key", path: "/internal/session/export?instance=nope", token: "api-key", want: http.StatusForbidden},
		{name: "export with a wrong token", path: "/internal/session/export?instance=nope", token: "admin-secreT", want: http.StatusUnauthorized},
		{name: "import with an api key", path: "/internal/session/import?instance=nope", token: "api-key", want: http.StatusForbidden},
		{name: "import without token", path: "/internal/session/import?instance=nope", want: http.StatusUnauthorized},
		{name: "export with the token", path: "/internal/session/export?instance=nope", token: "admin-secret", want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if code, out := e.do(t, tt.path, tt.token, []byte(`{"bundle":"AAAA"}`)); code != tt.want {
				t.Errorf("status %d %v, want %d", code, out, tt.want)
			}
		})
	}
}

func TestBundleRoutesWithoutAKey(t *testing.T) {
	e := newBundleEnv(t, nil, admin.Config{}, admin.Edge(""), false, false)
	for _, path := range []string{"/internal/session/export?instance=w1", "/internal/session/import?instance=w1"} {
		code, out := e.do(t, path, "", importBody(t, []byte("sealed")))
		if msg := fmt.Sprint(out["error"]); code != http.StatusServiceUnavailable ||
			!strings.Contains(msg, "POOLGATE_BUNDLE_KEY") || !strings.Contains(msg, "openssl rand -base64 32") {
			t.Errorf("%s: status %d %q, want 503 saying how to set POOLGATE_BUNDLE_KEY", path, code, msg)
		}
	}
}

// With bundle_export_plain an export answers the Python gateway's unsealed
// form, with no bundle key; its bundle_b64 alone (what LINGMA_SESSION_BUNDLE
// held) imports into the instance the query names, and the whole answer
// without a query only into an instance the body names that exists.
func TestBundlePlainExportAndBareImport(t *testing.T) {
	src := newBundleEnv(t, nil, admin.Config{BundleExportPlain: true}, admin.Edge(""), true, true)
	dst := newBundleEnv(t, nil, admin.Config{BundleImportPlain: true}, admin.Edge(""), true, false)
	src.waitState(t, supervisor.StateReady, nil)
	before := dst.waitState(t, supervisor.StateNeedsLogin, nil)

	code, exp := src.do(t, "/internal/session/export", "", nil)
	raw, err := base64.StdEncoding.DecodeString(fmt.Sprint(exp["bundle_b64"]))
	if code != http.StatusOK || err != nil || exp["instance"] != "w1" || exp["account"] != "acct" || exp["picked"] != true ||
		exp["raw_bytes"] != float64(len(raw)) || exp["bundle"] != nil || !bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		t.Fatalf("plain export = %d %v (decode: %v), want the Python gateway's form", code, exp, err)
	}
	if code, out := src.do(t, "/internal/session/export?format=sealed", "", nil); code != http.StatusServiceUnavailable ||
		!strings.Contains(fmt.Sprint(out["error"]), "POOLGATE_BUNDLE_EXPORT_PLAIN=true answers its unsealed form") {
		t.Errorf("sealed export without a key = %d %v, want 503 naming the plain export", code, out)
	}
	if code, out := dst.do(t, "/internal/session/export?format=plain", "", nil); code != http.StatusForbidden ||
		!strings.Contains(fmt.Sprint(out["error"]), "POOLGATE_BUNDLE_EXPORT_PLAIN=true") {
		t.Errorf("plain export where it is off = %d %v, want 403 naming the setting", code, out)
	}

	renamed, _ := json.Marshal(map[string]any{"instance": "lingma-0", "account": "acct", "bundle_b64": exp["bundle_b64"]})
	if code, out := dst.do(t, "/internal/session/import", "", renamed); code != http.StatusNotFound ||
		!strings.Contains(fmt.Sprint(out["error"]), "does not have (w1): name the target with ?instance=NAME") {
		t.Errorf("import naming an instance of the old gateway = %d %v, want 404 listing w1", code, out)
	}
	if code, out := dst.do(t, "/internal/session/import", "", []byte(fmt.Sprint(exp["bundle_b64"]))); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out["error"]), "add ?instance=NAME") {
		t.Errorf("bare import without ?instance= = %d %v, want 400", code, out)
	}
	bare := []byte(fmt.Sprint(exp["bundle_b64"]) + "\n")
	// An unsealed bundle proves nothing about whose it is: one that names
	// no account is refused, and the worker left alone.
	anonymous, _ := json.Marshal(map[string]any{"instance": "w1", "bundle_b64": exp["bundle_b64"]})
	for _, give := range []struct{ query, body string }{{"?instance=w1", string(bare)}, {"?instance=w1", string(anonymous)}, {"", string(anonymous)}} {
		if code, out := dst.do(t, "/internal/session/import"+give.query, "", []byte(give.body)); code != http.StatusBadRequest ||
			!strings.Contains(fmt.Sprint(out["error"]), "names no account") {
			t.Errorf("import of a plain bundle naming no account (%s %.40s) = %d %v, want 400", give.query, give.body, code, out)
		}
	}
	if now := dst.waitState(t, supervisor.StateNeedsLogin, nil); now.Restarts != before.Restarts {
		t.Errorf("the refused imports restarted the worker: %+v, was %+v", now, before)
	}
	code, imp := dst.do(t, "/internal/session/import?instance=w1&account=acct", "", bare)
	if code != http.StatusOK || imp["format"] != "plain" || imp["instance"] != "w1" {
		t.Fatalf("bare import = %d %v", code, imp)
	}
	dst.waitState(t, supervisor.StateReady, func(in route.InstanceStatus) bool { return in.Restarts > before.Restarts })
	want, _ := os.ReadFile(filepath.Join(src.workDir, "cache", "user"))
	got, _ := os.ReadFile(filepath.Join(dst.workDir, "cache", "user"))
	if len(want) == 0 || !bytes.Equal(got, want) {
		t.Errorf("imported cache/user = %q, want %q", got, want)
	}
}
