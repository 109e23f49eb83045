package agentcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/textchat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Backend is one account's running CLI: the process the supervisor runs
// and the ones the driver spawned for other sessions, each holding one
// session at a time.
type Backend struct {
	d    *Driver
	name string
	ep   worker.Endpoint
	dirs Dirs
	rec  *recorder
	log  *slog.Logger
	wg   sync.WaitGroup // goroutines waiting out interrupted turns

	mu        sync.Mutex
	conns     []*conn       // the supervised process first
	changed   chan struct{} // closed (and replaced) when a process is freed
	closed    bool
	models    []chat.Model
	rawModels json.RawMessage
	auth      authState
	login     worker.Child // the running login command, if any
}

// authState is what the backend knows of the account's login.
type authState struct {
	worker.AuthState
	// refused is the login state (the status command's output and the
	// stored login's files) when a turn's login was refused: while it is
	// the same, the account stays logged out (a CLI that counts any
	// configured key as a login would otherwise take turns again that
	// fail the same way).
	refused []byte
	known   bool
}

var _ worker.Backend = (*Backend)(nil)

func newBackend(d *Driver, ep worker.Endpoint, ds Dirs) *Backend {
	b := &Backend{d: d, name: ep.Name, ep: ep, dirs: ds, log: d.cfg.Logger.With("instance", ep.Name),
		changed: make(chan struct{})}
	b.rec = newRecorder(d, ep, b.log)
	return b
}

// adopt makes c the supervised process, with the models its initialize
// answer lists.
func (b *Backend) adopt(c *conn, init json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.conns = []*conn{c}
	if f := b.d.cfg.Profile.Models; f != nil {
		b.models = f(init)
		var raw struct {
			Models json.RawMessage `json:"models"`
		}
		_ = json.Unmarshal(init, &raw)
		b.rawModels = raw.Models
	}
}

// Capabilities: models, sessions, and a browser login when the kind has
// one.
func (b *Backend) Capabilities() worker.Capabilities {
	p := &b.d.cfg.Profile
	return worker.Capabilities{Models: p.Models != nil, RawModels: p.Models != nil,
		BrowserLogin: len(p.LoginArgs) > 0 && p.LoginURL != nil, Sessions: true}
}

