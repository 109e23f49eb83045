package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// turn plays one user message: a slash command the CLI runs itself, or a
// turn of the session that the simulated model answers.
func (s *agentSession) turn(ctx context.Context, text string) {
	if s.command(text) {
		return
	}
	switch method, source := s.e.login(); {
	case method == "none":
		s.synthetic("authentication_failed", s.e.d.notLoggedIn, 0, "stop_sequence")
		return
	case strings.Contains(s.e.getenv(source), "invalid") || source == "stored" && s.e.storedRefused():
		// The upstream refuses the key (401), as the real CLI reports it.
		s.synthetic("authentication_failed", "Invalid API key · Fix external API key", 401, "stop_sequence")
		return
	}
	tctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	id, model, n, note := s.id, s.model, len(s.history)+1, s.note
	s.note = ""
	s.mu.Unlock()
	text = note + text
	defer func() {
		cancel()
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
	}()
	text = s.mentions(text)
	s.emit(map[string]any{"type": "system", "subtype": "init", "cwd": s.e.cwd, "session_id": id, "tools": s.tools,
		"mcp_servers": []any{}, "model": model, "permissionMode": "default", "claude_code_version": s.e.d.version,
		"output_style": "default", "uuid": newUUID()})
	s.emit(map[string]any{"type": "system", "subtype": "status", "status": "requesting", "session_id": id,
		"uuid": newUUID()})
	secs := relayed(parsePrompt(text))
	d := parseDirectives("")
	if s.e.directives {
		d = parseDirectives(directiveText(secs))
	}
	d = d.withDefaults(Faults{Chunks: -1, TimeScale: 1})
	if d.logout {
		_ = os.Remove(filepath.Join(s.e.configDir, s.e.d.credFile))
	}
	if d.offModel {
		// Lines no CLI was seen to print: a message type outside the
		// protocol, and a line that is not JSON.
		s.emit(map[string]any{"type": "sim_unknown", "uuid": newUUID(), "session_id": id})
		s.wmu.Lock()
		_, _ = s.e.stdout.Write([]byte("this line is not JSON\n"))
		s.wmu.Unlock()
	}
	if s.fault(tctx, id, model, d) {
		return
	}
	s.stream(tctx, id, model, n, text, secs, d)
}

// fault plays the turn's fault, when its directives ask for one, and
// reports whether it did.
func (s *agentSession) fault(ctx context.Context, id, model string, d directives) bool {
	if d.hang {
		<-ctx.Done()
		s.interrupted(id, model, "", "")
		return true
	}
	if sleepCtx(ctx, d.delay) != nil {
		s.interrupted(id, model, "", "")
		return true
	}
	switch {
	case d.ratelimit:
		if d.retryAfter != time.Second { // a reset time the directive gave
			s.emit(map[string]any{"type": "rate_limit_event", "rate_limit_info": map[string]any{"status": "rejected",
				"resetsAt": time.Now().Add(d.retryAfter).Unix()}, "uuid": newUUID(), "session_id": id})
		}
		s.synthetic("rate_limit", "API Error: Request rejected (429) · rate limited", 429, "stop_sequence")
		return true
	case d.errAfter == 0 || d.timeout:
		s.synthetic("server_error", "API Error: 500 Internal server error. This is a server-side issue, usually temporary — try again in a moment.", 500, "stop_sequence")
		return true
	}
	return false
}

