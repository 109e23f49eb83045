package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// A replay plays a recorded transcript (lingmarpc's format) as the worker:
// every message the client sends is checked against the next one the
// transcript holds, and the worker's messages that follow it in the
// transcript are sent as recorded. The setup calls (initialize,
// auth/status, config/queryModels) are answered from the transcript
// whenever they come, so health checks do not disturb the script. A
// mismatch is an error the client sees: a request is answered with a
// JSON-RPC error naming it, and the turn in progress finishes with a 500
// that says it; the replay then plays nothing more.

// setupCalls are answered whenever they come.
var setupCalls = []string{"initialize", "auth/status", "config/queryModels"}

// volatile keys differ from run to run by nature: a replay does not compare
// them.
var volatile = map[string]bool{"startTime": true, "timeConsuming": true, "timestamp": true}

// script is a transcript made ready to replay.
type script struct {
	setup map[string]json.RawMessage // method -> the recorded answer
	steps []lingmarpc.Entry          // everything else, in order
}

// loadScript reads a transcript file for --replay.
func loadScript(path string) (*script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--replay: %w", err)
	}
	defer f.Close()
	t, err := lingmarpc.ReadTranscript(f)
	if err != nil {
		return nil, fmt.Errorf("--replay %s: %w", path, err)
	}
	sc := &script{setup: map[string]json.RawMessage{}}
	asked := map[string]string{} // a setup request's id -> its method
	for _, e := range t.Entries {
		m, _ := lingmarpc.Decode(e.Msg) // ReadTranscript checked every message
		switch {
		case e.Dir == lingmarpc.Send && slices.Contains(setupCalls, m.Method):
			asked[string(m.ID)] = m.Method
		case e.Dir == lingmarpc.Recv && m.IsResponse() && asked[string(m.ID)] != "":
			sc.setup[asked[string(m.ID)]] = e.Msg
			delete(asked, string(m.ID))
		default:
			sc.steps = append(sc.steps, e)
		}
	}
	return sc, nil
}

// ReplayStats is how far a replay got, in /sim/stats.
type ReplayStats struct {
	// Steps is the number of messages to play (setup calls aside);
	// Played how many have been; Done says all were.
	Steps  int  `json:"steps"`
	Played int  `json:"played"`
	Done   bool `json:"done"`
	// Mismatch is the first difference between what the client sent and
	// the transcript ("" while there is none).
	Mismatch string `json:"mismatch,omitempty"`
}

// replayer is one connection's replay of the script.
type replayer struct {
	c  *conn
	sc *script

	mu       sync.Mutex
	pos      int
	ids      map[string]json.RawMessage // a recorded id of the client's requests -> the one it sent now
	reqIDs   map[string]string          // a recorded requestId -> the one the client uses now
	lastTurn string                     // the requestId (now) of the turn in progress
	failed   string
}

func newReplayer(c *conn, sc *script) *replayer {
	return &replayer{c: c, sc: sc, ids: map[string]json.RawMessage{}, reqIDs: map[string]string{}}
}

func (r *replayer) stats() ReplayStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return ReplayStats{Steps: len(r.sc.steps), Played: r.pos, Done: r.pos == len(r.sc.steps), Mismatch: r.failed}
}