// Models lists the models the CLI offered at start.
func (b *Backend) Models(context.Context) ([]chat.Model, error) {
	if b.d.cfg.Profile.Models == nil {
		return nil, worker.ErrUnsupported
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.models, nil
}

// RawModels is the initialize answer's model list beside the parsed one.
func (b *Backend) RawModels(ctx context.Context) (json.RawMessage, []chat.Model, error) {
	ms, err := b.Models(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.rawModels, ms, err
}

// main is the supervised process.
func (b *Backend) main() *conn {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns[0]
}

// Status is the health probe: the supervised process answers a control
// request, and the account is logged in (asked again of the CLI while it
// is not).
func (b *Backend) Status(ctx context.Context) (worker.AuthState, error) {
	c := b.main()
	if !c.alive() {
		return worker.AuthState{}, c.gone()
	}
	b.mu.Lock()
	stuck := c.stuck
	b.mu.Unlock()
	if stuck {
		return worker.AuthState{}, errors.New("an interrupted turn never ended on the worker")
	}
	if p := b.d.cfg.Profile.Probe; p != "" {
		var ce *ControlError
		if _, err := c.control(ctx, ControlRequest{Subtype: p}); err != nil && !errors.As(err, &ce) {
			return worker.AuthState{}, err // a refusal is an answer too
		}
	}
	b.mu.Lock()
	st := b.auth
	b.mu.Unlock()
	if st.LoggedIn {
		return st.AuthState, nil
	}
	if err := b.refreshLogin(ctx); err != nil {
		return worker.AuthState{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.auth.AuthState, nil
}

// refreshLogin asks the CLI's status command for the login state.
func (b *Backend) refreshLogin(ctx context.Context) error {
	p := &b.d.cfg.Profile
	if p.ParseStatus == nil {
		b.mu.Lock()
		b.auth = authState{AuthState: worker.AuthState{LoggedIn: true}, known: true}
		b.mu.Unlock()
		return nil
	}
	out, err := b.run(ctx, append(append([]string(nil), b.d.cfg.Command...), p.StatusArgs...))
	if err != nil {
		return err
	}
	st, err := p.ParseStatus(out)
	if err != nil {
		return fmt.Errorf("status command: %w", err)
	}
	state := b.loginPrint(out)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.auth.refused != nil && bytes.Equal(b.auth.refused, state) {
		st.LoggedIn = false
	} else {
		b.auth.refused = nil
	}
	b.auth.AuthState, b.auth.known = st, true
	return nil
}

// loggedOut notes that a turn's login was refused.
func (b *Backend) loggedOut(ctx context.Context) {
	p := &b.d.cfg.Profile
	var out []byte
	if p.ParseStatus != nil {
		out, _ = b.run(ctx, append(append([]string(nil), b.d.cfg.Command...), p.StatusArgs...))
	}
	state := b.loginPrint(out)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.auth.LoggedIn, b.auth.refused = false, state
}

// loginPrint is what identifies a login state: the status command's
// output, and the size and time of each stored login file.
func (b *Backend) loginPrint(status []byte) []byte {
	return append(append([]byte{}, status...), CredentialPrint(b.dirs.Config, b.d.cfg.Profile.CredentialFiles)...)
}

// CredentialPrint is what identifies the stored login files (paths under
// configDir) without reading them: the size and time of each one there
// ("": none is).
func CredentialPrint(configDir string, files []string) string {
	var state []byte
	for _, f := range files {
		if fi, err := os.Stat(filepath.Join(configDir, f)); err == nil {
			state = fmt.Appendf(state, "\n%s %d %d", f, fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return string(state)
}

// run runs a short CLI command of the worker (its status) and returns what
// it printed; its exit status is not an error.
func (b *Backend) run(ctx context.Context, argv []string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.d.cfg.StartTimeout)
	defer cancel()
	ch, err := b.ep.Spawn(argv, nil)
	if err != nil {
		return nil, err
	}
	defer ch.Stop()
	_ = ch.Stdio().In.Close()
	type res struct {
		out []byte
		err error
	}
	done := make(chan res, 1)
	go func() {
		var buf bytes.Buffer
		_, err := buf.ReadFrom(io.LimitReader(ch.Stdio().Out, 1<<20))
		done <- res{buf.Bytes(), err}
	}()
	select {
	case r := <-done:
		<-ch.Exited()
		return r.out, r.err
	case <-ctx.Done():
		ch.Stop()
		<-done
		return nil, fmt.Errorf("%s: %w", argv[len(argv)-1], ctx.Err())
	}
}

// LoginURL starts the CLI's own login and returns the URL it hands out;
// the login keeps running (it waits for the browser) until it ends, the
// next LoginURL or the backend's Close.
func (b *Backend) LoginURL(ctx context.Context) (string, error) {
	p := &b.d.cfg.Profile
	if len(p.LoginArgs) == 0 || p.LoginURL == nil {
		return "", worker.ErrUnsupported
	}
	b.mu.Lock()
	old := b.login
	b.login = nil
	b.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	ch, err := b.ep.Spawn(append(append([]string(nil), b.d.cfg.Command...), p.LoginArgs...), nil)
	if err != nil {
		return "", err
	}
	u, err := scanURL(ctx, ch, p.LoginURL, b.d.cfg.StartTimeout)
	if err != nil {
		ch.Stop()
		return "", fmt.Errorf("%s %s: login: %w", p.Name, b.name, err)
	}
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.login = ch
	}
	b.mu.Unlock()
	if closed {
		ch.Stop()
		return "", chat.ErrWorkerGone
	}
	return u, nil
}

// DeleteSession frees a session nobody continues: a spawned process
// holding it is stopped, the supervised one will reset it before its
// next conversation, and its transcript files are removed.
func (b *Backend) DeleteSession(_ context.Context, id string) error {
	if !sessionID.MatchString(id) {
		return fmt.Errorf("session id %q is not one a CLI hands out", id)
	}
	var stop []*conn
	b.mu.Lock()
	for _, c := range b.conns {
		if c.session == id && !c.busy {
			c.stale = true
			if c.child != nil {
				stop = append(stop, c)
			}
		}
	}
	b.drop(stop)
	b.mu.Unlock()
	for _, c := range stop {
		c.close()
	}
	if g := b.d.cfg.Profile.SessionGlob; g != nil {
		files, _ := filepath.Glob(filepath.Join(b.dirs.Config, g(id)))
		for _, f := range files {
			_ = os.Remove(f)
		}
	}
	return nil
}

// sessionID is the shape of a session id (a UUID, or a word of the same
// characters): nothing that could name a path.
var sessionID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

// drop removes the given processes from the set; b.mu held.
func (b *Backend) drop(gone []*conn) {
	if len(gone) == 0 {
		return
	}
	kept := b.conns[:0]
	for _, c := range b.conns {
		keep := true
		for _, g := range gone {
			keep = keep && c != g
		}
		if keep {
			kept = append(kept, c)
		}
	}
	b.conns = kept
}

// Close stops every process the backend spawned and ends the supervised
// one's input; the supervisor stops that one.
func (b *Backend) Close() error {
	b.closeAll()
	b.wg.Wait()
	b.rec.close()
	return nil
}

func (b *Backend) closeAll() {
	b.mu.Lock()
	b.closed = true
	conns := append([]*conn(nil), b.conns...)
	login := b.login
	b.login = nil
	b.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	if login != nil {
		login.Stop()
	}
}

// Start runs one turn on a process holding its session (or a new one): the
// turn's messages rendered as one user message, its tools emulated as text
// (pool/textchat). The answer is read on the caller's goroutine.
func (b *Backend) Start(ctx context.Context, t *chat.Turn) (chat.Answer, error) {
	if err := b.d.CheckTurn(t); err != nil {
		return nil, err
	}
	b.mu.Lock()
	auth := b.auth
	b.mu.Unlock()
	if auth.known && !auth.LoggedIn {
		return nil, fmt.Errorf("%s %s: %w (%w)", b.d.cfg.Profile.Name, b.name, chat.ErrNotLoggedIn, chat.ErrNotSent)
	}
	prompt := textchat.Render(t)
	if esc := b.d.cfg.Profile.Escape; esc != nil {
		prompt = esc(prompt)
	}
	c, err := b.acquire(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", b.d.cfg.Profile.Name, b.name, err)
	}
	s := newSink()
	c.listen(s)
	if err := c.send(prompt); err != nil {
		c.listen(nil)
		b.release(c, "", false)
		return nil, fmt.Errorf("%s %s: send the turn: %w", b.d.cfg.Profile.Name, b.name, c.gone())
	}
	return b.newAnswer(ctx, c, s, t), nil
}
