package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

func newBundleKey(t *testing.T) string {
	var k [32]byte
	_, _ = rand.Read(k[:])
	return base64.StdEncoding.EncodeToString(k[:])
}

// loggedOutSims are the default simulated accounts, configured explicitly so
// their workers start without credentials.
const loggedOutSims = `POOLGATE_ACCOUNTS=[{"name":"sim-1","username":"demo1","password":"demo1"},{"name":"sim-2","username":"demo2","password":"demo2"}]`

func post(t *testing.T, url, token string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestBundleFromRedisStartsAFreshReplicaLoggedIn(t *testing.T) {
	r := testenv.Redis(t)
	key := newBundleKey(t)
	a := daemontest.StartDaemon(t, "POOLGATE_REDIS_URL="+r.URL(), "POOLGATE_BUNDLE_KEY="+key)
	waitAllReady(t, a, 2, 15*time.Second)
	rc := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rc.Close()
	testenv.WaitFor(t, 10*time.Second, "sealed bundles in Redis after the accounts became ready", func() bool {
		return rc.Exists(context.Background(), "poolgate:{bundle:sim-1}", "poolgate:{bundle:sim-2}").Val() == 2
	})
	a.Stop(t, 15*time.Second)

	// A new replica with an empty disk and no way to log in: the bundles
	// restore both accounts before their workers start.
	b := daemontest.StartDaemon(t, "POOLGATE_REDIS_URL="+r.URL(), "POOLGATE_BUNDLE_KEY="+key, loggedOutSims,
		"POOLGATE_AUTO_LOGIN=false")
	waitAllReady(t, b, 2, 15*time.Second)
}

func TestExportImportBetweenDaemons(t *testing.T) {
	key := newBundleKey(t)
	a := daemontest.StartDaemon(t, "POOLGATE_BUNDLE_KEY="+key, "POOLGATE_ADMIN_TOKEN=adm")
	b := daemontest.StartDaemon(t, "POOLGATE_BUNDLE_KEY="+key, "POOLGATE_ADMIN_TOKEN=adm", loggedOutSims, "POOLGATE_AUTO_LOGIN=false")
	testenv.WaitForNoError(t, 15*time.Second, "sim-1 ready on a and logged out on b", func() error {
		var s, sb route.Snapshot
		a.GetJSON(t, "/internal/pool", "adm", &s)
		b.GetJSON(t, "/internal/pool", "adm", &sb)
		if len(s.Instances) == 2 && s.Instances[0].State == supervisor.StateReady && sb.Instances[0].State == supervisor.StateNeedsLogin {
			return nil
		}
		return fmt.Errorf("a: %+v\nb: %+v", s.Instances, sb.Instances)
	})
	code, exported := post(t, a.URL+"/internal/session/export?instance=sim-1", "adm", nil)
	if code != http.StatusOK {
		t.Fatalf("export: %d %s", code, exported)
	}
	var exp struct {
		Instance, Account, Bundle string
		Bytes                     int
	}
	if err := json.Unmarshal(exported, &exp); err != nil || exp.Account != "sim-1" || exp.Bytes == 0 {
		t.Fatalf("export body %s (%v)", exported, err)
	}
	if code, _ := post(t, b.URL+"/internal/session/import?instance=sim-1", "wrong", exported); code != http.StatusUnauthorized {
		t.Errorf("import with a wrong token: %d", code)
	}
	tampered := []byte(exp.Bundle)
	tampered[len(tampered)/2] ^= 'A' ^ 'B'
	bad, _ := json.Marshal(map[string]any{"instance": "sim-1", "account": "sim-1", "bundle": string(tampered)})
	if code, body := post(t, b.URL+"/internal/session/import?instance=sim-1", "adm", bad); code != http.StatusUnprocessableEntity && code != http.StatusBadRequest {
		t.Errorf("tampered import: %d %s", code, body)
	}
	if code, body := post(t, b.URL+"/internal/session/import?instance=sim-1", "adm", exported); code != http.StatusOK {
		t.Fatalf("import: %d %s", code, body)
	}
	testenv.WaitForNoError(t, 15*time.Second, "sim-1 ready on b after the import", func() error {
		var sb route.Snapshot
		b.GetJSON(t, "/internal/pool", "adm", &sb)
		if sb.Instances[0].State != supervisor.StateReady {
			return fmt.Errorf("sim-1 on b: %+v", sb.Instances[0])
		}
		return nil
	})
}
