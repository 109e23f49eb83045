package supervisor

import "sync"

type command int

const (
	cmdRestart command = iota + 1
	cmdDrain
	cmdStop  // stop now: in-flight turns are cut (a lost lease)
	cmdCheck // re-check health and login now
)

// mailbox holds the commands sent to a worker's run loop until it takes
// them. A command is never lost: of restart, drain and stop the latest one
// sent is the one that counts (each replaces what was asked before it), and a
// check is kept until the loop has looked at the worker again.
type mailbox struct {
	mu    sync.Mutex
	cmd   command // the latest restart, drain or stop; 0 if none
	check bool
	wake  chan struct{} // one slot: "something is waiting"
}

func newMailbox() mailbox { return mailbox{wake: make(chan struct{}, 1)} }

func (m *mailbox) post(c command) {
	m.mu.Lock()
	if c == cmdCheck {
		m.check = true
	} else {
		m.cmd = c
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default: // already signalled; take() will see this command too
	}
}

// take returns the waiting command (a lifecycle command before a check, which
// it includes), or 0 when there is none.
func (m *mailbox) take() command {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cmd
	if c == 0 && m.check {
		c = cmdCheck
	}
	m.cmd, m.check = 0, false
	return c
}
