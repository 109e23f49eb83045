package agentcli

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/worker"
)

// Transcripts: with Config.Record (or an account's record setting) every
// line written to and read from each of a worker's CLI processes is kept,
// one JSON object a line ({"at", "process", "dir": "in"|"out", "line"}), in
// a file per start of the worker. They hold prompts and answers as the
// CLI saw them; they are for checking the driver's model of the protocol
// against a real CLI (the tests read every "out" line back through
// Parse).

// maxTranscript caps one transcript; the rest of the worker's life is not
// written.
const maxTranscript = 64 << 20

// TranscriptLine is one line of a transcript.
type TranscriptLine struct {
	At      time.Time `json:"at"`
	Process string    `json:"process"`
	Dir     string    `json:"dir"`
	Line    string    `json:"line"`
}

// recorder writes one worker's transcript; a nil one writes nothing.
type recorder struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	n    int64
	full bool
}

// newRecorder opens the transcript of the worker at ep, or returns nil.
func newRecorder(d *Driver, ep worker.Endpoint, log *slog.Logger) *recorder {
	if !d.cfg.Record && !ep.Account.Record {
		return nil
	}
	dir := filepath.Join(ep.WorkDir, "transcripts")
	if d.cfg.RecordDir != "" {
		dir = filepath.Join(d.cfg.RecordDir, ep.Name)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		log.Warn("transcript not written", "err", err)
		return nil
	}
	name := filepath.Join(dir, strconv.FormatInt(time.Now().UnixNano(), 10)+".jsonl")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		log.Warn("transcript not written", "err", err)
		return nil
	}
	return &recorder{f: f, w: bufio.NewWriter(f)}
}

// write notes one line in or out of a process.
func (r *recorder) write(process, dir string, line []byte) {
	if r == nil {
		return
	}
	b, err := json.Marshal(TranscriptLine{At: time.Now().UTC(), Process: process, Dir: dir, Line: string(line)})
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.full || r.f == nil {
		return
	}
	if r.n+int64(len(b))+1 > maxTranscript {
		r.full = true
		return
	}
	r.n += int64(len(b)) + 1
	_, _ = r.w.Write(append(b, '\n'))
	_ = r.w.Flush() // a worker killed mid-turn leaves its lines
}

func (r *recorder) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f != nil {
		_ = r.w.Flush()
		_ = r.f.Close()
		r.f = nil
	}
}
