package agentcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Sessions: a CLI process holds one session, so an account's conversations
// share its processes this way. A follow-up goes to the process holding
// its session; when none does (the process was restarted, or stopped to
// make room) a process is started with --resume. A new conversation takes
// a process that holds no session yet, else starts one. Beyond
// Config.LiveSessions processes that hold a session someone may continue,
// the least recently used idle one the driver started is stopped (the
// supervised one runs until it is restarted). A process is never switched to another session in place:
// Claude Code's /clear leaves a note of the command in the next
// conversation's context. docs/claude-code-worker.md has the measurements
// behind this choice.

// errSessionBusy: the session's process runs another turn of it (the
// router sends one turn of a conversation at a time; a caller that did
// not wait gets a new session instead).
var errSessionBusy = errors.New("the session's process is running another turn")

// acquire picks the process for t and makes it ready: marked busy, reset
// for a new conversation, set to t's model.
func (b *Backend) acquire(ctx context.Context, t *chat.Turn) (*conn, error) {
	// A follow-up sent right after its conversation's turn was interrupted
	// waits (bounded) for the interrupted turn to end on the worker.
	wait := time.NewTimer(b.d.cfg.StopTimeout)
	defer wait.Stop()
	var c *conn
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return nil, fmt.Errorf("%w (%w)", chat.ErrWorkerGone, chat.ErrNotSent)
		}
		var err error
		c, err = b.pick(t)
		if c != nil {
			c.busy = true
		}
		changed := b.changed
		b.mu.Unlock()
		if !errors.Is(err, errSessionBusy) {
			if err != nil {
				return nil, err
			}
			break
		}
		select {
		case <-changed:
		case <-wait.C:
			return nil, err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", ctx.Err(), chat.ErrNotSent)
		}
	}
	if c == nil {
		return b.spawn(ctx, Launch{SystemPrompt: b.d.cfg.SystemPrompt, Resume: t.SessionID, Model: t.Model})
	}
	b.mu.Lock()
	model := c.model
	b.mu.Unlock()
	if t.Model != "" && t.Model != model {
		cctx, cancel := context.WithTimeout(ctx, b.d.cfg.CallTimeout)
		_, err := c.control(cctx, ControlRequest{Subtype: "set_model", Model: &t.Model})
		cancel()
		if err != nil {
			b.release(c, "", true)
			return nil, fmt.Errorf("model %s: %w (%w)", t.Model, err, chat.ErrNotSent)
		}
		b.mu.Lock()
		c.model = t.Model
		b.mu.Unlock()
	}
	return c, nil
}

// pick chooses the process for t, nil to start one; b.mu held.
func (b *Backend) pick(t *chat.Turn) (*conn, error) {
	for _, c := range b.conns {
		if !c.alive() || c.stuck || c.stale {
			continue
		}
		switch {
		case t.SessionID != "" && c.session == t.SessionID:
			if c.busy {
				return nil, fmt.Errorf("session %s: %w (%w)", t.SessionID, errSessionBusy, chat.ErrNotSent)
			}
			return c, nil
		case t.SessionID == "" && c.session == "" && !c.busy:
			return c, nil
		}
	}
	return nil, nil
}

// spawn starts a process for l (a new session, or l.Resume's) and waits
// for its initialize answer. It is returned busy.
func (b *Backend) spawn(ctx context.Context, l Launch) (*conn, error) {
	argv := append(b.d.argv(l), b.ep.Account.Args...)
	ch, err := b.ep.Spawn(argv, nil)
	if err != nil {
		return nil, fmt.Errorf("%w (%w)", err, chat.ErrNotSent)
	}
	label := "spawned"
	if l.Resume != "" {
		label = "resume-" + l.Resume
	}
	c := b.newConn(ch.Stdio(), ch, label)
	s := newSink()
	c.listen(s) // a CLI that cannot resume says why before it exits
	ictx, cancel := context.WithTimeout(ctx, b.d.cfg.StartTimeout)
	_, err = c.initialize(ictx)
	cancel()
	c.listen(nil)
	if err != nil {
		c.close()
		why := ""
		for _, m := range s.Take(nil) {
			if m.Type == TypeResult && len(m.Errors) > 0 {
				why = " (" + strings.Join(m.Errors, "; ") + ")"
			}
		}
		return nil, fmt.Errorf("start a process for session %q: %w%s (%w)", l.Resume, err, why, chat.ErrNotSent)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		c.close()
		return nil, fmt.Errorf("%w (%w)", chat.ErrWorkerGone, chat.ErrNotSent)
	}
	c.session, c.model, c.busy = l.Resume, l.Model, true
	b.conns = append(b.conns, c)
	return c, nil
}