// stream plays the model's answer: partial messages when asked for, the
// whole message, and the result.
func (s *agentSession) stream(ctx context.Context, id, model string, n int, text string, secs []section, d directives) {
	full := s.answer(id, n, text, secs, d)
	chunks, _ := splitChunks(full, d.chunks)
	msgID := "msg_sim" + randomHex(10)
	in := wordCount(text)
	ev := func(e map[string]any) {
		if s.partial {
			s.emit(map[string]any{"type": "stream_event", "event": e, "session_id": id, "parent_tool_use_id": nil,
				"uuid": newUUID()})
		}
	}
	ev(map[string]any{"type": "message_start", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "usage": usage(in, 0)}})
	ev(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	var sent strings.Builder
	for i, c := range chunks {
		if d.errAfter == i && i > 0 {
			s.assistant(id, model, msgID, sent.String(), "")
			s.result(id, false, "", "API Error: the stream ended early", 500)
			return
		}
		if i > 0 && sleepCtx(ctx, d.chunkDelay) != nil {
			s.interrupted(id, model, msgID, sent.String())
			return
		}
		sent.WriteString(c)
		ev(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": c}})
		if d.crash {
			fmt.Fprintln(s.e.stderr, "sim crash: exiting mid-stream")
			os.Exit(3)
		}
	}
	s.assistant(id, model, msgID, full, "")
	ev(map[string]any{"type": "content_block_stop", "index": 0})
	ev(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"input_tokens": in, "output_tokens": wordCount(full)}})
	ev(map[string]any{"type": "message_stop"})
	s.mu.Lock()
	s.history = append(s.history, exchange{question: text, answer: full})
	s.mu.Unlock()
	s.save(id, exchange{question: text, answer: full})
	s.failed = false
	s.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 1,
		"duration_api_ms": 1, "num_turns": 1, "result": full, "stop_reason": "end_turn", "session_id": id,
		"total_cost_usd": 0, "usage": usage(in, wordCount(full)), "modelUsage": map[string]any{},
		"permission_denials": []any{}, "terminal_reason": "completed", "uuid": newUUID()})
}

// answer is the simulated model's whole answer to text, the n-th turn of
// the session id.
func (s *agentSession) answer(id string, n int, text string, secs []section, d directives) string {
	s.mu.Lock()
	history := append([]exchange(nil), s.history...)
	s.mu.Unlock()
	return sessionAnswer(id, n, text, secs, d, history)
}

// sessionAnswer is an agent CLI session's answer to text, the n-th turn
// of the session id whose earlier exchanges are history (the tools an
// earlier turn offered still count).
func sessionAnswer(id string, n int, text string, secs []section, d directives, history []exchange) string {
	_, isJSON := promptFormat(secs)
	if d.whoami && !isJSON {
		return whoamiText(id, n, n > 1, len(secs), len(text))
	}
	tools := promptTools(secs)
	for i := len(history) - 1; i >= 0 && tools == nil; i-- {
		tools = promptTools(relayed(parsePrompt(history[i].question)))
	}
	p := planAnswer(secs, tools, d.calls)
	switch {
	case len(p.calls) > 0 && d.toolCode:
		return renderToolCode(p.calls[0])
	case len(p.calls) > 0:
		return renderJSONCalls(p.calls)
	case d.words >= 0:
		return padWords(p.text, d.words)
	}
	return p.text
}

// assistant prints the turn's whole assistant message (code: its error).
func (s *agentSession) assistant(id, model, msgID, text, code string) {
	m := map[string]any{"type": "assistant", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "content": []any{map[string]any{"type": "text", "text": text}},
		"stop_reason": nil, "stop_sequence": nil}, "parent_tool_use_id": nil, "session_id": id, "uuid": newUUID()}
	if code != "" {
		m["error"], m["is_api_error_message"] = code, true
	}
	s.emit(m)
}

// synthetic ends a turn the CLI answers itself with an error (no login,
// an API error): its message, then an error result.
func (s *agentSession) synthetic(code, text string, status int, stop string) {
	s.mu.Lock()
	id := s.id
	s.mu.Unlock()
	s.assistant(id, "<synthetic>", newUUID(), text, code)
	s.result(id, true, stop, text, status)
}

// result prints an error result.
func (s *agentSession) result(id string, success bool, stop, text string, status int) {
	s.failed = true
	var st any
	if status != 0 {
		st = status
	}
	var sr any
	if stop != "" {
		sr = stop
	}
	subtype := "success"
	if !success && stop == "" {
		subtype = "error_during_execution"
	}
	s.emit(map[string]any{"type": "result", "subtype": subtype, "is_error": true, "duration_ms": 0,
		"duration_api_ms": 0, "num_turns": 1, "result": text, "stop_reason": sr, "session_id": id,
		"total_cost_usd": 0, "usage": usage(0, 0), "api_error_status": st, "terminal_reason": "api_error",
		"uuid": newUUID()})
}

