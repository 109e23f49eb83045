package pycompat_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// TestViewersDoNotReadLoginSecrets: with python_compat, the auto-login
// status in the Python gateway's shape keeps from a viewer what poolgate's
// own keeps (the hostile suite's test of the same name): a login whose page
// (the test's own, on a host the recipe allows) never shows its form fails
// with the page's address, state nonce and all, which an admin reads whole
// and a viewer without its query; and the status's auth.id (the account's
// username) is an admin's to read too. Before, a viewer read both.
func TestViewersDoNotReadLoginSecrets(t *testing.T) {
	const nonce, adminToken = "nonce-s3cret-4471", "adm-viewer"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>no form here</body></html>")
	}))
	defer page.Close()
	accts, _ := json.Marshal([]map[string]any{
		{"name": "a1", "username": "alice@example.com", "password": "pw", "args": []string{"--login-url=" + page.URL + "/login?state=" + nonce}},
		{"name": "a2", "username": "bob@example.com", "password": "pw", "args": []string{"--logged-in"}}})
	const viewerKey = "sk-viewer"
	d := daemontest.StartDaemon(t, "POOLGATE_ACCOUNTS="+string(accts), "POOLGATE_ADMIN_TOKEN="+adminToken,
		`POOLGATE_API_KEYS=[{"name":"v","key":"`+viewerKey+`","role":"viewer"}]`, "POOLGATE_PYTHON_COMPAT=true",
		"POOLGATE_LOGIN_ATTEMPTS=1", "POOLGATE_LOGIN_TIMEOUT=5s", "POOLGATE_HEALTH_INTERVAL=300ms")
	type status struct {
		Instances []struct {
			Name    string `json:"name"`
			PageURL string `json:"page_url"`
			Auth    struct {
				ID string `json:"id"`
			} `json:"auth"`
		} `json:"instances"`
	}
	read := func(token string) (page, id string) {
		var st status
		d.GetJSON(t, "/internal/auto-login/status", token, &st)
		for _, in := range st.Instances {
			switch in.Name {
			case "a1":
				page = in.PageURL
			case "a2":
				id = in.Auth.ID
			}
		}
		return page, id
	}
	testenv.WaitFor(t, 60*time.Second, "a1's login to fail on the page and a2 logged in", func() bool {
		page, id := read(adminToken)
		return page != "" && id != ""
	})
	if page, id := read(adminToken); !strings.Contains(page, nonce) || id != "bob@example.com" {
		t.Errorf("the admin reads page %q, auth.id %q; want the whole address and the username", page, id)
	}
	if got, id := read(viewerKey); strings.Contains(got, nonce) || !strings.HasPrefix(got, page.URL+"/login") || id != "" {
		t.Errorf("a viewer reads page %q, auth.id %q; want the address without its state nonce, and no username", got, id)
	}
}
