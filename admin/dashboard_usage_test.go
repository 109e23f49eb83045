package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-rod/rod"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/usage"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Names an operator or a user chose, written to break out of the page if
// it ever put them in as markup.
const (
	hostileKey     = `<img src=x onerror="window.__xss='key'">`
	hostileAccount = `<b>acct</b><img src=x>`
	hostileError   = `<script>window.__xss='err'</script><img src=x onerror="window.__xss='err'">`
	hostilePrompt  = `<img src=x onerror="window.__xss='prompt'">`
)

// TestDashboardUsage drives the usage and request-log views in a real
// headless Chromium over the real in-memory stores, filled with known
// records: the per key and account table and its totals, one bar per day
// with requests, the filters, auto-refresh, and names and errors holding
// HTML shown as text.
func TestDashboardUsage(t *testing.T) {
	chromium := findChromium(t)
	now := time.Now().UTC()
	ago := func(days int) time.Time { return now.Add(-time.Duration(days) * 24 * time.Hour) }
	day := func(days int) string { return ago(days).Format("2006-01-02") }

	counts := usage.NewMemory(30*24*time.Hour, nil)
	addUsage(t, counts,
		usage.Record{Time: ago(3), Key: "alice", Account: "sim-1", InputTokens: 10, OutputTokens: 5},
		usage.Record{Time: ago(3), Key: "alice", Account: "sim-1", InputTokens: 10, OutputTokens: 5, Error: true},
		usage.Record{Time: ago(1), Key: "alice", Account: "sim-2", InputTokens: 5, OutputTokens: 4},
		usage.Record{Time: ago(1), Key: "alice", Account: "sim-2", InputTokens: 5, OutputTokens: 4, Reused: true},
		usage.Record{Time: ago(1), Key: "alice", Account: "sim-2", InputTokens: 5, OutputTokens: 4},
		usage.Record{Time: ago(1), Key: "bob", Account: "sim-1", InputTokens: 7, Error: true},
		usage.Record{Time: ago(0), Key: "alice", Account: "sim-1", InputTokens: 2, OutputTokens: 3},
		usage.Record{Time: ago(0), Key: hostileKey, Account: hostileAccount, InputTokens: 1, OutputTokens: 1},
		usage.Record{Time: ago(0), Error: true}, // refused before any account, on a gateway without keys
	)
	log := requestlog.NewMemory(requestlog.Config{Debug: true})
	minute := func(n int) time.Time { return now.Add(-time.Duration(n) * time.Minute) }
	addLog(t, log,
		requestlog.Entry{Time: minute(5), RequestID: "r1", Key: "alice", Account: "sim-1", Instance: "sim-1", Model: "qwen",
			Protocol: "openai", Status: 200, LatencyMS: 120, InputTokens: 10, OutputTokens: 5},
		requestlog.Entry{Time: minute(4), RequestID: "r2", Key: "bob", Account: "sim-2", Instance: "sim-2", Model: "qwen",
			Protocol: "anthropic", Status: 502, LatencyMS: 900, Error: "upstream failed"},
		requestlog.Entry{Time: minute(3), RequestID: "r3", Key: hostileKey, Account: hostileAccount, Instance: "sim-1",
			Model: "qwen", Protocol: "openai", Status: 200, Error: hostileError, Prompt: hostilePrompt, Answer: "<b>bold</b>"},
		requestlog.Entry{Time: minute(2), RequestID: "r4", Protocol: "openai", Status: 429, Error: "over the key's limit"},
		requestlog.Entry{Time: minute(1), RequestID: "r5", Key: "alice", Account: "sim-2", Instance: "sim-2", Model: "qwen",
			Protocol: "responses", Status: 200, LatencyMS: 80, InputTokens: 3, OutputTokens: 2, Reused: true},
	)
	srv := startUsageAdmin(t, counts, log)

	page := openPage(t, chromium)
	page.Timeout(15 * time.Second).MustNavigate(srv.URL + "/admin").MustWaitLoad()
	typeToken(t, page, adminToken)

	// Usage: one row per key and account over the last 7 days, the
	// nameless ones labelled, and the totals.
	waitRows(t, page, "the usage table", "#usage-table tbody", [][]string{
		{"(no key)", "(refused)", "1", "0", "0", "1", "0"},
		{hostileKey, hostileAccount, "1", "1", "1", "0", "0"},
		{"alice", "sim-1", "3", "22", "13", "1", "0"},
		{"alice", "sim-2", "3", "15", "12", "0", "1"},
		{"bob", "sim-1", "1", "7", "0", "1", "0"},
	})
	waitRows(t, page, "the usage totals", "#usage-table tfoot", [][]string{{"Total", "9", "45", "26", "3", "1"}})
	if got, want := page.MustEval(`() => document.getElementById("u-from").value`).Str(), day(6); got != want {
		t.Errorf("the usage range starts on %s, want %s (the last 7 days)", got, want)
	}
	waitBars(t, page, "a bar on each day with requests", [][]string{{day(3), "2"}, {day(1), "4"}, {day(0), "3"}})
	waitJS(t, page, "a slot and a label for each of the 7 days", `() =>
		document.querySelectorAll("#usage-chart text").length === 3 + 7`)

	// The filters narrow the table and the chart.
	choose(t, page, "#u-key", "alice")
	waitRows(t, page, "alice's usage", "#usage-table tbody", [][]string{
		{"alice", "sim-1", "3", "22", "13", "1", "0"},
		{"alice", "sim-2", "3", "15", "12", "0", "1"},
	})
	waitRows(t, page, "alice's totals", "#usage-table tfoot", [][]string{{"Total", "6", "37", "25", "1", "1"}})
	waitBars(t, page, "alice's bars", [][]string{{day(3), "2"}, {day(1), "3"}, {day(0), "1"}})
	choose(t, page, "#u-account", "sim-1")
	setDate(t, page, "#u-from", day(1))
	waitRows(t, page, "alice on sim-1 since yesterday", "#usage-table tbody", [][]string{
		{"alice", "sim-1", "1", "2", "3", "0", "0"},
	})
	waitBars(t, page, "one bar, today's", [][]string{{day(0), "1"}})
	choose(t, page, "#u-key", "")
	choose(t, page, "#u-account", "")
	click(t, page, `button.u-range[data-days="30"]`)
	waitRows(t, page, "the usage totals over 30 days", "#usage-table tfoot", [][]string{{"Total", "9", "45", "26", "3", "1"}})
	waitJS(t, page, "30 day slots", `(from) => document.querySelectorAll("#usage-chart text").length === 3 + 10 &&
		document.getElementById("u-from").value === from`, day(29))

	// The request log, newest first.
	waitRows(t, page, "the request log", "#log-table tbody", logRows(
		[]string{"alice", "sim-2", "sim-2", "qwen", "responses", "200", "80 ms", "3 / 2", "yes", ""},
		[]string{"(no key)", "(refused)", "-", "-", "openai", "429", "0 ms", "0 / 0", "", "over the key's limit"},
		[]string{hostileKey, hostileAccount, "sim-1", "qwen", "openai", "200", "0 ms", "0 / 0", "",
			hostileError + "prompt and answerPrompt: " + hostilePrompt + "Answer: <b>bold</b>"},
		[]string{"bob", "sim-2", "sim-2", "qwen", "anthropic", "502", "900 ms", "0 / 0", "", "upstream failed"},
		[]string{"alice", "sim-1", "sim-1", "qwen", "openai", "200", "120 ms", "10 / 5", "", ""},
	))
	// A prompt opened stays open through the refreshes.
	click(t, page, "#log-table td.err details summary")
	before := page.MustElement("#status").MustText()
	waitJS(t, page, "a refresh", `(before) => document.getElementById("status").textContent !== before`, before)
	waitJS(t, page, "the prompt still open after it", `() => document.querySelector("#log-table td.err details").open`)

	tests := []struct {
		give string // the status filter
		code string // typed into the exact code box
		want []string
	}{
		{give: "errors", want: []string{"429", "200", "502"}},
		{give: "4xx", want: []string{"429"}},
		{give: "5xx", want: []string{"502"}},
		{give: "2xx", want: []string{"200", "200", "200"}},
		{give: "code", code: "502", want: []string{"502"}},
		{give: "", want: []string{"200", "429", "200", "502", "200"}},
	}
	for _, tt := range tests {
		choose(t, page, "#l-status", tt.give)
		if tt.code != "" {
			el := page.Timeout(10 * time.Second).MustElement("#l-code")
			el.MustInput(tt.code)
		}
		waitStatuses(t, page, "the request log with status "+tt.give+" "+tt.code, tt.want)
	}
	choose(t, page, "#l-key", "bob")
	waitStatuses(t, page, "bob's requests", []string{"502"})

	// Both views refresh themselves.
	addLog(t, log, requestlog.Entry{Time: now, RequestID: "r6", Key: "bob", Account: "sim-1", Protocol: "openai", Status: 503, Error: "no instance"})
	waitStatuses(t, page, "bob's new request", []string{"503", "502"})
	addUsage(t, counts, usage.Record{Time: now, Key: "bob", Account: "sim-1", InputTokens: 4, OutputTokens: 6})
	waitRows(t, page, "the usage totals with bob's new request", "#usage-table tfoot", [][]string{{"Total", "10", "49", "32", "3", "1"}})

	// What came from users and config stayed text: nothing the page did
	// not make itself is an element.
	if got := page.MustEval(`(key) => [...document.querySelectorAll("#u-key option")].some(o => o.textContent === key)`, hostileKey).Bool(); !got {
		t.Errorf("the key filter has no option reading %q", hostileKey)
	}
	if got := page.MustEval(`() => document.querySelectorAll("main img, main b, main script").length +
		" " + String(window.__xss)`).Str(); got != "0 undefined" {
		t.Errorf("elements and script runs from data = %q, want %q", got, "0 undefined")
	}
	saveScreenshot(t, page, "dashboard-usage.png")
}

