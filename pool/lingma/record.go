package lingma

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// RecordConfig says which workers write a transcript of each turn
// (lingmarpc's format, redacted) and where. A transcript is how a real
// worker's behaviour becomes a regression test: the simulator replays it.
type RecordConfig struct {
	// All records every worker; otherwise only those whose account asks
	// (worker.Account.Record). Default off.
	All bool
	// Dir holds the transcripts, one sub-directory per instance; "" puts
	// them in each work dir's transcripts/.
	Dir string
	// MaxBytes caps one transcript; past it the rest of the turn is
	// dropped. Default 1 MiB.
	MaxBytes int64
	// Keep is how many transcripts an instance keeps; older ones are
	// removed. Default 100.
	Keep int
	// Prompts keeps the prompt text (the request log's debug capture);
	// default redacted.
	Prompts bool
}

// setupMethods are the calls a replay answers whenever they come; each
// transcript starts with the connection's latest exchange of each.
var setupMethods = []string{"initialize", "auth/status", "config/queryModels"}

// recorder writes one worker connection's turns, a transcript per turn.
// The driver calls in and out with every frame body it reads and writes;
// a frame goes to the turn it belongs to: by its requestId, by its
// session, or as the answer to a request of that turn. Frames of no turn
// are dropped, but for the last exchange of each setup method.
type recorder struct {
	dir  string
	cfg  RecordConfig
	name string
	log  *slog.Logger

	mu       sync.Mutex
	calls    map[string]call                        // "s:ID" (our requests), "r:ID" (the worker's): what they are
	setup    map[string][2][]byte                   // method -> its last request and response, redacted
	open     map[string]*lingmarpc.TranscriptWriter // requestId -> its transcript
	files    map[string]*os.File
	sessions map[string]string // sessionId -> the requestId of its open turn
}

// call is a request in flight: its method and the turn it belongs to ("" for
// none, "*" for every open one).
type call struct {
	method, turn string
	body         []byte // setup requests only: kept until answered
}

func newRecorder(dir string, cfg RecordConfig, name string, log *slog.Logger) (*recorder, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lingma %s: transcripts: %w", name, err)
	}
	return &recorder{dir: dir, cfg: cfg, name: name, log: log, calls: map[string]call{}, setup: map[string][2][]byte{},
		open: map[string]*lingmarpc.TranscriptWriter{}, files: map[string]*os.File{}, sessions: map[string]string{}}, nil
}

// frameHead is what the recorder reads of a message to place it.
type frameHead struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID string `json:"requestId"`
		SessionID string `json:"sessionId"`
	} `json:"params"`
}

// out records a message the driver sent (a whole frame, header included).
func (r *recorder) out(frame []byte) {
	body, _, err := lingmarpc.Split(frame)
	if err != nil {
		return
	}
	r.record(lingmarpc.Send, body)
}

// in records a message the worker sent (a frame's body).
func (r *recorder) in(body []byte) { r.record(lingmarpc.Recv, body) }

func (r *recorder) record(dir string, body []byte) {
	var h frameHead
	if json.Unmarshal(body, &h) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) > 10000 { // answers that never came: forget them
		clear(r.calls)
	}
	mine, theirs := "s:"+string(h.ID), "r:"+string(h.ID)
	if dir == lingmarpc.Recv {
		mine, theirs = theirs, mine
	}
	if h.Method == "" { // an answer to the other side's request
		c := r.calls[theirs]
		delete(r.calls, theirs)
		red := lingmarpc.Redact(body, c.method, r.cfg.Prompts)
		if slices.Contains(setupMethods, c.method) && c.body != nil {
			r.setup[c.method] = [2][]byte{c.body, red}
		}
		r.write(c.turn, dir, red)
		return
	}
	if h.Method == "chat/ask" && dir == lingmarpc.Send {
		r.start(h.Params.RequestID)
	}
	turn := r.turnOf(&h)
	red := lingmarpc.Redact(body, h.Method, r.cfg.Prompts)
	if len(h.ID) > 0 {
		c := call{method: h.Method, turn: turn}
		if slices.Contains(setupMethods, h.Method) {
			c.body = red
		}
		r.calls[mine] = c
	}
	r.write(turn, dir, red)
}

// turnOf is the turn a request or notification belongs to.
func (r *recorder) turnOf(h *frameHead) string {
	p := &h.Params
	if p.RequestID != "" {
		if p.SessionID != "" && r.open[p.RequestID] != nil {
			r.sessions[p.SessionID] = p.RequestID
		}
		return p.RequestID
	}
	if t := r.sessions[p.SessionID]; p.SessionID != "" && t != "" {
		return t
	}
	if slices.Contains(setupMethods, h.Method) || strings.HasPrefix(h.Method, "login/") || strings.HasPrefix(h.Method, "config/") {
		return ""
	}
	return "*"
}

// start opens the transcript of turn reqID, beginning with the setup
// exchanges seen so far.
func (r *recorder) start(reqID string) {
	if reqID == "" || r.open[reqID] != nil {
		return
	}
	name := time.Now().UTC().Format("20060102-150405.000") + "-" + safeName(reqID) + ".jsonl"
	f, err := os.OpenFile(filepath.Join(r.dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		r.log.Warn("lingma: transcript not written", "instance", r.name, "err", err)
		return
	}
	tw, err := lingmarpc.NewTranscriptWriter(f, lingmarpc.Header{Prompts: r.cfg.Prompts,
		Note: "poolgate lingma driver, instance " + r.name + ", turn " + reqID}, r.cfg.MaxBytes)
	if err != nil {
		_ = f.Close()
		return
	}
	for _, m := range setupMethods {
		if ex, ok := r.setup[m]; ok {
			_ = tw.Write(lingmarpc.Send, ex[0])
			_ = tw.Write(lingmarpc.Recv, ex[1])
		}
	}
	r.open[reqID], r.files[reqID] = tw, f
	r.prune()
}

// write appends a message to the turn's transcript ("*": every open one).
func (r *recorder) write(turn, dir string, body []byte) {
	if turn == "*" {
		for _, tw := range r.open {
			_ = tw.Write(dir, body)
		}
		return
	}
	if tw := r.open[turn]; tw != nil {
		if err := tw.Write(dir, body); err != nil {
			r.log.Warn("lingma: transcript write", "instance", r.name, "err", err)
		}
	}
}

// end closes the transcript of turn reqID.
func (r *recorder) end(reqID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f := r.files[reqID]; f != nil {
		_ = f.Close()
	}
	delete(r.open, reqID)
	delete(r.files, reqID)
	for s, t := range r.sessions {
		if t == reqID {
			delete(r.sessions, s)
		}
	}
}

// close closes every open transcript.
func (r *recorder) close() {
	r.mu.Lock()
	ids := make([]string, 0, len(r.open))
	for id := range r.open {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	for _, id := range ids {
		r.end(id)
	}
}

// prune removes the oldest transcripts beyond Keep (names sort by time).
func (r *recorder) prune() {
	names, err := filepath.Glob(filepath.Join(r.dir, "*.jsonl"))
	if err != nil || len(names) <= r.cfg.Keep {
		return
	}
	slices.Sort(names)
	for _, n := range names[:len(names)-r.cfg.Keep] {
		_ = os.Remove(n)
	}
}

// safeName keeps a requestId usable in a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}
