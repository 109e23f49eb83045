package bundle_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/session/bundle"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, bundle.KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// loggedIn returns a work dir with the simulator's credentials for user, expiring at exp.
func loggedIn(t *testing.T, user string, exp time.Time) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"id": "machine-" + user, "user": `{"username":"` + user + `","expiresAt":"` + exp.Format(time.RFC3339) + `"}`}
	for n, d := range files {
		if err := os.WriteFile(filepath.Join(dir, "cache", n), []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func pack(t *testing.T, key []byte, dir, account string, at time.Time) []byte {
	t.Helper()
	s, _, err := bundle.Pack(dir, bundle.SimSpec(), account, key, at)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func userOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "cache", "user"))
	if err != nil {
		return ""
	}
	return string(b)
}

func TestRestore(t *testing.T) {
	key := newKey(t)
	later := t0.Add(60 * 24 * time.Hour)
	fromStore := pack(t, key, loggedIn(t, "store-user", later), "acct", t0.Add(time.Hour))
	fromConfig := pack(t, key, loggedIn(t, "config-user", later), "acct", t0)
	expired := pack(t, key, loggedIn(t, "expired-user", t0.Add(-time.Hour)), "acct", t0.Add(2*time.Hour))
	foreign := pack(t, newKey(t), loggedIn(t, "foreign-user", later), "acct", t0.Add(3*time.Hour))
	otherAccount := pack(t, key, loggedIn(t, "other-user", later), "acct-2", t0.Add(4*time.Hour))
	tests := []struct {
		name     string
		store    []byte
		config   []byte
		workDir  func(t *testing.T) string
		want     bool
		wantUser string
		wantErr  bool
	}{
		{name: "from the store", store: fromStore, want: true, wantUser: "store-user"},
		{name: "from config", config: fromConfig, want: true, wantUser: "config-user"},
		{name: "newest wins", store: fromStore, config: fromConfig, want: true, wantUser: "store-user"},
		{name: "expired skipped", store: expired, config: fromConfig, want: true, wantUser: "config-user"},
		{name: "other key skipped", store: foreign, config: fromConfig, want: true, wantUser: "config-user"},
		{name: "only unusable", store: foreign, wantErr: true},
		{name: "another account's is never installed", store: otherAccount, config: fromConfig, want: true, wantUser: "config-user"},
		{name: "only another account's", store: otherAccount, wantErr: true},
		{name: "nothing stored", want: false},
		{name: "already logged in", store: fromStore,
			workDir: func(t *testing.T) string { return loggedIn(t, "present-user", later) }, wantUser: "present-user"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := bundle.NewMemoryStore()
			if tt.store != nil {
				_ = store.SaveBundle(context.Background(), "acct", tt.store, bundle.Version{})
			}
			cfg := bundle.Config{Key: key, Spec: bundle.SimSpec(), Now: func() time.Time { return t0.Add(24 * time.Hour) }}
			if tt.config != nil {
				cfg.Configured = map[string][]byte{"acct": tt.config}
			}
			svc := bundle.New(cfg, nil, store, slog.New(slog.DiscardHandler))
			dir := filepath.Join(t.TempDir(), "w1")
			if tt.workDir != nil {
				dir = tt.workDir(t)
			}
			got, err := svc.Restore(context.Background(), "acct", dir)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("Restore() = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
			u := userOf(t, dir)
			if tt.wantUser == "" && u != "" || tt.wantUser != "" && !strings.Contains(u, `"`+tt.wantUser+`"`) {
				t.Errorf("cache/user = %q, want %s's", u, tt.wantUser)
			}
		})
	}
}

