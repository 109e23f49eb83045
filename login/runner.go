// Package login logs pool workers in with a real headless Chromium driven by
// go-rod. It is the adapter of the supervisor's login port
// (supervisor.Loginer, with its LoginTarget; the port's owner sits below,
// in pool/supervisor, and knows nothing of browsers): the supervisor calls
// Runner.Ensure when a worker's health check finds it logged out, and the
// admin API starts logins on demand and shows their status and failure
// screenshots.
//
// A login follows a declarative recipe (recipe.go, YAML): open the worker's
// login URL, fill the form, pick an organisation, wait for the callback.
// Success is what the worker says afterwards (LoginTarget.Confirm), never
// what the page shows. Each attempt gets its own browser process and
// profile, bounded by Config.Concurrency, and leaves nothing running.
package login

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/internal/telemetry"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// State is where an instance's login stands.
type State string

// States of a login.
const (
	StateIdle      State = "idle"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
)

// Status is one instance's login state, as the admin API shows it. Nothing
// in it ever contains the account's password.
type Status struct {
	Name     string `json:"name"`
	State    State  `json:"state"`
	Attempts int    `json:"attempts"`
	// LastError is the last attempt's failure ("" after a success).
	LastError  string     `json:"last_error"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// PageURL and PageSnippet show the page at the last failure.
	PageURL     string `json:"page_url"`
	PageSnippet string `json:"page_snippet"`
}

// Errors of the runner.
var (
	// ErrNoScreenshot: no failure screenshot is kept for that instance.
	ErrNoScreenshot = errors.New("no login screenshot")
	// ErrUnknownRecipe: the target names a recipe that does not exist.
	ErrUnknownRecipe = errors.New("unknown login recipe")

	errClosed = errors.New("cancelled: the login runner closed")
	// errReleased ends a login whose worker run was ended on purpose.
	errReleased = errors.New("abandoned: the worker was stopped (handed over, lease lost or restarted)")
)

// maxBackoff caps the doubling wait between attempts.
const maxBackoff = 5 * time.Minute

// Runner runs logins, at most one per instance at a time. It owns every
// goroutine and browser it starts; Close ends them all.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	recipes map[string]*Recipe
	slots   chan struct{} // one token per browser allowed at once
	tracer  telemetry.Tracer

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	insts  map[string]*instance
	closed bool
}

// instance is the runner's record of one instance; guarded by Runner.mu.
type instance struct {
	status   Status
	running  bool
	rejected bool      // the last failure was the page refusing the login
	workDir  string    // where its screenshots go
	lastShot string    // path of the newest screenshot
	done     time.Time // when the last login ended
}

var _ supervisor.Loginer = (*Runner)(nil)

// NewRunner checks the browser and the recipes (the built-in ones and
// cfg.RecipeFile) and returns a runner with cfg's defaults filled. It starts
// nothing until a login is asked for.
func NewRunner(cfg Config, log *slog.Logger) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	recipes, err := loadRecipes(cfg.RecipeFile)
	if err != nil {
		return nil, err
	}
	if _, ok := recipes[cfg.DefaultRecipe]; !ok {
		return nil, fmt.Errorf("default recipe %q: %w", cfg.DefaultRecipe, ErrUnknownRecipe)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{
		cfg: cfg, log: log, recipes: recipes,
		slots: make(chan struct{}, cfg.Concurrency),
		ctx:   ctx, cancel: cancel,
		insts:  map[string]*instance{},
		tracer: telemetry.New(cfg.Tracing, "github.com/poolgate/poolgate/login"),
	}, nil
}

// Ensure starts a login for t.Instance unless one is running, or the last
// one gave up: after a rejection by the login page Ensure waits for Start;
// after any other failure it waits Config.Cooloff. It does not block.
func (r *Runner) Ensure(t supervisor.LoginTarget) {
	r.start(t, false)
}

// Start starts a login for t.Instance now (the admin API's on-demand login):
// it resets the attempt count and starts unless a login is running. It
// returns the instance's status after the call.
func (r *Runner) Start(t supervisor.LoginTarget) Status {
	return r.start(t, true)
}

func (r *Runner) start(t supervisor.LoginTarget, force bool) Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.insts[t.Instance]
	if in == nil {
		in = &instance{status: Status{Name: t.Instance, State: StateIdle}}
		r.insts[t.Instance] = in
	}
	in.workDir = t.WorkDir
	if r.closed || in.running || (!force && !r.retryDue(in)) {
		return in.status
	}
	now := time.Now().UTC()
	in.running = true
	in.status = Status{Name: t.Instance, State: StateRunning, StartedAt: &now}
	r.wg.Go(func() { r.login(t) })
	return in.status
}

// retryDue says whether Ensure may start after the last login ended.
func (r *Runner) retryDue(in *instance) bool {
	if in.status.State != StateFailed {
		return true
	}
	if in.rejected || r.cfg.Cooloff < 0 {
		return false
	}
	return time.Since(in.done) >= r.cfg.Cooloff
}

// Status returns the instance's login status; false when no login was ever
// asked for it.
func (r *Runner) Status(instance string) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.insts[instance]
	if !ok {
		return Status{Name: instance, State: StateIdle}, false
	}
	return in.status, true
}

// All returns every known instance's status, sorted by name.
func (r *Runner) All() []Status {
	r.mu.Lock()
	out := make([]Status, 0, len(r.insts))
	for _, in := range r.insts {
		out = append(out, in.status)
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b Status) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Close cancels every login, waits until their browsers are gone, and makes
// later Ensure and Start calls no-ops. It is safe to call twice.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// login is one instance's login: attempts with a doubling backoff until one
// succeeds, MaxAttempts failed, the runner closes, or the worker run it is
// for is ended on purpose (t.Released).
func (r *Runner) login(t supervisor.LoginTarget) {
	ctx, stop := r.loginContext(t)
	defer stop()
	log := r.log.With("instance", t.Instance)
	red := newRedactor(t.Account.Password)
	if _, _, pass, err := r.recipeFor(t); err == nil {
		red = newRedactor(t.Account.Password, pass) // also from password_env or password_file
	}
	log.Info("login started", "recipe", cmp.Or(t.Recipe, r.cfg.DefaultRecipe))
	backoff := r.cfg.Backoff
	for n := 1; ; n++ {
		r.update(t.Instance, func(in *instance) { in.status.Attempts = n })
		begin := time.Now()
		actx, span := r.tracer.Start(ctx, telemetry.SpanLogin, trace.WithNewRoot())
		c, err := r.attempt(actx, t)
		endLoginSpan(span, t, n, err)
		if r.ctx.Err() != nil { // closing: whatever happened is not the login's fault
			r.finish(t.Instance, StateFailed, errClosed, capture{}, red)
			return
		}
		if err != nil && released(t) {
			r.abandon(t, n, log)
			return
		}
		r.observe(err, time.Since(begin))
		if err == nil {
			log.Info("login succeeded", "attempt", n)
			r.finish(t.Instance, StateSucceeded, nil, capture{}, red)
			return
		}
		msg := red.redact(err.Error())
		r.keepScreenshot(t, c.png, log)
		if n >= r.cfg.MaxAttempts {
			log.Warn("login failed, giving up", "attempt", n, "err", msg)
			r.finish(t.Instance, StateFailed, err, c, red)
			return
		}
		log.Warn("login attempt failed", "attempt", n, "retry_in", backoff, "err", msg)
		r.update(t.Instance, func(in *instance) {
			in.status.LastError, in.status.PageURL, in.status.PageSnippet = fromCapture(err, c, red)
		})
		select {
		case <-r.ctx.Done():
			r.finish(t.Instance, StateFailed, errClosed, capture{}, red)
			return
		case <-t.Released:
			r.abandon(t, n, log)
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// loginContext is cancelled when the runner closes or when the worker run
// the login is for is ended on purpose; stop it when the login ends.
func (r *Runner) loginContext(t supervisor.LoginTarget) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.ctx)
	if t.Released == nil {
		return ctx, cancel
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-t.Released:
			cancel()
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel() }
}

func released(t supervisor.LoginTarget) bool {
	select {
	case <-t.Released:
		return true
	default:
		return false
	}
}

// abandon ends a login whose worker run was ended on purpose: a hand-over
// to another replica, a lost lease or a restart cut it, not the login page.
// It is neither counted nor backed off: the next run that finds the worker
// logged out starts a login at once (a cool-off would park the account).
func (r *Runner) abandon(t supervisor.LoginTarget, attempt int, log *slog.Logger) {
	log.Info("login abandoned: the worker was stopped", "attempt", attempt)
	r.finish(t.Instance, StateIdle, errReleased, capture{}, redactor{})
}

// observe records one attempt in the metrics.
func (r *Runner) observe(err error, d time.Duration) {
	m := r.cfg.Metrics
	if m == nil {
		return
	}
	result := "success"
	if err != nil {
		result = "failure"
	}
	m.LoginAttempts.WithLabelValues(result).Inc()
	m.LoginDuration.Observe(d.Seconds())
}

func (r *Runner) update(name string, f func(*instance)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r.insts[name])
}

// finish records the end of a login.
func (r *Runner) finish(name string, st State, err error, c capture, red redactor) {
	now := time.Now().UTC()
	r.update(name, func(in *instance) {
		in.running = false
		in.done = now
		in.status.State = st
		in.status.FinishedAt = &now
		in.status.LastError, in.status.PageURL, in.status.PageSnippet = fromCapture(err, c, red)
		var rej *RejectedError
		in.rejected = errors.As(err, &rej)
	})
}

// fromCapture is the status's error, page URL and snippet, redacted.
func fromCapture(err error, c capture, red redactor) (string, string, string) {
	if err == nil {
		return "", "", ""
	}
	return red.redact(err.Error()), red.redact(c.url), red.snippet(c.text)
}

// attempt is one try: ask the worker for a URL, drive a browser through the
// recipe, then wait until the worker confirms. It returns what the page
// showed when it failed.
func (r *Runner) attempt(lctx context.Context, t supervisor.LoginTarget) (_ capture, err error) {
	ctx, cancel := context.WithTimeout(lctx, r.cfg.LoginTimeout)
	defer cancel()
	defer func() {
		// A step cut by the attempt's deadline may only see its own context
		// cancelled (a browser still starting, say): name the deadline.
		if err != nil && lctx.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) &&
			!errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("the attempt's deadline (login_timeout %s) passed: %w", r.cfg.LoginTimeout, err)
		}
	}()
	if ok, _ := r.confirmOnce(ctx, t); ok {
		return capture{}, nil // logged in already (e.g. by hand): no browser needed
	}
	rc, user, pass, err := r.recipeFor(t)
	if err != nil {
		return capture{}, err
	}
	uctx, ucancel := context.WithTimeout(ctx, r.cfg.StepTimeout)
	u, err := t.LoginURL(uctx)
	ucancel()
	if err != nil {
		return capture{}, fmt.Errorf("ask the worker for a login URL: %w", err)
	}
	if err := rc.check(u); err != nil {
		return capture{}, err // no browser for a URL the recipe does not allow
	}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return capture{}, fmt.Errorf("wait for a browser slot: %w", ctx.Err())
	}
	defer func() { <-r.slots }()
	br, err := launch(ctx, &r.cfg, r.log)
	if err != nil {
		return capture{}, err
	}
	defer br.close()
	pl := &play{page: br.page, recipe: rc, loginURL: u, username: user, password: pass, timeout: r.cfg.StepTimeout}
	if err := pl.run(ctx); err != nil {
		return snapshotUnlessEnded(lctx, br, rc), err
	}
	if err := r.awaitConfirm(ctx, t); err != nil {
		return snapshotUnlessEnded(lctx, br, rc), err
	}
	return capture{}, nil
}

// snapshotUnlessEnded captures the page unless the login was ended (the
// runner closing, the worker stopped on purpose): that page proves nothing.
func snapshotUnlessEnded(lctx context.Context, br *browser, rc *Recipe) capture {
	if lctx.Err() != nil {
		return capture{}
	}
	return snapshot(br.page, rc)
}

// recipeFor picks the target's recipe and its credentials.
func (r *Runner) recipeFor(t supervisor.LoginTarget) (*Recipe, string, string, error) {
	name := cmp.Or(t.Recipe, r.cfg.DefaultRecipe)
	rc, ok := r.recipes[name]
	if !ok {
		return nil, "", "", fmt.Errorf("recipe %q: %w", name, ErrUnknownRecipe)
	}
	pass, err := rc.password(t.Account.Password, r.cfg.Getenv)
	if err != nil {
		return nil, "", "", err
	}
	for _, st := range rc.Steps {
		if st.Field == "password" && pass == "" {
			return nil, "", "", fmt.Errorf("recipe %s types a password but account %s has none", name, t.Account.Name)
		}
		if st.Field == "username" && t.Account.Username == "" {
			return nil, "", "", fmt.Errorf("recipe %s types a username but account %s has none", name, t.Account.Name)
		}
	}
	return rc, t.Account.Username, pass, nil
}

func (r *Runner) confirmOnce(ctx context.Context, t supervisor.LoginTarget) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StepTimeout)
	defer cancel()
	return t.Confirm(ctx)
}

// awaitConfirm asks the worker until it says it is logged in, for up to
// StepTimeout: the callback may take a moment to land.
func (r *Runner) awaitConfirm(ctx context.Context, t supervisor.LoginTarget) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.StepTimeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		ok, err := t.Confirm(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("the recipe finished but the worker did not confirm the login: %w", last)
			}
			return errors.New("the recipe finished but the worker still says it is logged out")
		case <-tick.C:
		}
	}
}

// endLoginSpan ends the span of a login attempt: the instance, its account,
// the attempt's number and whether it succeeded (never the error's text,
// which is the page's).
func endLoginSpan(span trace.Span, t supervisor.LoginTarget, n int, err error) {
	if !span.IsRecording() {
		return
	}
	result := "success"
	if err != nil {
		result = "failure"
		span.SetStatus(codes.Error, "login attempt failed")
	}
	span.SetAttributes(attribute.String(telemetry.AttrInstance, t.Instance),
		attribute.String(telemetry.AttrAccount, t.Account.Name), attribute.Int(telemetry.AttrAttempt, n),
		attribute.String(telemetry.AttrLoginStage, result))
	span.End()
}
