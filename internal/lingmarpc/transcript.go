package lingmarpc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// A transcript is a record of the JSON-RPC messages between a client and a
// Lingma worker, one JSON object a line: a Header first, then one Entry per
// message in the order the client saw them, and a last {"truncated": true}
// line when the size cap cut it short. The driver writes one per turn
// (lingma.record), poolgate doctor one per run, and the simulator replays
// one (--replay): answering as recorded, checking what it is sent against
// it. docs/lingma-protocol.md describes the format.

// TranscriptVersion is the format's version, in every Header.
const TranscriptVersion = 1

// Directions of a transcript entry.
const (
	// Send is a message the client sent the worker.
	Send = "send"
	// Recv is a message the worker sent the client.
	Recv = "recv"
)

// Header is a transcript's first line.
type Header struct {
	// Transcript is always "lingma".
	Transcript string `json:"transcript"`
	Version    int    `json:"version"`
	// Started is when the first message was recorded (RFC 3339).
	Started string `json:"started,omitempty"`
	// Note says where the transcript comes from.
	Note string `json:"note,omitempty"`
	// Prompts says whether prompt text was kept (debug capture); false:
	// it was redacted.
	Prompts bool `json:"prompts,omitempty"`
}

// Entry is one recorded message.
type Entry struct {
	Dir string `json:"dir"`
	// At is the time since the transcript started, in milliseconds.
	At  int64           `json:"at"`
	Msg json.RawMessage `json:"msg"`
}

// Transcript is a whole transcript as read.
type Transcript struct {
	Header    Header
	Entries   []Entry
	Truncated bool
}

// ReadTranscript reads a transcript. Blank lines are skipped; anything
// else that is not a header, an entry or the truncation mark is an error
// naming its line.
func ReadTranscript(r io.Reader) (*Transcript, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxFrame+64<<10)
	t := &Transcript{}
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if err := t.readLine(b, line); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("transcript line %d: %w", line+1, err)
	}
	if t.Header.Transcript == "" {
		return nil, errors.New("transcript: no header line")
	}
	return t, nil
}

func (t *Transcript) readLine(b []byte, line int) error {
	if line == 1 || t.Header.Transcript == "" {
		if err := json.Unmarshal(b, &t.Header); err != nil || t.Header.Transcript != "lingma" {
			return fmt.Errorf("transcript line %d: not a lingma transcript header", line)
		}
		if t.Header.Version != TranscriptVersion {
			return fmt.Errorf("transcript line %d: version %d, this build reads %d", line, t.Header.Version, TranscriptVersion)
		}
		return nil
	}
	var e struct {
		Entry
		Truncated bool `json:"truncated"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		return fmt.Errorf("transcript line %d: %w", line, err)
	}
	if e.Truncated {
		t.Truncated = true
		return nil
	}
	if e.Dir != Send && e.Dir != Recv || len(e.Msg) == 0 {
		return fmt.Errorf("transcript line %d: an entry needs dir %q or %q and a msg", line, Send, Recv)
	}
	var m Message
	if err := decode(e.Msg, &m); err != nil {
		return fmt.Errorf("transcript line %d: %w", line, err)
	}
	t.Entries = append(t.Entries, e.Entry)
	return nil
}

// TranscriptWriter writes a transcript of at most Max bytes; past that it
// writes the truncation mark once and drops the rest. It is not safe for
// concurrent use.
type TranscriptWriter struct {
	w     io.Writer
	max   int64
	n     int64
	start time.Time
	full  bool
	err   error
}

// NewTranscriptWriter writes h (with Started set to now) and returns a
// writer of entries after it. max <= 0 means no cap.
func NewTranscriptWriter(w io.Writer, h Header, max int64) (*TranscriptWriter, error) {
	now := time.Now()
	h.Transcript, h.Version, h.Started = "lingma", TranscriptVersion, now.UTC().Format(time.RFC3339)
	tw := &TranscriptWriter{w: w, max: max, start: now}
	b, _ := json.Marshal(h) // a struct of strings, an int and a bool always encodes
	if err := tw.line(b); err != nil {
		return nil, err
	}
	return tw, nil
}

// Write records one message (a frame's JSON body) sent in direction dir.
// The body should already be redacted (Redact).
func (tw *TranscriptWriter) Write(dir string, body []byte) error {
	if tw.full || tw.err != nil {
		return tw.err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // placeholders and prompts are full of < and >
	if err := enc.Encode(Entry{Dir: dir, At: time.Since(tw.start).Milliseconds(), Msg: json.RawMessage(body)}); err != nil {
		return fmt.Errorf("transcript: %w", err)
	}
	b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if tw.max > 0 && tw.n+int64(len(b))+1 > tw.max-32 {
		tw.full = true
		return tw.line([]byte(`{"truncated":true}`))
	}
	return tw.line(b)
}

func (tw *TranscriptWriter) line(b []byte) error {
	n, err := tw.w.Write(append(b, '\n'))
	tw.n += int64(n)
	if err != nil {
		tw.err = fmt.Errorf("transcript: %w", err)
	}
	return tw.err
}
