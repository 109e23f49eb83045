package pycompat

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/access"
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
// The admin API asks for these answers through admin.LoginCompat, whose
// adapter (the wiring's) hands over each instance as a LoginInstance.

// LoginInstance is one instance as these answers see it.
type LoginInstance struct {
	Name string
	// ID is who it logs in as: its account's username, else its name.
	ID string
	// State is the instance's state, as the pool names it; Ready says it
	// is logged in and serving.
	State string
	Ready bool
	// Login is its login's status (poolgate's object), as JSON.
	Login json.RawMessage
	// Confirm asks its worker whether it is logged in now.
	Confirm func(context.Context) (bool, error)
}

// startAnswer is the Python gateway's answer to a login start.
type startAnswer struct {
	OK        bool            `json:"ok"`
	State     string          `json:"state"`
	Instance  string          `json:"instance"`
	Picked    bool            `json:"picked,omitempty"`
	Auth      *auth           `json:"auth,omitempty"`
	AutoLogin json.RawMessage `json:"auto_login,omitempty"`
}

// auth is what the worker says of its login, asked at the time of the
// request as the Python gateway asked it. That gateway passed the worker's
// own auth/status object; poolgate's drivers report only whether it is
// logged in, so id is the account's username when it is (a script's
// "auth.id" test reads as before), and error says why the worker could not
// be asked.
type auth struct {
	LoggedIn bool   `json:"logged_in"`
	ID       string `json:"id,omitempty"`
	Error    string `json:"error,omitempty"`
}

// authTimeout bounds the workers' answers to a status request.
const authTimeout = 5 * time.Second

// authOf asks the instance's worker whether it is logged in.
func authOf(ctx context.Context, in LoginInstance) auth {
	ok, err := in.Confirm(ctx)
	switch {
	case err != nil:
		return auth{Error: err.Error()}
	case ok:
		return auth{LoggedIn: true, ID: in.ID}
	}
	return auth{}
}

// LoginStart answers a start of in's login: picked says the gateway chose
// in, force that the caller asked for a login all the same; running says a
// login of in runs now, and start starts one and returns the login's
// status (nil: no browser can). ok false: no login could be started, and
// nothing is answered.
func LoginStart(ctx context.Context, in LoginInstance, picked, force, running bool, start func() json.RawMessage) (body any, started, ok bool) {
	if in.Ready && !force {
		ctx, cancel := context.WithTimeout(ctx, authTimeout)
		defer cancel()
		a := authOf(ctx, in)
		return startAnswer{OK: true, State: "already_logged_in", Instance: in.Name, Picked: picked, Auth: &a}, false, true
	}
	if start == nil {
		return nil, false, false
	}
	state := "running"
	if running {
		state = "already_running"
	}
	return startAnswer{OK: true, State: state, Instance: in.Name, Picked: picked, AutoLogin: start()}, true, true
}

// statusAnswer is the Python gateway's answer to a status request.
type statusAnswer struct {
	Browser   bool              `json:"browser"`
	Instances []json.RawMessage `json:"instances"`
	OK        bool              `json:"ok"`
}

// LoginStatus answers the status of every login, of ins, whose workers are
// asked at once, each within authTimeout; browser says logins can run. A
// caller of ctx who may not read content (a viewer) gets no "auth.id": the
// account's username is an admin's to read.
func LoginStatus(ctx context.Context, ins []LoginInstance, browser bool) any {
	viewer := !access.From(ctx).SeesContent()
	ctx, cancel := context.WithTimeout(ctx, authTimeout)
	defer cancel()
	auths := make([]auth, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() { auths[i] = authOf(ctx, in) })
	}
	wg.Wait()
	if viewer {
		for i := range auths {
			auths[i].ID = ""
		}
	}
	items := make([]json.RawMessage, len(ins))
	for i, in := range ins {
		// The login's own fields, then the Python gateway's.
		extra, _ := json.Marshal(struct {
			Instance      string          `json:"instance"`
			AutoLogin     json.RawMessage `json:"auto_login"`
			Auth          auth            `json:"auth"`
			InstanceState string          `json:"instance_state"`
		}{in.Name, in.Login, auths[i], in.State})
		items[i] = splice(in.Login, extra)
	}
	return statusAnswer{Browser: browser, Instances: items, OK: true}
}

// splice joins two JSON objects' fields, a's first.
func splice(a, b []byte) json.RawMessage {
	if len(a) < 2 || string(a) == "{}" {
		return b
	}
	return append(append(a[:len(a)-1:len(a)-1], ','), b[1:]...)
}