// interrupted ends a turn stopped by an interrupt, as the real CLI does:
// the partial message, the user's interruption, an error result.
func (s *agentSession) interrupted(id, model, msgID, partial string) {
	if msgID != "" {
		s.assistant(id, model, msgID, partial, "")
	}
	s.emit(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "[Request interrupted by user]"}}}, "parent_tool_use_id": nil,
		"session_id": id, "uuid": newUUID()})
	if msgID != "" && s.partial {
		for _, e := range []map[string]any{{"type": "content_block_stop", "index": 0},
			{"type": "message_delta", "delta": map[string]any{"stop_reason": nil}}, {"type": "message_stop"}} {
			s.emit(map[string]any{"type": "stream_event", "event": e, "session_id": id, "parent_tool_use_id": nil,
				"uuid": newUUID()})
		}
	}
	s.failed = false
	s.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "is_error": true, "duration_ms": 0,
		"duration_api_ms": 0, "num_turns": 2, "stop_reason": nil, "session_id": id, "total_cost_usd": 0,
		"usage": usage(0, 0), "terminal_reason": "aborted_streaming",
		"errors": []string{"[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"}, "uuid": newUUID()})
}

// command runs a slash command that opens the message, as the real CLI
// does with a message that starts with "/": the reset command starts a new
// session; another command it knows is answered without the model. It
// reports whether text was one.
func (s *agentSession) command(text string) bool {
	if !strings.HasPrefix(text, "/") {
		return false
	}
	name := strings.TrimPrefix(strings.Fields(text + " ")[0], "/")
	if !s.e.d.commands[name] {
		return false // not a command: the model gets it
	}
	s.mu.Lock()
	old := s.id
	s.mu.Unlock()
	if "/"+name == s.e.d.reset && !s.o.has("--disable-slash-commands") {
		id := newUUID()
		s.mu.Lock()
		// The new conversation keeps a note of the command, which the
		// model reads with the next message, as the real CLI's does.
		s.id, s.history, s.note = id, nil, fmt.Sprintf(clearNote, name, strings.TrimSpace(strings.TrimPrefix(text, "/"+name)))
		s.mu.Unlock()
		s.emit(map[string]any{"type": "conversation_reset", "new_conversation_id": newUUID(), "uuid": newUUID(),
			"trigger": "clear"})
		s.emit(map[string]any{"type": "system", "subtype": "background_tasks_changed", "tasks": []any{},
			"uuid": newUUID(), "session_id": old})
		s.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 0,
			"duration_api_ms": 0, "num_turns": 0, "result": "", "stop_reason": nil, "session_id": id,
			"total_cost_usd": 0, "usage": usage(0, 0), "uuid": newUUID()})
		return true
	}
	msg := "/" + name + " isn't available in this environment."
	s.assistant(old, "<synthetic>", newUUID(), msg, "")
	s.emit(map[string]any{"type": "result", "subtype": "success", "is_error": false, "duration_ms": 0,
		"duration_api_ms": 0, "num_turns": 0, "result": msg, "stop_reason": nil, "session_id": old,
		"total_cost_usd": 0, "usage": usage(0, 0), "uuid": newUUID()})
	return true
}

// storedRefused reports whether the stored login is one the upstream
// refuses (its token contains "invalid").
func (e *agentEnv) storedRefused() bool {
	c, err := e.readCreds()
	return err == nil && strings.Contains(c.OAuth.AccessToken, "invalid")
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
func (s *agentSession) mentions(text string) string {
	if s.e.getenv(s.e.d.mentionsOff) == "1" {
		return text
	}
	for _, m := range mentionRE.FindAllStringSubmatch(text, -1) {
		p := m[1]
		if !filepath.IsAbs(p) {
			p = filepath.Join(s.e.cwd, p)
		}
		if b, err := os.ReadFile(p); err == nil {
			text += fmt.Sprintf("\n[attached %s: %s]", m[1], strings.TrimSpace(string(b)))
		}
	}
	return text
}
