package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// agentSession is one print-mode process: its session (the conversation
// it holds) and its output.
type agentSession struct {
	e       *agentEnv
	o       printOptions
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

// session reads user messages and control requests until its input ends.
func (e *agentEnv) session(ctx context.Context, o printOptions) error {
	s := &agentSession{e: e, o: o, partial: o.has("--include-partial-messages"), model: o["--model"]}
	if s.model == "" {
		s.model = "claude-sim-1"
	}
	s.tools = []string{}
	if !o.has("--tools") || o["--tools"] != "" {
		s.tools = e.d.defaultTools
	}
	if err := s.open(); err != nil {
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
	turns := make(chan string, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for text := range turns {
			s.turn(ctx, text)
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

// open takes the session to continue (--resume) or starts one.
func (s *agentSession) open() error {
	id := s.o["--resume"]
	if id == "" {
		s.id = s.o["--session-id"]
		if s.id == "" {
			s.id = newUUID()
		}
		return nil
	}
	var msg string
	if !uuidRE.MatchString(id) {
		msg = fmt.Sprintf("Error: --resume requires a valid session ID or session title when used with --print. Usage: claude -p --resume <session-id|title>. Provided value %q is not a UUID and does not match any session title.", id)
		s.id = newUUID()
	} else if h, err := s.load(id); err != nil {
		msg = "No conversation found with session ID: " + id
		s.id = id
	} else {
		s.id, s.history = id, h
		return nil
	}
	s.emit(map[string]any{"type": "result", "subtype": "error_during_execution", "duration_ms": 0, "is_error": true,
		"num_turns": 0, "stop_reason": nil, "session_id": s.id, "total_cost_usd": 0, "usage": usage(0, 0),
		"errors": []string{msg}, "uuid": newUUID()})
	fmt.Fprintln(s.e.stderr, msg)
	return errors.New(msg)
}

// sessionFile is where a session's exchanges are kept.
func (s *agentSession) sessionFile(id string) string {
	return filepath.Join(s.e.projectDir(), id+".jsonl")
}

func (s *agentSession) load(id string) ([]exchange, error) {
	f, err := os.Open(s.sessionFile(id))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []exchange
	dec := json.NewDecoder(f)
	for {
		var x struct{ Question, Answer string }
		if err := dec.Decode(&x); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		out = append(out, exchange{question: x.Question, answer: x.Answer})
	}
}

// save appends an exchange to the session's file.
func (s *agentSession) save(id string, x exchange) {
	if s.o.has("--no-session-persistence") {
		return
	}
	if err := os.MkdirAll(s.e.projectDir(), 0o700); err != nil {
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

// inLine is what the simulator reads of a line on its input.
type inLine struct {
	Type      string `json:"type"`
	RequestID string `json:"request_id"`
	Request   struct {
		Subtype string  `json:"subtype"`
		Model   *string `json:"model"`
	} `json:"request"`
	Message *struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"message"`
}

// input handles one line of input: a control request now, a user message
// in its turn.
func (s *agentSession) input(line []byte, turns chan<- string) {
	var in inLine
	if err := json.Unmarshal(line, &in); err != nil {
		fmt.Fprintf(s.e.stderr, "Error parsing streaming input line: %v\n", err)
		return
	}
	switch in.Type {
	case "control_request":
		s.control(&in)
	case "user":
		if in.Message == nil {
			fmt.Fprintln(s.e.stderr, "Error: a user message without its message")
			return
		}
		turns <- (&agentContent{raw: in.Message.Content}).text()
	case "control_response", "keep_alive":
	default:
		fmt.Fprintf(s.e.stderr, "Error: unexpected message type %q on input\n", in.Type)
	}
}

// agentContent is a message's content: a string or content blocks.
type agentContent struct{ raw json.RawMessage }

func (c *agentContent) text() string {
	var str string
	if json.Unmarshal(c.raw, &str) == nil {
		return str
	}
	var blocks []struct{ Type, Text string }
	_ = json.Unmarshal(c.raw, &blocks)
	var b strings.Builder
	for _, bl := range blocks {
		if bl.Type == "text" {
			b.WriteString(bl.Text)
		}
	}
	return b.String()
}

// control answers a control request.
func (s *agentSession) control(in *inLine) {
	ok := func(resp any) {
		s.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "success",
			"request_id": in.RequestID, "response": resp}})
	}
	switch in.Request.Subtype {
	case "initialize":
		ok(s.initialize())
	case "get_binary_version":
		ok(map[string]any{"version": s.e.d.version})
	case "set_model":
		s.mu.Lock()
		if in.Request.Model != nil && *in.Request.Model != "default" {
			s.model = *in.Request.Model
		}
		s.mu.Unlock()
		ok(map[string]any{})
	case "interrupt":
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.mu.Unlock()
		ok(map[string]any{"still_queued": []string{}})
	default:
		s.emit(map[string]any{"type": "control_response", "response": map[string]any{"subtype": "error",
			"request_id": in.RequestID, "error": "Unsupported control request subtype: " + in.Request.Subtype,
			"error_code": "unsupported_request"}})
	}
}

// initialize is the initialize answer: what the real one lists that a
// driver reads (models, account), in its shape.
func (s *agentSession) initialize() map[string]any {
	var models []map[string]any
	for _, m := range s.e.d.models {
		models = append(models, map[string]any{"value": m[0], "displayName": m[1], "description": m[1]})
	}
	account := map[string]any{"tokenSource": "none", "apiProvider": "firstParty"}
	switch method, source := s.e.login(); method {
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
		"claude_code_version": s.e.d.version, "capabilities": []string{}}
}

func usage(in, out int) map[string]any {
	return map[string]any{"input_tokens": in, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
		"output_tokens": out}
}

// newUUID is a random version-4 UUID.
func newUUID() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

func portOf(ln net.Listener) int { return ln.Addr().(*net.TCPAddr).Port }
