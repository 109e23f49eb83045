package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
	"unicode"
)

// qoderVoice is Qoder CLI's part of a session: its lines, its login and
// its commands.
type qoderVoice struct {
	*agentSession
	user   qoderUser
	tokens bool // QODER_EXPOSE_TOKEN_USAGE: results carry token counts
	// Under the session's mu:
	inited  bool
	credits float64
}

// start checks the login, then takes the session. Logged out, the CLI
// answers a turn it was never asked, then answers nothing more.
func (q *qoderVoice) start(ctx context.Context) error {
	u, ok, err := q.e.qoderLogin()
	switch {
	case err != nil:
		_ = q.e.critical(err)
		q.drain(ctx, qoderAuthExit) // it reads nothing more
		return err
	case !ok:
		q.id = newUUID()
		q.init(false)
		q.loggedOut()
		q.drain(ctx, qoderAuthExit)
		return errors.New("not logged in")
	}
	q.user = u
	if err := q.open(); err != nil {
		return err
	}
	q.e.runLog("cli.main.started")
	return nil
}

// qoderAuthExit is how long a CLI that cannot log in stays after saying
// so (run under os/exec, the real one exited 8 to 9 seconds after its
// not-logged-in answer, and about 8 after a token's failed exchange).
const qoderAuthExit = 8500 * time.Millisecond

// drain reads the input, doing nothing with it, until it ends or for d.
func (q *qoderVoice) drain(ctx context.Context, d time.Duration) {
	done := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, q.e.stdin); close(done) }()
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
func (q *qoderVoice) open() error {
	if id := q.o["--resume"]; id != "" {
		h, err := q.load(id, false)
		if err != nil {
			msg := fmt.Sprintf("Error resuming session: Invalid session identifier %q.\n  Searched current project and same-repo worktrees:\n    - %s\n  Use --list-sessions to see available sessions.", id, q.e.projectDir())
			fmt.Fprintln(q.e.stderr, msg)
			return errors.New(msg) // the real CLI exits 42
		}
		q.id, q.history = id, h
		return nil
	}
	q.id = q.o["--session-id"]
	if q.id == "" {
		q.id = newUUID()
	} else if !uuidRE.MatchString(q.id) {
		fmt.Fprintln(q.e.stderr, "Invalid session ID. Must be a valid UUID.")
		return errors.New("invalid session id") // the real CLI exits 42
	}
	return nil
}

// control answers a control request, named by its type or (the older
// form) its subtype; both were seen answered.
func (q *qoderVoice) control(in *inLine) {
	kind := in.Request.Type
	if kind == "" {
		kind = in.Request.Subtype
	}
	switch kind {
	case "initialize":
		q.mu.Lock()
		again := q.inited
		q.inited = true
		q.mu.Unlock()
		if again {
			q.deny(in, "Already initialized", "")
			return
		}
		q.init(true)
		q.reply(in, map[string]any{"commands": []any{map[string]any{"name": "clear",
			"description": "Clear conversation history", "argumentHint": ""}}, "agents": []any{},
			"output_style": "default", "available_output_styles": []string{"default"}, "models": []any{},
			"account": q.account(), "capabilities": qoderCapabilities, "pid": os.Getpid()})
	case "mcp_status":
		q.reply(in, map[string]any{"servers": []any{}})
	case "account_info":
		q.reply(in, map[string]any{"account": q.account()})
	case "set_model":
		q.mu.Lock()
		if in.Request.Model != nil {
			q.model = *in.Request.Model
		}
		q.mu.Unlock()
		q.reply(in, nil)
	case "interrupt":
		q.interrupt(in)
	default:
		q.deny(in, fmt.Sprintf("Unsupported control request type: %q", kind), "")
	}
}

func (q *qoderVoice) account() map[string]any {
	return map[string]any{"userId": q.user.UID, "name": q.user.Name, "email": q.user.Email}
}

var qoderCapabilities = []string{"interrupt_receipt_v1", "interrupt_cancel_queued_v1", "msg_lifecycle_v1"}

