// Package modelserver is the pool driver for workers that are OpenAI-compatible
// HTTP servers (llama.cpp's llama-server, vLLM, another gateway, or the
// bundled simulator with --protocol=openai), one process per account.
//
// The supervisor (pool/supervisor) starts a worker with Driver.Command and
// calls Driver.Connect until its GET /v1/models answers; the Client it gets
// back is the worker.Backend of that worker. A chat turn is one POST
// /v1/chat/completions (streamed, or one JSON answer for a non-streaming
// request) carrying the whole transcript (these servers keep no sessions),
// with native tool calls passed through. The answer is parsed
// tolerantly, since servers differ in where they put usage, how they send
// tool arguments and whether they stream at all.
//
// Each client keeps its own pool of keep-alive connections for chat turns,
// sized to the per-instance concurrency so steady traffic never redials, and
// does each turn's HTTP exchange on the caller's goroutine (see conn.go).
// The driver owns the wire to one kind of worker; it must not decide which
// worker takes a turn, nor restart one.
package modelserver

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/worker"
)

// Config is the driver's configuration. New fills the defaults of zero
// fields; only Command is required.
type Config struct {
	// Command is the argv template that starts one worker. These placeholders
	// are replaced in every argument: {port} (the API port the driver talks
	// to), {auxport} (a second free port), {workdir}, {account.name} and
	// {account.username} (the account's name and login name). Example:
	// ["llama-server", "--host", "127.0.0.1", "--port", "{port}", "-m", "model.gguf"].
	// Required: there is no default.
	Command []string
	// APIKey is sent as "Authorization: Bearer <APIKey>" on every request.
	// Default "": no Authorization header.
	APIKey string
	// IdleConns is the number of keep-alive connections kept open to each
	// worker; set it to the instance's concurrency (supervisor.WorkerConfig's
	// MaxInFlight). Default 8.
	IdleConns int
	// MaxConnsPerHost caps the chat connections to one worker, idle or
	// busy; turns beyond it wait for one. Default 0: no cap, since
	// the pool's admission guard already bounds the turns in flight and a
	// hidden queue here would skew its least-busy pick.
	MaxConnsPerHost int
	// RequestTimeout bounds a whole chat turn, from sending the request to
	// the last event. Default 120s.
	RequestTimeout time.Duration
	// HeaderTimeout bounds the wait for a chat response's headers, which many
	// servers send only with the first token (after prompt processing).
	// Default 60s.
	HeaderTimeout time.Duration
	// ProbeTimeout bounds Connect's probe, Status and Models when the
	// caller's context has no earlier deadline. Default 2s.
	ProbeTimeout time.Duration
	// DialTimeout bounds one TCP connect to a worker on loopback. Default 2s.
	DialTimeout time.Duration
	// MaxRequest is the largest chat request body sent to a worker: a turn
	// that would need a larger one is refused with a *chat.TooLargeError
	// before anything is sent (bound.go). Default 16 MiB.
	MaxRequest int64
	// Models is a static model list, for servers whose /v1/models is missing
	// or odd. When set, Models returns it and any answer of /v1/models below
	// 500 counts as ready (a 5xx, such as llama-server's 503 while loading,
	// still does not). Default empty: ask the worker.
	Models []string
}

func (c *Config) setDefaults() {
	worker.Default(&c.IdleConns, 8)
	c.MaxConnsPerHost = max(c.MaxConnsPerHost, 0)
	worker.Default(&c.RequestTimeout, 120*time.Second)
	worker.Default(&c.HeaderTimeout, 60*time.Second)
	worker.Default(&c.ProbeTimeout, 2*time.Second)
	worker.Default(&c.DialTimeout, 2*time.Second)
	worker.Default(&c.MaxRequest, defaultMaxRequest)
}

// Driver starts and connects to OpenAI-compatible workers. It owns the
// probes' HTTP transport and the buffer pools that all its clients share.
type Driver struct {
	cfg Config
	hc  *http.Client
	tr  *http.Transport

	payloads sync.Pool // *payload: encoded requests
	readers  sync.Pool // *sseReader: response scanners
}

var _ worker.Driver = (*Driver)(nil)

// New returns a driver with cfg's defaults filled.
func New(cfg Config) *Driver {
	cfg.setDefaults()
	d := &Driver{cfg: cfg, tr: newTransport(cfg)}
	d.hc = &http.Client{Transport: d.tr}
	d.payloads.New = func() any { return new(payload) }
	d.readers.New = func() any { return &sseReader{r: bufio.NewReaderSize(nil, readBufSize)} }
	return d
}

// newTransport builds the transport of the health probes, which one driver
// shares across its workers. It keeps one idle connection per worker and
// ignores the proxy variables, which must never apply to loopback workers.
func newTransport(cfg Config) *http.Transport {
	dialer := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:               nil, // workers are on 127.0.0.1
		DialContext:         dialer.DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     idleTimeout,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
}

// Close drops the probes' idle connections. Call it when the pool that uses
// the driver has stopped; each client's chat connections close with it.
func (d *Driver) Close() {
	d.tr.CloseIdleConnections()
}

// Command returns the worker's argv for ep: Command with its placeholders
// expanded.
func (d *Driver) Command(ep worker.Endpoint) []string {
	if len(d.cfg.Command) == 0 {
		return nil
	}
	r := strings.NewReplacer(
		"{port}", strconv.Itoa(ep.Port),
		"{auxport}", strconv.Itoa(ep.AuxPort),
		"{workdir}", ep.WorkDir,
		"{account.name}", ep.Account.Name,
		"{account.username}", ep.Account.Username,
	)
	argv := make([]string, len(d.cfg.Command))
	for i, a := range d.cfg.Command {
		argv[i] = r.Replace(a)
	}
	return argv
}

// Connect probes the worker at ep once with GET /v1/models (within
// ProbeTimeout) and returns its client when it answers. The supervisor calls
// it in a loop until the worker is ready.
func (d *Driver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	c := newClient(d, ep.Name, "127.0.0.1:"+strconv.Itoa(ep.Port))
	if _, err := c.Status(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}
