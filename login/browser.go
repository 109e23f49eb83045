package login

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-rod/rod"
	"github.com/go-rod/rod/lib/launcher"
	"github.com/go-rod/rod/lib/launcher/flags"
	"github.com/go-rod/rod/lib/proto"
	"github.com/go-rod/stealth"
)

// Bounds of the browser's shutdown: a polite Browser.close, then a kill.
const (
	closeTimeout = 3 * time.Second
	exitTimeout  = 5 * time.Second
	killTimeout  = 10 * time.Second
)

// browserFlags are the switches a browser on a closed network needs: no
// background traffic, no component updates, no QUIC, no GPU.
var browserFlags = []flags.Flag{
	"disable-gpu", "disable-background-networking", "disable-component-update",
	"disable-sync", "no-first-run", "disable-quic",
}

// browser is one Chromium process with one page, for one login attempt. It
// owns a fresh user-data dir and removes it in close.
type browser struct {
	l    *launcher.Launcher
	b    *rod.Browser
	page *rod.Page
	dir  string
	log  *slog.Logger
	// stop ends the connection's own context: the connection outlives the
	// attempt's deadline so that a timed-out page can still be captured
	// and closed politely.
	stop context.CancelFunc
}

// launch starts Chromium (leakless, so it dies with this process too) with
// its own profile dir and opens one page, all under ctx. On error nothing is
// left running.
func launch(ctx context.Context, cfg *Config, log *slog.Logger) (_ *browser, err error) {
	dir, err := os.MkdirTemp(cfg.TempDir, "poolgate-login-")
	if err != nil {
		return nil, fmt.Errorf("browser profile dir: %w", err)
	}
	l := launcher.New().
		Context(ctx).
		Bin(cfg.Chromium). // a set binary means the launcher never downloads one
		Leakless(true).
		Headless(*cfg.Headless).
		NoSandbox(os.Geteuid() == 0). // Chromium refuses to run as root with its sandbox
		UserDataDir(dir).
		// Without an explicit list the launcher passes on this process's
		// environment, secrets and all.
		Env(append(append([]string(nil), cfg.Env...), "HOME="+dir)...)
	for _, f := range browserFlags {
		l.Set(f)
	}
	if cfg.Stealth {
		l.Delete("enable-automation") // it shows an infobar and sets navigator.webdriver
	}
	connCtx, stop := context.WithCancel(context.Background())
	br := &browser{l: l, dir: dir, log: log, stop: stop}
	defer func() {
		if err != nil {
			br.close()
		}
	}()
	u, err := l.Launch()
	if err != nil {
		return nil, fmt.Errorf("start chromium %s: %w", cfg.Chromium, err)
	}
	// While launching, the attempt's deadline also bounds the connection.
	unwatch := context.AfterFunc(ctx, stop)
	defer unwatch()
	// Trace off: rod's trace would log what is typed, i.e. the password.
	b := rod.New().ControlURL(u).Context(connCtx).Trace(false).SlowMotion(0)
	if err := b.Connect(); err != nil {
		// Not kept: a browser whose connection never started has no
		// client, and closing it over CDP would dereference none (close
		// kills the process instead).
		return nil, fmt.Errorf("connect to chromium: %w", err)
	}
	br.b = b
	if cfg.Stealth {
		br.page, err = stealth.Page(br.b)
	} else {
		br.page, err = br.b.Page(proto.TargetCreateTarget{})
	}
	if err != nil {
		return nil, fmt.Errorf("open page: %w", err)
	}
	return br, nil
}

// close ends the browser: Browser.close over CDP, a kill if it lingers, then
// waits for the process tree and removes the profile dir. Every wait is
// bounded and none depends on the attempt's (possibly cancelled) context.
func (br *browser) close() {
	defer br.stop()
	defer func() { _ = os.RemoveAll(br.dir) }()
	if br.l.PID() == 0 {
		return // never started
	}
	if br.b != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		_ = br.b.Context(ctx).Close() // the connection drops as the browser exits
		cancel()
	}
	exited := make(chan struct{})
	go func() {
		br.l.Cleanup() // waits for the process tree to exit, removes the dir
		close(exited)
	}()
	select {
	case <-exited:
		return
	case <-time.After(exitTimeout):
	}
	br.l.Kill()
	select {
	case <-exited:
	case <-time.After(killTimeout):
		br.log.Error("chromium did not exit after a kill", "pid", br.l.PID())
	}
}

// errNotFound reports that a query found no element (yet).
var errNotFound = errors.New("not found")

// jsVisible is a page-side helper: whether an element is rendered and shown.
const jsVisible = `const vis = el => { const r = el.getBoundingClientRect(); const s = getComputedStyle(el);
  return r.width > 0 && r.height > 0 && s.visibility !== "hidden" && s.display !== "none"; };`

// visible returns the first visible element matching sel whose text
// contains text (case-insensitive; "" matches any), without waiting.
func visible(p *rod.Page, sel, text string) (*rod.Element, error) {
	el, err := p.Sleeper(rod.NotFoundSleeper).ElementByJS(rod.Eval(`(sel, text) => { `+jsVisible+`
  text = text.toLowerCase();
  for (const el of document.querySelectorAll(sel)) {
    if (vis(el) && (text === "" || (el.innerText || el.value || "").toLowerCase().includes(text))) return el;
  }
  return null; }`, sel, text))
	if errors.Is(err, &rod.ElementNotFoundError{}) {
		return nil, errNotFound
	}
	return el, err
}

// failureText returns the text of the first failure marker on the page, or
// "" when there is none.
func failureText(p *rod.Page, fs []Failure) (string, error) {
	if len(fs) == 0 {
		return "", nil
	}
	sels, texts := []string{}, []string{} // never null in JSON
	for _, f := range fs {
		if f.Selector != "" {
			sels = append(sels, f.Selector)
		} else {
			texts = append(texts, f.Text)
		}
	}
	res, err := p.Eval(`(sels, texts) => { `+jsVisible+`
  for (const s of sels) for (const el of document.querySelectorAll(s)) {
    if (vis(el)) return (el.innerText || "").trim() || ("failure marker " + s);
  }
  const body = document.body ? document.body.innerText : "";
  for (const t of texts) if (body.includes(t)) return t;
  return ""; }`, sels, texts)
	if err != nil {
		return "", err
	}
	return res.Value.Str(), nil
}

// pageText returns the page's visible text.
func pageText(p *rod.Page) (string, error) {
	res, err := p.Eval(`() => document.body ? document.body.innerText : ""`)
	if err != nil {
		return "", err
	}
	return res.Value.Str(), nil
}

// fatalEval reports a page-side exception that retrying cannot cure, such as
// an invalid selector.
func fatalEval(err error) bool {
	var ee *rod.EvalError
	return errors.As(err, &ee)
}
