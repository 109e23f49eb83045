// Package lingma is the pool driver for the Lingma local agent (and the
// bundled simulator that speaks its protocol, shared/LINGMA.md): JSON-RPC 2.0
// with LSP-style framing over a WebSocket on the worker's socket port.
//
// The supervisor in pool starts the worker with Driver.Command and calls
// Driver.Connect until it answers; the Client it gets back is the pool.Backend
// of that worker. Chat turns are rendered into one prompt and parsed back by
// pool/textchat, since the worker's chat mode is text in, text out.
package lingma

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/lsp"
	"github.com/poolgate/poolgate/pool"
)

// Modes of chat/ask.
const (
	ModeChat  = "chat"
	ModeAgent = "agent"
)

// Config is the driver's configuration. The zero value is usable once
// Command is set; New fills the defaults.
type Config struct {
	// Command is the argv prefix that runs the worker, e.g. ["/usr/bin/Lingma"]
	// or ["/path/poolgate", "simworker"]. Default ["Lingma"], found on PATH.
	Command []string
	// ExtraArgs are appended after the standard start arguments. Default none.
	ExtraArgs []string
	// DialTimeout bounds one WebSocket dial attempt; the supervisor retries.
	// Default 1s.
	DialTimeout time.Duration
	// CallTimeout bounds each request other than a chat turn's stream
	// (initialize, auth/status, chat/ask's acknowledgement, ...), and the
	// write of each reply to a worker request. Default 5s.
	CallTimeout time.Duration
	// TurnTimeout bounds a whole chat turn, from chat/ask to chat/finish.
	// Default 120s.
	TurnTimeout time.Duration
	// ReplyTimeout is the longest silence allowed within a turn: between the
	// ask and the first message, and between two messages (chat/think counts).
	// Default 60s.
	ReplyTimeout time.Duration
	// StopTimeout bounds the best-effort chat/stop sent when a turn is
	// abandoned. Default 1s.
	StopTimeout time.Duration
	// Mode is chat/ask's mode: ModeChat (default) or ModeAgent, which also
	// sets sessionType "assistant" (a guess: the driver emulates tools in the
	// prompt either way).
	Mode string
}

func (c *Config) setDefaults() {
	if len(c.Command) == 0 {
		c.Command = []string{"Lingma"}
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = time.Second
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.TurnTimeout <= 0 {
		c.TurnTimeout = 120 * time.Second
	}
	if c.ReplyTimeout <= 0 {
		c.ReplyTimeout = 60 * time.Second
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = time.Second
	}
	if c.Mode == "" {
		c.Mode = ModeChat
	}
}

// Driver starts and connects to Lingma workers.
type Driver struct {
	cfg Config
}

var _ pool.Driver = (*Driver)(nil)

// New returns a driver with cfg's defaults filled.
func New(cfg Config) *Driver {
	cfg.setDefaults()
	return &Driver{cfg: cfg}
}

// Command returns the worker's argv for ep: Command, the standard start
// arguments, then ExtraArgs.
func (d *Driver) Command(ep pool.Endpoint) []string {
	argv := make([]string, 0, len(d.cfg.Command)+6+len(d.cfg.ExtraArgs))
	argv = append(argv, d.cfg.Command...)
	argv = append(argv,
		"start",
		"--transportType=websocket",
		"--workDir="+ep.WorkDir,
		"--socketPort="+strconv.Itoa(ep.Port),
		"--httpPort="+strconv.Itoa(ep.AuxPort),
	)
	return append(argv, d.cfg.ExtraArgs...)
}

// Connect dials the worker at ep once (within DialTimeout) and sends
// initialize. The supervisor calls it in a loop until the worker is ready.
func (d *Driver) Connect(ctx context.Context, ep pool.Endpoint) (pool.Backend, error) {
	u := "ws://127.0.0.1:" + strconv.Itoa(ep.Port)
	dctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
	conn, _, err := websocket.Dial(dctx, u, nil)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("lingma %s: dial %s: %w", ep.Name, u, err)
	}
	c := newClient(conn, d.cfg, ep.Name)
	if err := c.initialize(ctx, ep.WorkDir); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// initialize sends the LSP-style initialize request that must come first.
func (c *Client) initialize(ctx context.Context, workDir string) error {
	root := ""
	if workDir != "" {
		if abs, err := filepath.Abs(workDir); err == nil {
			workDir = abs
		}
		root = (&url.URL{Scheme: "file", Path: filepath.ToSlash(workDir)}).String()
	}
	type folder struct {
		URI  string `json:"uri"`
		Name string `json:"name"`
	}
	params := struct {
		ProcessID        *int              `json:"processId"`
		ClientInfo       map[string]string `json:"clientInfo"`
		RootURI          string            `json:"rootUri"`
		Capabilities     struct{}          `json:"capabilities"`
		WorkspaceFolders []folder          `json:"workspaceFolders"`
	}{
		ClientInfo:       map[string]string{"name": "poolgate", "version": "1"},
		RootURI:          root,
		WorkspaceFolders: []folder{},
	}
	if root != "" {
		params.WorkspaceFolders = append(params.WorkspaceFolders, folder{URI: root, Name: filepath.Base(workDir)})
	}
	return c.call(ctx, "initialize", params, nil)
}

// newRequestID mints a turn id for a Turn that carries none.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return "pg-" + hex.EncodeToString(b[:])
}

// readLimit caps one WebSocket message: a frame plus its header.
const readLimit = lsp.MaxFrame + 64<<10
