package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"
)

// qoderSession is one simulated print-mode qodercli process.
type qoderSession struct {
	e       *qoderEnv
	o       printOptions
	user    qoderUser
	partial bool
	tokens  bool // QODER_EXPOSE_TOKEN_USAGE: results carry token counts

	wmu sync.Mutex

	mu      sync.Mutex
	id      string
	history []exchange
	model   string
	inited  bool
	cancel  context.CancelFunc
	credits float64
}

// qoderDefaultTools are the built-in tools without --tools "".
var qoderDefaultTools = []string{"Agent", "Bash", "Edit", "Glob", "Grep", "Read", "WebFetch", "WebSearch", "Write"}

// session runs a print-mode process until its input ends.
func (e *qoderEnv) session(ctx context.Context, o printOptions) error {
	s := &qoderSession{e: e, o: o, partial: o.has("--include-partial-messages"), model: o["--model"],
		tokens: e.getenv("QODER_EXPOSE_TOKEN_USAGE") == "1"}
	if s.model == "" {
		s.model = "auto"
	}
	u, ok, err := e.login()
	switch {
	case err != nil:
		_ = e.critical(err)
		s.drain(ctx, qoderAuthExit) // it reads nothing more
		return err
	case !ok:
		// Logged out, the CLI answers a turn it was never asked, then
		// answers nothing more.
		s.id = newUUID()
		s.init(false)
		s.assistant("<synthetic>", qoderNotLoggedIn, "authentication_failed", false)
		s.result(map[string]any{"subtype": "success", "is_error": true, "num_turns": 1, "result": qoderNotLoggedIn,
			"stop_reason": "stop_sequence"})
		s.drain(ctx, qoderAuthExit)
		return errors.New("not logged in")
	}
	s.user = u
	if err := s.open(); err != nil {
		return err
	}
	e.runLog("cli.main.started")
	return s.serve(ctx)
}

// qoderAuthExit is how long a CLI that cannot log in stays after saying
// so (run under os/exec, the real one exited 8 to 9 seconds after its
// not-logged-in answer, and about 8 after a token's failed exchange).
const qoderAuthExit = 8500 * time.Millisecond

// drain reads the input, doing nothing with it, until it ends or for d.
func (s *qoderSession) drain(ctx context.Context, d time.Duration) {
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, s.e.stdin); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// open takes the session --resume or --session-id names, or a new one;
// the CLI exits 42 for one it cannot take.
func (s *qoderSession) open() error {
	if id := s.o["--resume"]; id != "" {
		h, err := s.load(id)
		if err != nil {
			msg := fmt.Sprintf("Error resuming session: Invalid session identifier %q.\n  Searched current project and same-repo worktrees:\n    - %s\n  Use --list-sessions to see available sessions.", id, s.projectDir())
			fmt.Fprintln(s.e.stderr, msg)
			return errors.New(msg) // the real CLI exits 42
		}
		s.id, s.history = id, h
		return nil
	}
	s.id = s.o["--session-id"]
	if s.id == "" {
		s.id = newUUID()
	} else if !uuidRE.MatchString(s.id) {
		fmt.Fprintln(s.e.stderr, "Invalid session ID. Must be a valid UUID.")
		return errors.New("invalid session id") // the real CLI exits 42
	}
	return nil
}

// projectDir is where the CLI keeps this working directory's sessions.
func (s *qoderSession) projectDir() string {
	return filepath.Join(s.e.configDir, "projects", strings.ReplaceAll(s.e.cwd, string(filepath.Separator), "-"))
}

func (s *qoderSession) load(id string) ([]exchange, error) {
	if !uuidRE.MatchString(id) {
		return nil, errors.New("not a session id")
	}
	b, err := os.ReadFile(filepath.Join(s.projectDir(), id+".jsonl"))
	if err != nil {
		return nil, err
	}
	var out []exchange
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var x struct{ Question, Answer string }
		if json.Unmarshal([]byte(l), &x) == nil {
			out = append(out, exchange{question: x.Question, answer: x.Answer})
		}
	}
	return out, nil
}

