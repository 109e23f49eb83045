package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The agent CLI mode: `simworker agent-cli DIALECT ARGS...` plays an agent
// CLI (Claude Code's dialect of the stream-json protocol, or Qoder CLI's)
// on its standard input and output, taking the CLI's own command line
// (ARGS) as strictly as the real binary was seen to: an option it lacks,
// stream-json output without --verbose, a --resume of a session it never
// kept are refused with the binary's words. docs/claude-code-worker.md
// lists what was seen.
//
//	agent-cli claude-code auth status [--json|--text]   the login state, as JSON; exit 1 when logged out
//	agent-cli claude-code auth login                    a login page on loopback (the simworker recipe's);
//	                                                    prints its URL and waits for the browser
//	agent-cli claude-code -p --input-format stream-json --output-format stream-json --verbose [...]
//	                                                    the session: user messages in, turns out
//
// A key or token whose value contains "invalid" (a stored login's token
// too) is one the upstream refuses: each turn fails as the real CLI
// reports a 401.
//
// A session's answers are the simulator's (package doc, "Answers"): the
// user message is read as a prompt of the contract, and the directives
// apply ([[sim:whoami]] says the CLI session and its turn number). The
// login is the CLI's: an API key or OAuth token in the environment, or a
// credentials file in the config dir that the simulated login writes.
// Sessions are kept in the config dir, so a later process resumes them.
//
// The dialects share the session loop, the turn path and the session
// files (agent_session.go); what differs is data in a dialect value and
// the lines a session prints, its voice.

// Dialect names the agent CLIs the simulator plays.
const DialectClaudeCode = "claude-code"

// dialect is what one agent CLI's simulation says and expects.
type dialect struct {
	name, version string
	// options are the CLI's options in print mode: the number of values
	// each takes (0 for a flag); aliases map short to long names.
	options map[string]int
	aliases map[string]string
	// promptArg refuses an argument that is not an option (%q: it);
	// check, a command line the CLI (or the simulator) does not take.
	promptArg string
	check     func(printOptions) error
	// configEnv names the config dir's variable; configDefault is the dir
	// under HOME without it.
	configEnv, configDefault string
	// subcommands are the CLI's commands other than a print-mode session
	// (the first argument names one: Claude Code's auth).
	subcommands map[string]func(e *agentEnv, ctx context.Context, args []string) error
	// versionFlags print the version when they are the whole command line.
	versionFlags []string
	// defaultModel is a session's model without --model; defaultTools
	// are the built-in tools without --tools "".
	defaultModel string
	defaultTools []string
	// A streamed message's id is msgPrefix and msgHex random bytes.
	msgPrefix string
	msgHex    int
	// quiet drops the input lines it does not take without a word.
	quiet bool
	// voice makes the dialect's part of a session.
	voice func(*agentSession) voice

	// What Claude Code's voice reads. credFile is the stored login under
	// the config dir; keyEnvs are variables that are an API key,
	// tokenEnvs a token (in the order the CLI reads them).
	credFile           string
	keyEnvs, tokenEnvs []string
	// notLoggedIn is a turn's text without a login; reset the slash
	// command that starts a new session; commands the slash commands the
	// CLI runs itself.
	notLoggedIn, reset string
	commands           map[string]bool
	// mentionsOff is the variable that turns @file mentions off.
	mentionsOff string
	// models are the models initialize lists (value, display name).
	models [][2]string
	// loginBanner is what the login command prints, with its URL for %s.
	loginBanner string
}

var claudeCode = &dialect{
	name: DialectClaudeCode, version: "2.1.328",
	options: map[string]int{"--print": 0, "--input-format": 1, "--output-format": 1, "--verbose": 0,
		"--include-partial-messages": 0, "--tools": 1, "--permission-prompts": 1, "--permission-mode": 1,
		"--strict-mcp-config": 0, "--system-prompt": 1, "--append-system-prompt": 1, "--resume": 1, "--model": 1,
		"--session-id": 1, "--disable-slash-commands": 0, "--no-session-persistence": 0, "--fallback-model": 1,
		"--setting-sources": 1, "--settings": 1, "--mcp-config": 1, "--replay-user-messages": 0},
	aliases:   map[string]string{"-p": "--print", "-r": "--resume"},
	promptArg: "error: a prompt argument is not taken with --input-format stream-json: %q", check: checkClaudeCode,
	configEnv: "CLAUDE_CONFIG_DIR", configDefault: ".claude", credFile: ".credentials.json",
	keyEnvs: []string{"ANTHROPIC_API_KEY"}, tokenEnvs: []string{"CLAUDE_CODE_OAUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN"},
	notLoggedIn: "Not logged in · Please run /login", reset: "/clear",
	commands:    map[string]bool{"clear": true, "compact": true, "cost": true, "help": true, "login": true, "logout": true, "model": true, "config": true, "context": true, "init": true},
	mentionsOff: "CLAUDE_CODE_DISABLE_FILE_MENTIONS",
	models: [][2]string{{"default", "Default (recommended)"}, {"opus", "Opus"}, {"sonnet", "Sonnet"},
		{"haiku", "Haiku"}},
	defaultModel: "claude-sim-1",
	defaultTools: []string{"Task", "Bash", "Glob", "Grep", "Read", "Edit", "Write", "WebFetch", "WebSearch"},
	msgPrefix:    "msg_sim", msgHex: 10,
	voice:       func(s *agentSession) voice { return claudeVoice{s} },
	subcommands: map[string]func(*agentEnv, context.Context, []string) error{"auth": (*agentEnv).auth},
	loginBanner: "Opening browser to sign in…\nIf the browser didn't open, visit: %s\nPaste code here if prompted > ",
}

