package supervisor

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// How a worker comes back after its process ends: after a backoff, and not
// at all, until an operator asks, when it keeps failing to start the same
// way.
//
// A worker that cannot start for a reason that will not go away by itself
// (its binary is missing or not executable, a port or socket it needs is
// taken) used to be restarted forever while the pool looked alive. Now a
// worker whose starts fail the same way FailAfter times in a row is marked
// failed, with the reason read from the exit error and its last lines of
// output, and waits for an operator: a restart (the admin API, the
// dashboard) or a reload starts it again.

// startFailure is a life that ended before its worker answered: the error,
// and the worker's last lines of output.
type startFailure struct {
	err   error
	lines []string
}

func (f *startFailure) Error() string { return f.err.Error() }
func (f *startFailure) Unwrap() error { return f.err }

// failureKinds are the causes recognised in an exit error or a worker's
// output, each with what it means to an operator.
var failureKinds = []struct {
	match  []string // lower case
	reason string
}{
	{[]string{"address already in use", "eaddrinuse"}, "a port or socket it needs is taken (address already in use)"},
	{[]string{"no such file or directory", "executable file not found", "enoent"}, "a file it needs is missing (no such file or directory)"},
	{[]string{"permission denied", "eacces", "operation not permitted"}, "it may not run or open what it needs (permission denied)"},
	{[]string{"exec format error"}, "the worker binary is not a program for this machine (exec format error)"},
}

var digits = regexp.MustCompile(`[0-9]+`)

// reasoned is a start error that names its cause itself: a driver's typed
// error, whose reason it read from the worker (qoder.StartError, from the
// CLI's run log). The worker's last line of output is not added to it, so
// that the same failure is seen as the same whether or not that line had
// reached the log yet.
type reasoned interface {
	error
	StartReason() string
}

// describe names a start failure: a reason an operator can act on (the
// cause recognised, and the line or error that shows it), and a signature
// that is the same when the same failure happens again (numbers such as
// ports, process ids and times left out).
func (f *startFailure) describe() (reason, signature string) {
	lines := f.lines
	if r, ok := errors.AsType[reasoned](f.err); ok && r.StartReason() != "" {
		lines = nil
	}
	texts := append([]string{f.err.Error()}, lines...)
	for _, k := range failureKinds {
		for i := len(texts) - 1; i >= 0; i-- {
			low := strings.ToLower(texts[i])
			for _, m := range k.match {
				if strings.Contains(low, m) {
					return k.reason + ": " + clip(texts[i]), k.reason
				}
			}
		}
	}
	reason = f.err.Error()
	if n := len(lines); n > 0 {
		reason += "; its last output: " + clip(lines[n-1])
	}
	return reason, digits.ReplaceAllString(reason, "#")
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// tail keeps a process's last lines of output.
type tail struct {
	mu    sync.Mutex
	lines []string
}

// tailLines is how many lines of output a start failure keeps.
const tailLines = 5

func (t *tail) add(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == tailLines {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, clip(line))
}

func (t *tail) last() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// failures counts a worker's start failures in a row that ended the same way.
type failures struct {
	signature string
	n         int
}

// count records how a life ended and says whether the worker has failed
// for good (the same start failure FailAfter times in a row), with the
// error to report.
func (f *failures) count(err error, limit int) (error, bool) {
	var sf *startFailure
	if !errors.As(err, &sf) {
		*f = failures{} // it ran, or ended for another reason
		return err, false
	}
	reason, sig := sf.describe()
	if sig == f.signature {
		f.n++
	} else {
		*f = failures{signature: sig, n: 1}
	}
	err = errors.New(reason)
	if f.n < limit {
		return err, false
	}
	return fmt.Errorf("failed %d starts in a row, the same way; restart it once that is fixed: %w", f.n, err), true
}

// failed holds a worker that failed for good until a restart (or its stop:
// a drain or a stop holds it stopped). It reports false when ctx ended.
func (w *Worker) failed(ctx context.Context, err error, held *bool) bool {
	w.set(StateFailed, err)
	w.log.Error("worker failed: not restarted until an operator restarts it", "err", err)
	return w.between(ctx, nil, held)
}

// backoff waits d before the next start; a restart cuts it short, a drain or
// stop ends it holding the worker. It reports false when ctx ended.
func (w *Worker) backoff(ctx context.Context, d time.Duration, held *bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	return w.between(ctx, t.C, held)
}

// between waits for the end of a wait between lives: timeout (nil: none), a
// restart, or a drain or stop, which holds the worker. It reports false
// when ctx ended.
func (w *Worker) between(ctx context.Context, timeout <-chan time.Time, held *bool) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timeout:
			return true
		case <-w.box.wake:
			switch w.box.take() {
			case cmdDrain, cmdStop:
				*held = true
				return true
			case cmdRestart:
				return true
			}
		}
	}
}

func (w *Worker) countRestart() {
	w.update(func() { w.restarts++ })
	if m := w.env.metrics; m != nil {
		m.Restarts.WithLabelValues(w.cfg.Name).Inc()
	}
}
