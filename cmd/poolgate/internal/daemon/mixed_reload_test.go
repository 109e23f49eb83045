package daemon

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// A reload brings a kind into a pool of one kind, changes an account's
// kind and takes a kind out again, each while the other accounts' workers
// run on untouched (their PIDs do not change).
func TestMixedPoolReloadChangesKinds(t *testing.T) {
	lingma := mixedKinds()[:2] // lm-1, lm-2
	d, path := startMixed(t, lingma, "")
	pids := func() map[string]int {
		out := map[string]int{}
		for name, in := range instancesOf(t, d) {
			out[name] = in.PID
		}
		return out
	}
	apply := func(accounts []mixedAccount, added, removed, changed []string) {
		t.Helper()
		writeMixed(t, path, accounts, "")
		code, rep, eb := reload(t, d, "")
		acc := rep.Applied.Accounts
		if code != http.StatusOK || !slices.Equal(acc.Added, added) || !slices.Equal(acc.Removed, removed) || !slices.Equal(acc.Changed, changed) {
			t.Fatalf("reload: %d %+v %+v; want added %v, removed %v, changed %v", code, rep, eb, added, removed, changed)
		}
		waitAllReady(t, d, len(accounts), 30*time.Second)
	}
	serve := func(model, wantDriver string) string {
		t.Helper()
		code, inst, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(model, "hello"))
		if code != http.StatusOK || instancesOf(t, d)[inst].Driver != wantDriver {
			t.Fatalf("%s: %d on %q: %s; want a %s instance", model, code, inst, body, wantDriver)
		}
		return inst
	}

	// One kind: every unknown name takes the default model, as ever.
	serve("ms-large", "lingma")
	before := pids()

	// A model server joins: its model goes to it, the Lingma workers run on.
	withServer := append(slices.Clone(lingma), mixedKinds()[2]) // ms-1
	apply(withServer, []string{"ms-1"}, []string{}, []string{})
	if inst := serve("ms-large", "openai"); inst != "ms-1" {
		t.Errorf("ms-large went to %s, want ms-1", inst)
	}
	if code, _, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody("no-such-model", "hi")); code != http.StatusNotFound ||
		!strings.Contains(body, "ms-large") {
		t.Errorf("no-such-model in the pool of two kinds: %d %s, want a 404 naming ms-large", code, body)
	}
	now := pids()
	for _, name := range []string{"lm-1", "lm-2"} {
		if now[name] != before[name] {
			t.Errorf("%s was restarted by the reload that added a kind (pid %d, was %d)", name, now[name], before[name])
		}
	}

	// lm-2 becomes a model server of its own model; lm-1 and ms-1 run on.
	before = pids()
	changed := slices.Clone(withServer)
	changed[1] = mixedAccount{Name: "lm-2", Driver: "openai", Models: []string{"ms-tiny"}}
	apply(changed, []string{}, []string{}, []string{"lm-2"})
	if in := instancesOf(t, d)["lm-2"]; in.Driver != "openai" || !slices.Equal(in.Models, []string{"ms-tiny"}) {
		t.Errorf("lm-2 after its kind changed: driver %q, models %v; want openai, [ms-tiny]", in.Driver, in.Models)
	}
	if inst := serve("ms-tiny", "openai"); inst != "lm-2" {
		t.Errorf("ms-tiny went to %s, want lm-2", inst)
	}
	now = pids()
	for _, name := range []string{"lm-1", "ms-1"} {
		if now[name] != before[name] {
			t.Errorf("%s was restarted by the reload that changed lm-2's kind (pid %d, was %d)", name, now[name], before[name])
		}
	}

	// The model servers leave: one kind again, lm-1 untouched.
	before = pids()
	apply(lingma[:1], []string{}, []string{"lm-2", "ms-1"}, []string{})
	if now := pids(); now["lm-1"] != before["lm-1"] || len(now) != 1 {
		t.Errorf("after the model servers left: %v, want lm-1 alone with pid %d", now, before["lm-1"])
	}
	serve("ms-large", "lingma") // an unknown name takes the default model again
}
