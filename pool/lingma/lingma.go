// Package lingma is the pool driver for the Lingma local agent (and the
// bundled simulator that speaks its protocol): JSON-RPC 2.0 with LSP-style
// framing over a WebSocket on the worker's socket port. What the driver
// relies on of that unpublished protocol, and what is an assumption, is
// written down in docs/lingma-protocol.md.
//
// The supervisor (pool/supervisor) starts the worker with Driver.Command
// and calls Driver.Connect until it answers; the Client it gets back is the
// worker.Backend of that worker. Chat turns are rendered into one prompt
// and parsed back by pool/textchat, since the worker's chat mode is text in,
// text out. The driver owns one worker's connection; it must not decide
// which worker takes a turn, nor restart one.
package lingma

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/worker"
)

// Modes of chat/ask. A plain chat was seen on the wire as "normal" (the
// worker logs "ChatMode: normal") and, in an earlier capture, as "chat";
// the plugin's shapes name "chat", "edit" and "agent".
const (
	ModeNormal = "normal"
	ModeChat   = "chat"
	ModeAgent  = "agent"
)

// What chat/ask's chatContext holds.
const (
	// ContextNone sends null, as the minimal request seen on the wire does.
	ContextNone = "none"
	// ContextPrompt repeats the prompt in chatContext.text.
	ContextPrompt = "prompt"
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
	// Default 30 minutes: a coding agent asking for a large file runs for
	// minutes, and a stuck worker is what ReplyTimeout detects.
	TurnTimeout time.Duration
	// ReplyTimeout is the longest silence allowed within a turn: between the
	// ask and the first message, and between two messages (chat/think and
	// tool events count). Default 2 minutes.
	ReplyTimeout time.Duration
	// StopTimeout bounds the best-effort chat/stop sent when a turn is
	// abandoned. Default 1s.
	StopTimeout time.Duration
	// Mode is chat/ask's mode for turns that do not ask for the agent:
	// ModeNormal (default: the live capture's), ModeChat or ModeAgent. A
	// turn with tools, tool history or an agent model name (chat.Turn.Agent)
	// always goes in ModeAgent.
	Mode string
	// AgentSessionType is chat/ask's sessionType in agent mode (a plain
	// turn's is "chat", as seen on the wire). The plugin's values are
	// chat, assistant, developer and inline; which one its agent mode
	// pairs with is not in a capture. Default "assistant".
	AgentSessionType string
	// Reuse is which upstream sessions a follow-up continues (sending only
	// the new messages): ReuseControlled (default) or ReuseChatOnly. A
	// session that may not be continued is deleted as its turn ends, and
	// the follow-up starts a new one with the whole conversation.
	Reuse string
	// ChatContext is what chat/ask's chatContext holds: ContextNone
	// (default: null, as on the wire) or ContextPrompt (the prompt again,
	// which doubles what a turn sends).
	ChatContext string
	// ToolMode is how offered tools reach the worker: ToolsEmulated (default)
	// renders them into the prompt and parses calls from the answer's text;
	// ToolsNative passes them in chat/ask's extra.toolConfig in agent mode
	// and turns the worker's tool/invoke requests into calls (the text
	// parser stays as the fallback); ToolsAuto is native when the worker's
	// initialize result advertises capabilities.toolInvoke.
	ToolMode string
	// NoIsolation turns off each worker's home of its own. By default a
	// worker's HOME, TMPDIR and XDG_RUNTIME_DIR are home/, tmp/ and run/
	// under its work dir, so that what it keeps outside the work dir (an
	// IDE's shared-client cache, an IPC socket under the home) is not
	// shared by two workers on one host; whether the real worker needs
	// this is not known. Default false: isolated.
	NoIsolation bool
	// DedicatedDomain is an enterprise endpoint URL. Before each login URL
	// is generated the worker's endpoint is read (config/getEndpoint) and
	// switched to it (config/updateEndpoint) when it differs. Default none.
	DedicatedDomain string
	// ToolSettle is how long a turn waits, without a message, for
	// chat/finish after the worker invoked a tool natively; a worker that
	// waits for the result instead of finishing is then stopped and the turn
	// ends with its calls. A chat/finish ends the turn at once; no other
	// message says a call is complete. The wait exists because what the real
	// binary does after an acknowledged tool/invoke is not publicly
	// documented (the bundled simulator finishes at once). Default 3s.
	ToolSettle time.Duration
	// RateLimitText matches the error text of a turn that failed because
	// the account is throttled (a rate limit, the pool cools the worker
	// down). Default lingmarpc.DefaultRateLimitText.
	RateLimitText *regexp.Regexp
	// LoginText matches the error text of a turn refused for a lost login
	// (the pool checks the worker's login). Default
	// lingmarpc.DefaultLoginText.
	LoginText *regexp.Regexp
	// Record says which workers write a transcript of each turn, and
	// where. Default: none.
	Record RecordConfig
	// MaxFrame is the largest frame (Content-Length header and JSON-RPC
	// message, one WebSocket message) sent to the worker: a turn that would
	// need a larger one is refused before anything is sent (bound.go).
	// What the real binary accepts is not publicly known; the bundled
	// simulator accepts lingmarpc.MaxFrame, the default.
	MaxFrame int64
	// Logger receives the driver's warnings (refused tool calls). Default
	// slog.Default().
	Logger *slog.Logger
}

// Reuse policies: which upstream sessions a follow-up turn may continue.
const (
	// ReuseControlled continues a session only while it holds nothing but
	// what the gateway sent and the worker's answers to it: plain turns
	// and turns with emulated tools, in which the worker ran none of its
	// own tools. A turn whose tools went natively, or in which the worker
	// ran its own tool loop, ends its session.
	ReuseControlled = "controlled"
	// ReuseChatOnly continues only turns in a plain (non-agent) mode
	// without tools, as the Python gateway did.
	ReuseChatOnly = "chat-only"
)