// init prints the init line, and the artifacts update after it (which the
// CLI prints after initialize's init line only).
func (q *qoderVoice) init(artifacts bool) {
	q.mu.Lock()
	id, model := q.id, q.model
	q.mu.Unlock()
	mode := map[string]string{"": "default", "default": "default", "accept_edits": "acceptEdits",
		"bypass_permissions": "bypassPermissions", "dont_ask": "dontAsk", "auto": "auto"}[q.o["--permission-mode"]]
	if q.o.has("--dangerously-skip-permissions") {
		mode = "bypassPermissions"
	}
	q.emit(map[string]any{"type": "system", "subtype": "init", "apiKeySource": "none", "qodercli_version": qoderVersion,
		"protocol_version": qoderProtocol, "cwd": q.e.cwd, "tools": q.tools, "mcp_servers": []any{}, "model": model,
		"permissionMode": mode, "slash_commands": []string{"clear", "compact", "login", "logout"},
		"output_style": "default", "agents": []string{"general-purpose"}, "skills": []string{}, "plugins": []any{},
		"capabilities": qoderCapabilities, "fast_mode_state": "off", "uuid": newUUID(), "session_id": id})
	if artifacts {
		q.emit(map[string]any{"type": "system", "subtype": "artifacts_update", "artifacts": []any{}, "uuid": newUUID(),
			"session_id": id})
	}
}

// usage is a message's or result's usage: token counts only when the
// CLI was asked to expose them.
func (q *qoderVoice) usage(in, out int) map[string]any {
	if !q.tokens {
		in, out = 0, 0
	}
	return map[string]any{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		"output_tokens": out, "server_tool_use": map[string]any{"web_search_requests": 0, "web_fetch_requests": 0},
		"service_tier": "standard"}
}

// assistant prints an assistant message (code: its error).
func (q *qoderVoice) assistant(model, text, code string, aborted bool) {
	q.mu.Lock()
	id := q.id
	q.mu.Unlock()
	m := map[string]any{"type": "assistant", "message": map[string]any{"id": newUUID(), "type": "message",
		"role": "assistant", "model": model, "stop_reason": "stop_sequence", "stop_sequence": "",
		"content": []any{map[string]any{"type": "text", "text": text}}, "usage": q.usage(0, 0)},
		"parent_tool_use_id": nil, "session_id": id, "uuid": newUUID()}
	if code != "" {
		m["error"] = code
	}
	if aborted {
		m["aborted"] = true
	}
	q.emit(m)
}

// result prints a result with the fields every result has.
func (q *qoderVoice) result(fields map[string]any) {
	q.mu.Lock()
	id, credits := q.id, q.credits
	q.mu.Unlock()
	r := map[string]any{"type": "result", "duration_ms": 1, "duration_api_ms": 1, "session_id": id,
		"total_cost_usd": 0, "total_credits": credits, "usage": q.usage(0, 0), "modelUsage": map[string]any{},
		"permission_denials": []any{}, "uuid": newUUID()}
	for k, v := range fields {
		r[k] = v
	}
	q.emit(r)
}

// qoderMentionRE is the CLI's @-mention pattern: a quoted path, a path
// starting with ~ . or /, or a word with a / or a . in it, right after
// the @ (white space as JavaScript's \s has it, U+FEFF among it).
var qoderMentionRE = regexp.MustCompile(`@(?:"([^"]+)"|([~./][^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+)|([^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]".]+/[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+)|([^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+\.[^\t\n\v\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff},;)}\]"]+))`)

