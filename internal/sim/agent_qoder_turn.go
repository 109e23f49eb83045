package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// turn plays one user message: a command the CLI runs itself, or a turn
// the simulated model answers.
func (s *qoderSession) turn(ctx context.Context, in qoderInput) {
	text := (&agentContent{raw: in.Message.Content}).text()
	if !in.ClientComposed && s.command(text) {
		return
	}
	tctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	id, model, n := s.id, s.model, len(s.history)+1
	s.mu.Unlock()
	defer func() {
		cancel()
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
	}()
	s.init(false) // a turn's init line comes alone; the artifacts update follows initialize's
	text = s.mentions(text)
	secs := relayed(parsePrompt(text))
	d := parseDirectives("")
	if s.e.directives {
		d = parseDirectives(directiveText(secs))
	}
	d = d.withDefaults(Faults{Chunks: -1, TimeScale: 1})
	if d.logout {
		_ = os.Remove(filepath.Join(s.e.authDir(), "user"))
		s.assistant("<synthetic>", qoderNotLoggedIn, "authentication_failed", false)
		s.result(map[string]any{"subtype": "success", "is_error": true, "num_turns": 1, "result": qoderNotLoggedIn,
			"stop_reason": "stop_sequence"})
		return
	}
	if d.offModel {
		s.emit(map[string]any{"type": "sim_unknown", "uuid": newUUID(), "session_id": id})
		s.wmu.Lock()
		_, _ = s.e.stdout.Write([]byte("this line is not JSON\n"))
		s.wmu.Unlock()
	}
	if d.hang {
		<-tctx.Done()
		s.aborted("")
		return
	}
	if sleepCtx(tctx, d.delay) != nil {
		s.aborted("")
		return
	}
	switch {
	case d.ratelimit:
		s.failed("rate_limit", "Rate limit reached: too many requests, retry later (429)", 429)
		return
	case d.errAfter == 0 || d.timeout:
		s.failed("", qoderFailed, 500)
		return
	}
	s.stream(tctx, id, model, n, text, secs, d)
}

// command runs a message that opens with "/" (after JavaScript's trim,
// which drops U+FEFF but not U+200B) as one of the CLI's commands,
// unless the host said the text is composed (client_composed). /clear
// starts a new session: its result still names the old one, and the
// next turn's init line the new. Another command does not reach the
// model (offline, /help ended as a failed execution of no turns). It
// reports whether text was a command.
func (s *qoderSession) command(text string) bool {
	t := jsTrim(text)
	if !strings.HasPrefix(t, "/") || len(t) == 1 {
		return false
	}
	name := strings.Fields(t[1:] + " ")[0]
	s.init(false)
	if name == "clear" || name == "new" {
		s.result(map[string]any{"subtype": "success", "is_error": false, "num_turns": 0, "result": "",
			"stop_reason": nil})
		s.mu.Lock()
		s.id, s.history = newUUID(), nil
		s.mu.Unlock()
		return true
	}
	s.result(map[string]any{"subtype": "error_during_execution", "is_error": true, "num_turns": 0,
		"stop_reason": nil, "errors": []string{qoderFailed}, "error_code": 500})
	return true
}

// failed ends a turn whose model request failed, as the CLI reports it:
// its synthetic message (with the error's code, when it has one) and an
// error result with the code as error_code.
func (s *qoderSession) failed(code, text string, status int) {
	s.assistant("<synthetic>", text, code, false)
	s.result(map[string]any{"subtype": "error_during_execution", "is_error": true, "num_turns": 1,
		"stop_reason": "stop_sequence", "errors": []string{text}, "error_code": status})
}

// aborted ends a turn an interrupt stopped: the message so far, marked
// aborted, and an error result.
func (s *qoderSession) aborted(partial string) {
	s.mu.Lock()
	model := s.model
	s.mu.Unlock()
	s.assistant(model, partial, "", true)
	s.result(map[string]any{"subtype": "error_during_execution", "is_error": true, "num_turns": 1,
		"stop_reason": nil, "errors": []string{"Operation aborted"}, "terminal_reason": "aborted"})
}

// stream plays the model's answer: partial messages when asked for, the
// whole message, the result.
func (s *qoderSession) stream(ctx context.Context, id, model string, n int, text string, secs []section, d directives) {
	full := s.answer(id, n, text, secs, d)
	chunks, _ := splitChunks(full, d.chunks)
	msgID := "msg_" + randomHex(12)
	in := wordCount(text)
	ev := func(e map[string]any) {
		if s.partial {
			s.emit(map[string]any{"type": "stream_event", "event": e, "parent_tool_use_id": nil, "uuid": newUUID(),
				"session_id": id})
		}
	}
	ev(map[string]any{"type": "message_start", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil, "usage": s.usage(in, 0)}})
	ev(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
	var sent strings.Builder
	for i, c := range chunks {
		if d.errAfter == i && i > 0 {
			s.failed("server_error", qoderFailed, 500)
			return
		}
		if i > 0 && sleepCtx(ctx, d.chunkDelay) != nil {
			s.aborted(sent.String())
			return
		}
		sent.WriteString(c)
		ev(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": c}})
		if d.crash {
			fmt.Fprintln(s.e.stderr, "sim crash: exiting mid-stream")
			os.Exit(3)
		}
	}
	ev(map[string]any{"type": "content_block_stop", "index": 0})
	ev(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn", "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": wordCount(full)}})
	ev(map[string]any{"type": "message_stop"})
	s.emit(map[string]any{"type": "assistant", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "stop_reason": "end_turn", "stop_sequence": nil,
		"content": []any{map[string]any{"type": "text", "text": full}}, "usage": s.usage(in, wordCount(full))},
		"parent_tool_use_id": nil, "session_id": id, "uuid": newUUID()})
	s.mu.Lock()
	s.history = append(s.history, exchange{question: text, answer: full})
	s.credits += 0.25
	s.mu.Unlock()
	s.save(id, exchange{question: text, answer: full})
	s.result(map[string]any{"subtype": "success", "is_error": false, "num_turns": 1, "result": full,
		"stop_reason": "end_turn", "terminal_reason": "completed", "usage": s.usage(in, wordCount(full)),
		"duration_ms": int(time.Millisecond.Milliseconds())})
}

// answer is the simulated model's whole answer to text, the n-th turn of
// the session id.
func (s *qoderSession) answer(id string, n int, text string, secs []section, d directives) string {
	s.mu.Lock()
	history := append([]exchange(nil), s.history...)
	s.mu.Unlock()
	return sessionAnswer(id, n, text, secs, d, history)
}