// Tool modes.
const (
	ToolsEmulated = "emulated"
	ToolsNative   = "native"
	ToolsAuto     = "auto"
)

func (c *Config) setDefaults() {
	if len(c.Command) == 0 {
		c.Command = []string{"Lingma"}
	}
	worker.Default(&c.DialTimeout, time.Second)
	worker.Default(&c.CallTimeout, 5*time.Second)
	worker.Default(&c.TurnTimeout, 30*time.Minute)
	worker.Default(&c.ReplyTimeout, 2*time.Minute)
	worker.Default(&c.ToolSettle, 3*time.Second)
	worker.Default(&c.StopTimeout, time.Second)
	c.Mode = cmp.Or(c.Mode, ModeNormal)
	c.AgentSessionType = cmp.Or(c.AgentSessionType, "assistant")
	c.ChatContext = cmp.Or(c.ChatContext, ContextNone)
	c.Reuse = cmp.Or(c.Reuse, ReuseControlled)
	c.ToolMode = cmp.Or(c.ToolMode, ToolsEmulated)
	if c.RateLimitText == nil {
		c.RateLimitText = regexp.MustCompile(lingmarpc.DefaultRateLimitText)
	}
	if c.LoginText == nil {
		c.LoginText = regexp.MustCompile(lingmarpc.DefaultLoginText)
	}
	worker.Default(&c.MaxFrame, lingmarpc.MaxFrame)
	c.Logger = cmp.Or(c.Logger, slog.Default())
	worker.Default(&c.Record.MaxBytes, 1<<20)
	worker.Default(&c.Record.Keep, 100)
}

// Driver starts and connects to Lingma workers.
type Driver struct {
	cfg Config
}

var _ worker.Driver = (*Driver)(nil)

// New returns a driver with cfg's defaults filled.
func New(cfg Config) *Driver {
	cfg.setDefaults()
	return &Driver{cfg: cfg}
}

var _ worker.Preparer = (*Driver)(nil)

// Prepare makes the worker's home, temp and runtime dirs under its work
// dir and returns the variables that point it there (see NoIsolation).
func (d *Driver) Prepare(ep worker.Endpoint) ([]string, error) {
	if d.cfg.NoIsolation || ep.WorkDir == "" {
		return nil, nil
	}
	dir, err := filepath.Abs(ep.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("lingma %s: work dir: %w", ep.Name, err)
	}
	env := make([]string, 0, 3)
	for _, v := range [...]struct{ key, sub string }{{"HOME", "home"}, {"TMPDIR", "tmp"}, {"XDG_RUNTIME_DIR", "run"}} {
		p := filepath.Join(dir, v.sub)
		if err := os.MkdirAll(p, 0o700); err != nil {
			return nil, fmt.Errorf("lingma %s: %w", ep.Name, err)
		}
		env = append(env, v.key+"="+p)
	}
	return env, nil
}

// Command returns the worker's argv for ep: Command, the standard start
// arguments, then ExtraArgs.
func (d *Driver) Command(ep worker.Endpoint) []string {
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
func (d *Driver) Connect(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	u := "ws://127.0.0.1:" + strconv.Itoa(ep.Port)
	dctx, cancel := context.WithTimeout(ctx, d.cfg.DialTimeout)
	conn, _, err := websocket.Dial(dctx, u, nil)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("lingma %s: dial %s: %w", ep.Name, u, err)
	}
	rec, err := d.recorder(ep)
	if err != nil {
		_ = conn.CloseNow()
		return nil, err
	}
	c := newClient(conn, d.cfg, ep.Name, rec)
	caps, err := c.initialize(ctx, ep.WorkDir)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	switch d.cfg.ToolMode {
	case ToolsNative:
		c.native = true
	case ToolsAuto:
		c.native = caps.ToolInvoke
	}
	return c, nil
}

// recorder is the transcript writer of the worker at ep, or nil when it
// records nothing.
func (d *Driver) recorder(ep worker.Endpoint) (*recorder, error) {
	if !d.cfg.Record.All && !ep.Account.Record {
		return nil, nil
	}
	dir := filepath.Join(ep.WorkDir, "transcripts")
	if d.cfg.Record.Dir != "" {
		dir = filepath.Join(d.cfg.Record.Dir, ep.Name)
	}
	return newRecorder(dir, d.cfg.Record, ep.Name, d.cfg.Logger)
}

// serverCaps are the initialize result's capabilities the driver reads.
// toolInvoke is not documented for the real binary: a worker that says
// nothing gets the emulated tools in auto mode.
type serverCaps struct {
	ToolInvoke bool `json:"toolInvoke"`
}

// initialize sends the LSP-style initialize request that must come first.
func (c *Client) initialize(ctx context.Context, workDir string) (serverCaps, error) {
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
	var raw json.RawMessage
	if err := c.call(ctx, "initialize", params, &raw); err != nil {
		return serverCaps{}, err
	}
	// A result of another shape advertises nothing the driver reads.
	var res struct {
		Capabilities serverCaps `json:"capabilities"`
	}
	_ = json.Unmarshal(raw, &res)
	return res.Capabilities, nil
}

// newRequestID mints a turn id for a Turn that carries none.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
	return "pg-" + hex.EncodeToString(b[:])
}

// readLimit caps one WebSocket message: a frame plus its header.
const readLimit = lingmarpc.MaxFrame + 64<<10
