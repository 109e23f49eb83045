package lingma

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/internal/redact"
	"github.com/poolgate/poolgate/pool/worker"
)

// Kind registers the Lingma driver with the daemon: its name, its
// credential layout (cache/id, the machine id the login is bound to, and
// cache/user, the login with its expiry, valid only as a pair), its agent
// model names, its login recipe and its configuration section (Settings).
var Kind = worker.Kind{
	Name:        "lingma",
	Credentials: worker.Credentials{Dir: "cache", Required: []string{"id", "user"}, MachineIDFile: "id", ExpiryFile: "user"},
	AgentModels: []string{"lingma-agent", "agent"},
	LoginRecipe: "lingma-alibaba",
	DemoArgs:    []string{"--logged-in"},
	Section:     func() any { s := DefaultSettings(); return &s },
	New:         newFromSetup,
}

// Settings is the driver's section of the configuration (the yaml key
// lingma:, environment variables POOLGATE_LINGMA_<KEY>). Each field's
// trailing comment is its documentation; its default is in
// DefaultSettings.
type Settings struct {
	TurnTimeout     time.Duration `yaml:"turn_timeout"`     // whole Lingma turn, ask to finish (30m)
	IdleTimeout     time.Duration `yaml:"idle_timeout"`     // longest silence within a turn: a stuck worker (2m)
	RPCTimeout      time.Duration `yaml:"rpc_timeout"`      // each Lingma call but a turn's stream (5s)
	AskMode         string        `yaml:"ask_mode"`         // normal, chat or agent, for requests without tools (normal)
	AgentSession    string        `yaml:"agent_session"`    // chat/ask's sessionType in agent mode: chat, assistant, developer or inline (assistant)
	ChatContext     string        `yaml:"chat_context"`     // what chat/ask's chatContext holds: none (null) or prompt (the prompt again) (none)
	ToolMode        string        `yaml:"tool_mode"`        // emulated, native or auto (emulated)
	DedicatedDomain string        `yaml:"dedicated_domain"` // enterprise endpoint set before a login ("" = none)
	Record          bool          `yaml:"record"`           // write a redacted transcript of every turn of every worker (false)
	RecordDir       string        `yaml:"record_dir"`       // where transcripts go, a sub-directory per instance ("" = each work dir's transcripts/)
	RecordBytes     int64         `yaml:"record_bytes"`     // cap of one transcript in bytes; the rest of the turn is dropped (1 MiB)
	RecordKeep      int           `yaml:"record_keep"`      // transcripts kept per instance, the oldest removed first (100)
	IsolateHome     bool          `yaml:"isolate_home"`     // give each worker its own HOME, TMPDIR and XDG_RUNTIME_DIR under its work dir (true)
	RateLimitText   string        `yaml:"ratelimit_text"`   // regular expression: a worker's error text that means the account is throttled, so the worker cools down
	LoginText       string        `yaml:"login_text"`       // regular expression: a worker's error text that means its login is gone, so the worker is checked
	// ToolSettle exists because how the real worker ends a turn after an
	// acknowledged tool/invoke is not publicly documented: it may send
	// chat/finish at once (the bundled simulator does, and the turn then
	// ends at once) or wait for the results, which the gateway never runs.
	ToolSettle time.Duration `yaml:"tool_settle"` // after a native tool call, longest silence before the turn ends with its calls and the worker is stopped (3s)
	Reuse      string        `yaml:"reuse"`       // which Lingma sessions a follow-up continues: controlled (those holding only what the gateway sent) or chat-only (plain turns without tools) (controlled)
}

// DefaultSettings are the section's defaults.
func DefaultSettings() Settings {
	return Settings{TurnTimeout: 30 * time.Minute, IdleTimeout: 2 * time.Minute, RPCTimeout: 5 * time.Second,
		AskMode: ModeNormal, AgentSession: "assistant", ChatContext: ContextNone, ToolMode: ToolsEmulated,
		ToolSettle: 3 * time.Second, RecordBytes: 1 << 20, RecordKeep: 100, IsolateHome: true,
		RateLimitText: lingmarpc.DefaultRateLimitText, LoginText: lingmarpc.DefaultLoginText, Reuse: ReuseControlled}
}

// Validate returns one error per bad setting, each naming its key as
// the configuration spells it (lingma.KEY).
func (s Settings) Validate() []error {
	var errs []error
	oneOf := func(key, v string, allowed ...string) {
		for _, a := range allowed {
			if v == a {
				return
			}
		}
		last := len(allowed) - 1
		errs = append(errs, fmt.Errorf("lingma.%s %q: use %s or %s", key, v, strings.Join(allowed[:last], ", "), allowed[last]))
	}
	oneOf("ask_mode", s.AskMode, ModeNormal, ModeChat, ModeAgent)
	oneOf("agent_session", s.AgentSession, "chat", "assistant", "developer", "inline")
	oneOf("reuse", s.Reuse, ReuseControlled, ReuseChatOnly)
	oneOf("chat_context", s.ChatContext, ContextNone, ContextPrompt)
	oneOf("tool_mode", s.ToolMode, ToolsEmulated, ToolsNative, ToolsAuto)
	for k, d := range map[string]time.Duration{"turn_timeout": s.TurnTimeout, "idle_timeout": s.IdleTimeout,
		"rpc_timeout": s.RPCTimeout, "tool_settle": s.ToolSettle} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("lingma.%s must be positive, got %s", k, d))
		}
	}
	if u := s.DedicatedDomain; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		errs = append(errs, fmt.Errorf("lingma.dedicated_domain %q: an http(s) URL", redact.URL(u)))
	}
	if s.RecordBytes < 4096 {
		errs = append(errs, fmt.Errorf("lingma.record_bytes %d: at least 4096", s.RecordBytes))
	}
	if s.RecordKeep < 1 {
		errs = append(errs, fmt.Errorf("lingma.record_keep %d: at least 1", s.RecordKeep))
	}
	for k, v := range map[string]string{"ratelimit_text": s.RateLimitText, "login_text": s.LoginText} {
		if v == "" {
			errs = append(errs, fmt.Errorf("lingma.%s is empty: give a regular expression (an empty one would match every error)", k))
		} else if _, err := regexp.Compile(v); err != nil {
			errs = append(errs, fmt.Errorf("lingma.%s: %w", k, err))
		}
	}
	return errs
}

// newFromSetup is Kind.New: the driver of a validated section.
func newFromSetup(s worker.Setup) (worker.Driver, error) {
	set, ok := s.Section.(Settings)
	if !ok {
		return nil, fmt.Errorf("lingma: configuration section is %T, not lingma.Settings", s.Section)
	}
	if errs := set.Validate(); len(errs) > 0 {
		return nil, errs[0]
	}
	return New(Config{Command: s.Command, ExtraArgs: s.ExtraArgs,
		TurnTimeout: set.TurnTimeout, ReplyTimeout: set.IdleTimeout, CallTimeout: set.RPCTimeout,
		Mode: set.AskMode, AgentSessionType: set.AgentSession, ChatContext: set.ChatContext, Reuse: set.Reuse,
		ToolMode: set.ToolMode, ToolSettle: set.ToolSettle, MaxFrame: s.MaxTurnBytes,
		NoIsolation: !set.IsolateHome, DedicatedDomain: set.DedicatedDomain, RateLimitText: regexp.MustCompile(set.RateLimitText),
		LoginText: regexp.MustCompile(set.LoginText), Logger: s.Logger,
		Record: RecordConfig{All: set.Record, Dir: set.RecordDir, MaxBytes: set.RecordBytes,
			Keep: set.RecordKeep, Prompts: s.Debug}}), nil
}
