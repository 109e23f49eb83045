// Package doctor is `poolgate doctor`: it starts one Lingma worker the way
// the pool does, in a scratch work dir, and checks one by one the points of
// the evidence table (docs/lingma-protocol.md) that a running worker can
// show: the start flags, the ports and sockets it opens, initialize,
// auth/status, the models, a plain turn in each ask mode, chat/finish, the
// requests the worker sends, a continued session, a tool/invoke round trip,
// chat/stop. Each check prints one line (holds, differs: what was seen, or
// not checked: why), the run's messages go to a redacted transcript an
// operator can attach to a bug report, and a run in which something
// differs fails. It asks and answers with the driver's own code
// (lingma.Driver.Ask, lingma.UnsupportedResult) but reads the worker's
// messages raw, so that a worker the driver would misread shows.
//
// cmd/poolgate only dispatches to Main.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

// Verdict is what a check found.
type Verdict string

// Verdicts.
const (
	Holds      Verdict = "holds"
	Differs    Verdict = "differs"
	NotChecked Verdict = "not checked"
)

// Result is one check's line.
type Result struct {
	Check   string
	Verdict Verdict
	Detail  string
}

func (r Result) String() string {
	if r.Verdict == Holds {
		if r.Detail == "" {
			return r.Check + ": holds"
		}
		return r.Check + ": holds (" + r.Detail + ")"
	}
	return r.Check + ": " + string(r.Verdict) + ": " + r.Detail
}

// Config is one doctor run.
type Config struct {
	// Command is the argv that starts the worker binary (the real Lingma,
	// or poolgate's simworker); the standard start arguments follow it,
	// then Args.
	Command []string
	Args    []string
	// Env is the worker's base environment (poolgate passes the one its
	// workers get); the driver's own (a home under the work dir) is added.
	Env []string
	// WorkDir, when set, is a logged-in work dir whose cache/ is copied
	// into the scratch work dir: the turns need a login. It is not touched.
	WorkDir string
	// Transcript is the file the run's redacted transcript goes to.
	Transcript string
	// StartTimeout bounds the start (default 30s), Timeout one turn
	// (default 2m), FinishWait the wait for chat/finish after the turn's
	// last step callback (default 15s).
	StartTimeout, Timeout, FinishWait time.Duration
	// Keep keeps the scratch work dir (its logs); default removed.
	Keep bool
	// Out receives each result's line as it comes (nil: none).
	Out io.Writer
}

func (c *Config) setDefaults() {
	worker.Default(&c.StartTimeout, 30*time.Second)
	worker.Default(&c.Timeout, 2*time.Minute)
	worker.Default(&c.FinishWait, 15*time.Second)
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// run is one run's state.
type run struct {
	cfg     Config
	ep      worker.Endpoint
	proc    supervisor.Process
	output  *ring
	results []Result
}

// Run starts the worker, runs every check and returns their results. An
// error means the doctor itself could not run (no scratch dir, no
// transcript file); a worker that does not start is a result.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	cfg.setDefaults()
	dir, err := os.MkdirTemp("", "poolgate-doctor-")
	if err != nil {
		return nil, fmt.Errorf("doctor: scratch work dir: %w", err)
	}
	if !cfg.Keep {
		defer os.RemoveAll(dir)
	}
	if err := copyCache(cfg.WorkDir, dir); err != nil {
		return nil, err
	}
	// A new file only: the default name is predictable, and a file or a
	// link already there (another user's, in a shared directory) is not
	// written through.
	f, err := os.OpenFile(cfg.Transcript, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("doctor: transcript: %s exists already: name a new file with --transcript", cfg.Transcript)
	}
	if err != nil {
		return nil, fmt.Errorf("doctor: transcript: %w", err)
	}
	defer f.Close()
	w, err := lingmarpc.NewTranscriptWriter(f, lingmarpc.Header{Prompts: true,
		Note: "poolgate doctor: " + filepath.Base(cfg.Command[0])}, 16<<20)
	if err != nil {
		return nil, err
	}
	r := &run{cfg: cfg, output: &ring{}}
	r.ep = worker.Endpoint{Name: "doctor", WorkDir: dir, Port: freePort(), AuxPort: freePort()}
	launcher := &supervisor.ExecLauncher{Env: cfg.Env}
	defer launcher.Close()
	if !r.start(launcher) {
		return r.results, nil
	}
	defer r.stop()
	r.checks(ctx, &tape{w: w, methods: map[string]string{}})
	return r.results, nil
}

// add records a result and prints its line.
func (r *run) add(check string, v Verdict, format string, args ...any) {
	res := Result{Check: check, Verdict: v, Detail: fmt.Sprintf(format, args...)}
	r.results = append(r.results, res)
	fmt.Fprintln(r.cfg.Out, res)
}

// start launches the worker as the pool does: the driver's argv and
// environment, its own process group.
func (r *run) start(l *supervisor.ExecLauncher) bool {
	drv := lingma.New(lingma.Config{Command: r.cfg.Command, ExtraArgs: r.cfg.Args})
	env, err := drv.Prepare(r.ep)
	if err == nil {
		err = os.WriteFile(filepath.Join(r.ep.WorkDir, checkFile), []byte(checkLine+"\n"), 0o600)
	}
	if err == nil {
		r.proc, err = l.Launch(supervisor.ProcSpec{Argv: drv.Command(r.ep), Env: env, Dir: r.ep.WorkDir,
			Log: slog.New(slog.NewTextHandler(r.output, nil))})
	}
	if err != nil {
		r.add("start", Differs, "%v", err)
		return false
	}
	return true
}

// stop asks the worker to stop, then kills its group.
func (r *run) stop() {
	_ = r.proc.Signal(syscall.SIGINT)
	select {
	case <-r.proc.Exited():
	case <-time.After(3 * time.Second):
		_ = r.proc.Signal(syscall.SIGKILL)
		<-r.proc.Exited()
	}
}

// copyCache copies from's cache/ (its regular files) into to's.
func copyCache(from, to string) error {
	if from == "" {
		return nil
	}
	src := filepath.Join(from, "cache")
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("doctor: --work-dir: %w", err)
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(to, "cache", rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return fmt.Errorf("doctor: --work-dir: %w", err)
		}
		return os.WriteFile(dst, b, 0o600)
	})
}

// freePort asks the system for a free loopback port.
func freePort() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// ring keeps the worker's last output lines.
type ring struct {
	mu    sync.Mutex
	lines [20]string
	n     int
}

func (r *ring) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines[r.n%len(r.lines)] = string(b)
	r.n++
	return len(b), nil
}

// last returns the kept lines, oldest first.
func (r *ring) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out string
	for i := max(0, r.n-len(r.lines)); i < r.n; i++ {
		out += r.lines[i%len(r.lines)]
	}
	return out
}

// ErrDiffers is Main's error when a check found the worker differs.
var ErrDiffers = errors.New("the worker differs from the evidence")
