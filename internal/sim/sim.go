// Package sim is simworker, poolgate's bundled reference worker. It runs as its
// own process (cmd/simworker, or `poolgate simworker`) and the supervisor in
// pool spawns it exactly like the real backends, so every gateway test drives
// real drivers over real sockets. It never runs inside the gateway.
//
// # Modes
//
// `agent-cli DIALECT` plays an agent CLI on stdio (agent.go).
//
// --protocol=lingma (default) speaks the Lingma local agent protocol
// (docs/lingma-protocol.md): JSON-RPC 2.0 framed LSP-style over a WebSocket on
// --socketPort, with the login page, the auth callback and /sim/stats on
// --httpPort. --protocol=openai serves an OpenAI-compatible API
// (/v1/models, /v1/chat/completions with native tool calls) and /sim/stats on
// --httpPort (or --port); it has no login.
//
// # Lingma choices the protocol leaves open
//
//   - Replies that can fail are {success, errorCode, errorMessage} (the
//     shape chat/ask's reply has on the wire). A chat/ask while logged out
//     is refused that way, with the worker's own log words ("No cached
//     user info, please login."); no turn starts.
//   - chat/answer, chat/think and chat/finish are requests with an id; the
//     next one is sent only after the client replied. No reply within
//     --reply-timeout (10s) logs "no response from client" and abandons the
//     turn without a finish.
//   - chat/finish carries the plugin's fields (requestId, sessionId,
//     reason, statusCode, fullAnswer, extra) and, on an error, errorMessage.
//     Status codes are the plugin's: 200 ("success", or "cancelled" after
//     chat/stop), 408 "error" ([[sim:timeout]]) and 500 "error" (every other
//     failure, an unknown session with isReply among them). The rate-limit
//     fault is a 500 whose text says so, plus retryAfter in whole seconds:
//     the one field no capture shows, sent because no capture shows what a
//     throttled worker sends at all.
//   - A chat/ask with a non-empty unknown sessionId and isReply false opens a
//     session with that id; with isReply true it finishes 500 "session not
//     found".
//   - config/getEndpoint answers the endpoint last set ("" at start);
//     config/updateEndpoint takes an http(s) URL. With --require-endpoint,
//     login/generateUrl fails until the endpoint is that URL.
//   - With --native-tools, initialize advertises capabilities.toolInvoke and
//     an agent-mode ask with extra.toolConfig answers a tool call as a
//     tool/invoke request {requestId, sessionId, toolCallId, name,
//     parameters} per call, then a successful chat/finish with no text
//     (with [[sim:await-results]], no finish: the turn waits for chat/stop).
//   - chat/ask takes the modes the evidence shows ("normal", "chat", "edit",
//     "agent", or none) and the plugin's session types (chat, assistant,
//     developer, inline); any other is refused with success false.
//   - A turn sends chat/process_step_callback (step_start, then step_end
//     before its finish) and, on a session's first turn,
//     session/title/update, each a request the client must answer.
//   - In agent mode, [[sim:builtin=NAME]] (or --builtin-tool) asks the
//     client to run the worker's own tool NAME: tool/invoke {requestId,
//     sessionId, toolCallId, name, parameters, async}. The result is the
//     plugin's ToolInvokeResponse (success, errorMessage, result): in the
//     reply, or after an acknowledgement as a tool/invokeResult request,
//     answered {errorCode: null, errorMessage: null}. A JSON-RPC error in its
//     place fails the turn; no result within --reply-timeout abandons it.
//   - --replay=FILE plays a transcript (internal/lingmarpc's format) as the
//     worker: setup calls are answered as recorded whenever they come, every
//     other message must be the transcript's next, the worker's recorded
//     messages follow it; a difference is a JSON-RPC error (and a 500
//     finish of the turn in progress) naming it.
//   - --deviate=NAME,... makes the worker differ from the evidence in the
//     ways Deviations lists, for the tests of a check of a real worker.
//   - [[sim:logout]] deletes cache/id and cache/user and still answers the
//     turn normally; the next auth/status reports status 1.
//
// # Answers
//
// Answers are deterministic. The prompt is read as the sections of
// docs/prompt-contract.md (bare text is one user section). Without tools the
// answer is "You said: " plus the last user text with directives removed.
// With tools it follows the contract's "What the simulator does with it".
//
// # Directives
//
// Directives are case-sensitive tokens in the prompt. They count in system
// sections and in the sections from the last user section on, so a replayed
// conversation does not fire an earlier turn's fault again (for a bare prompt
// that is the whole text). Flags of the same name set process-wide defaults.
//
//	[[sim:whoami]]          answer "session=S turn=N reply=B sections=K chars=L" (L in bytes)
//	[[sim:ask]]             answer "mode=M session_type=T model=K tools=W endpoint=E context=C" (the ask's
//	                        settings; W is none, prompt:N or native:N; C null or text:N) (lingma)
//	[[sim:env]]             answer "home=H tmpdir=T runtime=R cwd=C" (the process's HOME, TMPDIR,
//	                        XDG_RUNTIME_DIR and working dir) (lingma)
//	[[sim:words=N]]         pad a text answer with filler words to N words
//	[[sim:chunks=N]]        exactly N deltas (default: one per word)
//	[[sim:delay=200ms]]     wait before the first delta
//	[[sim:chunk-delay=5ms]] wait between deltas
//	[[sim:think]]           send chat/think before the first delta (lingma)
//	[[sim:tool_code]]       answer a tool call in the tool_code form (lingma)
//	[[sim:error]]           fail with 500 before any delta
//	[[sim:timeout]]         fail with 408 (the upstream timed out) before any delta
//	[[sim:error-after=N]]   fail with 500 after N deltas
//	[[sim:ratelimit]]       fail with 500 "rate limited", retryAfter 1s; [[sim:ratelimit=2s]] sets it
//	[[sim:crash]]           the process exits (status 3) right after the first delta
//	[[sim:hang]]            accept and never answer until stopped or disconnected
//	[[sim:await-results]]   after native tool/invoke calls, wait until stopped instead of finishing (lingma)
//	[[sim:logout]]          delete the credentials, then answer normally (lingma)
//	[[sim:builtin=NAME]]    in agent mode, have the client run the worker's own tool NAME first (lingma)
//	[[sim:builtin-async=NAME]] the same, asynchronously (tool/invokeResult) (lingma)
//	[[sim:off-model]]       print a message of an unknown type and a line that is not JSON first (agent-cli)
//
// In openai mode an error after N deltas is an in-stream {"error": ...} event
// with no [DONE] (a 500 for a non-stream request), a rate limit is HTTP 429
// with Retry-After, and a hang holds the request until the client goes away.
package sim

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Protocols a simworker can speak.
const (
	ProtocolLingma = "lingma"
	ProtocolOpenAI = "openai"
)

