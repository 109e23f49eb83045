package login

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/proto"
)

// pollInterval is how often a waiting step looks at the page again.
const pollInterval = 100 * time.Millisecond

// RejectedError means the login page showed one of the recipe's failure
// markers, e.g. "Invalid username or password". Message is the page's text
// (with the password redacted).
type RejectedError struct {
	Message string
}

// Error says what the page said.
func (e *RejectedError) Error() string { return "login page says: " + e.Message }

// StepError is a recipe step that failed: it timed out or the browser
// refused it. Step counts from 1; Target is the step's selector or pattern.
type StepError struct {
	Step   int
	Action string
	Target string
	Err    error
}

// Error names the step and why it failed.
func (e *StepError) Error() string {
	return fmt.Sprintf("step %d (%s %s): %v", e.Step, e.Action, e.Target, e.Err)
}

// Unwrap returns the cause.
func (e *StepError) Unwrap() error { return e.Err }

// play runs a recipe on one page: the steps in order, each under its own
// deadline, watching for the failure markers while it waits.
type play struct {
	page     *rod.Page
	recipe   *Recipe
	loginURL string
	username string
	password string
	timeout  time.Duration // per step unless the step says otherwise
}

// run plays every step; it returns nil when the last step passed.
func (pl *play) run(ctx context.Context) error {
	for i := range pl.recipe.Steps {
		st := &pl.recipe.Steps[i]
		act, arg, err := st.action()
		if err != nil {
			return err // validated at load; kept for safety
		}
		d := cmp.Or(st.Timeout, pl.timeout)
		sctx, cancel := context.WithTimeout(ctx, d)
		err = pl.step(sctx, st, act, arg)
		cancel()
		if err == nil {
			continue
		}
		var rej *RejectedError
		var host *HostError
		if errors.As(err, &rej) || errors.As(err, &host) {
			return err
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("timed out after %s", d)
		}
		return &StepError{Step: i + 1, Action: act, Target: arg, Err: err}
	}
	return nil
}

func (pl *play) step(ctx context.Context, st *Step, act, arg string) error {
	p := pl.page.Context(ctx)
	if st.If != "" {
		if _, err := visible(p, st.If, ""); err != nil {
			return nil // condition not met (or the page is between documents): skip
		}
	}
	switch act {
	case actOpen:
		u := arg
		if arg == openLoginURL {
			u = pl.loginURL
		}
		if err := pl.recipe.check(u); err != nil {
			return err
		}
		return p.Navigate(u)
	case actWait:
		_, err := pl.waitFor(ctx, p, arg, "")
		return err
	case actType:
		el, err := pl.waitFor(ctx, p, arg, "")
		if err != nil {
			return err
		}
		// Nothing is typed into a page the recipe does not allow: it may be
		// one a worker or a redirect made up to collect the password.
		if info, err := p.Info(); err != nil {
			return err
		} else if err := pl.recipe.check(info.URL); err != nil {
			return err
		}
		text := st.Text
		switch st.Field {
		case "username":
			text = pl.username
		case "password":
			text = pl.password
		}
		if err := el.SelectAllText(); err != nil {
			return err
		}
		return el.Input(text)
	case actClick:
		el, err := pl.waitFor(ctx, p, arg, "")
		if err != nil {
			return err
		}
		return el.Click(proto.InputMouseButtonLeft, 1)
	case actChoose:
		el, err := pl.waitFor(ctx, p, arg, st.Text)
		if err != nil {
			return err
		}
		return el.Click(proto.InputMouseButtonLeft, 1)
	case actWaitURL:
		return pl.poll(ctx, p, func() (bool, error) {
			info, err := p.Info()
			if err != nil {
				return false, err
			}
			return st.urlRE.MatchString(info.URL), nil
		})
	case actWaitText:
		return pl.poll(ctx, p, func() (bool, error) {
			body, err := pageText(p)
			return strings.Contains(body, arg), err
		})
	}
	return fmt.Errorf("unknown action %q", act)
}

// waitFor waits until a visible element matches sel (and text).
func (pl *play) waitFor(ctx context.Context, p *rod.Page, sel, text string) (*rod.Element, error) {
	var found *rod.Element
	err := pl.poll(ctx, p, func() (bool, error) {
		el, err := visible(p, sel, text)
		if errors.Is(err, errNotFound) {
			return false, nil
		}
		found = el
		return err == nil, err
	})
	return found, err
}

// poll checks the failure markers, then cond, every pollInterval until cond
// holds, a marker shows, or ctx ends. Errors while the page is between
// documents are expected and retried; a page-side exception (a bad
// selector) is not.
func (pl *play) poll(ctx context.Context, p *rod.Page, cond func() (bool, error)) error {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var last error
	for {
		msg, err := failureText(p, pl.recipe.Failure)
		if err == nil && msg != "" {
			return &RejectedError{Message: msg}
		}
		if err != nil && fatalEval(err) {
			return fmt.Errorf("failure markers: %w", err)
		}
		ok, err := cond()
		switch {
		case ok:
			return nil
		case err != nil && fatalEval(err):
			return err
		case err != nil && ctx.Err() == nil:
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("%w (last error: %v)", ctx.Err(), last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// capture is what the page showed when an attempt failed.
type capture struct {
	url, text string
	png       []byte
}

// snapshot records the page's URL, text and a screenshot, under its own
// short deadline since the attempt's may have passed. A page the recipe
// does not allow (a local file, a foreign site) is not recorded: its
// content is not the login's to keep.
func snapshot(page *rod.Page, rc *Recipe) capture {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p := page.Context(ctx)
	var c capture
	info, err := p.Info()
	if err != nil {
		return c
	}
	if herr := rc.check(info.URL); herr != nil {
		var he *HostError
		errors.As(herr, &he)
		c.url = he.Where
		return c
	}
	c.url = info.URL
	c.text, _ = pageText(p)
	c.png, _ = p.Screenshot(false, nil)
	return c
}
