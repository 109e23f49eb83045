package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Sim is one simulated worker process: its listeners, credentials, upstream
// sessions and login state.
type Sim struct {
	cfg      Config
	log      *slog.Logger
	creds    *creds // nil in openai mode without a work dir
	httpPort int    // the bound HTTP port, set before serving starts

	mu       sync.Mutex
	sessions map[string]*session
	running  map[string]context.CancelCauseFunc // requestId -> stop
	nonces   map[string]time.Time               // login nonce -> expiry
	codes    map[string]grant                   // callback auth code -> grant
	tickets  map[string]grant                   // org picker ticket -> grant

	conns sync.WaitGroup // WebSocket connections (hijacked, so Shutdown does not wait)

	loginHits, asks, sessionsMade, logins, builtinCalls atomic.Int64

	ep atomic.Pointer[string] // the endpoint config/updateEndpoint set

	// script is the transcript --replay plays; replaying the newest
	// connection's replay of it.
	script    *script
	replaying atomic.Pointer[replayer]

	// onLogin, when set, stores a login the login page granted instead of
	// the Lingma credentials (an agent CLI's login keeps its own).
	onLogin func(username, org string) error
}

func (s *Sim) endpoint() string {
	if p := s.ep.Load(); p != nil {
		return *p
	}
	return ""
}

func (s *Sim) setEndpoint(u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("endpoint %q is not an http(s) URL", u)
	}
	s.ep.Store(&u)
	s.log.Info("endpoint switched", "endpoint", u)
	return nil
}

// session is one upstream conversation: every question asked in it and the
// answers given.
type session struct {
	id      string
	history []exchange
}

type exchange struct{ question, answer string }

// grant is a login in flight: the nonce it answers and who proved a password.
type grant struct {
	state, username, org string
	expires              time.Time
}

// New checks cfg, fills its defaults and returns a Sim ready to Run.
func New(cfg Config, log *slog.Logger) (*Sim, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sim{
		cfg:      cfg,
		log:      log,
		sessions: map[string]*session{},
		running:  map[string]context.CancelCauseFunc{},
		nonces:   map[string]time.Time{},
		codes:    map[string]grant{},
		tickets:  map[string]grant{},
	}
	if cfg.WorkDir != "" {
		s.creds = newCreds(cfg.WorkDir)
	}
	if cfg.Replay != "" {
		sc, err := loadScript(cfg.Replay)
		if err != nil {
			return nil, err
		}
		s.script = sc
	}
	return s, nil
}

// Run serves until ctx ends, then shuts down and returns nil; it returns an
// error when a listener cannot be opened or a server fails.
func (s *Sim) Run(ctx context.Context) error {
	if err := s.prepareWorkDir(); err != nil {
		return err
	}
	httpLn, err := listenLoopback(s.cfg.HTTPPort)
	if err != nil {
		return err
	}
	s.httpPort = httpLn.Addr().(*net.TCPAddr).Port
	servers := []*http.Server{s.newServer(ctx, s.httpRoutes())}
	listeners := []net.Listener{httpLn}
	socket := 0
	if s.cfg.Protocol == ProtocolLingma {
		wsLn, err := listenLoopback(s.cfg.SocketPort)
		if err != nil {
			_ = httpLn.Close()
			return err
		}
		socket = wsLn.Addr().(*net.TCPAddr).Port
		servers = append(servers, s.newServer(ctx, http.HandlerFunc(s.serveWS)))
		listeners = append(listeners, wsLn)
	}
	if ln, err := s.extraListener(); err != nil {
		closeAll(listeners)
		return err
	} else if ln != nil {
		servers = append(servers, s.newServer(ctx, http.NotFoundHandler()))
		listeners = append(listeners, ln)
		s.log.Info("deviation extra-listener: listening where no flag says", "addr", ln.Addr().String())
	}
	s.log.Info("simworker listening", "socket", socket, "http", s.httpPort, "protocol", s.cfg.Protocol)
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(listeners[i]) }()
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	for _, srv := range servers {
		if srv.Shutdown(shutCtx) != nil {
			_ = srv.Close()
		}
	}
	s.conns.Wait()
	s.log.Info("simworker stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("simworker serve: %w", serveErr)
	}
	return nil
}

// prepareWorkDir creates the machine id and, with --logged-in, credentials.
func (s *Sim) prepareWorkDir() error {
	if s.creds == nil {
		return nil
	}
	if _, err := s.creds.ensureID(); err != nil {
		return err
	}
	if s.cfg.LoggedIn != "" {
		return s.creds.login(s.cfg.LoggedIn, "")
	}
	return nil
}

// newServer makes an HTTP server whose request contexts end with ctx, so
// streams and WebSocket connections stop on shutdown.
func (s *Sim) newServer(ctx context.Context, h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		_ = ln.Close()
	}
}

func listenLoopback(port int) (net.Listener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listen on port %d (pick a free port): %w", port, err)
	}
	return ln, nil
}