func (s *qoderSession) save(id string, x exchange) {
	if s.o.has("--no-session-persistence") || os.MkdirAll(s.projectDir(), 0o700) != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(s.projectDir(), id+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(map[string]string{"question": x.question, "answer": x.answer})
	_, _ = f.Write(append(b, '\n'))
}

// serve reads control requests and user messages until the input ends.
func (s *qoderSession) serve(ctx context.Context) error {
	turns := make(chan qoderInput, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for in := range turns {
			s.turn(ctx, in)
		}
	}()
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		r := bufio.NewReaderSize(s.e.stdin, 1<<16)
		for {
			line, err := r.ReadBytes('\n')
			if len(strings.TrimSpace(string(line))) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				close(turns)
				select {
				case <-done:
				case <-ctx.Done():
				}
				return nil
			}
			s.input(line, turns)
		case <-ctx.Done():
			return nil
		}
	}
}

// qoderInput is a line of input, as the simulator reads it.
type qoderInput struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Request   struct {
		Type    string  `json:"type"`
		Subtype string  `json:"subtype"`
		Model   *string `json:"model"`
	} `json:"request"`
	Message *struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
	ClientComposed bool `json:"client_composed"`
}

func (s *qoderSession) input(line []byte, turns chan<- qoderInput) {
	var in qoderInput
	if err := json.Unmarshal(line, &in); err != nil {
		fmt.Fprintf(s.e.stderr, "Error parsing streaming input line: %v\n", err)
		return
	}
	switch in.Type {
	case "control_request":
		s.control(&in)
	case "user":
		if in.Message != nil {
			turns <- in
		}
	}
}

// control answers a control request, named by its type or (the older
// form) its subtype; both were seen answered.
func (s *qoderSession) control(in *qoderInput) {
	kind := in.Request.Type
	if kind == "" {
		kind = in.Request.Subtype
	}
	answer := func(resp any) {
		r := map[string]any{"subtype": "success", "request_id": in.RequestID}
		if resp != nil {
			r["response"] = resp
		}
		s.emit(map[string]any{"type": "control_response", "response": r})
	}
	fail := func(msg string) {
		s.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "error",
			"request_id": in.RequestID, "error": msg}})
	}
	switch kind {
	case "initialize":
		s.mu.Lock()
		again := s.inited
		s.inited = true
		s.mu.Unlock()
		if again {
			fail("Already initialized")
			return
		}
		s.init(true)
		answer(s.initialize())
	case "mcp_status":
		answer(map[string]any{"servers": []any{}})
	case "account_info":
		answer(map[string]any{"account": s.account()})
	case "set_model":
		s.mu.Lock()
		if in.Request.Model != nil {
			s.model = *in.Request.Model
		}
		s.mu.Unlock()
		answer(nil)
	case "interrupt":
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.mu.Unlock()
		answer(map[string]any{"still_queued": []string{}})
	default:
		fail(fmt.Sprintf("Unsupported control request type: %q", kind))
	}
}

func (s *qoderSession) account() map[string]any {
	return map[string]any{"userId": s.user.UID, "name": s.user.Name, "email": s.user.Email}
}

func (s *qoderSession) initialize() map[string]any {
	return map[string]any{"commands": []any{map[string]any{"name": "clear", "description": "Clear conversation history",
		"argumentHint": ""}}, "agents": []any{}, "output_style": "default", "available_output_styles": []string{"default"},
		"models": []any{}, "account": s.account(), "capabilities": qoderCapabilities, "pid": os.Getpid()}
}

var qoderCapabilities = []string{"interrupt_receipt_v1", "interrupt_cancel_queued_v1", "msg_lifecycle_v1"}

