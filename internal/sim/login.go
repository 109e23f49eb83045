package sim

import (
	"crypto/subtle"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// nonceLife is how long a login URL stays usable.
const nonceLife = 10 * time.Minute

// orgOption is one organisation on the org login page.
type orgOption struct{ Value, Label string }

// orgs are the organisations the org login page offers.
var orgs = []orgOption{{"acme", "Acme"}, {"personal", "Personal"}}

// generateLoginURL answers login/generateUrl. The nonce lives only in this
// process, as with the real binary: a restart invalidates the URL.
func (s *Sim) generateLoginURL() map[string]any {
	if want := s.cfg.RequireEndpoint; want != "" && s.endpoint() != want {
		return s.failure("DEDICATED_DOMAIN_REQUIRED", "this account signs in at its dedicated domain "+want)
	}
	nonce := randomHex(16)
	now := time.Now()
	s.mu.Lock()
	for n, exp := range s.nonces {
		if now.After(exp) {
			delete(s.nonces, n)
		}
	}
	s.nonces[nonce] = now.Add(nonceLife)
	s.mu.Unlock()
	u := fmt.Sprintf("http://127.0.0.1:%d/login?state=%s&port=%d", s.httpPort, nonce, s.httpPort)
	if s.cfg.LoginURL != "" {
		u = s.cfg.LoginURL
	}
	return map[string]any{"loginUrl": u, "nonce": nonce, "success": true}
}

func (s *Sim) validNonce(state string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.nonces[state]
	return ok && time.Now().Before(exp)
}

// page is what the login templates (and the device login's) render.
type page struct {
	Kind     string // form, user, password, delayed, org, message; signin, accounts, done
	Title    string
	State    string
	Username string
	Ticket   string
	Error    string
	Message  string
	MsgID    string
	Orgs     []orgOption
	Params   DeviceApproval // a device login's parameters
}

// renderPage writes a login page that no cache keeps.
func renderPage(w http.ResponseWriter, code int, tpl *template.Template, p page) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	return tpl.Execute(w, p)
}

func (s *Sim) render(w http.ResponseWriter, code int, p page) {
	if err := renderPage(w, code, loginPages, p); err != nil {
		s.log.Debug("render login page", "err", err)
	}
}

func (s *Sim) invalidState(w http.ResponseWriter) {
	s.render(w, http.StatusBadRequest, page{Kind: "message", Title: "Sign-in failed", Message: "invalid state", MsgID: "login-invalid"})
}

// firstPage is the page a variant starts with.
func (s *Sim) firstPage(state string) page {
	p := page{Kind: "form", Title: "Sign in", State: state}
	switch s.cfg.LoginPage {
	case LoginTwoStep:
		p.Kind = "user"
	case LoginDelayed:
		p.Kind = "delayed"
	}
	return p
}

func (s *Sim) serveLogin(w http.ResponseWriter, r *http.Request) {
	s.loginHits.Add(1)
	state := r.URL.Query().Get("state")
	if !s.validNonce(state) {
		s.invalidState(w)
		return
	}
	s.render(w, http.StatusOK, s.firstPage(state))
}

func (s *Sim) serveLoginSubmit(w http.ResponseWriter, r *http.Request) {
	state, user, pass := r.PostFormValue("state"), r.PostFormValue("username"), r.PostFormValue("password")
	if !s.validNonce(state) {
		s.invalidState(w)
		return
	}
	twoStep := s.cfg.LoginPage == LoginTwoStep
	if twoStep && r.PostFormValue("step") == "user" {
		s.render(w, http.StatusOK, page{Kind: "password", Title: "Enter your password", State: state, Username: user})
		return
	}
	if !checkPassword(s.cfg.Accounts, user, pass) {
		p := s.firstPage(state)
		if twoStep {
			p = page{Kind: "password", Title: "Enter your password", State: state, Username: user}
		}
		p.Error = "Invalid username or password"
		s.render(w, http.StatusOK, p)
		return
	}
	g := grant{state: state, username: user, expires: time.Now().Add(nonceLife)}
	if s.cfg.LoginPage == LoginOrg {
		ticket := randomHex(16)
		s.mu.Lock()
		s.tickets[ticket] = g
		s.mu.Unlock()
		s.render(w, http.StatusOK, page{Kind: "org", Title: "Choose an organisation", Ticket: ticket, Orgs: orgs})
		return
	}
	s.redirectToCallback(w, r, g)
}

// checkPassword reports whether pass is user's among accounts.
func checkPassword(accounts map[string]string, user, pass string) bool {
	want, ok := accounts[user]
	return ok && subtle.ConstantTimeCompare([]byte(want), []byte(pass)) == 1
}

