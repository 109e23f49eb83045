package sim

import (
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// DevicePage is a simulated Qoder device login page: the page `qodercli
// login` sends the browser to (https://qoder.com/device/selectAccounts
// with the login's challenge, challenge_method=S256, nonce, machine_id and
// client_id). The real page was never seen here (it is on the vendor's
// site, out of reach); this one has the shape such pages have: sign in,
// pick the account, and an approval the CLI then collects. Its markup
// fits both the qoder-device login recipe and the simworker one (ids
// #username, #password, #submit, .org-option, #login-ok, and a last page
// under /auth/callback), so a simulated qoder pool logs in with either.
//
// The simulator's `qodercli login` serves it on loopback and stores the
// login once the page approves it; a test serves it on its own (over TLS,
// under qoder.com's name, for a browser that maps that name to loopback)
// to see the real CLI's URL opened and driven by a recipe.
type DevicePage struct {
	// Accounts are the users who may sign in, with their passwords.
	Accounts map[string]string
	// OnApprove, when set, is told of each approval; an error is shown on
	// the page instead of the success.
	OnApprove func(DeviceApproval) error
	// OnDone, when set, is told when the last page (the approval's) was
	// served: a login command that stops its server sooner would leave the
	// browser without it.
	OnDone func()

	mu        sync.Mutex
	tickets   map[string]DeviceApproval // a signed-in user's pending choice
	approvals []DeviceApproval
	visits    []string // the query of every first page served
}

// DeviceApproval is one login the page approved.
type DeviceApproval struct {
	Challenge, Nonce, MachineID, ClientID string
	// User signed in and chose Account.
	User, Account string
	At            time.Time
}

// deviceAccounts are the accounts a signed-in user may pick.
var deviceAccounts = []orgOption{{"personal", "Personal"}, {"team", "Team workspace"}}

// Approvals returns the logins the page approved so far.
func (p *DevicePage) Approvals() []DeviceApproval {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]DeviceApproval(nil), p.approvals...)
}

// Visits returns the query of every login URL the page was opened with.
func (p *DevicePage) Visits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.visits...)
}

// ServeHTTP serves the page's routes: /device/selectAccounts (sign in),
// /device/signin, /device/approve, /device/auth/callback (done).
func (p *DevicePage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/device/selectAccounts":
		p.first(w, r)
	case "/device/signin":
		p.signIn(w, r)
	case "/device/approve":
		p.approve(w, r)
	case "/device/auth/callback":
		p.render(w, http.StatusOK, page{Kind: "done", Title: "Device authorized"})
		if p.OnDone != nil {
			p.OnDone()
		}
	default:
		http.NotFound(w, r)
	}
}

// deviceParams are a login URL's parameters, all required.
var deviceParams = []string{"challenge", "challenge_method", "nonce", "machine_id", "client_id"}

func params(v url.Values) (DeviceApproval, bool) {
	for _, k := range deviceParams {
		if v.Get(k) == "" {
			return DeviceApproval{}, false
		}
	}
	return DeviceApproval{Challenge: v.Get("challenge"), Nonce: v.Get("nonce"), MachineID: v.Get("machine_id"),
		ClientID: v.Get("client_id")}, v.Get("challenge_method") == "S256"
}

func (p *DevicePage) first(w http.ResponseWriter, r *http.Request) {
	a, ok := params(r.URL.Query())
	if r.Method != http.MethodGet || !ok {
		p.render(w, http.StatusBadRequest, page{Kind: "message", Title: "Invalid request",
			Message: "This sign-in link is not valid.", MsgID: "login-invalid"})
		return
	}
	p.mu.Lock()
	p.visits = append(p.visits, r.URL.RawQuery)
	p.mu.Unlock()
	p.render(w, http.StatusOK, page{Kind: "signin", Title: "Sign in to Qoder", Params: a})
}

