package admin

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/login"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// LoginService is what the admin API needs of the login runner
// (*login.Runner).
type LoginService interface {
	// Start starts a login now unless one runs, and returns its status.
	Start(t supervisor.LoginTarget) login.Status
	// Status returns one instance's login status.
	Status(instance string) (login.Status, bool)
	// All returns every instance's login status, by name.
	All() []login.Status
	// Screenshot returns the newest failure screenshot (PNG), or
	// login.ErrNoScreenshot.
	Screenshot(instance string) ([]byte, error)
}

// LoginTargets finds instances for the login endpoints (*supervisor.Supervisor).
type LoginTargets interface {
	// LoginTarget returns the named instance's login target, or
	// supervisor.ErrUnknownInstance.
	LoginTarget(name string) (supervisor.LoginTarget, error)
	// LoginPort returns the port of the instance's login callback (0 when
	// it is not running), or supervisor.ErrUnknownInstance.
	LoginPort(name string) (int, error)
	// Names lists every instance, in config order.
	Names() []string
	// State returns the named instance's state, or
	// supervisor.ErrUnknownInstance.
	State(name string) (supervisor.State, error)
}

// loginURLTimeout bounds the worker's answer to a login URL request.
const loginURLTimeout = 30 * time.Second

// RegisterLogin adds the auto-login endpoints to r, the authenticated
// /internal group: start a login, list login states, hand out a login URL,
// serve the last failure screenshot, and forward a login callback to its
// instance (the manual fallback: an operator signs in with their own
// browser and passes the callback through here). svc may be nil when no
// browser is available: the manual fallback still works, start answers 503.
// compat, when set, answers start and status in another gateway's shapes.
func RegisterLogin(r gin.IRouter, svc LoginService, targets LoginTargets, compat LoginCompat, log *slog.Logger) {
	h := &loginAPI{svc: svc, targets: targets, compat: compat, log: log}
	r.POST("/auto-login/start", h.start)
	r.GET("/auto-login/status", h.status)
	r.GET("/auto-login/url", h.url)
	r.GET("/auto-login/:instance/screenshot", h.screenshot)
	r.GET("/auto-login/:instance/callback", h.callback)
}

// LoginCompat answers a login start and the logins' status in another
// gateway's shapes, which its scripts parse: the wiring's adapter of
// internal/pycompat, the Python gateway's.
type LoginCompat interface {
	// Start answers a start of t's login on w (picked: the gateway chose
	// t); started says a login was started. ErrNoBrowser: none could be,
	// and nothing was written.
	Start(w http.ResponseWriter, r *http.Request, t supervisor.LoginTarget, picked bool) (started bool, err error)
	// Status answers the status of every login, all, on w; all is as the
	// caller of r may read it (a viewer's without the addresses' queries).
	Status(w http.ResponseWriter, r *http.Request, all []login.Status)
}

// ErrNoBrowser says that no login can be started: no browser is available.
var ErrNoBrowser = errors.New("automatic login is not available (no browser)")

type loginAPI struct {
	svc     LoginService
	targets LoginTargets
	compat  LoginCompat // nil: poolgate's own answers
	log     *slog.Logger
}

// target resolves the instance named in the query or path, or writes the
// error (400 when none is named, 404 naming an unknown one).
func (h *loginAPI) target(c *gin.Context, name string) (supervisor.LoginTarget, bool) {
	if name == "" {
		writeError(c, http.StatusBadRequest, CodeBadRequest, "instance is required (?instance=NAME)")
		return supervisor.LoginTarget{}, false
	}
	t, err := h.targets.LoginTarget(name)
	if err != nil {
		writeInstanceError(c, name, err)
		return supervisor.LoginTarget{}, false
	}
	return t, true
}

func writeInstanceError(c *gin.Context, name string, err error) {
	if errors.Is(err, supervisor.ErrUnknownInstance) {
		writeError(c, http.StatusNotFound, CodeUnknownInstance, "unknown instance "+name)
		return
	}
	writeError(c, http.StatusInternalServerError, CodeInternal, "instance "+name+": "+err.Error())
}

// startAnswer is the answer of a login start: the login's status, with the
// Python gateway's fields beside it (ok, instance, the login's status as
// auto_login) and whether the instance was picked.
type startAnswer struct {
	login.Status
	OK        bool          `json:"ok"`
	Instance  string        `json:"instance"`
	Picked    bool          `json:"picked,omitempty"`
	AutoLogin *login.Status `json:"auto_login,omitempty"`
}

// stateLoggedIn is a start's answer for an instance that is ready: no
// login runs (the Python gateway's word).
const stateLoggedIn login.State = "already_logged_in"

// start starts a login of ?instance= (whatever its state: an operator may
// log a ready instance in again), or of an instance it picks: the first
// that needs a login, else the first, which when it is ready is answered
// already_logged_in, with no login started.
func (h *loginAPI) start(c *gin.Context) {
	name, picked := instanceParam(c), pickedInstance(c)
	t, ok := h.target(c, name)
	if !ok {
		return
	}
	if h.compat != nil {
		started, err := h.compat.Start(c.Writer, c.Request, t, picked)
		switch {
		case err != nil:
			noBrowser(c, name)
		case started:
			h.log.Info("admin action", "action", "auto_login_start", "instance", name, "picked", picked, "by", who(c))
		}
		return
	}
	if st, err := h.targets.State(name); picked && err == nil && st == supervisor.StateReady {
		c.JSON(http.StatusOK, startAnswer{Status: login.Status{Name: name, State: stateLoggedIn}, OK: true, Instance: name, Picked: picked})
		return
	}
	if h.svc == nil {
		noBrowser(c, name)
		return
	}
	st := h.svc.Start(t)
	h.log.Info("admin action", "action", "auto_login_start", "instance", name, "picked", picked, "by", who(c))
	c.JSON(http.StatusAccepted, startAnswer{Status: st, OK: true, Instance: name, Picked: picked, AutoLogin: &st})
}

