package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"github.com/poolgate/poolgate/pool/worker"
)

// Process is one started worker process group.
type Process interface {
	// Pid is the process id (also its process group id).
	Pid() int
	// Wait blocks until the process exited and returns its exit error. It
	// may be called from several goroutines; all see the same result.
	Wait() error
	// Exited is closed once the process has exited.
	Exited() <-chan struct{}
	// Signal sends sig to the whole process group.
	Signal(sig syscall.Signal) error
}

// Launcher starts worker processes. The real one is ExecLauncher; tests
// pass one that starts no real process, so the supervisor's whole life cycle
// runs against fakes.
type Launcher interface {
	Launch(spec ProcSpec) (Process, error)
}

// ProcSpec is what to start.
type ProcSpec struct {
	Argv []string
	// Env is added to the launcher's base environment.
	Env []string
	Dir string
	// Log receives the process's stdout and stderr, a line at a time.
	Log *slog.Logger
	// Lines, when not nil, is handed each of those lines too.
	Lines func(line string)
	// Stdin and Stdout, when set, are the process's standard input and
	// output (a stdio transport's pipe ends, handed to the child as they
	// are); Log then receives only its standard error. Nil: no input, and
	// the output goes to Log.
	Stdin  io.Reader
	Stdout io.Writer
}

// procEnv is the process's own environment: what the driver prepares for
// it (a worker.Preparer's), then the account's entries, which win.
func (w *Worker) procEnv(ep worker.Endpoint) ([]string, error) {
	p, ok := w.driver.(worker.Preparer)
	if !ok {
		return w.cfg.Account.Env, nil
	}
	env, err := p.Prepare(ep)
	if err != nil {
		return nil, err
	}
	return append(env, w.cfg.Account.Env...), nil
}

// ExecLauncher starts processes with os/exec, each in its own process group
// so a kill takes the whole tree, and with a parent-death signal so workers
// never outlive a poolgate that was killed outright.
//
// Linux delivers the parent-death signal when the *thread* that forked the
// child exits, so all forks happen on one goroutine locked to its OS thread
// until Close (golang/go#27505). Close it only after every process it started
// has exited: its thread ends then.
type ExecLauncher struct {
	// Env is the base environment of every worker (the daemon passes an allowlist
	// of its own: paths, locale, proxies); ProcSpec.Env is added. Nothing
	// else is inherited, so a worker never sees the gateway's secrets.
	Env []string

	once   sync.Once
	mu     sync.Mutex
	closed bool
	reqs   chan launchReq
	done   chan struct{}
}

// Close ends the spawner goroutine (and its thread) and waits for it.
func (l *ExecLauncher) Close() {
	l.init()
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.reqs)
	}
	l.mu.Unlock()
	<-l.done
}

func (l *ExecLauncher) init() {
	l.once.Do(func() {
		l.reqs = make(chan launchReq)
		l.done = make(chan struct{})
		go func() {
			defer close(l.done)
			// No UnlockOSThread: the thread exits with the goroutine.
			runtime.LockOSThread()
			for r := range l.reqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
}

type launchReq struct {
	cmd  *exec.Cmd
	done chan error
}

var _ Launcher = (*ExecLauncher)(nil)

// Launch starts spec.
func (l *ExecLauncher) Launch(spec ProcSpec) (Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("launch: empty command")
	}
	path, err := exec.LookPath(spec.Argv[0])
	if err != nil {
		return nil, &StartError{Argv: spec.Argv, Err: err, Hint: "set POOLGATE_WORKER_BIN to the worker binary's path"}
	}
	cmd := exec.Command(path, spec.Argv[1:]...)
	cmd.Dir = spec.Dir
	// Never nil: a nil Env would hand the child this process's whole
	// environment.
	env := make([]string, 0, len(l.Env)+len(spec.Env))
	cmd.Env = append(append(env, l.Env...), spec.Env...)
	lw := &lineLogger{log: spec.Log, lines: spec.Lines}
	cmd.Stdout, cmd.Stderr = lw, lw
	if spec.Stdin != nil {
		cmd.Stdin = spec.Stdin
	}
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	l.init()
	done := make(chan error, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, &StartError{Argv: spec.Argv, Err: errors.New("launcher closed")}
	}
	l.reqs <- launchReq{cmd: cmd, done: done}
	l.mu.Unlock()
	if err := <-done; err != nil {
		return nil, &StartError{Argv: spec.Argv, Err: err}
	}
	p := &execProcess{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		lw.flush()
		close(p.exited)
	}()
	return p, nil
}

// StartError says a worker process could not be started and what to fix.
type StartError struct {
	Argv []string
	Err  error
	Hint string
}

func (e *StartError) Error() string {
	s := fmt.Sprintf("start %q: %v", e.Argv[0], e.Err)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *StartError) Unwrap() error { return e.Err }

type execProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func (p *execProcess) Pid() int                { return p.cmd.Process.Pid }
func (p *execProcess) Exited() <-chan struct{} { return p.exited }

func (p *execProcess) Wait() error {
	<-p.exited
	return p.err
}

func (p *execProcess) Signal(sig syscall.Signal) error {
	err := syscall.Kill(-p.cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil // already gone
	}
	return err
}

// lineLogger turns a process's output into one log record per line.
type lineLogger struct {
	mu    sync.Mutex
	log   *slog.Logger
	lines func(string) // may be nil
	buf   []byte
}

func (w *lineLogger) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a runaway line: log what we have
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
	return len(b), nil
}

func (w *lineLogger) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(w.buf)
		w.buf = nil
	}
}

func (w *lineLogger) emit(line []byte) {
	line = bytes.TrimRight(line, "\r")
	if len(line) == 0 {
		return
	}
	if w.lines != nil {
		w.lines(string(line))
	}
	if w.log != nil {
		w.log.Info(string(line), "source", "worker")
	}
}

var _ io.Writer = (*lineLogger)(nil)
