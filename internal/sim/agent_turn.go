package sim

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// turn plays one user message: one the CLI answers itself, or a turn of
// the session that the simulated model answers.
func (s *agentSession) turn(ctx context.Context, in *inLine) {
	text := messageText(in.Message.Content)
	if s.v.preempt(in, text) {
		return
	}
	tctx, cancel := context.WithCancel(ctx)
	s.mu.Lock()
	s.cancel = cancel
	id, model, n, note := s.id, s.model, len(s.history)+1, s.note
	s.note = ""
	s.mu.Unlock()
	defer func() {
		cancel()
		s.mu.Lock()
		s.cancel = nil
		s.mu.Unlock()
	}()
	s.v.begin(id, model)
	text = s.v.mentions(note + text)
	secs := relayed(parsePrompt(text))
	d := directivesOf(s.e.directives, secs).withDefaults(Faults{Chunks: -1, TimeScale: 1})
	if d.logout && s.v.logout() {
		return
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
	switch {
	case d.hang:
		<-ctx.Done()
		s.v.interrupted(id, model, "", "")
	case sleepCtx(ctx, d.delay) != nil:
		s.v.interrupted(id, model, "", "")
	case d.ratelimit:
		s.v.rateLimited(id, d)
	case d.errAfter == 0 || d.timeout:
		s.v.serverError()
	default:
		return false
	}
	return true
}

// stream plays the model's answer: partial messages when asked for, then
// the dialect's whole message and result.
func (s *agentSession) stream(ctx context.Context, id, model string, n int, text string, secs []section, d directives) {
	full := s.answer(id, n, text, secs, d)
	chunks, _ := splitChunks(full, d.chunks)
	msgID := s.e.d.msgPrefix + randomHex(s.e.d.msgHex)
	s.event(id, map[string]any{"type": "message_start", "message": map[string]any{"id": msgID, "type": "message",
		"role": "assistant", "model": model, "content": []any{}, "stop_reason": nil,
		"usage": s.v.usage(wordCount(text), 0)}})
	s.event(id, map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{
		"type": "text", "text": ""}})
	var sent strings.Builder
	for i, c := range chunks {
		if d.errAfter == i && i > 0 {
			s.v.broken(id, model, msgID, sent.String())
			return
		}
		if i > 0 && sleepCtx(ctx, d.chunkDelay) != nil {
			s.v.interrupted(id, model, msgID, sent.String())
			return
		}
		sent.WriteString(c)
		s.event(id, map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{
			"type": "text_delta", "text": c}})
		if d.crash {
			fmt.Fprintln(s.e.stderr, "sim crash: exiting mid-stream")
			os.Exit(3)
		}
	}
	s.v.finish(id, model, msgID, text, full)
}

// answer is the simulated model's whole answer to text, the n-th turn of
// the session id (the tools an earlier turn offered still count).
func (s *agentSession) answer(id string, n int, text string, secs []section, d directives) string {
	if _, isJSON := promptFormat(secs); d.whoami && !isJSON {
		return whoamiText(id, n, n > 1, len(secs), len(text))
	}
	s.mu.Lock()
	history := s.history // appended to, never changed in place
	s.mu.Unlock()
	tools := promptTools(secs)
	for i := len(history) - 1; i >= 0 && tools == nil; i-- {
		tools = promptTools(relayed(parsePrompt(history[i].question)))
	}
	return planText(secs, tools, d)
}
