// Package agents knows the coding agents poolgate is tested with: Claude
// Code (Anthropic Messages), Codex CLI (OpenAI Responses), qwen-code (chat
// completions) and Gemini CLI (the Gemini API). It says which releases are pinned (npm/package.json,
// installed by `make agents` into a cache), how to run each one
// non-interactively against a gateway (a fresh home, telemetry off, every
// connection but loopback refused), and it holds the requests recorded from
// them (testdata/, refreshed by `make agents-capture`) with the recording
// proxy that captures them. Only tests import it.
package agents

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

//go:embed npm/package.json
var packageJSON []byte

// Client is one coding agent.
type Client struct {
	// Name is the client's short name, also its testdata directory.
	Name string
	// Package is its npm package; Version the pinned release.
	Package, Version string
	// Bin is its command in node_modules/.bin.
	Bin string
	// Protocol is the API it speaks: messages, responses, chat or gemini.
	Protocol string
	// Model is the model name it is configured with.
	Model string
}

// Clients are the pinned agents, in the order tests run them.
func Clients() []Client {
	var pkg struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(packageJSON, &pkg); err != nil {
		panic("internal/agents: npm/package.json: " + err.Error())
	}
	cs := []Client{
		{Name: "claude-code", Package: "@anthropic-ai/claude-code", Bin: "claude", Protocol: "messages", Model: "claude-sonnet-4-5"},
		{Name: "codex", Package: "@openai/codex", Bin: "codex", Protocol: "responses", Model: "gpt-5-codex"},
		{Name: "qwen-code", Package: "@qwen-code/qwen-code", Bin: "qwen", Protocol: "chat", Model: "qwen3-coder-plus"},
		// Gemini CLI picks its models itself (a router model for its side
		// requests, a main model for the turn).
		{Name: "gemini-cli", Package: "@google/gemini-cli", Bin: "gemini", Protocol: "gemini"},
	}
	for i := range cs {
		cs[i].Version = pkg.Dependencies[cs[i].Package]
	}
	return cs
}

// Dir is where `make agents` installs the clients: $POOLGATE_AGENTS_DIR,
// else the user cache dir's poolgate/agents (the same default as
// scripts/agents.sh).
func Dir() string {
	if d := os.Getenv("POOLGATE_AGENTS_DIR"); d != "" {
		return d
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "poolgate-agents")
	}
	return filepath.Join(c, "poolgate", "agents")
}

// Path returns the client's installed command, or an error that says how
// to install it.
func (c Client) Path() (string, error) {
	p := filepath.Join(Dir(), "node_modules", ".bin", c.Bin)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s %s is not installed in %s: run `make agents` (needs Node.js 20+ with npm; see docs/development.md)", c.Package, c.Version, Dir())
	}
	return p, nil
}

// Gateway is where a client is pointed.
type Gateway struct {
	// URL is the gateway's base URL (http://127.0.0.1:PORT, no /v1).
	URL string
	// APIKey is the key the client presents.
	APIKey string
}

// Session is one client set up to run in a scratch directory with a home of
// its own.
type Session struct {
	Client Client
	// Home is the client's fresh HOME; Work the directory it runs in.
	Home, Work string
	gw         Gateway
}

// NewSession prepares home and work (both must exist) for c: the client's
// configuration files pointing at gw, with telemetry and updates off.
func NewSession(c Client, home, work string, gw Gateway) (*Session, error) {
	s := &Session{Client: c, Home: home, Work: work, gw: gw}
	var err error
	switch c.Name {
	case "codex":
		err = writeFile(filepath.Join(home, ".codex", "config.toml"), fmt.Sprintf(`model = %q
model_provider = "poolgate"

[model_providers.poolgate]
name = "poolgate"
base_url = %q
wire_api = "responses"
env_key = "POOLGATE_API_KEY"

[analytics]
enabled = false
`, c.Model, gw.URL+"/v1"))
	case "qwen-code":
		err = writeFile(filepath.Join(home, ".qwen", "settings.json"),
			`{"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`+"\n")
	case "gemini-cli":
		// An API key, not a Google login; no telemetry, usage statistics
		// or update checks.
		err = writeFile(filepath.Join(home, ".gemini", "settings.json"),
			`{"security":{"auth":{"selectedType":"gemini-api-key"}},"telemetry":{"enabled":false},`+
				`"privacy":{"usageStatisticsEnabled":false},"general":{"enableAutoUpdate":false,"enableAutoUpdateNotification":false}}`+"\n")
	}
	return s, err
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o600)
}

// refused is a loopback address nothing listens on: every connection a
// client tries to make other than to the gateway goes there and fails at
// once, so no test ever reaches, or waits on, the network.
const refused = "http://127.0.0.1:9"

