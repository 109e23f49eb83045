package supervisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/worker"
)

// How a started process is reached, as its driver's transport says
// (worker.Transport): on two loopback ports picked for each start, which
// Connect is called on until the worker answers, or on its standard input
// and output.
//
// The stdio transport (worker.TransportStdio): a worker whose driver
// speaks to it over its standard input and output. The supervisor makes
// the two pipes, hands the child its ends through the Launcher (ProcSpec's
// Stdin and Stdout) and the driver the others (Endpoint.Stdio), once per
// process; the process's standard error is drained into the log as every
// worker's output is. The driver may start more processes of the same
// worker (Endpoint.Spawn) through the same launcher.

// ready waits for the started process to answer its driver's Connect.
func (w *Worker) ready(ctx context.Context, proc Process, ep worker.Endpoint) (Process, worker.Backend, error) {
	sctx, cancel := context.WithTimeout(ctx, w.cfg.StartTimeout)
	defer cancel()
	for {
		var be worker.Backend
		var err error
		if ep.Stdio != nil {
			be, err = w.connectStdio(sctx, ep, proc)
		} else {
			actx, acancel := context.WithTimeout(sctx, 2*time.Second)
			be, err = w.driver.Connect(actx, ep)
			acancel()
		}
		if err == nil {
			return proc, be, nil
		}
		retry := time.After(200 * time.Millisecond)
		if ep.Stdio != nil {
			// The pipes are read once: a failed Connect is the start's end.
			// Its output most often ended because the process is exiting:
			// the exit, when it comes, is the failure to report (the same
			// each time, so a worker that cannot start is seen to fail).
			retry = nil
			if sctx.Err() == nil && !exitsSoon(proc) {
				w.stopProcess(proc)
				w.update(func() { w.pid = 0 })
				return nil, nil, fmt.Errorf("worker %s not ready: %w", w.cfg.Name, err)
			}
		}
		select {
		case <-proc.Exited():
			w.update(func() { w.pid = 0 })
			return nil, nil, fmt.Errorf("worker %s exited before ready: %v", w.cfg.Name, proc.Wait())
		case <-sctx.Done():
			w.stopProcess(proc)
			w.update(func() { w.pid = 0 })
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("worker %s not ready within %s: %w", w.cfg.Name, w.cfg.StartTimeout, err)
		case <-retry:
		}
	}
}

// exitsSoon reports whether proc exits within a second.
func exitsSoon(proc Process) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-proc.Exited():
		return true
	case <-t.C:
		return false
	}
}

// endpoint picks free loopback ports for this start, unless the worker is
// reached on its standard input and output.
func (w *Worker) endpoint(stdio bool) (worker.Endpoint, error) {
	if stdio {
		return worker.Endpoint{Name: w.cfg.Name, WorkDir: w.cfg.WorkDir, Account: w.cfg.Account}, nil
	}
	p1, err := freePort()
	if err != nil {
		return worker.Endpoint{}, err
	}
	p2, err := freePort()
	if err != nil {
		return worker.Endpoint{}, err
	}
	return worker.Endpoint{Name: w.cfg.Name, WorkDir: w.cfg.WorkDir, Port: p1, AuxPort: p2, Account: w.cfg.Account}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loginPort is the port of the running worker's login callback, 0 when
// none runs.
func (w *Worker) loginPort() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pid == 0 {
		return 0
	}
	return w.ep.AuxPort
}

// pipes are the two pipes of one process on a stdio transport.
type pipes struct {
	inR, inW   *os.File // the child reads inR; the driver writes inW
	outR, outW *os.File // the child writes outW; the driver reads outR
}

// newPipes makes the pipes and sets spec's ends of them.
func newPipes(spec *ProcSpec) (*pipes, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		_ = inR.Close()
		_ = inW.Close()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	spec.Stdin, spec.Stdout = inR, outW
	return &pipes{inR: inR, inW: inW, outR: outR, outW: outW}, nil
}

// launched closes the child's ends, which the child holds now (or never
// will, when the launch failed): a pipe reads EOF only once every writer
// closed it.
func (p *pipes) launched() {
	_ = p.inR.Close()
	_ = p.outW.Close()
}

// stdio is the driver's ends.
func (p *pipes) stdio() *worker.Stdio { return &worker.Stdio{In: p.inW, Out: p.outR} }

// close closes the driver's ends (once the process's life is over, or when
// the launch failed); closing what the driver closed already is harmless.
func (p *pipes) close() {
	_ = p.inW.Close()
	_ = p.outR.Close()
}

// connectStdio connects the driver to a process on a stdio transport: one
// Connect, bounded by the start timeout and cut short when the process
// exits (its output's EOF ends the driver's read too, unless a child of it
// holds the pipe).
func (w *Worker) connectStdio(sctx context.Context, ep worker.Endpoint, proc Process) (worker.Backend, error) {
	cctx, cancel := context.WithCancel(sctx)
	defer cancel()
	go func() {
		select {
		case <-proc.Exited():
			cancel()
		case <-cctx.Done():
		}
	}()
	return w.driver.Connect(cctx, ep)
}

// spawner starts more processes of this worker for its driver, with env
// (the worker's own environment) under the spawned process's own entries.
func (w *Worker) spawner(env []string) worker.Spawner {
	return func(argv, more []string) (worker.Child, error) {
		spec := ProcSpec{Argv: argv, Env: append(append([]string(nil), env...), more...), Dir: w.cfg.WorkDir,
			Log: w.log.With("spawned", argv[0])}
		p, err := newPipes(&spec)
		if err != nil {
			return nil, fmt.Errorf("spawn for worker %s: %w", w.cfg.Name, err)
		}
		proc, err := w.launcher.Launch(spec)
		p.launched()
		if err != nil {
			p.close()
			return nil, fmt.Errorf("spawn for worker %s: %w", w.cfg.Name, err)
		}
		return &child{w: w, proc: proc, pipes: p}, nil
	}
}

// child is a process a driver spawned.
type child struct {
	w     *Worker
	proc  Process
	pipes *pipes
	once  sync.Once
}

var _ worker.Child = (*child)(nil)

func (c *child) Stdio() worker.Stdio     { return *c.pipes.stdio() }
func (c *child) Exited() <-chan struct{} { return c.proc.Exited() }
func (c *child) Wait() error             { return c.proc.Wait() }

// Stop closes its input first (an agent CLI ends at the end of its input),
// then stops it as the worker's own process is stopped.
func (c *child) Stop() {
	c.once.Do(func() {
		_ = c.pipes.inW.Close()
		c.w.stopProcess(c.proc)
		c.pipes.close()
	})
}
