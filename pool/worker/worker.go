// Package worker is the seam between poolgate and one kind of backend
// worker: the Driver a kind of worker implements (how to start a process
// and connect to it) and the Backend it connects (health, turns, and the
// optional operations its Capabilities name). Drivers live beside it,
// each in its own package under pool/, listed in pool/drivers;
// pool/supervisor runs the processes and the admission room and router
// above it use the backends. It holds no process, no state and no
// goroutine.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/poolgate/poolgate/internal/chat"
)

// Backend is a connected client of one running worker process. A driver's
// Connect returns one once the worker is ready; the supervisor closes it when
// the process goes away. Every backend has every method: those its
// Capabilities do not name answer ErrUnsupported.
type Backend interface {
	// Status reports the worker's login state; it doubles as the health probe,
	// so it must answer within ctx's deadline.
	Status(ctx context.Context) (AuthState, error)
	// Start starts one turn and returns its answer, read on the caller's
	// goroutine. An error returned here happened before anything was sent
	// upstream. Cancelling ctx stops the upstream turn: the answer then
	// ends with an EventError.
	Start(ctx context.Context, t *chat.Turn) (chat.Answer, error)
	// Capabilities says which optional operations the worker has.
	Capabilities() Capabilities
	// Models lists the models the worker serves (Capabilities.Models).
	Models(ctx context.Context) ([]chat.Model, error)
	// RawModels shows the worker's own model payload beside the parsed
	// list, for operators: display names, capability flags the pool does
	// not read (Capabilities.RawModels).
	RawModels(ctx context.Context) (raw json.RawMessage, models []chat.Model, err error)
	// LoginURL is the page a browser logs the worker in on
	// (Capabilities.BrowserLogin).
	LoginURL(ctx context.Context) (string, error)
	// DeleteSession frees an upstream session the worker keeps for a
	// conversation (Capabilities.Sessions).
	DeleteSession(ctx context.Context, sessionID string) error
	// Close drops the connection.
	Close() error
}

// Capabilities are the optional operations of a Backend.
type Capabilities struct {
	// Models: the worker lists its models; RawModels: it shows its own
	// payload of them too.
	Models, RawModels bool
	// BrowserLogin: the worker logs in through a browser page.
	BrowserLogin bool
	// Sessions: the worker keeps upstream sessions a follow-up turn
	// continues, and frees them on request.
	Sessions bool
}

// ErrUnsupported is the answer of an operation a backend's Capabilities do
// not name.
var ErrUnsupported = errors.New("the worker does not support this operation")

// Endpoint is where a started worker is reached: its ports, or its
// standard input and output, as its driver's Transport says.
type Endpoint struct {
	// Name is the instance name (for logs and errors).
	Name string
	// WorkDir is the worker's own directory.
	WorkDir string
	// Port is the worker's main port (the port its protocol is spoken on:
	// an RPC socket, the HTTP port of an OpenAI-compatible server); 0 on a
	// stdio transport.
	Port int
	// AuxPort is a second port (for instance a login callback's);
	// 0 when the driver needs none.
	AuxPort int
	// Account is the account the worker runs as (for command templates).
	Account Account
	// Stdio is the started process's standard input and output, handed
	// to Connect (TransportStdio only; nil otherwise, and in Command and
	// Prepare, which run before the process starts).
	Stdio *Stdio
	// Spawn starts another process for this worker, beside the one the
	// supervisor runs (TransportStdio only; nil otherwise).
	Spawn Spawner
}

// Transport is how a driver reaches its started worker processes. It
// comes with the driver (Transporter), so a kind that needs a new one
// changes neither the supervisor's callers nor the router.
type Transport uint8