// Env is the client's whole environment: nothing is inherited from the
// test's (which may hold real API keys), only PATH.
func (s *Session) Env() []string {
	env := []string{
		"HOME=" + s.Home,
		"PATH=" + os.Getenv("PATH"),
		"LANG=C.UTF-8", "TERM=dumb", "NO_COLOR=1", "CI=1",
		"XDG_CONFIG_HOME=" + filepath.Join(s.Home, ".config"),
		"XDG_CACHE_HOME=" + filepath.Join(s.Home, ".cache"),
		"XDG_DATA_HOME=" + filepath.Join(s.Home, ".local", "share"),
		"HTTP_PROXY=" + refused, "HTTPS_PROXY=" + refused, "ALL_PROXY=" + refused,
		"http_proxy=" + refused, "https_proxy=" + refused, "all_proxy=" + refused,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
		"DO_NOT_TRACK=1", "DISABLE_TELEMETRY=1",
	}
	switch s.Client.Name {
	case "claude-code":
		env = append(env, "ANTHROPIC_BASE_URL="+s.gw.URL, "ANTHROPIC_API_KEY="+s.gw.APIKey,
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1",
			"DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1")
	case "codex":
		env = append(env, "POOLGATE_API_KEY="+s.gw.APIKey, "CODEX_HOME="+filepath.Join(s.Home, ".codex"))
	case "qwen-code":
		env = append(env, "OPENAI_BASE_URL="+s.gw.URL+"/v1", "OPENAI_API_KEY="+s.gw.APIKey, "OPENAI_MODEL="+s.Client.Model)
	case "gemini-cli":
		// The work directory is trusted without asking (headless).
		env = append(env, "GOOGLE_GEMINI_BASE_URL="+s.gw.URL, "GEMINI_API_KEY="+s.gw.APIKey,
			"GEMINI_CLI_TRUST_WORKSPACE=true", "GEMINI_TELEMETRY_ENABLED=false")
	}
	return env
}

// Args are the client's command-line arguments for one non-interactive turn
// with prompt; resume continues the session's latest conversation (resumeID
// names it for clients that need an id).
func (s *Session) Args(prompt string, resume bool, resumeID string) []string {
	switch s.Client.Name {
	case "claude-code":
		args := []string{"-p", "--output-format", "json"}
		if resume {
			args = append(args, "--resume", resumeID)
		}
		return append(args, prompt)
	case "codex":
		// The sandbox is Codex's business, not the gateway's: the test
		// runs in a scratch directory with the network closed.
		args := []string{"exec", "--skip-git-repo-check", "--color", "never", "--dangerously-bypass-approvals-and-sandbox"}
		if resume {
			args = append(args, "resume", "--last")
		}
		return append(args, prompt)
	case "gemini-cli":
		args := []string{"-p", prompt}
		if resume {
			args = append([]string{"--resume", "latest"}, args...)
		}
		return args
	default:
		args := []string{"-p", prompt}
		if resume {
			args = append([]string{"--continue"}, args...)
		}
		return args
	}
}

// Result is what one run of a client did.
type Result struct {
	Args           []string
	Stdout, Stderr string
	ExitCode       int
	Duration       time.Duration
}

// Run runs one turn and waits for the client to exit (or ctx to end).
func (s *Session) Run(ctx context.Context, prompt string, resume bool, resumeID string) (*Result, error) {
	path, err := s.Client.Path()
	if err != nil {
		return nil, err
	}
	res := &Result{Args: s.Args(prompt, resume, resumeID)}
	cmd := exec.CommandContext(ctx, path, res.Args...)
	cmd.Dir, cmd.Env = s.Work, s.Env()
	cmd.Stdin = strings.NewReader("") // codex reads stdin when it is not a terminal
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Run()
	res.Duration = time.Since(start)
	res.Stdout, res.Stderr = out.String(), errOut.String()
	if ee, ok := err.(*exec.ExitError); ok {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	return res, err
}

// Answer is the client's final answer in res: Claude Code's JSON result,
// else its standard output.
func (s *Session) Answer(res *Result) (answer, sessionID string, err error) {
	if s.Client.Name != "claude-code" {
		return res.Stdout, "", nil
	}
	var out struct {
		Result    string `json:"result"`
		SessionID string `json:"session_id"`
		IsError   bool   `json:"is_error"`
	}
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		return "", "", fmt.Errorf("claude's --output-format json: %w (stdout %q)", err, res.Stdout)
	}
	if out.IsError {
		return out.Result, out.SessionID, fmt.Errorf("claude reported an error: %s", out.Result)
	}
	return out.Result, out.SessionID, nil
}