// httpRoutes serves the HTTP port: login pages (lingma) or the OpenAI API
// (openai), and /sim/stats in both.
func (s *Sim) httpRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sim/stats", s.serveStats)
	if s.cfg.Protocol == ProtocolOpenAI {
		mux.HandleFunc("GET /v1/models", s.serveModels)
		mux.HandleFunc("POST /v1/chat/completions", s.serveCompletions)
		return mux
	}
	mux.HandleFunc("GET /login", s.serveLogin)
	mux.HandleFunc("POST /login/submit", s.serveLoginSubmit)
	mux.HandleFunc("POST /login/org", s.serveLoginOrg)
	mux.HandleFunc("GET /auth/callback", s.serveCallback)
	return mux
}

// Stats are the counters /sim/stats reports, so tests can prove what did
// (or did not) happen inside the worker.
type Stats struct {
	LoginPageHits int64 `json:"login_page_hits"`
	Asks          int64 `json:"asks"`
	// Sessions counts upstream sessions opened since start (deleted ones too).
	Sessions int64 `json:"sessions"`
	Logins   int64 `json:"logins"`
	// Endpoint is the endpoint config/updateEndpoint set.
	Endpoint string `json:"endpoint"`
	// BuiltinCalls counts the built-in tools the worker asked the client
	// to run (tool/invoke).
	BuiltinCalls int64 `json:"builtin_calls"`
	// Replay is how far the newest connection's replay got (--replay).
	Replay *ReplayStats `json:"replay,omitempty"`
}

func (s *Sim) stats() Stats {
	var rs *ReplayStats
	if r := s.replaying.Load(); r != nil {
		st := r.stats()
		rs = &st
	}
	return Stats{
		Replay:        rs,
		LoginPageHits: s.loginHits.Load(),
		Asks:          s.asks.Load(),
		Sessions:      s.sessionsMade.Load(),
		Endpoint:      s.endpoint(),
		Logins:        s.logins.Load(),
		BuiltinCalls:  s.builtinCalls.Load(),
	}
}

func (s *Sim) serveStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.stats())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do
}

// openSession returns the session a turn runs in and its turn number. An
// empty sid opens a new session; an unknown sid is an error when reply is
// set, else it opens a session under that id.
func (s *Sim) openSession(sid, question string, reply bool) (id string, turn int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[sid]
	if reply && sess != nil && s.cfg.Deviate["new-session"] {
		sess, sid, reply = nil, "", false
	}
	if sess == nil {
		if reply {
			return "", 0, false
		}
		if sid == "" {
			sid = "sess-" + randomHex(8)
		}
		sess = &session{id: sid}
		s.sessions[sid] = sess
		s.sessionsMade.Add(1)
	}
	sess.history = append(sess.history, exchange{question: question})
	return sess.id, len(sess.history), true
}

// recordAnswer stores the answer of turn n of session sid.
func (s *Sim) recordAnswer(sid string, n int, answer string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sess := s.sessions[sid]; sess != nil && n <= len(sess.history) {
		sess.history[n-1].answer = answer
	}
}

// earlierTools returns the newest tools section among the session's
// questions before turn n, or nil.
func (s *Sim) earlierTools(sid string, n int) *toolSpec {
	s.mu.Lock()
	var questions []string
	if sess := s.sessions[sid]; sess != nil {
		for _, e := range sess.history[:min(n-1, len(sess.history))] {
			questions = append(questions, e.question)
		}
	}
	s.mu.Unlock()
	for i := len(questions) - 1; i >= 0; i-- {
		if ts := promptTools(relayed(parsePrompt(questions[i]))); ts != nil {
			return ts
		}
	}
	return nil
}

func (s *Sim) deleteSession(sid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, sid)
}

// startTurn registers a running turn so chat/stop can reach it.
func (s *Sim) startTurn(requestID string, stop context.CancelCauseFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.running[requestID]; dup {
		return false
	}
	s.running[requestID] = stop
	return true
}

func (s *Sim) endTurn(requestID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.running, requestID)
}

// errStopped is the cause of a turn cancelled by chat/stop.
var errStopped = errors.New("stopped by chat/stop")

func (s *Sim) stopTurn(requestID string) {
	s.mu.Lock()
	stop := s.running[requestID]
	s.mu.Unlock()
	if stop != nil {
		stop(errStopped)
	}
}

// modelInfo is one entry of config/queryModels.
type modelInfo struct {
	Key         string `json:"key"`
	DisplayName string `json:"displayName"`
	Format      string `json:"format"`
	Source      string `json:"source"`
	IsReasoning bool   `json:"isReasoning"`
}

var displayNames = map[string]string{"dashscope_qwen3_coder": "Qwen3-Coder", "kmodel": "Kimi"}

func (s *Sim) models() []modelInfo {
	out := make([]modelInfo, 0, len(s.cfg.ModelKeys))
	for _, k := range s.cfg.ModelKeys {
		name := displayNames[k]
		if name == "" {
			name = k
		}
		out = append(out, modelInfo{Key: k, DisplayName: name, Format: "openai", Source: "system"})
	}
	return out
}