// Login page variants.
const (
	LoginPlain   = "plain"
	LoginTwoStep = "twostep"
	LoginDelayed = "delayed"
	LoginOrg     = "org"
)

// Config is one simworker's settings, normally parsed from its command line
// by ParseArgs.
type Config struct {
	// Protocol is ProtocolLingma (default) or ProtocolOpenAI.
	Protocol string
	// WorkDir holds cache/id and cache/user; required for lingma.
	WorkDir string
	// SocketPort is the lingma WebSocket port on 127.0.0.1; 0 picks a free one.
	SocketPort int
	// HTTPPort is the login/callback port (lingma) or the API port (openai);
	// 0 picks a free one.
	HTTPPort int
	// Accounts maps valid usernames to passwords; default demo:demo.
	Accounts map[string]string
	// LoggedIn, when set, is the username whose credentials are written at
	// start. Default "": keep whatever the work dir holds.
	LoggedIn string
	// LoginPage is the login page variant; default LoginPlain.
	LoginPage string
	// LoginURL, when set, is the login URL handed out instead of this
	// worker's own page: a compromised or squatting worker, for tests.
	LoginURL string
	// NativeTools makes the Lingma mode speak native tools: initialize
	// advertises capabilities.toolInvoke, and an agent-mode ask that passes
	// extra.toolConfig is answered with tool/invoke requests instead of a
	// tool call in the text. Default off (tools only in the prompt).
	NativeTools bool
	// Deviate names the ways the worker differs from the evidence
	// (Deviations), for tests of a check of a real worker. Default none.
	Deviate map[string]bool
	// Replay, when set, is a transcript the worker plays instead of
	// answering (lingma protocol): it checks what the client sends against
	// it and answers as recorded. Default none.
	Replay string
	// BuiltinTool, when set, is a built-in tool every agent-mode turn asks
	// the client to run (tool/invoke) before it answers, as a worker whose
	// agent loop uses its own tools does; BuiltinAsync makes the call
	// asynchronous (its result comes as tool/invokeResult). A turn's
	// [[sim:builtin=NAME]] directives replace it. Default none.
	BuiltinTool  string
	BuiltinAsync bool
	// RequireEndpoint, when set, is the only endpoint at which a login URL
	// is handed out (an enterprise account on a dedicated domain); until
	// config/updateEndpoint sets it, login/generateUrl fails.
	RequireEndpoint string
	// Faults are process-wide fault defaults that directives override.
	Faults Faults
	// ModelKeys are the model keys offered; default dashscope_qwen3_coder, kmodel.
	ModelKeys []string
	// ReplyTimeout bounds the wait for the client's reply to each
	// server-to-client request; default 10s.
	ReplyTimeout time.Duration
	// Exit ends the process for [[sim:crash]]; default os.Exit. A test sets it
	// to observe the crash; when it returns, the turn's connection is dropped.
	Exit func(code int)
}