// handle takes one message from the client (body is its JSON).
func (r *replayer) handle(m *lingmarpc.Message, body []byte) {
	if m.IsRequest() && slices.Contains(setupCalls, m.Method) {
		r.answerSetup(m)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != "" {
		r.refuse(m, r.failed)
		return
	}
	if r.pos >= len(r.sc.steps) {
		r.fail(m, fmt.Sprintf("the transcript has ended; got %s", describe(m)))
		return
	}
	want := r.sc.steps[r.pos]
	if want.Dir != lingmarpc.Send {
		r.fail(m, fmt.Sprintf("the worker speaks next in the transcript; got %s from the client", describe(m)))
		return
	}
	if err := r.match(want.Msg, body); err != nil {
		r.fail(m, fmt.Sprintf("message %d: %v", r.pos+1, err))
		return
	}
	r.pos++
	r.play()
}

// play sends the worker's recorded messages up to the client's next one.
func (r *replayer) play() {
	for ; r.pos < len(r.sc.steps) && r.sc.steps[r.pos].Dir == lingmarpc.Recv; r.pos++ {
		var m lingmarpc.Message
		if err := json.Unmarshal(r.sc.steps[r.pos].Msg, &m); err != nil {
			continue // ReadTranscript checked it
		}
		if m.IsResponse() {
			if id, ok := r.ids[string(m.ID)]; ok {
				m.ID = id
			}
		} else {
			m.Params = r.rewrite(m.Params)
		}
		if err := r.c.send(&m); err != nil {
			r.c.log.Debug("replay send", "err", err)
			return
		}
	}
}

// rewrite puts the client's own requestIds into recorded params.
func (r *replayer) rewrite(params json.RawMessage) json.RawMessage {
	var p map[string]any
	if json.Unmarshal(params, &p) != nil {
		return params
	}
	if id, ok := p["requestId"].(string); ok {
		if now, ok := r.reqIDs[id]; ok {
			p["requestId"] = now
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return params
	}
	return b
}

func (r *replayer) answerSetup(m *lingmarpc.Message) {
	rec, ok := r.sc.setup[m.Method]
	if !ok {
		r.c.respond(m.ID, nil, &lingmarpc.Error{Code: codeMethodNotFound, Message: "replay: the transcript has no answer to " + m.Method})
		return
	}
	var ans lingmarpc.Message
	_ = json.Unmarshal(rec, &ans) // ReadTranscript checked it
	ans.ID = m.ID
	if err := r.c.send(&ans); err != nil {
		r.c.log.Debug("replay send", "err", err)
	}
}

// fail records the first mismatch and makes it the client's error.
func (r *replayer) fail(m *lingmarpc.Message, why string) {
	r.failed = "replay mismatch at " + why
	r.c.log.Error(r.failed)
	r.refuse(m, r.failed)
	if r.lastTurn != "" {
		fin := finishParams{RequestID: r.lastTurn, Reason: reasonError, StatusCode: statusFailed, ErrorMessage: r.failed}
		raw, _ := json.Marshal(fin)
		_ = r.c.send(&lingmarpc.Message{ID: json.RawMessage(`"replay-mismatch"`), Method: "chat/finish", Params: raw})
	}
}

// refuse answers a request after a mismatch.
func (r *replayer) refuse(m *lingmarpc.Message, why string) {
	if m.IsRequest() {
		r.c.respond(m.ID, nil, &lingmarpc.Error{Code: -32600, Message: why})
	}
}

// match compares what the client sent with the recorded message, binding
// the ids the client chooses: its requests' JSON-RPC ids and its turns'
// requestIds.
func (r *replayer) match(want, got []byte) error {
	w, err := decodeAny(want)
	if err != nil {
		return err
	}
	g, err := decodeAny(got)
	if err != nil {
		return err
	}
	wm, gm := w.(map[string]any), g.(map[string]any)
	if _, isReq := wm["method"]; isReq {
		// The client numbers its own requests.
		wid, _ := json.Marshal(wm["id"])
		gid, _ := json.Marshal(gm["id"])
		r.ids[string(wid)] = gid
		delete(wm, "id")
		delete(gm, "id")
	}
	return r.compare(wm, gm, "")
}

func decodeAny(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, errors.New("not a JSON object")
	}
	return v, nil
}

// compare matches got against want: a recorded placeholder matches any
// value, a requestId binds on first sight, volatile keys are skipped.
func (r *replayer) compare(want, got any, path string) error {
	if s, ok := want.(string); ok && strings.HasPrefix(s, lingmarpc.Redacted) {
		return nil
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %s", orRoot(path), show(got))
		}
		for k := range g {
			if _, ok := w[k]; !ok && !volatile[k] {
				return fmt.Errorf("%s: not in the transcript", join(path, k))
			}
		}
		for k, wv := range w {
			if volatile[k] {
				continue
			}
			gv, ok := g[k]
			if !ok {
				return fmt.Errorf("%s: missing, want %s", join(path, k), show(wv))
			}
			if err := r.compareKey(k, wv, gv, join(path, k)); err != nil {
				return err
			}
		}
		return nil
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: want %s, got %s", orRoot(path), show(want), show(got))
		}
		for i := range w {
			if err := r.compare(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if show(want) != show(got) {
		return fmt.Errorf("%s: want %s, got %s", orRoot(path), show(want), show(got))
	}
	return nil
}

// compareKey binds a requestId the client chose, then compares.
func (r *replayer) compareKey(k string, want, got any, path string) error {
	ws, wok := want.(string)
	gs, gok := got.(string)
	if k != "requestId" || !wok || !gok {
		return r.compare(want, got, path)
	}
	if bound, ok := r.reqIDs[ws]; ok && bound != gs {
		return fmt.Errorf("%s: want the turn's %q, got %q", path, bound, gs)
	}
	r.reqIDs[ws], r.lastTurn = gs, gs
	return nil
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orRoot(path string) string {
	if path == "" {
		return "the message"
	}
	return path
}

// describe names a message for an error.
func describe(m *lingmarpc.Message) string {
	if m.Method != "" {
		return m.Method
	}
	return "an answer to " + string(m.ID)
}
