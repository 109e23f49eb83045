package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// agentSession is one print-mode process: its session (the conversation
// it holds) and its output. The loop that reads its input, the turn path
// and the session files are the same in every dialect; v says the
// dialect's lines.
type agentSession struct {
	e       *agentEnv
	o       printOptions
	v       voice
	partial bool
	tools   []string

	wmu sync.Mutex // one line at a time

	mu      sync.Mutex
	id      string
	history []exchange
	model   string
	cancel  context.CancelFunc // the running turn's
	failed  bool               // the last turn ended in an error
	note    string             // what a reset left for the next message
}

// voice is a dialect's part of a session: what it prints where the
// dialects differ.
type voice interface {
	// start readies the session before its input is read (its login,
	// the session it continues); an error ends the process.
	start(ctx context.Context) error
	// control answers a control request.
	control(in *inLine)
	// preempt answers a message the model never gets (a command the CLI
	// runs itself, a turn it cannot make) and reports whether it did.
	preempt(in *inLine, text string) bool
	// begin prints a turn's first lines.
	begin(id, model string)
	// mentions attaches the files the message mentions.
	mentions(text string) string
	// logout plays [[sim:logout]] and reports whether that ends the turn.
	logout() bool
	// usage is a message's token usage.
	usage(in, out int) map[string]any
	// rateLimited and serverError end a turn whose model request failed.
	rateLimited(id string, d directives)
	serverError()
	// broken ends a turn whose stream broke after sent; interrupted, one
	// an interrupt stopped (msgID "" before its message started).
	broken(id, model, msgID, sent string)
	interrupted(id, model, msgID, partial string)
	// finish prints a whole answer's last lines and its result, and keeps
	// the exchange.
	finish(id, model, msgID, text, full string)
}

// session reads user messages and control requests until its input ends.
func (e *agentEnv) session(ctx context.Context, o printOptions) error {
	s := &agentSession{e: e, o: o, partial: o.has("--include-partial-messages"), model: o["--model"],
		tools: []string{}}
	if s.model == "" {
		s.model = e.d.defaultModel
	}
	if !o.has("--tools") || o["--tools"] != "" {
		s.tools = e.d.defaultTools
	}
	s.v = e.d.voice(s)
	if err := s.v.start(ctx); err != nil {
		return err
	}
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		r := bufio.NewReaderSize(e.stdin, 1<<16)
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
	turns := make(chan *inLine, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for in := range turns {
			s.turn(ctx, in)
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
				if s.failed {
					return errors.New("the last turn failed")
				}
				return nil
			}
			s.input(line, turns)
		case <-ctx.Done():
			return nil
		}
	}
}

// inLine is what the simulator reads of a line on its input.
type inLine struct {
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
	// ClientComposed says the host composed the text (Qoder CLI's): a
	// "/" opening it is no command.
	ClientComposed bool `json:"client_composed"`
}

// input handles one line of input: a control request now, a user message
// in its turn.
func (s *agentSession) input(line []byte, turns chan<- *inLine) {
	var in inLine
	if err := json.Unmarshal(line, &in); err != nil {
		fmt.Fprintf(s.e.stderr, "Error parsing streaming input line: %v\n", err)
		return
	}
	switch {
	case in.Type == "control_request":
		s.v.control(&in)
	case in.Type == "user" && in.Message != nil:
		turns <- &in
	case s.e.d.quiet || in.Type == "control_response" || in.Type == "keep_alive":
	case in.Type == "user":
		fmt.Fprintln(s.e.stderr, "Error: a user message without its message")
	default:
		fmt.Fprintf(s.e.stderr, "Error: unexpected message type %q on input\n", in.Type)
	}
}

// messageText is a message's text: its content is a string or content
// blocks, of which the text blocks count.
func messageText(raw json.RawMessage) string {
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	var blocks []struct{ Type, Text string }
	_ = json.Unmarshal(raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// reply answers a control request with success (and resp, when not nil).
func (s *agentSession) reply(in *inLine, resp any) {
	r := map[string]any{"subtype": "success", "request_id": in.RequestID}
	if resp != nil {
		r["response"] = resp
	}
	s.emit(map[string]any{"type": "control_response", "response": r})
}

// deny answers a control request with an error (and its code, when not "").
func (s *agentSession) deny(in *inLine, msg, code string) {
	r := map[string]any{"subtype": "error", "request_id": in.RequestID, "error": msg}
	if code != "" {
		r["error_code"] = code
	}
	s.emit(map[string]any{"type": "control_response", "response": r})
}

// interrupt stops the running turn and answers the request.
func (s *agentSession) interrupt(in *inLine) {
	s.mu.Lock()
	if s.cancel != nil {
		s.cancel()
	}
	s.mu.Unlock()
	s.reply(in, map[string]any{"still_queued": []string{}})
}

// sessionFile is where a session's exchanges are kept.
func (s *agentSession) sessionFile(id string) string {
	return filepath.Join(s.e.projectDir(), id+".jsonl")
}

// load reads a kept session; a line that is not an exchange fails it
// when strict, and is skipped when not.
func (s *agentSession) load(id string, strict bool) ([]exchange, error) {
	if !uuidRE.MatchString(id) {
		return nil, errors.New("not a session id")
	}
	b, err := os.ReadFile(s.sessionFile(id))
	if err != nil {
		return nil, err
	}
	var out []exchange
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var x struct{ Question, Answer string }
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			if strict && l != "" {
				return nil, err
			}
			continue
		}
		out = append(out, exchange{question: x.Question, answer: x.Answer})
	}
	return out, nil
}

// keep adds an exchange to the session and appends it to its file.
func (s *agentSession) keep(id, text, full string) {
	x := exchange{question: text, answer: full}
	s.mu.Lock()
	s.history = append(s.history, x)
	s.mu.Unlock()
	if s.o.has("--no-session-persistence") || os.MkdirAll(s.e.projectDir(), 0o700) != nil {
		return
	}
	f, err := os.OpenFile(s.sessionFile(id), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	b, _ := json.Marshal(map[string]string{"question": x.question, "answer": x.answer})
	_, _ = f.Write(append(b, '\n'))
}

// emit prints one line.
func (s *agentSession) emit(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _ = s.e.stdout.Write(append(b, '\n'))
}

// event prints a stream event, when partial messages were asked for.
func (s *agentSession) event(id string, e map[string]any) {
	if s.partial {
		s.emit(map[string]any{"type": "stream_event", "event": e, "session_id": id, "parent_tool_use_id": nil,
			"uuid": newUUID()})
	}
}

// endStream prints the stream events that close a whole message.
func (s *agentSession) endStream(id string, usage map[string]any) {
	s.event(id, map[string]any{"type": "content_block_stop", "index": 0})
	s.event(id, map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn",
		"stop_sequence": nil}, "usage": usage})
	s.event(id, map[string]any{"type": "message_stop"})
}