// logRows turns the cells after the time into the request log's rows;
// the time column reads whatever the browser's locale makes of it.
func logRows(rows ...[]string) [][]string {
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = append([]string{"*"}, r...)
	}
	return out
}

// waitRows waits until the rows under sel read want, cell by cell ("*"
// matches any cell).
func waitRows(t *testing.T, page *rod.Page, what, sel string, want [][]string) {
	t.Helper()
	const js = `(sel, want) => {
		const got = [...document.querySelectorAll(sel + " tr")].map(tr => [...tr.cells].map(c => c.textContent));
		return got.length === want.length && got.every((r, i) =>
			r.length === want[i].length && r.every((c, j) => want[i][j] === "*" || c === want[i][j]));
	}`
	if err := page.Timeout(15 * time.Second).Wait(rod.Eval(js, sel, want)); err != nil {
		got := page.MustEval(`(sel) => JSON.stringify([...document.querySelectorAll(sel + " tr")].map(tr => [...tr.cells].map(c => c.textContent)))`, sel)
		t.Fatalf("waiting for %s: %v\ngot  %s\nwant %q\npage: %s", what, err, got.Str(), want, page.MustElement("body").MustText())
	}
}

// waitBars waits until the chart's bars are want: day and requests.
func waitBars(t *testing.T, page *rod.Page, what string, want [][]string) {
	t.Helper()
	const js = `(want) => {
		const got = [...document.querySelectorAll("#usage-chart g.day")].map(g => [g.dataset.day, g.dataset.requests]);
		return JSON.stringify(got) === JSON.stringify(want);
	}`
	if err := page.Timeout(15 * time.Second).Wait(rod.Eval(js, want)); err != nil {
		got := page.MustEval(`() => JSON.stringify([...document.querySelectorAll("#usage-chart g.day")].map(g => [g.dataset.day, g.dataset.requests]))`)
		t.Fatalf("waiting for %s: %v\ngot  %s\nwant %q", what, err, got.Str(), want)
	}
}

