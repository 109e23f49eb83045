package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// claudeVoice is Claude Code's part of a session: its lines, its login
// and its slash commands.
type claudeVoice struct{ *agentSession }

// login is how the process is logged in: the variable that holds its key
// or token, "stored" for the credentials file, "" for none.
func (e *agentEnv) login() (method, source string) {
	for _, k := range e.d.keyEnvs {
		if e.getenv(k) != "" {
			return "api_key", k
		}
	}
	for _, k := range e.d.tokenEnvs {
		if e.getenv(k) != "" {
			return "oauth_token", k
		}
	}
	if _, err := os.Stat(filepath.Join(e.configDir, e.d.credFile)); err == nil {
		return "claude.ai", "stored"
	}
	return "none", ""
}

// storedRefused reports whether the stored login is one the upstream
// refuses (its token contains "invalid").
func (e *agentEnv) storedRefused() bool {
	c, err := e.readCreds()
	return err == nil && strings.Contains(c.OAuth.AccessToken, "invalid")
}

// start takes the session to continue (--resume) or starts one.
func (c claudeVoice) start(context.Context) error {
	id := c.o["--resume"]
	if id == "" {
		c.id = c.o["--session-id"]
		if c.id == "" {
			c.id = newUUID()
		}
		return nil
	}
	var msg string
	if !uuidRE.MatchString(id) {
		msg = fmt.Sprintf("Error: --resume requires a valid session ID or session title when used with --print. Usage: claude -p --resume <session-id|title>. Provided value %q is not a UUID and does not match any session title.", id)
		c.id = newUUID()
	} else if h, err := c.load(id, true); err != nil {
		msg = "No conversation found with session ID: " + id
		c.id = id
	} else {
		c.id, c.history = id, h
		return nil
	}
	c.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "duration_ms": 0, "is_error": true,
		"num_turns": 0, "stop_reason": nil, "session_id": c.id, "total_cost_usd": 0, "usage": c.usage(0, 0),
		"errors": []string{msg}, "uuid": newUUID()})
	fmt.Fprintln(c.e.stderr, msg)
	return errors.New(msg)
}

// control answers a control request, named by its subtype.
func (c claudeVoice) control(in *inLine) {
	switch in.Request.Subtype {
	case "initialize":
		c.reply(in, c.initialize())
	case "get_binary_version":
		c.reply(in, map[string]any{"version": c.e.d.version})
	case "set_model":
		c.mu.Lock()
		if in.Request.Model != nil && *in.Request.Model != "default" {
			c.model = *in.Request.Model
		}
		c.mu.Unlock()
		c.reply(in, map[string]any{})
	case "interrupt":
		c.interrupt(in)
	default:
		c.deny(in, "Unsupported control request subtype: "+in.Request.Subtype, "unsupported_request")
	}
}

// initialize is the initialize answer: what the real one lists that a
// driver reads (models, account), in its shape.
func (c claudeVoice) initialize() map[string]any {
	var models []map[string]any
	for _, m := range c.e.d.models {
		models = append(models, map[string]any{"value": m[0], "displayName": m[1], "description": m[1]})
	}
	account := map[string]any{"tokenSource": "none", "apiProvider": "firstParty"}
	switch method, source := c.e.login(); method {
	case "api_key":
		account["apiKeySource"] = source
	case "oauth_token":
		account["tokenSource"] = source
	case "claude.ai":
		delete(account, "tokenSource")
		account["subscriptionType"] = "Claude Pro"
	}
	return map[string]any{"commands": []any{}, "agents": []any{}, "output_style": "default",
		"available_output_styles": []string{"default"}, "models": models, "account": account, "pid": os.Getpid(),
		"claude_code_version": c.e.d.version, "capabilities": []string{}}
}

// usage is Claude Code's usage object.
func (claudeVoice) usage(in, out int) map[string]any {
	return map[string]any{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		"output_tokens": out}
}