func (p *DevicePage) signIn(w http.ResponseWriter, r *http.Request) {
	var a DeviceApproval
	ok := r.Method == http.MethodPost && r.ParseForm() == nil
	if ok {
		a, ok = params(r.PostForm)
	}
	if !ok {
		p.render(w, http.StatusBadRequest, page{Kind: "message", Title: "Invalid request",
			Message: "This sign-in link is not valid.", MsgID: "login-invalid"})
		return
	}
	user, pass := r.PostFormValue("email"), r.PostFormValue("password")
	if !checkPassword(p.Accounts, user, pass) {
		p.render(w, http.StatusOK, page{Kind: "signin", Title: "Sign in to Qoder", Params: a,
			Error: "Incorrect email or password"})
		return
	}
	a.User = user
	ticket := randomHex(16)
	p.mu.Lock()
	if p.tickets == nil {
		p.tickets = map[string]DeviceApproval{}
	}
	p.tickets[ticket] = a
	p.mu.Unlock()
	p.render(w, http.StatusOK, page{Kind: "accounts", Title: "Select an account", Ticket: ticket,
		Orgs: deviceAccounts, Username: user})
}

func (p *DevicePage) approve(w http.ResponseWriter, r *http.Request) {
	ticket, acct := r.PostFormValue("ticket"), r.PostFormValue("account")
	p.mu.Lock()
	a, ok := p.tickets[ticket]
	delete(p.tickets, ticket)
	p.mu.Unlock()
	known := slices.ContainsFunc(deviceAccounts, func(o orgOption) bool { return o.Value == acct })
	if r.Method != http.MethodPost || !ok || !known {
		p.render(w, http.StatusBadRequest, page{Kind: "message", Title: "Invalid request",
			Message: "This sign-in session has expired.", MsgID: "login-invalid"})
		return
	}
	a.Account, a.At = acct, time.Now()
	if p.OnApprove != nil {
		if err := p.OnApprove(a); err != nil {
			p.render(w, http.StatusOK, page{Kind: "message", Title: "Authorization failed",
				Message: err.Error(), MsgID: "login-failed"})
			return
		}
	}
	p.mu.Lock()
	p.approvals = append(p.approvals, a)
	p.mu.Unlock()
	http.Redirect(w, r, "/device/auth/callback?"+url.Values{"challenge": {a.Challenge}}.Encode(), http.StatusSeeOther)
}

func (p *DevicePage) render(w http.ResponseWriter, code int, d page) {
	_ = renderPage(w, code, devicePages, d)
}

// devicePages are self-contained (no external resources), like the
// simulator's other login pages.
var devicePages = template.Must(template.New("device").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title></head><body>
<h1>{{.Title}}</h1>
{{if eq .Kind "signin"}}
<form method="post" action="/device/signin">
{{with .Params}}<input type="hidden" name="challenge" value="{{.Challenge}}">
<input type="hidden" name="challenge_method" value="S256">
<input type="hidden" name="nonce" value="{{.Nonce}}">
<input type="hidden" name="machine_id" value="{{.MachineID}}">
<input type="hidden" name="client_id" value="{{.ClientID}}">{{end}}
{{if .Error}}<p id="login-error" class="login-error" role="alert">{{.Error}}</p>{{end}}
<label>Email <input id="username" type="text" name="email" autocomplete="username"></label>
<label>Password <input id="password" type="password" name="password" autocomplete="current-password"></label>
<button id="submit" type="submit">Sign in</button>
</form>
{{else if eq .Kind "accounts"}}
<p>Signed in as {{.Username}}. Authorize Qoder CLI for:</p>
<form method="post" action="/device/approve"><input type="hidden" name="ticket" value="{{.Ticket}}">
{{range .Orgs}}<button class="org-option account-item" type="submit" name="account" value="{{.Value}}">{{.Label}}</button>
{{end}}</form>
{{else if eq .Kind "done"}}
<p id="login-ok" class="device-ok">Device authorized. You can close this page and return to your terminal.</p>
{{else}}
<p id="{{.MsgID}}">{{.Message}}</p>
{{end}}
</body></html>
`))