// dialects are the agent CLIs the simulator plays, by name.
var dialects = map[string]*dialect{DialectClaudeCode: claudeCode, DialectQoder: qoder}

// agentEnv is what an agent CLI process sees of its world.
type agentEnv struct {
	d              *dialect
	getenv         func(string) string
	stdin          io.Reader
	stdout, stderr io.Writer
	configDir, cwd string
	started        time.Time
	// directives: the simulator's own --directives flag was given, so
	// prompts may steer it (Config.Directives).
	directives bool
}

// AgentMain plays the agent CLI that args[0] names with the command line
// after it. It returns when its input ends (a session), its command is
// done (status, login) or ctx ends; an error is the CLI's own refusal,
// already written to stderr.
func AgentMain(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	// --directives is the simulator's own flag, which no CLI takes: it
	// may follow the CLI's arguments anywhere (a driver's extra
	// arguments).
	directives := slices.Contains(args, "--directives")
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool { return a == "--directives" })
	if len(args) == 0 || dialects[args[0]] == nil {
		return fmt.Errorf("agent-cli: name a dialect (%s, %s)", DialectClaudeCode, DialectQoder)
	}
	d := dialects[args[0]]
	e := &agentEnv{d: d, getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, started: time.Now(),
		directives: directives}
	e.cwd, _ = os.Getwd()
	e.configDir = getenv(d.configEnv)
	if e.configDir == "" {
		e.configDir = filepath.Join(getenv("HOME"), d.configDefault)
	}
	args = args[1:]
	if len(args) == 1 && slices.Contains(d.versionFlags, args[0]) {
		fmt.Fprintln(stdout, d.version)
		return nil
	}
	if len(args) > 0 && d.subcommands[args[0]] != nil {
		return d.subcommands[args[0]](e, ctx, args[1:])
	}
	opts, err := d.parse(args)
	if err != nil {
		return e.refuse(err.Error())
	}
	if dir := opts["--config-dir"]; dir != "" {
		e.configDir = dir
	}
	return e.session(ctx, opts)
}

// refuse prints a command-line error as the CLI does and fails.
func (e *agentEnv) refuse(msg string) error {
	fmt.Fprintln(e.stderr, msg)
	return errors.New(msg)
}

// printOptions are a print-mode command line, parsed.
type printOptions map[string]string

func (o printOptions) has(k string) bool { _, ok := o[k]; return ok }

// parse reads a print-mode command line as the CLI's parser does.
func (d *dialect) parse(args []string) (printOptions, error) {
	o := printOptions{}
	for i := 0; i < len(args); i++ {
		name, val, inline := strings.Cut(args[i], "=")
		if long, ok := d.aliases[name]; ok {
			name = long
		}
		n, ok := d.options[name]
		switch {
		case !ok && !strings.HasPrefix(args[i], "-"):
			return nil, fmt.Errorf(d.promptArg, args[i])
		case !ok:
			return nil, fmt.Errorf("error: unknown option '%s'", name)
		case n == 0:
			o[name] = "true"
		case inline:
			o[name] = val
		case i+1 < len(args):
			i++
			o[name] = args[i]
		default:
			return nil, fmt.Errorf("error: option '%s <value>' argument missing", name)
		}
	}
	return o, d.check(o)
}

// checkClaudeCode refuses the print-mode command lines Claude Code (or
// the simulator) does not take.
func checkClaudeCode(o printOptions) error {
	switch {
	case !o.has("--print"):
		return errors.New("simulator: only --print (-p) sessions are played")
	case o["--input-format"] != "stream-json":
		return errors.New("simulator: only --input-format stream-json is played")
	case o["--output-format"] != "stream-json":
		return errors.New("simulator: only --output-format stream-json is played")
	case !o.has("--verbose"):
		//lint:ignore ST1005 the real binary's words, which its callers see
		return errors.New("Error: When using --print, --output-format=stream-json requires --verbose")
	}
	return nil
}

// uuidRE is a session id's shape.
var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// newUUID is a random version-4 UUID.
func newUUID() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

// projectDir is where the CLI keeps this working directory's sessions:
// its path with each separator a dash, as the real one names it.
func (e *agentEnv) projectDir() string {
	return filepath.Join(e.configDir, "projects", strings.ReplaceAll(e.cwd, string(filepath.Separator), "-"))
}

// serveLoopback serves a login command's pages on a free loopback port,
// with the server that server makes for that port; stop shuts it down.
func serveLoopback(ctx context.Context, server func(port int) *http.Server) (port int, stop func(), err error) {
	ln, err := listenLoopback(0)
	if err != nil {
		return 0, nil, err
	}
	port = ln.Addr().(*net.TCPAddr).Port
	srv := server(port)
	go func() { _ = srv.Serve(ln) }()
	return port, func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}, nil
}
