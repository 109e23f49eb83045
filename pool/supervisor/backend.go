package supervisor

import (
	"context"
	"encoding/json"

	"github.com/poolgate/poolgate/internal/chat"
)

// The seams between the supervisor and a concrete kind of worker: a Driver
// starts and connects to one, its Backend answers health checks and runs
// turns. Drivers live in pool/lingma and pool/modelserver.

// Backend is a connected client of one running worker process. A driver's
// Connect returns one once the worker is ready; the supervisor closes it when
// the process goes away.
type Backend interface {
	// Status reports the worker's login state; it doubles as the health probe,
	// so it must answer within ctx's deadline.
	Status(ctx context.Context) (AuthState, error)
	// Start starts one turn and returns its answer, read on the caller's
	// goroutine. An error returned here happened before anything was sent
	// upstream. Cancelling ctx stops the upstream turn: the answer then
	// ends with an EventError.
	Start(ctx context.Context, t *chat.Turn) (chat.Answer, error)
	// Close drops the connection.
	Close() error
}

// ModelLister is implemented by backends that can list their models.
type ModelLister interface {
	Models(ctx context.Context) ([]chat.Model, error)
}

// RawModelLister is implemented by backends that can show the worker's own
// model payload beside the parsed list (for operators: display names,
// capability flags the pool does not read).
type RawModelLister interface {
	RawModels(ctx context.Context) (raw json.RawMessage, models []chat.Model, err error)
}

// LoginURLer is implemented by backends that log in through a browser.
type LoginURLer interface {
	LoginURL(ctx context.Context) (string, error)
}

// SessionDeleter is implemented by backends with upstream sessions.
type SessionDeleter interface {
	DeleteSession(ctx context.Context, sessionID string) error
}

// Endpoint is where a started worker listens.
type Endpoint struct {
	// Name is the instance name (for logs and errors).
	Name string
	// WorkDir is the worker's own directory.
	WorkDir string
	// Port is the worker's main port (Lingma's socket port, the HTTP port of
	// an OpenAI-compatible server).
	Port int
	// AuxPort is a second port (Lingma's --httpPort for the login callback);
	// 0 when the driver needs none.
	AuxPort int
	// Account is the account the worker runs as (for command templates).
	Account Account
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
}
