package access

import (
	"net/http"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/apikey"
)

func TestDecide(t *testing.T) {
	keys := apikey.NewRegistry([]apikey.Key{{Name: "alice", Secret: "sk-a"}, {Name: "vic", Secret: "sk-v", Role: "viewer"},
		{Name: "ops", Secret: "sk-o", Role: "admin"}})
	full := &Credentials{Keys: keys, AdminToken: "adm", MetricsToken: "met", Hops: testHops(t, "r1")}
	noAdmin := &Credentials{Keys: apikey.NewRegistry([]apikey.Key{{Name: "alice", Secret: "sk-a"}})}
	open := &Credentials{Keys: apikey.NewRegistry(nil)}
	openToken := &Credentials{Keys: apikey.NewRegistry(nil), AdminToken: "adm"}
	tests := []struct {
		name   string
		cr     *Credentials
		header map[string]string
		need   Need
		want   int // 0: admitted
	}{
		{"user on the API", full, bearer("sk-a"), APIUser, 0},
		{"nobody on the API", full, nil, APIUser, 401},
		{"admin token is no API key", full, bearer("adm"), APIUser, 401},
		{"user reads its own", full, bearer("sk-a"), Own, 0},
		{"metrics token has no records", full, bearer("met"), Own, 403},
		{"user on a read", full, bearer("sk-a"), Viewer, 403},
		{"viewer on a read", full, bearer("sk-v"), Viewer, 0},
		{"viewer on an action", full, bearer("sk-v"), Admin, 403},
		{"admin key on an action", full, bearer("sk-o"), Admin, 0},
		{"admin token on an action", full, bearer("adm"), Admin, 0},
		{"x-api-key counts like Bearer", full, map[string]string{"X-Api-Key": "sk-o"}, Admin, 0},
		{"surrounding spaces are trimmed", full, bearer("adm "), Admin, 0},
		{"near miss", full, bearer("ad"), Admin, 401},
		{"metrics token on metrics", full, bearer("met"), Metrics, 0},
		{"viewer on metrics", full, bearer("sk-v"), Metrics, 0},
		{"user on metrics", full, bearer("sk-a"), Metrics, 403},
		{"keys without an admin", noAdmin, bearer("sk-a"), Admin, 403},
		{"nobody without an admin", noAdmin, nil, Viewer, 403},
		{"open demo is the admin", open, nil, Admin, 0},
		{"open with a token wants it", openToken, nil, Admin, 401},
		{"open with a token serves the API", openToken, nil, APIUser, 0},
		{"open with a token: no own records", openToken, nil, Own, 401},
		// The older versions' hop, with the cluster token itself, opens
		// nothing, on a replica or a single node.
		{"the cluster token, no key", full, map[string]string{legacyHopHeader: "r2", legacyTokenHeader: "ct"}, Public, 401},
		{"the cluster token and a key", full, map[string]string{legacyHopHeader: "r2", legacyTokenHeader: "ct",
			"Authorization": "Bearer sk-a"}, APIUser, 401},
		{"the cluster token alone", full, map[string]string{legacyTokenHeader: "ct", "Authorization": "Bearer sk-o"}, Public, 401},
		{"a hop header on a node that is not clustered", noAdmin, map[string]string{HopHeader: "v1.e30.x"}, Public, 401},
		{"a hop header that does not verify, and a key", full, map[string]string{HopHeader: "v1.e30.x",
			"Authorization": "Bearer sk-o"}, Public, 401},
		{"a route without a rule", full, bearer("adm"), 0, 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "/", nil)
			for k, v := range tt.header {
				r.Header.Set(k, v)
			}
			c, v, ok := tt.cr.Identify(r)
			if ok {
				v, ok = tt.cr.Decide(tt.need, c)
			}
			got := 0
			if !ok {
				got = v.Status
			}
			if got != tt.want {
				t.Errorf("got %d (%s), want %d", got, v.Message, tt.want)
			}
		})
	}
}

// A user's key on /metrics (the Python gateway let any key scrape) is told
// what Prometheus should send instead.
func TestMetricsRefusalNamesTheToken(t *testing.T) {
	keys := apikey.NewRegistry([]apikey.Key{{Name: "alice", Secret: "sk-a"}})
	tests := []struct {
		name string
		cr   *Credentials
	}{
		{"with a metrics token", &Credentials{Keys: keys, MetricsToken: "met"}},
		{"with no token at all", &Credentials{Keys: keys}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := http.NewRequest("GET", "/metrics", nil)
			r.Header.Set("Authorization", "Bearer sk-a")
			c, v, ok := tt.cr.Identify(r)
			if ok {
				v, ok = tt.cr.Decide(Metrics, c)
			}
			if ok || v.Status != http.StatusForbidden || !strings.Contains(v.Message, "POOLGATE_METRICS_TOKEN") {
				t.Errorf("got %v %+v, want 403 naming POOLGATE_METRICS_TOKEN", ok, v)
			}
		})
	}
}

func bearer(s string) map[string]string { return map[string]string{"Authorization": "Bearer " + s} }

// A replica's headers stop at the edge, and the caller names who acted
// without a secret.
func TestStripHopAndName(t *testing.T) {
	r, _ := http.NewRequest("GET", "/", nil)
	for _, h := range []string{HopHeader, AnswerHeader, legacyHopHeader, legacyTokenHeader} {
		r.Header.Set(h, "x")
	}
	StripHop(r)
	if len(r.Header) != 0 {
		t.Errorf("headers left: %v", r.Header)
	}
	for _, tt := range []struct {
		give Caller
		want string
	}{
		{Caller{Key: &apikey.Key{Name: "ops", Secret: "sk-o"}, Role: RoleAdmin}, "key:ops"},
		{Caller{Token: "admin-token", Role: RoleAdmin}, "admin-token"},
		{Caller{Open: true, Key: &apikey.Key{Secret: "anything"}}, "open"},
		{Caller{}, "anonymous"},
	} {
		if got := tt.give.Name(); got != tt.want {
			t.Errorf("Name() = %q, want %q", got, tt.want)
		}
	}
}