// waitStatuses waits until the request log shows exactly these statuses.
func waitStatuses(t *testing.T, page *rod.Page, what string, want []string) {
	t.Helper()
	waitJS(t, page, what, `(want) => JSON.stringify([...document.querySelectorAll("#log-table tbody td.status")].map(td => td.textContent)) === JSON.stringify(want)`, want)
}

// choose picks the option whose value is value, as a user would.
func choose(t *testing.T, page *rod.Page, sel, value string) {
	t.Helper()
	el, err := page.Timeout(10 * time.Second).Element(sel)
	if err == nil {
		err = el.Select([]string{`option[value="` + value + `"]`}, true, rod.SelectorTypeCSSSector)
	}
	if err != nil {
		t.Fatalf("choose %q in %s: %v", value, sel, err)
	}
}

// setDate sets a date input the way its picker does: a value, then change.
func setDate(t *testing.T, page *rod.Page, sel, day string) {
	t.Helper()
	page.MustEval(`(sel, day) => {
		const el = document.querySelector(sel);
		el.value = day;
		el.dispatchEvent(new Event("change", { bubbles: true }));
	}`, sel, day)
}

func addUsage(t *testing.T, m *usage.Memory, recs ...usage.Record) {
	t.Helper()
	if err := m.Add(context.Background(), 0, recs); err != nil {
		t.Fatal(err)
	}
}

func addLog(t *testing.T, m *requestlog.Memory, es ...requestlog.Entry) {
	t.Helper()
	if err := m.Add(context.Background(), 0, es); err != nil {
		t.Fatal(err)
	}
}

// startUsageAdmin serves the admin API, the page and the usage endpoints
// over the given stores, with two idle instances.
func startUsageAdmin(t *testing.T, u *usage.Memory, l *requestlog.Memory) *httptest.Server {
	t.Helper()
	gin.SetMode(gin.TestMode)
	eng := gin.New()
	eng.Use(admin.Edge(adminToken))
	p := staticPool{}
	adm := admin.New(admin.Config{}, p, p, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	in := adm.Register(eng)
	adm.RegisterDashboard(eng)
	adm.RegisterUsage(in, u, l)
	srv := httptest.NewServer(eng)
	t.Cleanup(srv.Close)
	return srv
}

// staticPool is a pool of two ready instances that never change; the
// usage views need the page connected, not workers.
type staticPool struct{}

var (
	_ admin.Pool    = staticPool{}
	_ admin.Workers = staticPool{}
)

func (staticPool) Snapshot() route.Snapshot {
	return route.Snapshot{Instances: []route.InstanceStatus{
		{Name: "sim-1", Account: "sim-1", State: supervisor.StateReady, MaxInFlight: 4},
		{Name: "sim-2", Account: "sim-2", State: supervisor.StateReady, MaxInFlight: 4},
	}}
}
func (staticPool) Ready() (bool, string) { return true, "" }
func (staticPool) Probe(context.Context, string) (route.ProbeResult, error) {
	return route.ProbeResult{}, route.ErrBusy
}
func (staticPool) Restart(string) error               { return nil }
func (staticPool) Drain(string) error                 { return nil }
func (staticPool) ClearCooldown(string) (bool, error) { return false, nil }
