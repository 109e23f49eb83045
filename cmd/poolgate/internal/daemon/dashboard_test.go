package daemon

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/browsertest"
)

// The dashboard on a real cluster of two keyless loopback replicas: the
// page connects by itself; opened on one replica it shows which replica
// holds each account, the others' included; its live charts and account
// rows move as traffic flows. A screenshot of each view is written for
// review (POOLGATE_SCREENSHOT_DIR keeps them).
func TestDashboardLiveAndCluster(t *testing.T) {
	chromium := browsertest.Chromium(t)
	s := startCluster(t, 2, nil)
	on := s.waitSpread(60 * time.Second)
	viewer := s.replicas[1]
	var elsewhere []string // the accounts the viewing replica does not hold
	for acct, rs := range on {
		if rs[0] == 0 {
			elsewhere = append(elsewhere, acct)
		}
	}
	if len(elsewhere) == 0 {
		t.Fatalf("replica 1 holds no account: %v", on)
	}

	page := browsertest.Open(t, chromium)
	page.MustSetViewport(1400, 1000, 1, false)
	page.Timeout(15 * time.Second).MustNavigate(viewer.URL + "/admin").MustWaitLoad()
	for acct, rs := range on {
		browsertest.WaitJS(t, page, "the holder of "+acct, `(acct, holder) => {
			const r = document.querySelector('#leases tr[data-account="' + acct + '"]');
			return r && r.querySelector("td.holder").textContent.startsWith(holder + "-") &&
				document.getElementById("token-form").hidden;
		}`, acct, fmt.Sprintf("r%d", rs[0]+1))
	}
	browsertest.WaitJS(t, page, "both replicas with the accounts they hold", `(count) => {
		const rows = [...document.querySelectorAll("#replicas tbody tr")];
		const held = rows.map(r => r.querySelectorAll(".held span").length);
		return rows.length === 2 && held[0] + held[1] === count && rows.some(r => r.querySelector(".self"));
	}`, len(on))

	points := func() string {
		return page.MustEval(`() => [...document.querySelectorAll("#lv-rps polyline.c-ok, #lv-rps circle.c-ok")]
			.map(p => p.getAttribute("points") || p.getAttribute("cy")).join("|")`).Str()
	}
	before := points()
	served := map[string]bool{}
	for i := range 12 {
		st, h, b := callAs(t, viewer, "k", fmt.Sprintf("hello %d [[sim:delay=50ms]]", i), false)
		if st != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, st, b)
		}
		served[h.Get("X-Poolgate-Instance")] = true
	}
	browsertest.WaitJS(t, page, "the requests-per-second chart moving", `(before) => {
		const now = [...document.querySelectorAll("#lv-rps polyline.c-ok, #lv-rps circle.c-ok")]
			.map(p => p.getAttribute("points") || p.getAttribute("cy")).join("|");
		return now !== "" && now !== before;
	}`, before)
	for acct := range served {
		browsertest.WaitJS(t, page, "the row of "+acct+" counting its requests", `(acct) => {
			const r = document.querySelector('#accounts-live tr[data-account="' + acct + '"]');
			return r && Number(r.querySelector("td.rps").textContent) > 0 && r.querySelector("td.p50").textContent !== "-";
		}`, acct)
	}
	if after := points(); after == before {
		t.Errorf("the chart did not move: %q", after)
	}

	page.MustSetViewport(1400, 3000, 1, false)
	browsertest.ElementScreenshot(t, page, "#live-charts", "dashboard-live.png")
	browsertest.ElementScreenshot(t, page, "#live", "dashboard-accounts.png")
	browsertest.ElementScreenshot(t, page, "#cluster", "dashboard-cluster.png")
	page.MustSetViewport(1280, 900, 1, false)
	browsertest.Screenshot(t, page, "dashboard.png")
}