func (s *Sim) serveLoginOrg(w http.ResponseWriter, r *http.Request) {
	ticket, org := r.PostFormValue("ticket"), r.PostFormValue("org")
	s.mu.Lock()
	g, ok := s.tickets[ticket]
	delete(s.tickets, ticket)
	s.mu.Unlock()
	known := slices.ContainsFunc(orgs, func(o orgOption) bool { return o.Value == org })
	if !ok || !known || time.Now().After(g.expires) {
		s.invalidState(w)
		return
	}
	g.org = org
	s.redirectToCallback(w, r, g)
}

// redirectToCallback sends the browser to /auth/callback with a one-time
// auth code, as the real account pages send it back to the local agent.
func (s *Sim) redirectToCallback(w http.ResponseWriter, r *http.Request, g grant) {
	code := randomHex(16)
	s.mu.Lock()
	s.codes[code] = g
	s.mu.Unlock()
	q := url.Values{"state": {g.state}, "auth": {code}, "token": {randomHex(16)}}
	http.Redirect(w, r, "/auth/callback?"+q.Encode(), http.StatusSeeOther)
}

// serveCallback consumes the nonce and the auth code and writes credentials.
func (s *Sim) serveCallback(w http.ResponseWriter, r *http.Request) {
	state, code := r.URL.Query().Get("state"), r.URL.Query().Get("auth")
	now := time.Now()
	s.mu.Lock()
	exp, okNonce := s.nonces[state]
	g, okCode := s.codes[code]
	ok := okNonce && okCode && g.state == state && now.Before(exp) && now.Before(g.expires)
	if ok {
		delete(s.nonces, state)
		delete(s.codes, code)
	}
	s.mu.Unlock()
	if !ok {
		s.invalidState(w)
		return
	}
	store := s.creds.login
	if s.onLogin != nil {
		store = s.onLogin
	}
	if err := store(g.username, g.org); err != nil {
		s.log.Error("write credentials", "err", err)
		s.render(w, http.StatusInternalServerError, page{Kind: "message", Title: "Sign-in failed", Message: "could not save credentials", MsgID: "login-failed"})
		return
	}
	s.logins.Add(1)
	s.log.Info("logged in", "user", g.username, "org", g.org)
	s.render(w, http.StatusOK, page{Kind: "message", Title: "Signed in", Message: "Login successful", MsgID: "login-ok"})
}

// loginPages are self-contained (no external resources) so a headless browser
// in a sandbox renders them offline.
var loginPages = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} - simworker</title>
<style>body{font-family:sans-serif;max-width:24rem;margin:4rem auto}label,input,button{display:block;margin:.5rem 0}.error{color:#b00020}</style>
</head><body>
<h1>{{.Title}}</h1>
{{if .Error}}<div class="error" id="login-error">{{.Error}}</div>{{end}}
{{- if eq .Kind "form"}}{{template "form" .}}
{{- else if eq .Kind "user"}}
<form id="login-form" method="post" action="/login/submit">
<input type="hidden" name="state" value="{{.State}}"><input type="hidden" name="step" value="user">
<label for="username">Username</label><input id="username" name="username" type="text" autocomplete="username">
<button id="next" type="submit">Next</button>
</form>
{{- else if eq .Kind "password"}}
<p id="who">Signing in as {{.Username}}</p>
<form id="login-form" method="post" action="/login/submit">
<input type="hidden" name="state" value="{{.State}}"><input type="hidden" name="username" value="{{.Username}}">
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password">
<button id="submit" type="submit">Sign in</button>
</form>
{{- else if eq .Kind "delayed"}}
<div id="app"><p id="loading">Loading...</p></div>
<template id="form-tpl">{{template "form" .}}</template>
<script>
setTimeout(function () {
  var app = document.getElementById("app");
  app.replaceChildren(document.getElementById("form-tpl").content.cloneNode(true));
}, 800);
</script>
{{- else if eq .Kind "org"}}
<form id="org-form" method="post" action="/login/org">
<input type="hidden" name="ticket" value="{{.Ticket}}">
{{range .Orgs}}<button class="org-option" type="submit" name="org" value="{{.Value}}">{{.Label}}</button>
{{end}}</form>
{{- else}}
<p id="{{.MsgID}}">{{.Message}}</p>
{{- end}}
</body></html>
{{define "form"}}
<form id="login-form" method="post" action="/login/submit">
<input type="hidden" name="state" value="{{.State}}">
<label for="username">Username</label><input id="username" name="username" type="text" autocomplete="username">
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password">
<button id="submit" type="submit">Sign in</button>
</form>
{{end}}`))