// Faults are the process-wide fault defaults.
type Faults struct {
	// Delay is the wait before the first delta; default 0.
	Delay time.Duration
	// ChunkDelay is the wait between deltas; default 0.
	ChunkDelay time.Duration
	// Chunks is the number of deltas per answer; default -1, one per word.
	Chunks int
	// FailRate is the probability (0..1) that a turn fails with 500; default 0.
	FailRate float64
	// RatelimitEvery makes every Nth ask fail with 429; default 0 (never).
	RatelimitEvery int
	// TimeScale multiplies every wait the directives and the flags ask for
	// (delays, gaps between deltas), so a test can play a turn of several
	// minutes in seconds; default 1.
	TimeScale float64
}

func (c *Config) setDefaults() {
	if c.Protocol == "" {
		c.Protocol = ProtocolLingma
	}
	if len(c.Accounts) == 0 {
		c.Accounts = map[string]string{"demo": "demo"}
	}
	if c.LoginPage == "" {
		c.LoginPage = LoginPlain
	}
	if c.Faults.TimeScale == 0 {
		c.Faults.TimeScale = 1
	}
	if len(c.ModelKeys) == 0 {
		c.ModelKeys = []string{"dashscope_qwen3_coder", "kmodel"}
	}
	if c.ReplyTimeout <= 0 {
		c.ReplyTimeout = 10 * time.Second
	}
	if c.Exit == nil {
		c.Exit = os.Exit
	}
}

func (c *Config) validate() error {
	switch c.Protocol {
	case ProtocolLingma:
		if c.WorkDir == "" {
			return errors.New("--workDir is required for --protocol=lingma")
		}
	case ProtocolOpenAI:
	default:
		return fmt.Errorf("--protocol=%q: want lingma or openai", c.Protocol)
	}
	switch c.LoginPage {
	case LoginPlain, LoginTwoStep, LoginDelayed, LoginOrg:
	default:
		return fmt.Errorf("--login-page=%q: want plain, twostep, delayed or org", c.LoginPage)
	}
	if c.Faults.TimeScale <= 0 {
		return fmt.Errorf("--time-scale=%v: want > 0", c.Faults.TimeScale)
	}
	if c.Faults.FailRate < 0 || c.Faults.FailRate > 1 {
		return fmt.Errorf("--fail-rate=%v: want 0..1", c.Faults.FailRate)
	}
	if c.LoggedIn != "" {
		if _, ok := c.Accounts[c.LoggedIn]; !ok {
			return fmt.Errorf("--logged-in=%s: not one of --accounts", c.LoggedIn)
		}
	}
	return nil
}