// mentions attaches the files the message mentions, as the CLI does,
// whatever its tools; the simulated model shows what it was given.
func (q *qoderVoice) mentions(text string) string {
	for _, m := range qoderMentionRE.FindAllStringSubmatch(text, -1) {
		p := m[1] + m[2] + m[3] + m[4]
		switch {
		case strings.HasPrefix(p, "~"):
			p = filepath.Join(q.e.getenv("HOME"), strings.TrimPrefix(p, "~"))
		case !filepath.IsAbs(p):
			p = filepath.Join(q.e.cwd, p)
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

// preempt runs a message that opens with "/" (after JavaScript's trim,
// which drops U+FEFF but not U+200B) as one of the CLI's commands,
// unless the host said the text is composed (client_composed). /clear
// starts a new session: its result still names the old one, and the
// next turn's init line the new. Another command does not reach the
// model (offline, /help ended as a failed execution of no turns). It
// reports whether text was a command.
func (q *qoderVoice) preempt(in *inLine, text string) bool {
	t := jsTrim(text)
	if in.ClientComposed || !strings.HasPrefix(t, "/") || len(t) == 1 {
		return false
	}
	name := strings.Fields(t[1:] + " ")[0]
	q.init(false)
	if name == "clear" || name == "new" {
		q.result(map[string]any{"subtype": "success", "is_error": false, "num_turns": 0, "result": "",
			"stop_reason": nil})
		q.mu.Lock()
		q.id, q.history = newUUID(), nil
		q.mu.Unlock()
		return true
	}
	q.result(map[string]any{"subtype": "error_during_execution", "is_error": true, "num_turns": 0,
		"stop_reason": nil, "errors": []string{qoderFailed}, "error_code": 500})
	return true
}

// begin prints a turn's init line, alone: the artifacts update follows
// initialize's only.
func (q *qoderVoice) begin(string, string) { q.init(false) }

// logout drops the stored login, and the turn ends as a logged-out one.
func (q *qoderVoice) logout() bool {
	_ = os.Remove(filepath.Join(q.e.authDir(), "user"))
	q.loggedOut()
	return true
}

// loggedOut prints the turn the CLI answers itself without a login.
func (q *qoderVoice) loggedOut() {
	q.assistant("<synthetic>", qoderNotLoggedIn, "authentication_failed", false)
	q.result(map[string]any{"subtype": "success", "is_error": true, "num_turns": 1, "result": qoderNotLoggedIn,
		"stop_reason": "stop_sequence"})
}

func (q *qoderVoice) rateLimited(string, directives) {
	q.failure("rate_limit", "Rate limit reached: too many requests, retry later (429)", 429)
}

func (q *qoderVoice) serverError() { q.failure("", qoderFailed, 500) }

func (q *qoderVoice) broken(string, string, string, string) {
	q.failure("server_error", qoderFailed, 500)
}

// failure ends a turn whose model request failed, as the CLI reports it:
// its synthetic message (with the error's code, when it has one) and an
// error result with the code as error_code.
func (q *qoderVoice) failure(code, text string, status int) {
	q.assistant("<synthetic>", text, code, false)
	q.result(map[string]any{"subtype": "error_during_execution", "is_error": true, "num_turns": 1,
		"stop_reason": "stop_sequence", "errors": []string{text}, "error_code": status})
}

// interrupted ends a turn an interrupt stopped: the message so far, marked
// aborted (with the session's model at that moment), and an error result.
func (q *qoderVoice) interrupted(_, _, _, partial string) {
	q.mu.Lock()
	model := q.model
	q.mu.Unlock()
	q.assistant(model, partial, "", true)
	q.result(map[string]any{"subtype": "error_during_execution", "is_error": true, "num_turns": 1,
		"stop_reason": nil, "errors": []string{"Operation aborted"}, "terminal_reason": "aborted"})
}

// finish prints the stream's end, the whole message and the result.
func (q *qoderVoice) finish(id, model, msgID, text, full string) {
	in, out := wordCount(text), wordCount(full)
	q.endStream(id, map[string]any{"output_tokens": out})
	q.emit(map[string]any{"type": "assistant", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "stop_reason": "end_turn", "stop_sequence": nil,
		"content": []any{map[string]any{"type": "text", "text": full}}, "usage": q.usage(in, out)},
		"parent_tool_use_id": nil, "session_id": id, "uuid": newUUID()})
	q.keep(id, text, full)
	q.mu.Lock()
	q.credits += 0.25
	q.mu.Unlock()
	q.result(map[string]any{"subtype": "success", "is_error": false, "num_turns": 1, "result": full,
		"stop_reason": "end_turn", "terminal_reason": "completed", "usage": q.usage(in, out)})
}
