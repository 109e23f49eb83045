package daemon

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/agents"
)

// A mixed pool of real Claude Code workers beside simulated Lingma ones,
// driven by the agents as released: Claude Code's own model name takes the
// default model, which the Claude Code workers serve; Codex CLI's is an
// alias of the Lingma kind's model. Each agent's turns (plain, a tool its
// client runs, a follow-up that continues the session) stay on their kind,
// as the turn log says.
func TestMixedPoolOfClaudeCodeAndLingmaDrivenByAgents(t *testing.T) {
	up := daemontest.StartDaemon(t)
	up.WaitReady(t, 20*time.Second)
	cc := ccAccount("cc-1", up.URL)
	env := map[string]string{}
	for k, v := range cc["env"].(map[string]string) {
		env[k] = v
	}
	dataDir := t.TempDir()
	d, _ := startMixed(t, []mixedAccount{
		{Name: "lm-1", Models: []string{"lm-coder"}, Args: []string{"--logged-in"}, Bin: simworkerBin(t)},
		{Name: "cc-1", Driver: "claude-code", Bin: claudeBin(t), Env: env},
	}, "default_model: default\nmodel_aliases: {gpt-5-codex: lm-coder}\n"+
		"metrics_public: true\nclaude-code:\n  record: true\n", "POOLGATE_DATA_DIR="+dataDir)
	t.Cleanup(func() { checkTranscripts(t, dataDir) })

	rec, err := agents.NewRecorder(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(rec)
	defer proxy.Close()
	want := map[string]string{"claude-code": "claude-code", "codex": "lingma"}
	for _, c := range agents.Clients() {
		kind, ok := want[c.Name]
		if !ok {
			continue
		}
		t.Run(c.Name, func(t *testing.T) {
			before := turnsByDriver(d.Log())
			runAgent(t, rec, proxy.URL, c, func() float64 { return scrape(t, d, "poolgate_session_cache_hits_total") }, nil)
			after := turnsByDriver(d.Log())
			for driver, n := range after {
				got := n - before[driver]
				switch {
				case driver == kind && got < 3:
					t.Errorf("%s's turns on %s: %d, want its three scenarios there", c.Name, driver, got)
				case driver != kind && got != 0:
					t.Errorf("%s's turns on %s: %d, want none off its kind %s", c.Name, driver, got, kind)
				}
			}
		})
	}
}

// turnsByDriver counts the turn log lines by the kind that served them.
func turnsByDriver(log string) map[string]int {
	out := map[string]int{}
	for l := range strings.Lines(log) {
		if strings.Contains(l, "msg=turn ") {
			out[turnAttr(l, "driver")]++
		}
	}
	return out
}