// noBrowser answers a start that no login can serve.
func noBrowser(c *gin.Context, name string) {
	writeError(c, http.StatusServiceUnavailable, CodeUnavailable,
		ErrNoBrowser.Error()+"; use /auto-login/url and /auto-login/"+name+"/callback")
}

// status lists every instance's login, in config order: those no login ran
// for yet are idle.
func (h *loginAPI) status(c *gin.Context) {
	known := map[string]login.Status{}
	if h.svc != nil {
		for _, st := range h.svc.All() {
			known[st.Name] = st
		}
	}
	names := h.targets.Names()
	all := make([]login.Status, 0, len(names))
	for _, name := range names {
		st, ok := known[name]
		if !ok {
			st = login.Status{Name: name, State: login.StateIdle}
		}
		all = append(all, st)
	}
	if !access.From(c.Request.Context()).SeesContent() {
		for i := range all {
			all[i] = forViewer(all[i])
		}
	}
	if h.compat != nil {
		h.compat.Status(c.Writer, c.Request, all)
		return
	}
	c.JSON(http.StatusOK, gin.H{"instances": all, "browser": h.svc != nil})
}

// forViewer is a login's status as a caller who may not act on logins (a
// viewer) sees it: the login page's address and any address in the error
// or the page's text without their query and fragment, where a login in
// progress keeps its state nonce (and a worker may put more).
func forViewer(st login.Status) login.Status {
	st.PageURL = stripQueries(st.PageURL)
	st.LastError = stripQueries(st.LastError)
	st.PageSnippet = stripQueries(st.PageSnippet)
	return st
}

// urlQuery matches the query and fragment of an http(s) address in text.
var urlQuery = regexp.MustCompile(`(?i)(\bhttps?://[^\s?#"'<>]*)[?#][^\s"'<>]*`)

// stripQueries cuts the query and fragment off every http(s) address in s.
func stripQueries(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlQuery.ReplaceAllString(s, "$1?REDACTED")
}

func (h *loginAPI) url(c *gin.Context) {
	name := instanceParam(c)
	t, ok := h.target(c, name)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), loginURLTimeout)
	defer cancel()
	u, err := t.LoginURL(ctx)
	if err != nil {
		status, code := http.StatusBadGateway, CodeWorkerError
		if errors.Is(err, chat.ErrWorkerGone) {
			status, code = http.StatusServiceUnavailable, CodeNotRunning
		}
		writeError(c, status, code, "ask instance "+name+" for a login URL: "+err.Error())
		return
	}
	h.log.Info("admin action", "action", "auto_login_url", "instance", name, "by", who(c))
	c.JSON(http.StatusOK, gin.H{"url": u})
}

func (h *loginAPI) screenshot(c *gin.Context) {
	name := instanceParam(c)
	if _, ok := h.target(c, name); !ok {
		return
	}
	var png []byte
	err := login.ErrNoScreenshot
	if h.svc != nil {
		png, err = h.svc.Screenshot(name)
	}
	switch {
	case errors.Is(err, login.ErrNoScreenshot):
		writeError(c, http.StatusNotFound, CodeNotFound, "no login screenshot for instance "+name)
		return
	case err != nil:
		writeError(c, http.StatusInternalServerError, CodeInternal, "screenshot of instance "+name+": "+err.Error())
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(http.StatusOK, "image/png", png)
}

// callbackAllowed are the headers a login callback passes on to the worker.
var callbackAllowed = []string{"Accept", "Accept-Language", "User-Agent"}

func callbackHeaders(in http.Header) http.Header {
	out := make(http.Header, len(callbackAllowed))
	for _, k := range callbackAllowed {
		if vs := in.Values(k); len(vs) > 0 {
			out[k] = append([]string(nil), vs...)
		}
	}
	return out
}

// callback forwards /auto-login/NAME/callback?QUERY to the instance's own
// http://127.0.0.1:PORT/auth/callback?QUERY and relays the answer.
func (h *loginAPI) callback(c *gin.Context) {
	name := instanceParam(c)
	port, err := h.targets.LoginPort(name)
	if err != nil {
		writeInstanceError(c, name, err)
		return
	}
	if port == 0 {
		writeError(c, http.StatusServiceUnavailable, CodeNotRunning, "instance "+name+" is not running")
		return
	}
	upstream := &url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(port)}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.Out.URL.Path, pr.Out.URL.RawPath = "/auth/callback", ""
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			// The worker gets what a browser's redirect would carry and
			// nothing of poolgate's: no credential, cookie or replica header.
			pr.Out.Header = callbackHeaders(pr.In.Header)
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			WriteError(w, http.StatusBadGateway, CodeWorkerError, "forward the login callback to instance "+name+": "+err.Error())
		},
	}
	h.log.Info("admin action", "action", "auto_login_callback", "instance", name, "by", who(c))
	proxy.ServeHTTP(c.Writer, c.Request)
}