// Main runs the simulator with the command line after the program name, e.g.
// ["start", "--transportType=websocket", "--workDir=D", "--socketPort=1",
// "--httpPort=2"]. It returns when ctx ends (clean shutdown) or on a fatal
// error. getenv is os.Getenv in production.
func Main(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	_ = stdout // everything goes to the log on stderr
	cfg, err := ParseArgs(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	s, err := New(cfg, log)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// loggedInFlag is --logged-in: a boolean that also takes a username.
type loggedInFlag struct{ v *string }

func (f loggedInFlag) String() string {
	if f.v == nil {
		return ""
	}
	return *f.v
}
func (f loggedInFlag) Set(s string) error { *f.v = s; return nil }
func (f loggedInFlag) IsBoolFlag() bool   { return true }

// ParseArgs turns a simworker command line (after the program name) into a
// Config with defaults filled and validated. Usage errors go to usage.
// SIMWORKER_ACCOUNTS (via getenv) supplies --accounts when the flag is absent.
func ParseArgs(args []string, getenv func(string) string, usage io.Writer) (Config, error) {
	if len(args) > 0 && args[0] == "start" {
		args = args[1:]
	}
	var (
		cfg                 Config
		transport, accounts string
		loggedIn, modelKeys string
		deviate             string
		port                int
	)
	fs := flag.NewFlagSet("simworker", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&cfg.Protocol, "protocol", ProtocolLingma, "lingma or openai")
	fs.StringVar(&transport, "transportType", "websocket", "transport (only websocket)")
	fs.StringVar(&cfg.WorkDir, "workDir", "", "work dir holding cache/id and cache/user")
	fs.IntVar(&cfg.SocketPort, "socketPort", 0, "lingma WebSocket port")
	fs.IntVar(&cfg.HTTPPort, "httpPort", 0, "login/callback port (lingma) or API port (openai)")
	fs.IntVar(&port, "port", 0, "alias of --httpPort")
	fs.StringVar(&accounts, "accounts", "", "valid logins user:pass,... (default demo:demo)")
	fs.Var(loggedInFlag{&loggedIn}, "logged-in", "start logged in (as the first account, or =USER)")
	fs.StringVar(&cfg.LoginPage, "login-page", LoginPlain, "plain, twostep, delayed or org")
	fs.StringVar(&cfg.LoginURL, "login-url", "", "hand out this login URL instead of the worker's own page (a fault)")
	fs.BoolVar(&cfg.NativeTools, "native-tools", false, "advertise and answer with native tool/invoke calls in agent mode")
	fs.StringVar(&cfg.RequireEndpoint, "require-endpoint", "", "hand out login URLs only once the endpoint is this URL")
	fs.StringVar(&deviate, "deviate", "", "differ from the evidence: some of "+strings.Join(Deviations, ","))
	fs.StringVar(&cfg.Replay, "replay", "", "play this transcript as the worker, checking what the client sends against it")
	fs.StringVar(&cfg.BuiltinTool, "builtin-tool", "", "in agent mode, ask the client to run this built-in tool (tool/invoke) in every turn")
	fs.BoolVar(&cfg.BuiltinAsync, "builtin-async", false, "make --builtin-tool's calls asynchronous (result by tool/invokeResult)")
	fs.DurationVar(&cfg.Faults.Delay, "delay", 0, "wait before the first delta")
	fs.DurationVar(&cfg.Faults.ChunkDelay, "chunk-delay", 0, "wait between deltas")
	fs.IntVar(&cfg.Faults.Chunks, "chunks", -1, "deltas per answer (-1: one per word)")
	fs.Float64Var(&cfg.Faults.FailRate, "fail-rate", 0, "probability 0..1 of a 500 per turn")
	fs.IntVar(&cfg.Faults.RatelimitEvery, "ratelimit-every", 0, "every Nth ask is rate limited")
	fs.Float64Var(&cfg.Faults.TimeScale, "time-scale", 1, "multiply every delay and gap by this (0.01 plays 5 minutes in 3 s)")
	fs.StringVar(&modelKeys, "model-keys", "", "comma-separated model keys")
	fs.DurationVar(&cfg.ReplyTimeout, "reply-timeout", 10*time.Second, "wait for each client reply")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if transport != "websocket" {
		return Config{}, fmt.Errorf("--transportType=%q: only websocket is supported", transport)
	}
	if port != 0 {
		cfg.HTTPPort = port
	}
	if accounts == "" {
		accounts = getenv("SIMWORKER_ACCOUNTS")
	}
	first, err := parseAccounts(accounts, &cfg)
	if err != nil {
		return Config{}, err
	}
	switch loggedIn {
	case "", "false":
	case "true":
		cfg.LoggedIn = first
	default:
		cfg.LoggedIn = loggedIn
	}
	if modelKeys != "" {
		cfg.ModelKeys = strings.Split(modelKeys, ",")
	}
	if cfg.Deviate, err = parseDeviations(deviate); err != nil {
		return Config{}, err
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// parseAccounts fills cfg.Accounts from "u1:p1,u2:p2" and returns the first
// username (demo when s is empty).
func parseAccounts(s string, cfg *Config) (string, error) {
	if s == "" {
		return "demo", nil
	}
	cfg.Accounts = map[string]string{}
	first := ""
	for _, pair := range strings.Split(s, ",") {
		u, p, ok := strings.Cut(strings.TrimSpace(pair), ":")
		if !ok || u == "" {
			return "", fmt.Errorf("--accounts: %q is not user:password", pair)
		}
		if first == "" {
			first = u
		}
		cfg.Accounts[u] = p
	}
	return first, nil
}
