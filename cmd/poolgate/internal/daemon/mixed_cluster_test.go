package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Two replicas on a real redis-server share a pool of two kinds: two
// Lingma accounts and one model server, so one replica holds no account of
// some kind. Both replicas list every model with its kind, each serves
// every model (a model none of its accounts serves goes to the replica
// whose accounts do), and when one replica stops, the other takes its
// accounts over and serves both kinds alone.
func TestMixedCluster(t *testing.T) {
	rs := testenv.Redis(t)
	accounts := mixedKinds()[:3] // lm-1, lm-2, ms-1
	kindOfAccount := map[string]string{"lm-1": "lingma", "lm-2": "lingma", "ms-1": "openai"}
	var ports [2]int
	replicas := make([]*daemontest.Daemon, 2)
	for i := range replicas {
		ports[i] = testenv.FreePort(t)
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		replicas[i] = daemontest.StartDaemon(t, "POOLGATE_REDIS_URL="+rs.URL(), "POOLGATE_ACCOUNTS="+mixedJSON(t, accounts),
			"POOLGATE_CLUSTER_TOKEN=ct", "POOLGATE_LEASE_TTL=3s", "POOLGATE_HEALTH_INTERVAL=300ms",
			"POOLGATE_LISTEN="+addr, "POOLGATE_ADVERTISE_URL=http://"+addr, fmt.Sprintf("POOLGATE_REPLICA_ID=r%d", i+1))
	}
	// Every account ready on one replica, the two replicas sharing them.
	var holder map[string]int // account -> replica
	testenv.WaitForNoError(t, 40*time.Second, "the accounts spread over both replicas", func() error {
		holder = map[string]int{}
		per := [2]int{}
		for i, d := range replicas {
			for name, in := range instancesOf(t, d) {
				if in.State == supervisor.StateReady && in.PID > 0 {
					holder[name] = i
					per[i]++
				}
			}
		}
		if len(holder) != len(accounts) || per[0] == 0 || per[1] == 0 {
			return fmt.Errorf("ready: %v", holder)
		}
		return nil
	})
	// Both replicas list every model with its kind: their own and, from
	// the heartbeats, the other's.
	for i, d := range replicas {
		testenv.WaitForNoError(t, 10*time.Second, fmt.Sprintf("r%d lists the pool's models", i+1), func() error {
			var l struct{ Data []struct{ ID, Driver string } }
			d.GetJSON(t, "/v1/models", "", &l)
			got := map[string]string{}
			for _, m := range l.Data {
				got[m.ID] = m.Driver
			}
			for model, kind := range kindOfModel {
				if got[model] != kind {
					return fmt.Errorf("models %v", got)
				}
			}
			return nil
		})
	}
	// Each replica serves each model, on an account of the model's kind,
	// wherever the account runs.
	serveAll := func(stage string, ds map[int]*daemontest.Daemon) {
		t.Helper()
		for i, d := range ds {
			for model, kind := range kindOfModel {
				code, inst, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(model, "hello "+model))
				if code != http.StatusOK || kindOfAccount[inst] != kind {
					t.Errorf("%s: %s through r%d: %d on %q: %s; want an account of kind %s", stage, model, i+1, code, inst, body, kind)
				}
			}
		}
	}
	// Three accounts on two replicas: one replica holds no account of some
	// kind, so its requests for that kind's models must go to the other.
	kinds := [2]map[string]bool{{}, {}}
	for acct, i := range holder {
		kinds[i][kindOfAccount[acct]] = true
	}
	if len(kinds[0]) == 2 && len(kinds[1]) == 2 {
		t.Fatalf("both replicas hold both kinds (%v): nothing here needs a hop", holder)
	}
	serveAll("spread", map[int]*daemontest.Daemon{0: replicas[0], 1: replicas[1]})

	// The replica holding the model server stops; the other takes every
	// account over and serves both kinds alone.
	gone := holder["ms-1"]
	stay := replicas[1-gone]
	replicas[gone].Stop(t, 20*time.Second)
	testenv.WaitForNoError(t, 30*time.Second, "every account taken over", func() error {
		if n := len(readyInstances(t, stay)); n != len(accounts) {
			return fmt.Errorf("%d ready", n)
		}
		return nil
	})
	serveAll("after the hand-over", map[int]*daemontest.Daemon{1 - gone: stay})
	if in := instancesOf(t, stay)["ms-1"]; in.Driver != "openai" || in.State != supervisor.StateReady {
		t.Errorf("ms-1 after the hand-over: %+v, want a ready openai instance", in)
	}
}

// mixedJSON renders accounts as POOLGATE_ACCOUNTS' JSON list.
func mixedJSON(t *testing.T, accounts []mixedAccount) string {
	t.Helper()
	var list []map[string]any
	for _, a := range accounts {
		acct := map[string]any{"name": a.Name}
		if a.Driver != "" {
			acct["driver"] = a.Driver
		}
		if len(a.Models) > 0 {
			acct["args"] = append([]string{"--model-keys=" + strings.Join(a.Models, ",")}, a.Args...)
		}
		list = append(list, acct)
	}
	b, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