// preempt runs a slash command, or ends a turn without a login the
// upstream takes as the real CLI reports it.
func (c claudeVoice) preempt(_ *inLine, text string) bool {
	if c.command(text) {
		return true
	}
	switch method, source := c.e.login(); {
	case method == "none":
		c.synthetic("authentication_failed", c.e.d.notLoggedIn, 0)
		return true
	case strings.Contains(c.e.getenv(source), "invalid") || source == "stored" && c.e.storedRefused():
		// The upstream refuses the key (401), as the real CLI reports it.
		c.synthetic("authentication_failed", "Invalid API key · Fix external API key", 401)
		return true
	}
	return false
}

// begin prints a turn's init and status lines.
func (c claudeVoice) begin(id, model string) {
	c.emit(map[string]any{"type": "system", "subtype": "init", "cwd": c.e.cwd, "session_id": id, "tools": c.tools,
		"mcp_servers": []any{}, "model": model, "permissionMode": "default", "claude_code_version": c.e.d.version,
		"output_style": "default", "uuid": newUUID()})
	c.emit(map[string]any{"type": "system", "subtype": "status", "status": "requesting", "session_id": id,
		"uuid": newUUID()})
}

// logout drops the stored login; the turn goes on.
func (c claudeVoice) logout() bool {
	_ = os.Remove(filepath.Join(c.e.configDir, c.e.d.credFile))
	return false
}

// rateLimited ends a turn the upstream refused with a 429 (and its reset
// time, when the directive gave one).
func (c claudeVoice) rateLimited(id string, d directives) {
	if d.retryAfter != time.Second {
		c.emit(map[string]any{"type": "rate_limit_event", "rate_limit_info": map[string]any{"status": "rejected",
			"resetsAt": time.Now().Add(d.retryAfter).Unix()}, "uuid": newUUID(), "session_id": id})
	}
	c.synthetic("rate_limit", "API Error: Request rejected (429) · rate limited", 429)
}

func (c claudeVoice) serverError() {
	c.synthetic("server_error", "API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment.", 500)
}

func (c claudeVoice) broken(id, model, msgID, sent string) {
	c.assistant(id, model, msgID, sent, "")
	c.result(id, nil, "API Error: the stream ended early", 500)
}

// finish prints the whole message, the stream's end and the result.
func (c claudeVoice) finish(id, model, msgID, text, full string) {
	in, out := wordCount(text), wordCount(full)
	c.assistant(id, model, msgID, full, "")
	c.endStream(id, map[string]any{"input_tokens": in, "output_tokens": out})
	c.keep(id, text, full)
	c.failed = false
	c.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1,
		"duration_api_ms": 1, "num_turns": 1, "result": full, "stop_reason": "end_turn", "session_id": id,
		"total_cost_usd": 0, "usage": c.usage(in, out), "modelUsage": map[string]any{},
		"permission_denials": []any{}, "terminal_reason": "completed", "uuid": newUUID()})
}

// assistant prints the turn's whole assistant message (code: its error).
func (c claudeVoice) assistant(id, model, msgID, text, code string) {
	m := map[string]any{"type": "assistant", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "content": []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": nil, "stop_sequence": nil}, "parent_tool_use_id": nil, "session_id": id, "uuid": newUUID()}
	if code != "" {
		m["error"], m["is_api_error_message"] = code, true
	}
	c.emit(m)
}

// synthetic ends a turn the CLI answers itself with an error (no login,
// an API error): its message, then an error result.
func (c claudeVoice) synthetic(code, text string, status int) {
	c.mu.Lock()
	id := c.id
	c.mu.Unlock()
	c.assistant(id, "<synthetic>", newUUID(), text, code)
	c.result(id, "stop_sequence", text, status)
}

// result prints an error result: a synthetic message's, which a stop
// sequence ended, or a broken stream's (stop nil).
func (c claudeVoice) result(id string, stop any, text string, status int) {
	c.failed = true
	var st any
	if status != 0 {
		st = status
	}
	subtype := "success"
	if stop == nil {
		subtype = "error_during_execution"
	}
	c.emit(map[string]any{"type": "result", "subtype": subtype, "is_error": true, "duration_ms": 0,
		"duration_api_ms": 0, "num_turns": 1, "result": text, "stop_reason": stop, "session_id": id,
		"total_cost_usd": 0, "usage": c.usage(0, 0), "api_error_status": st, "terminal_reason": "api_error",
		"uuid": newUUID()})
}

// interrupted ends a turn stopped by an interrupt, as the real CLI does:
// the partial message, the user's interruption, an error result.
func (c claudeVoice) interrupted(id, model, msgID, partial string) {
	if msgID != "" {
		c.assistant(id, model, msgID, partial, "")
	}
	c.emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "[Request interrupted by user]"}}}, "parent_tool_use_id": nil,
		"session_id": id, "uuid": newUUID()})
	if msgID != "" {
		for _, e := range []map[string]any{{"type": "content_block_stop", "index": 0},
			{"type": "message_delta", "delta": map[string]any{"stop_reason": nil}}, {"type": "message_stop"}} {
			c.event(id, e)
		}
	}
	c.failed = false
	c.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true, "duration_ms": 0,
		"duration_api_ms": 0, "num_turns": 2, "stop_reason": nil, "session_id": id, "total_cost_usd": 0,
		"usage": c.usage(0, 0), "terminal_reason": "aborted_streaming",
		"errors": []string{"[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"}, "uuid": newUUID()})
}

