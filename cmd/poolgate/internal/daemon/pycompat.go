package daemon

// The Python gateway's compatibility (internal/pycompat) as the wiring
// connects it to the house: this file, and the lines that call it, are all
// the house knows of it, so deleting the compatibility one day is deleting
// internal/pycompat and them. The compatibility sits on the ground floor
// and owns the ports it needs of the floors above; the adapters are here.

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/handlers/protocols"
	"github.com/poolgate/poolgate/internal/pycompat"
	"github.com/poolgate/poolgate/internal/pycompat/plainbundle"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/drivers"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/session/bundle"
)

// compat is the Python gateway's compatibility, on (python_compat) or off.
type compat struct{ on bool }

// protocols are its ways with the answer APIs. Off, they are OpenAI's and
// Anthropic's, and only its refusals name python_compat.
func (c compat) protocols() protocols.Compat { return pycompat.Shapes{Enabled: c.on} }

// errors wraps a listener's handler in its error bodies' detail, when on.
func (c compat) errors(h http.Handler) http.Handler {
	if !c.on {
		return h
	}
	return pycompat.Errors(h)
}

// plainFormat is the adapter of internal/pycompat/plainbundle's port: the
// session bundles' format (session/bundle) of one kind's logins, which that
// package, on the ground floor, cannot import.
type plainFormat bundle.Spec

var _ plainbundle.Format = plainFormat{}

func (f plainFormat) OpenPlain(raw []byte, account string) (plainbundle.Bundle, error) {
	b, err := bundle.OpenPlain(raw, bundle.Spec(f), bundle.Limits{}, account, time.Now())
	if err != nil {
		return nil, err // never a typed nil
	}
	return b, nil
}

func (f plainFormat) HasCredentials(workDir string) bool {
	return bundle.HasCredentials(workDir, bundle.Spec(f))
}

func (f plainFormat) CredentialDir() string { return f.Dir }

// PlainFormat is the login format of the driver's workers, for `poolgate
// migrate`; false when the driver keeps no login in its work dirs.
func PlainFormat(driver string) (plainbundle.Format, bool) {
	k, ok := worker.ByName(drivers.Kinds(), driver)
	if !ok || k.Credentials.Dir == "" {
		return nil, false
	}
	return plainFormat(k.Credentials), true
}

// logins is the adapter of admin.LoginCompat, when on (nil off): the
// Python gateway's auto-login answers (pycompat.LoginStart, LoginStatus)
// on the login runner (svc, nil without a browser) and the supervisor.
func (c compat) logins(svc admin.LoginService, targets admin.LoginTargets) admin.LoginCompat {
	if !c.on {
		return nil
	}
	return loginAnswers{svc: svc, targets: targets}
}

type loginAnswers struct {
	svc     admin.LoginService
	targets admin.LoginTargets
}

var _ admin.LoginCompat = loginAnswers{}

func (l loginAnswers) Start(w http.ResponseWriter, r *http.Request, t supervisor.LoginTarget, picked bool) (bool, error) {
	st, running := login.Status{Name: t.Instance, State: login.StateIdle}, false
	var start func() json.RawMessage
	if l.svc != nil {
		if prev, ok := l.svc.Status(t.Instance); ok {
			st, running = prev, prev.State == login.StateRunning
		}
		start = func() json.RawMessage { return marshal(l.svc.Start(t)) }
	}
	body, started, ok := pycompat.LoginStart(r.Context(), l.instance(t.Instance, t, st), picked,
		r.URL.Query().Get("force") == "true", running, start)
	if !ok {
		return false, admin.ErrNoBrowser
	}
	writeJSON(w, body)
	return started, nil
}

func (l loginAnswers) Status(w http.ResponseWriter, r *http.Request, all []login.Status) {
	ins := make([]pycompat.LoginInstance, len(all))
	for i, st := range all {
		t, err := l.targets.LoginTarget(st.Name)
		ins[i] = l.instance(st.Name, t, st)
		if err != nil {
			ins[i].Confirm = func(context.Context) (bool, error) { return false, err }
		}
	}
	writeJSON(w, pycompat.LoginStatus(r.Context(), ins, l.svc != nil))
}

// instance is the instance name, whose login target is t, as the Python
// gateway's answers see it, with its login's status st.
func (l loginAnswers) instance(name string, t supervisor.LoginTarget, st login.Status) pycompat.LoginInstance {
	state, _ := l.targets.State(name)
	id := t.Account.Username
	if id == "" {
		id = t.Account.Name
	}
	return pycompat.LoginInstance{Name: name, ID: id, State: string(state), Ready: state == supervisor.StateReady,
		Login: marshal(st), Confirm: t.Confirm}
}

func marshal(v any) json.RawMessage {
	b, _ := json.Marshal(v) // plain fields: cannot fail
	return b
}

// writeJSON answers v with 200, as the admin API answers.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(marshal(v))
}