func TestSavedThenRestoredElsewhere(t *testing.T) {
	key := newKey(t)
	store := bundle.NewMemoryStore()
	svc := bundle.New(bundle.Config{Key: key, Spec: bundle.SimSpec()}, nil, store, slog.New(slog.DiscardHandler))
	src := loggedIn(t, "u1", time.Now().Add(time.Hour))
	if err := svc.Saved(context.Background(), "acct", src); err != nil {
		t.Fatalf("Saved() = %v", err)
	}
	sealed, err := store.LoadBundle(context.Background(), "acct")
	if err != nil {
		t.Fatalf("LoadBundle() = %v", err)
	}
	if b, err := bundle.Open(sealed, key, bundle.SimSpec(), bundle.Limits{}); err != nil || b.Manifest.Account != "acct" || b.Manifest.MachineID != "machine-u1" {
		t.Fatalf("saved bundle: %v, %+v", err, b)
	}
	dst := t.TempDir() // a wiped disk
	if ok, err := svc.Restore(context.Background(), "acct", dst); !ok || err != nil {
		t.Fatalf("Restore() = %v, %v; want true, nil", ok, err)
	}
	if userOf(t, dst) != userOf(t, src) {
		t.Errorf("restored cache/user = %q, want %q", userOf(t, dst), userOf(t, src))
	}
	if err := svc.Saved(context.Background(), "acct", t.TempDir()); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("Saved(empty dir) = %v, want ErrNoCredentials", err)
	}
}

func TestWithoutAKeyNothingHappens(t *testing.T) {
	var logs testenv.Buffer
	store := bundle.NewMemoryStore()
	_ = store.SaveBundle(context.Background(), "acct", []byte("sealed"), bundle.Version{})
	svc := bundle.New(bundle.Config{Spec: bundle.SimSpec()}, nil, store, slog.New(slog.NewTextHandler(&logs, nil)))
	dir := loggedIn(t, "u1", time.Now().Add(time.Hour))
	for range 3 {
		if err := svc.Saved(context.Background(), "acct", dir); err != nil {
			t.Errorf("Saved() = %v, want nil", err)
		}
		if ok, err := svc.Restore(context.Background(), "acct", t.TempDir()); ok || err != nil {
			t.Errorf("Restore() = %v, %v; want false, nil", ok, err)
		}
	}
	if n := strings.Count(logs.String(), "POOLGATE_BUNDLE_KEY is not set"); n != 1 {
		t.Errorf("the missing key was logged %d times, want once:\n%s", n, logs.String())
	}
	if _, _, err := svc.Export(context.Background(), "w1"); !errors.Is(err, bundle.ErrNoKey) {
		t.Errorf("Export() = %v, want ErrNoKey", err)
	}
	if err := svc.Import(context.Background(), "w1", []byte("x")); !errors.Is(err, bundle.ErrNoKey) {
		t.Errorf("Import() = %v, want ErrNoKey", err)
	}
}

// A kind of worker that keeps no login in its work dir (the zero Spec, a
// model server's) has nothing to bundle: export and import say so, save and
// restore do nothing, even with a key and a bundle in the store.
func TestWithoutALayoutNothingIsBundled(t *testing.T) {
	key := newKey(t)
	store := bundle.NewMemoryStore()
	sealed := pack(t, key, loggedIn(t, "u1", time.Now().Add(time.Hour)), "acct", time.Now())
	_ = store.SaveBundle(context.Background(), "acct", sealed, bundle.Version{})
	dir := loggedIn(t, "u1", time.Now().Add(time.Hour))
	svc := bundle.New(bundle.Config{Key: key}, oneInstance{dir}, store, slog.New(slog.DiscardHandler))
	if err := svc.Saved(context.Background(), "acct", dir); err != nil {
		t.Errorf("Saved() = %v, want nil", err)
	}
	empty := t.TempDir()
	if ok, err := svc.Restore(context.Background(), "acct", empty); ok || err != nil {
		t.Errorf("Restore() = %v, %v; want false, nil", ok, err)
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("Restore wrote %d entries into the work dir", len(entries))
	}
	if _, _, err := svc.Export(context.Background(), "w1"); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("Export() = %v, want ErrNoCredentials", err)
	}
	if _, _, err := svc.ExportPlain(context.Background(), "w1"); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("ExportPlain() = %v, want ErrNoCredentials", err)
	}
	if err := svc.Import(context.Background(), "w1", sealed); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("Import() = %v, want ErrNoCredentials", err)
	}
	if err := svc.ImportPlain(context.Background(), "w1", "", strings.NewReader("x")); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("ImportPlain() = %v, want ErrNoCredentials", err)
	}
}

