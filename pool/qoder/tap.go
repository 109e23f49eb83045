package qoder

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
)

// tap passes the supervised process's output through to agentcli's reader
// and watches its first lines for the CLI's answer to its start: the
// initialize answer (logged in) or the unasked turn that says it is not
// logged in. After either it only passes bytes on.
type tap struct {
	r     io.ReadCloser
	vocab agentcli.Vocabulary

	// Read runs on agentcli's reader goroutine only; these are its own.
	buf  []byte
	skip bool // the current line is too long to be the answer: skip to its end

	decided   atomic.Bool
	loggedOut chan struct{} // closed at the logged-out answer
}

// maxTapLine is the longest line the tap looks at; the answers it waits
// for are a few kilobytes.
const maxTapLine = 1 << 20

func newTap(r io.ReadCloser, v agentcli.Vocabulary) *tap {
	return &tap{r: r, vocab: v, loggedOut: make(chan struct{})}
}

func (t *tap) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 && !t.decided.Load() {
		t.inspect(p[:n])
	}
	return n, err
}

func (t *tap) Close() error { return t.r.Close() }

// inspect reads the complete lines in b.
func (t *tap) inspect(b []byte) {
	for len(b) > 0 && !t.decided.Load() {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !t.skip {
				t.buf = append(t.buf, b...)
				if len(t.buf) > maxTapLine {
					t.buf, t.skip = t.buf[:0], true
				}
			}
			return
		}
		if !t.skip {
			t.buf = append(t.buf, b[:i]...)
			t.line(t.buf)
		}
		t.buf, t.skip, b = t.buf[:0], false, b[i+1:]
	}
}

// line looks at one line: a control answer means the CLI reads its input
// (it answers only when logged in); the not-logged-in answer means it
// will not.
func (t *tap) line(l []byte) {
	m, _ := agentcli.Parse(l, t.vocab)
	if m == nil {
		return
	}
	switch {
	case m.Type == agentcli.TypeControlResponse:
		t.decided.Store(true)
	case m.Type == agentcli.TypeAssistant && m.Error == "authentication_failed",
		m.Type == agentcli.TypeResult && m.IsError && m.Result != nil && loginText.MatchString(*m.Result):
		t.decided.Store(true)
		close(t.loggedOut)
	}
}

// isLoggedOut reports whether the CLI said at its start that it is not
// logged in.
func (t *tap) isLoggedOut() bool {
	select {
	case <-t.loggedOut:
		return true
	default:
		return false
	}
}

// heldInput is the supervised process's input, whose closing the driver
// holds back while it decides: agentcli closes the input of a process
// whose start failed, and qodercli exits when its input ends. A start
// refused for its token keeps the process (and its input) until the
// supervisor stops it, so that the reason, not the exit, is reported.
type heldInput struct {
	w io.WriteCloser

	mu      sync.Mutex
	held    bool
	pending bool // a Close came while held
	closed  bool
}

func (h *heldInput) Write(p []byte) (int, error) { return h.w.Write(p) }

// SetWriteDeadline passes agentcli's write deadline on, when the pipe has
// one.
func (h *heldInput) SetWriteDeadline(t time.Time) error {
	if d, ok := h.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		return d.SetWriteDeadline(t)
	}
	return nil
}

// Close closes the input, or notes the wish while it is held.
func (h *heldInput) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held {
		h.pending = true
		return nil
	}
	return h.closeLocked()
}

func (h *heldInput) closeLocked() error {
	if h.closed {
		return nil
	}
	h.closed = true
	return h.w.Close()
}

// unhold lets Close through, and closes now if one came meanwhile.
func (h *heldInput) unhold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = false
	if h.pending {
		_ = h.closeLocked()
	}
}

// release closes the input whether or not it is held: the process's
// input ends and it exits.
func (h *heldInput) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = false
	_ = h.closeLocked()
}