// Transports.
const (
	// TransportPorts: each start gets two free loopback ports
	// (Endpoint.Port and AuxPort) that the worker listens on, and the
	// supervisor calls Connect until the worker answers there: Lingma's
	// socket, a model server's HTTP URL. The process's output goes to the
	// log. The default.
	TransportPorts Transport = iota
	// TransportStdio: the process's standard input and output are the
	// driver's (Endpoint.Stdio), and only its standard error goes to the
	// log; Connect is called once per process, bounded by the start
	// timeout, since the pipes cannot be opened twice. An agent CLI that
	// speaks JSON lines is reached this way.
	TransportStdio
)

// Transporter is a Driver whose workers are not reached on ports.
type Transporter interface {
	// Transport is how the driver's workers are reached.
	Transport() Transport
}

// TransportOf is d's transport: what its Transport method says, else
// TransportPorts.
func TransportOf(d Driver) Transport {
	if t, ok := d.(Transporter); ok {
		return t.Transport()
	}
	return TransportPorts
}

// ArgsPlacer is a Driver whose Command places the account's Args itself,
// because not every command it starts is the worker (qoder's device login
// runs `qodercli login`, which refuses the session's options). The
// supervisor appends an account's Args to any other driver's command.
type ArgsPlacer interface {
	Driver
	// PlacesArgs is a marker: the Command of this driver holds
	// Endpoint.Account.Args wherever they belong.
	PlacesArgs()
}

// Argv is the argv that starts a worker at ep: d's command with the
// account's Args, unless d places them itself.
func Argv(d Driver, ep Endpoint) []string {
	argv := d.Command(ep)
	if _, ok := d.(ArgsPlacer); ok {
		return argv
	}
	return append(argv, ep.Account.Args...)
}

// Stdio is one process's standard input and output, as its driver gets
// them. The supervisor closes both once the process's life is over; the
// driver may close In sooner, to end the process's input.
type Stdio struct {
	// In is the process's standard input.
	In io.WriteCloser
	// Out is the process's standard output; reading it ends (EOF) once
	// the process and its children have exited.
	Out io.ReadCloser
}

// Spawner starts another process of a worker (an agent CLI's second
// session, its login or status command), through the supervisor's
// launcher: in the worker's directory, with the worker's environment (its
// driver's Prepare entries and the account's) and env after it (a later
// entry wins), its standard error in the worker's log. argv is the whole
// command line. The driver owns what it spawned and stops it; nothing
// outlives poolgate, as for the worker's own process.
type Spawner func(argv, env []string) (Child, error)

// Child is a process a driver spawned.
type Child interface {
	// Stdio is its standard input and output.
	Stdio() Stdio
	// Exited is closed once it has exited.
	Exited() <-chan struct{}
	// Wait waits for it to exit and returns its exit error.
	Wait() error
	// Stop ends it (an interrupt, a bounded wait, then a kill of its
	// whole process group) and closes its pipes; safe to call twice.
	Stop()
}

// Driver knows how to launch and talk to one kind of worker.
type Driver interface {
	// Command returns the argv that starts a worker at ep.
	Command(ep Endpoint) []string
	// Connect waits until the worker at ep answers and returns a client; it
	// returns when ctx ends. The supervisor calls it in a loop until the start
	// timeout, so one call may fail fast.
	Connect(ctx context.Context, ep Endpoint) (Backend, error)
}

// Preparer is a Driver whose worker needs more than its argv: directories
// and environment variables of its own, made before each start.
type Preparer interface {
	// Prepare makes what the worker at ep needs and returns the
	// environment entries (KEY=VALUE) its process gets over the base
	// environment; the account's own entries come after and win.
	Prepare(ep Endpoint) ([]string, error)
}

// AuthState is a worker's login state as its backend reports it.
type AuthState struct {
	LoggedIn bool
	// Account is the upstream account name or id, when known.
	Account string
}

// Account is one upstream account a worker runs as.
type Account struct {
	Name     string
	Username string
	// Password is never logged nor shown.
	Password string
	// Env is extra environment for this account's worker (KEY=VALUE).
	Env []string
	// Args are extra worker arguments for this account only.
	Args []string
	// Record asks the driver to write a transcript of this worker's turns
	// (a driver's record setting, for one account).
	Record bool
}
