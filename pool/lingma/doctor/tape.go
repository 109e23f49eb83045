package doctor

import (
	"sync"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// tape is the run's transcript: every message of every connection,
// redacted (prompts kept: the doctor's prompts are its own).
type tape struct {
	mu      sync.Mutex
	w       *lingmarpc.TranscriptWriter
	methods map[string]string // a request's direction and id -> its method
}

func (t *tape) record(dir string, body []byte, m *lingmarpc.Message) {
	if t == nil || t.w == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	method := m.Method
	switch {
	case m.Method != "" && len(m.ID) > 0:
		t.methods[dir+string(m.ID)] = m.Method
	case m.Method == "":
		other := lingmarpc.Recv
		if dir == lingmarpc.Recv {
			other = lingmarpc.Send
		}
		method = t.methods[other+string(m.ID)]
		delete(t.methods, other+string(m.ID))
	}
	_ = t.w.Write(dir, lingmarpc.Redact(body, method, true))
}