// release frees c after a turn: it holds session now (unchanged when
// ""), which a follow-up may continue when ok. Spawned processes beyond
// the cap are stopped, the least recently used first.
func (b *Backend) release(c *conn, session string, ok bool) {
	b.mu.Lock()
	c.busy, c.used = false, time.Now()
	if session != "" {
		c.session = session
	}
	c.stale = c.stale || !ok
	var stop []*conn
	live := 0
	for _, x := range b.conns {
		switch {
		case x.child != nil && (!x.alive() || x.stale && !x.busy):
			stop = append(stop, x) // gone, or holding a session nobody continues
		case x.alive() && !x.stale:
			live++ // the supervised process holding a dead session is not counted: it serves nobody
		}
	}
	for live > b.d.cfg.LiveSessions {
		var lru *conn
		for _, x := range b.conns {
			if x.child != nil && x.alive() && !x.busy && (lru == nil || x.used.Before(lru.used)) {
				lru = x
			}
		}
		if lru == nil {
			break
		}
		stop = append(stop, lru)
		b.drop([]*conn{lru})
		live--
	}
	b.drop(stop)
	b.notify()
	b.mu.Unlock()
	for _, x := range stop {
		x.close()
	}
}

// notify tells whoever waits for a process that one may be free; b.mu
// held.
func (b *Backend) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// stuckConn notes that c's interrupted turn never ended: a spawned process
// is stopped, the supervised one fails its health checks until the
// supervisor restarts it.
func (b *Backend) stuckConn(c *conn) {
	b.mu.Lock()
	c.stuck, c.busy = true, false
	if c.child != nil {
		b.drop([]*conn{c})
	}
	b.notify()
	b.mu.Unlock()
	if c.child != nil {
		c.close()
	}
	b.log.Warn("an interrupted turn did not end on the agent CLI", "process", c.label)
}

// scanURL reads the login command's output until a URL matching re.
func scanURL(ctx context.Context, ch worker.Child, re *regexp.Regexp, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u, _, err := ScanURL(ctx, ch.Stdio().Out, re)
	switch {
	case err != nil:
		return "", fmt.Errorf("no login URL: %w", err)
	case u == "":
		return "", fmt.Errorf("the login command ended without a URL: %v", ch.Wait())
	}
	return u, nil
}

// ScanURL reads out, a login command's output, until a URL matching re,
// and drains the rest of it in the background until it ends. When the
// output ends without one it returns "" and what the command printed (its
// first MiB); an error only when ctx ends first.
func ScanURL(ctx context.Context, out io.Reader, re *regexp.Regexp) (url, printed string, err error) {
	type scanned struct{ url, printed string }
	found := make(chan scanned, 1)
	go func() {
		var seen strings.Builder
		buf := make([]byte, 4096)
		sent := false
		for {
			n, err := out.Read(buf)
			if !sent && n > 0 && seen.Len() < 1<<20 {
				seen.Write(buf[:n])
				// Only whole lines: a URL cut by a short read is not one.
				text := seen.String()
				if err == nil {
					text = text[:strings.LastIndexByte(text, '\n')+1]
				}
				if u := re.FindString(text); u != "" {
					found <- scanned{url: u}
					sent = true
				}
			}
			if err != nil {
				if !sent {
					found <- scanned{url: re.FindString(seen.String()), printed: seen.String()}
				}
				return
			}
		}
	}()
	select {
	case s := <-found:
		return s.url, s.printed, nil
	case <-ctx.Done():
		return "", "", ctx.Err()
	}
}
