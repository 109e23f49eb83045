package admin

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// With python_compat, the auto-login routes answer as the Python gateway's
// scripts parse them: start is 200, not 202; a named instance that is
// logged in is answered already_logged_in with no login started (?force=true
// logs it in again, poolgate's way); a login already running is
// already_running; status has "ok" and, for each instance, "instance",
// "auto_login" (the login's status) and "auth" (what the worker says of its
// login now), beside poolgate's own fields. The Python gateway's
// per-instance "state" was its connection's state; here "state" stays the
// login's (the dashboard reads it) and the instance's is "instance_state".

// compatStartAnswer is the Python gateway's answer to a login start.
type compatStartAnswer struct {
	OK        bool          `json:"ok"`
	State     string        `json:"state"`
	Instance  string        `json:"instance"`
	Picked    bool          `json:"picked,omitempty"`
	Auth      *compatAuth   `json:"auth,omitempty"`
	AutoLogin *login.Status `json:"auto_login,omitempty"`
}

// compatAuth is what the worker says of its login, asked at the time of the
// request as the Python gateway asked it. That gateway passed the worker's
// own auth/status object; poolgate's drivers report only whether it is
// logged in, so id is the account's username when it is (a script's
// "auth.id" test reads as before), and error says why the worker could not
// be asked.
type compatAuth struct {
	LoggedIn bool   `json:"logged_in"`
	ID       string `json:"id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// compatStatusItem is one instance of the status answer.
type compatStatusItem struct {
	login.Status
	Instance      string           `json:"instance"`
	AutoLogin     login.Status     `json:"auto_login"`
	Auth          compatAuth       `json:"auth"`
	InstanceState supervisor.State `json:"instance_state"`
}

// compatAuthTimeout bounds the workers' answers to a status request.
const compatAuthTimeout = 5 * time.Second

// authOf asks the instance's worker whether it is logged in.
func authOf(ctx context.Context, t supervisor.LoginTarget) compatAuth {
	ok, err := t.Confirm(ctx)
	switch {
	case err != nil:
		return compatAuth{Error: err.Error()}
	case ok:
		id := t.Account.Username
		if id == "" {
			id = t.Account.Name
		}
		return compatAuth{LoggedIn: true, ID: id}
	}
	return compatAuth{}
}

// compatStart is start under python_compat.
func (h *loginAPI) compatStart(c *gin.Context, t supervisor.LoginTarget, picked bool) {
	name := t.Instance
	if st, err := h.targets.State(name); err == nil && st == supervisor.StateReady && c.Query("force") != "true" {
		ctx, cancel := context.WithTimeout(c.Request.Context(), compatAuthTimeout)
		defer cancel()
		auth := authOf(ctx, t)
		c.JSON(http.StatusOK, compatStartAnswer{OK: true, State: string(stateLoggedIn), Instance: name, Picked: picked, Auth: &auth})
		return
	}
	if h.svc == nil {
		writeError(c, http.StatusServiceUnavailable, CodeUnavailable,
			"automatic login is not available (no browser); use /auto-login/url and /auto-login/"+name+"/callback")
		return
	}
	state := "running"
	if prev, ok := h.svc.Status(name); ok && prev.State == login.StateRunning {
		state = "already_running"
	}
	st := h.svc.Start(t)
	h.log.Info("admin action", "action", "auto_login_start", "instance", name, "picked", picked, "by", who(c))
	c.JSON(http.StatusOK, compatStartAnswer{OK: true, State: state, Instance: name, Picked: picked, AutoLogin: &st})
}

// compatStatus is status under python_compat: the workers are asked at
// once, each within compatAuthTimeout.
func (h *loginAPI) compatStatus(c *gin.Context, all []login.Status) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), compatAuthTimeout)
	defer cancel()
	items := make([]compatStatusItem, len(all))
	var wg sync.WaitGroup
	for i, st := range all {
		items[i] = compatStatusItem{Status: st, Instance: st.Name, AutoLogin: st}
		items[i].InstanceState, _ = h.targets.State(st.Name)
		t, err := h.targets.LoginTarget(st.Name)
		if err != nil {
			items[i].Auth = compatAuth{Error: err.Error()}
			continue
		}
		wg.Go(func() { items[i].Auth = authOf(ctx, t) })
	}
	wg.Wait()
	if !access.From(c.Request.Context()).SeesContent() {
		for i := range items {
			items[i].Auth.ID = "" // the account's username: an admin's to read
		}
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "instances": items, "browser": h.svc != nil})
}