// init prints the init line, and the artifacts update after it (which the
// CLI prints after initialize's init line only).
func (s *qoderSession) init(artifacts bool) {
	s.mu.Lock()
	id, model := s.id, s.model
	s.mu.Unlock()
	tools := []string{}
	if v, ok := s.o["--tools"]; !ok || v != "" {
		tools = qoderDefaultTools
	}
	mode := map[string]string{"": "default", "default": "default", "accept_edits": "acceptEdits",
		"bypass_permissions": "bypassPermissions", "dont_ask": "dontAsk", "auto": "auto"}[s.o["--permission-mode"]]
	if s.o.has("--dangerously-skip-permissions") {
		mode = "bypassPermissions"
	}
	s.emit(map[string]any{"type": "system", "subtype": "init", "apiKeySource": "none", "qodercli_version": qoderVersion,
		"protocol_version": qoderProtocol, "cwd": s.e.cwd, "tools": tools, "mcp_servers": []any{}, "model": model,
		"permissionMode": mode, "slash_commands": []string{"clear", "compact", "login", "logout"},
		"output_style": "default", "agents": []string{"general-purpose"}, "skills": []string{}, "plugins": []any{},
		"capabilities": qoderCapabilities, "fast_mode_state": "off", "uuid": newUUID(), "session_id": id})
	if artifacts {
		s.emit(map[string]any{"type": "system", "subtype": "artifacts_update", "artifacts": []any{}, "uuid": newUUID(),
			"session_id": id})
	}
}

func (s *qoderSession) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _ = s.e.stdout.Write(append(b, '\n'))
}

// qoderUsage is a result's usage: token counts only when the CLI was
// asked to expose them.
func (s *qoderSession) usage(in, out int) map[string]any {
	if !s.tokens {
		in, out = 0, 0
	}
	return map[string]any{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		"output_tokens": out, "server_tool_use": map[string]any{"web_search_requests": 0, "web_fetch_requests": 0},
		"service_tier": "standard"}
}

// assistant prints an assistant message (code: its error).
func (s *qoderSession) assistant(model, text, code string, aborted bool) {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	m := map[string]any{"type": "assistant", "message": map[string]any{"id": newUUID(), "type": "message",
		"role": "assistant", "model": model, "stop_reason": "stop_sequence", "stop_sequence": "",
		"content": []any{map[string]any{"type": "text", "text": text}}, "usage": s.usage(0, 0)},
		"parent_tool_use_id": nil, "session_id": id, "uuid": newUUID()}
	if code != "" {
		m["error"] = code
	}
	if aborted {
		m["aborted"] = true
	}
	s.emit(m)
}

// result prints a result with the fields every result has.
func (s *qoderSession) result(fields map[string]any) {
	s.mu.Lock()
	id, credits := s.id, s.credits
	s.mu.Unlock()
	r := map[string]any{"type": "result", "duration_ms": 1, "duration_api_ms": 1, "session_id": id,
		"total_cost_usd": 0, "total_credits": credits, "usage": s.usage(0, 0), "modelUsage": map[string]any{},
		"permission_denials": []any{}, "uuid": newUUID()}
	for k, v := range fields {
		r[k] = v
	}
	s.emit(r)
}

// qoderMentionRE is the CLI's @-mention pattern: a quoted path, a path
// starting with ~ . or /, or a word with a / or a . in it, right after
// the @ (white space as JavaScript's \s has it, U+FEFF among it).
var qoderMentionRE = regexp.MustCompile(`@(?:"([^"]+)"|([~./][^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+)|([^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]".]+/[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+)|([^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+\.[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+))`)

// mentions attaches the files the message mentions, as the CLI does,
// whatever its tools; the simulated model shows what it was given.
func (s *qoderSession) mentions(text string) string {
	for _, m := range qoderMentionRE.FindAllStringSubmatch(text, -1) {
		p := m[1] + m[2] + m[3] + m[4]
		switch {
		case strings.HasPrefix(p, "~"):
			p = filepath.Join(s.e.getenv("HOME"), strings.TrimPrefix(p, "~"))
		case !filepath.IsAbs(p):
			p = filepath.Join(s.e.cwd, p)
		}
		if b, err := os.ReadFile(p); err == nil {
			text += fmt.Sprintf("\n[attached %s: %s]", p, strings.TrimSpace(string(b)))
		}
	}
	return text
}

// jsTrim trims as JavaScript's String.prototype.trim does.
func jsTrim(s string) string {
	return strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '\ufeff' })
}