// command runs a slash command that opens the message, as the real CLI
// does with a message that starts with "/": the reset command starts a new
// session; another command it knows is answered without the model. It
// reports whether text was one.
func (c claudeVoice) command(text string) bool {
	if !strings.HasPrefix(text, "/") {
		return false
	}
	name := strings.TrimPrefix(strings.Fields(text + " ")[0], "/")
	if !c.e.d.commands[name] {
		return false // not a command: the model gets it
	}
	c.mu.Lock()
	id := c.id
	c.mu.Unlock()
	result := "/" + name + " isn't available in this environment."
	if "/"+name == c.e.d.reset && !c.o.has("--disable-slash-commands") {
		old := id
		id, result = newUUID(), ""
		c.mu.Lock()
		// The new conversation keeps a note of the command, which the
		// model reads with the next message, as the real CLI's does.
		c.id, c.history, c.note = id, nil, fmt.Sprintf(clearNote, name, strings.TrimSpace(strings.TrimPrefix(text, "/"+name)))
		c.mu.Unlock()
		c.emit(map[string]any{"type": "conversation_reset", "new_conversation_id": newUUID(), "uuid": newUUID(),
			"trigger": "clear"})
		c.emit(map[string]any{"type": "system", "subtype": "background_tasks_changed", "tasks": []any{},
			"uuid": newUUID(), "session_id": old})
	} else {
		c.assistant(id, "<synthetic>", newUUID(), result, "")
	}
	c.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 0,
		"duration_api_ms": 0, "num_turns": 0, "result": result, "stop_reason": nil, "session_id": id,
		"total_cost_usd": 0, "usage": c.usage(0, 0), "uuid": newUUID()})
	return true
}

// clearNote is what the real CLI keeps of a /clear in the conversation it
// starts, and sends the model before the next message.
const clearNote = "<local-command-caveat>The command below was run directly in Claude Code, not sent to you as a " +
	"request, and its output goes straight to the user. It's recorded here as context for later messages." +
	"</local-command-caveat>\n\n\n<command-name>/%s</command-name>\n            <command-message>clear</command-message>\n" +
	"            <command-args>%s</command-args>\n\n\n<local-command-stdout></local-command-stdout>\n\n\n"

// mentionRE finds @file mentions.
var mentionRE = regexp.MustCompile(`(?:^|\s)@(\S+)`)

// mentions attaches the files the message mentions, as the real CLI reads
// them into the model's context unless its variable turns that off; the
// simulated model shows what it was given.
func (c claudeVoice) mentions(text string) string {
	if c.e.getenv(c.e.d.mentionsOff) == "1" {
		return text
	}
	for _, m := range mentionRE.FindAllStringSubmatch(text, -1) {
		p := m[1]
		if !filepath.IsAbs(p) {
			p = filepath.Join(c.e.cwd, p)
		}
		if b, err := os.ReadFile(p); err == nil {
			text += fmt.Sprintf("\n[attached %s: %s]", m[1], strings.TrimSpace(string(b)))
		}
	}
	return text
}
