package daemon

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/cluster"
	"github.com/poolgate/poolgate/pool/route"
)

func postAdmin(t *testing.T, url string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// The lease decides who drives an account, for the admin API too: an action
// sent to a replica that does not hold the account is carried out by the
// holder (forwarded), never where it landed, so no account is ever served
// by two replicas.
func TestAdminActionsFollowTheLease(t *testing.T) {
	s := newScale(t)
	var violations atomic.Int32
	stop := make(chan struct{})
	var wg sync.WaitGroup
	s.sample(stop, &violations, &wg)
	defer func() {
		close(stop)
		wg.Wait()
	}()
	on := s.waitSpread(30 * time.Second)
	holder := on["acct-1"][0]
	other := -1
	for i := range s.live() {
		if i != holder {
			other = i
			break
		}
	}
	restarts := func(i int) int {
		var snap route.Snapshot
		s.live()[i].GetJSON(t, "/internal/pool", "", &snap)
		in, _ := snap.Instance("acct-1")
		return in.Restarts
	}
	before := restarts(holder)
	code, body := postAdmin(t, s.live()[other].URL+"/internal/pool/acct-1/restart", nil, "")
	if code != http.StatusAccepted {
		t.Fatalf("restart on a non-holder: %d %s, want 202 from the holder", code, body)
	}
	testenv.WaitFor(t, 10*time.Second, "the holder to restart acct-1", func() bool { return restarts(holder) > before })
	if on := s.waitSpread(15 * time.Second); on["acct-1"][0] != holder {
		t.Errorf("acct-1 moved to replica %d, want it still on the holder %d", on["acct-1"][0], holder)
	}

	// A bundle import lands on the holder too: its own check answers.
	code, body = postAdmin(t, s.live()[other].URL+"/internal/session/import?instance=acct-1", nil, `{"bundle":"not base64!"}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "bundle") {
		t.Errorf("import on a non-holder: %d %s, want the holder's 400 about the bundle", code, body)
	}

	// An import that names its instance only in its body (the export's
	// answer sent back as it is) is held to that instance's lease as well:
	// the holder imports it and restarts its own worker; the replica it was
	// sent to starts none (the sampler sees no second owner).
	code, exported := postAdmin(t, s.live()[holder].URL+"/internal/session/export?instance=acct-1", nil, "")
	if code != http.StatusOK || !strings.Contains(exported, `"instance":"acct-1"`) {
		t.Fatalf("export on the holder: %d %s", code, exported)
	}
	before = restarts(holder)
	code, body = postAdmin(t, s.live()[other].URL+"/internal/session/import", nil, exported)
	if code != http.StatusOK || !strings.Contains(body, `"imported":true`) {
		t.Errorf("body-named import on a non-holder: %d %s, want the holder's 200", code, body)
	}
	testenv.WaitFor(t, 10*time.Second, "the holder to restart acct-1 on the import", func() bool { return restarts(holder) > before })
	var snap route.Snapshot
	s.live()[other].GetJSON(t, "/internal/pool", "", &snap)
	if in, _ := snap.Instance("acct-1"); in.PID != 0 {
		t.Errorf("the non-holder runs acct-1 (pid %d, %s) after an import sent to it", in.PID, in.State)
	}

	// A replica that receives an already forwarded action it does not hold
	// refuses it: one hop, and never an action without the lease. A hop
	// not signed with the cluster's key is no replica's, and neither is
	// the cluster token itself (the older versions' hop).
	var view cluster.Status
	s.live()[other].GetJSON(t, "/internal/cluster", "", &view)
	sign := func(token string) string {
		h, err := access.NewHops(token, "r9", "http://r9:8080")
		if err != nil {
			t.Fatal(err)
		}
		signed, err := h.Sign(view.Self, http.MethodPost, "/internal/pool/acct-1/drain", access.NewHopBody(nil),
			access.Caller{Open: true, Role: access.RoleAdmin, Owner: access.OwnerOf("")})
		if err != nil {
			t.Fatal(err)
		}
		return signed.Header
	}
	tests := []struct {
		name   string
		header map[string]string
		want   int
	}{
		{"a hop from another replica", map[string]string{access.HopHeader: sign("ct")}, http.StatusConflict},
		{"a hop signed with another key", map[string]string{access.HopHeader: sign("not-ct")}, http.StatusUnauthorized},
		{"the cluster token", map[string]string{"X-Poolgate-Forwarded-By": "r9", "X-Poolgate-Cluster-Token": "ct"}, http.StatusUnauthorized},
	}
	for _, tt := range tests {
		code, body = postAdmin(t, s.live()[other].URL+"/internal/pool/acct-1/drain", tt.header, "")
		if code != tt.want || (code == http.StatusConflict && !strings.Contains(body, "acct-1")) {
			t.Errorf("drain on a non-holder, %s: %d %s, want %d", tt.name, code, body, tt.want)
		}
	}
	s.waitSpread(10 * time.Second)
	if violations.Load() > 0 {
		t.Fatalf("%d times an account was served by two replicas at one instant", violations.Load())
	}
}