// oneInstance is the supervisor as the service sees it: one instance, w1,
// of account acct, whose worker never runs.
type oneInstance struct{ workDir string }

func (o oneInstance) Home(name string) (bundle.Home, error) {
	if name != "w1" {
		return bundle.Home{}, fmt.Errorf("instance %s: %w", name, supervisor.ErrUnknownInstance)
	}
	return bundle.Home{Account: "acct", WorkDir: o.workDir}, nil
}

func (o oneInstance) Restart(string) error { return nil }

func TestExportImportWithoutProcesses(t *testing.T) {
	key := newKey(t)
	srcDir := loggedIn(t, "u1", time.Now().Add(time.Hour))
	store := bundle.NewMemoryStore()
	src := bundle.New(bundle.Config{Key: key, Spec: bundle.SimSpec()}, oneInstance{srcDir}, store, slog.New(slog.DiscardHandler))
	account, sealed, err := src.Export(context.Background(), "w1")
	if err != nil || account != "acct" {
		t.Fatalf("Export() = %q, %v", account, err)
	}
	if _, _, err := src.Export(context.Background(), "nope"); !errors.Is(err, supervisor.ErrUnknownInstance) {
		t.Errorf("Export(unknown) = %v, want ErrUnknownInstance", err)
	}
	dstDir := t.TempDir()
	dst := bundle.New(bundle.Config{Key: key, Spec: bundle.SimSpec()}, oneInstance{dstDir}, nil, slog.New(slog.DiscardHandler))
	if _, _, err := dst.Export(context.Background(), "w1"); !errors.Is(err, bundle.ErrNoCredentials) {
		t.Errorf("Export(empty work dir) = %v, want ErrNoCredentials", err)
	}
	if err := dst.Import(context.Background(), "w1", sealed); err != nil {
		t.Fatalf("Import() = %v", err)
	}
	if userOf(t, dstDir) != userOf(t, srcDir) {
		t.Errorf("imported cache/user = %q, want %q", userOf(t, dstDir), userOf(t, srcDir))
	}
	other := pack(t, key, srcDir, "other-acct", time.Now())
	if err := dst.Import(context.Background(), "w1", other); !errors.Is(err, bundle.ErrWrongAccount) {
		t.Errorf("Import(other account) = %v, want ErrWrongAccount", err)
	}
}

// In a cluster only the account's lease holder saves its bundle, under its
// fencing token: a replica that lost the lease can't overwrite the bundle
// the next holder saved.
func TestSavesFollowTheLease(t *testing.T) {
	key := newKey(t)
	store := bundle.NewMemoryStore()
	dir := loggedIn(t, "u1", time.Now().Add(time.Hour))
	saver := func(tok int64, held bool) *bundle.Service {
		return bundle.New(bundle.Config{Key: key, Spec: bundle.SimSpec(), Token: func(string) (int64, bool) { return tok, held }},
			nil, store, slog.New(slog.DiscardHandler))
	}
	if err := saver(0, false).Saved(context.Background(), "acct", dir); err == nil {
		t.Error("a replica without the lease saved a bundle")
	}
	if err := saver(5, true).Saved(context.Background(), "acct", dir); err != nil {
		t.Fatalf("the holder's save: %v", err)
	}
	if err := saver(4, true).Saved(context.Background(), "acct", dir); !errors.Is(err, bundle.ErrStale) {
		t.Errorf("a stale holder's save = %v, want ErrStaleBundle", err)
	}
}
