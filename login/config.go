package login

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/pool/worker"
)

// Config configures the login runner. Zero fields take the defaults noted;
// NewRunner fills them.
type Config struct {
	// Chromium is the browser binary. Default "": the first of chromium,
	// chromium-browser, google-chrome found on PATH. Nothing is ever
	// downloaded.
	Chromium string
	// Concurrency is how many browsers may run at once, over all instances.
	// Default 2.
	Concurrency int
	// StepTimeout bounds each recipe step, the worker calls (login URL,
	// confirmation) and the wait for the worker to confirm. Default 30s.
	StepTimeout time.Duration
	// LoginTimeout bounds one whole attempt, browser start to confirmation.
	// Default 3m.
	LoginTimeout time.Duration
	// MaxAttempts is how many attempts one login makes before it gives up.
	// Default 3.
	MaxAttempts int
	// Backoff is the wait after the first failed attempt; it doubles after
	// each further one, up to 5m. Default 5s.
	Backoff time.Duration
	// Cooloff is how long Ensure leaves an instance alone after a login gave
	// up, before it tries again by itself. A login the page rejected (a
	// recipe failure marker, e.g. a wrong password) is never retried by
	// Ensure: retrying would only risk locking the account; Start does.
	// Default 15m; negative means only Start restarts a failed login.
	Cooloff time.Duration
	// Stealth makes pages with github.com/go-rod/stealth, for login pages
	// that refuse automated browsers. Default false.
	Stealth bool
	// Headless runs the browser without a window. Default true; the field is
	// a pointer so that false can be told from unset.
	Headless *bool
	// RecipeFile is a YAML file whose recipes override the built-in ones of
	// the same name or add new ones. Default "": built-in recipes only.
	RecipeFile string
	// DefaultRecipe is the recipe for targets that name none. Default
	// "simworker".
	DefaultRecipe string
	// Screenshots is how many failure screenshots to keep per instance, in
	// <WorkDir>/login-screenshots. Default 5; negative keeps none.
	Screenshots int
	// TempDir is where the per-login browser profiles are made (and removed
	// after each attempt). Default os.TempDir().
	TempDir string
	// Getenv reads the variables named by a recipe's password_env. Default
	// os.Getenv; the daemon passes its own so that tests can inject.
	Getenv func(string) string
	// Env is the browser's whole environment (HOME is set to its profile
	// dir on top). Default none: Chromium never sees the gateway's own
	// environment, which holds its keys and tokens.
	Env []string
	// Metrics records poolgate_login_attempts_total{result} and
	// poolgate_login_duration_seconds per attempt. Default nil: nothing.
	Metrics *metrics.Metrics
	// Tracing makes each attempt a span (nil: off).
	Tracing trace.TracerProvider
}

// Default values of Config.
const (
	DefaultConcurrency  = 2
	DefaultStepTimeout  = 30 * time.Second
	DefaultLoginTimeout = 3 * time.Minute
	DefaultMaxAttempts  = 3
	DefaultBackoff      = 5 * time.Second
	DefaultCooloff      = 15 * time.Minute
	DefaultScreenshots  = 5
	DefaultRecipeName   = "simworker"
	screenshotDirName   = "login-screenshots"
	installAdvice       = "install chromium with 'apt-get install chromium' or set the browser path"
)

// ErrNoChromium means no browser binary was configured or found on PATH.
var ErrNoChromium = errors.New("no chromium found on PATH (tried chromium, chromium-browser, google-chrome): " + installAdvice)

// withDefaults fills zero fields and finds the browser.
func (c Config) withDefaults() (Config, error) {
	worker.Default(&c.Concurrency, DefaultConcurrency)
	worker.Default(&c.MaxAttempts, DefaultMaxAttempts)
	worker.Default(&c.StepTimeout, DefaultStepTimeout)
	worker.Default(&c.LoginTimeout, DefaultLoginTimeout)
	worker.Default(&c.Backoff, DefaultBackoff)
	c.Cooloff = cmp.Or(c.Cooloff, DefaultCooloff)
	if c.Headless == nil {
		on := true
		c.Headless = &on
	}
	c.DefaultRecipe = cmp.Or(c.DefaultRecipe, DefaultRecipeName)
	c.Screenshots = cmp.Or(c.Screenshots, DefaultScreenshots)
	c.TempDir = cmp.Or(c.TempDir, os.TempDir())
	if c.Getenv == nil {
		c.Getenv = func(string) string { return "" } // only cmd reads the environment
	}
	bin, err := findChromium(c.Chromium)
	if err != nil {
		return c, err
	}
	c.Chromium = bin
	return c, nil
}

// findChromium resolves the configured binary, or looks one up on PATH.
func findChromium(configured string) (string, error) {
	if configured != "" {
		p, err := exec.LookPath(configured)
		if err != nil {
			return "", fmt.Errorf("chromium %q: %w (%s)", configured, err, installAdvice)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}
