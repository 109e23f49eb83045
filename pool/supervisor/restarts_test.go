package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// reasonedErr is a start error that names its reason (as a driver's typed
// error does).
type reasonedErr struct{ reason string }

func (e reasonedErr) Error() string       { return "refused: " + e.reason }
func (e reasonedErr) StartReason() string { return e.reason }

func TestStartFailureReasons(t *testing.T) {
	tests := []struct {
		name string
		give startFailure
		want string // the reason starts with it
	}{
		{"a port taken, from the output", startFailure{err: errors.New("worker w1 exited before ready: exit status 1"),
			lines: []string{"starting", "listen tcp 127.0.0.1:38510: bind: address already in use"}},
			"a port or socket it needs is taken (address already in use): listen tcp 127.0.0.1:38510"},
		{"a missing binary, from the exit error", startFailure{err: errors.New(`start "/opt/lingma/Lingma": fork/exec /opt/lingma/Lingma: no such file or directory`)},
			"a file it needs is missing (no such file or directory): start"},
		{"not executable", startFailure{err: errors.New(`start "/opt/x": fork/exec /opt/x: permission denied`)},
			"it may not run or open what it needs (permission denied)"},
		{"anything else", startFailure{err: errors.New("worker w1 exited before ready: exit status 3"), lines: []string{"panic: boom"}},
			"worker w1 exited before ready: exit status 3; its last output: panic: boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := tt.give.describe(); !strings.HasPrefix(got, tt.want) {
				t.Errorf("reason %q, want it to start with %q", got, tt.want)
			}
		})
	}
}

// TestFailuresCount: the same start failure FailAfter times in a row fails
// the worker, numbers (ports, times) aside; another failure in between, or a
// run that got ready, starts the count again.
func TestFailuresCount(t *testing.T) {
	exit := func(line string) error {
		return &startFailure{err: errors.New("worker w1 exited before ready: exit status 1"), lines: []string{line}}
	}
	tests := []struct {
		name string
		give []error
		want []bool
	}{
		{"the same, ports aside", []error{exit("bind 127.0.0.1:4001: in use"), exit("bind 127.0.0.1:4002: in use"), exit("bind 127.0.0.1:4003: in use")},
			[]bool{false, false, true}},
		{"alternating", []error{exit("a"), exit("b"), exit("a"), exit("b")}, []bool{false, false, false, false}},
		{"a run in between", []error{exit("a"), exit("a"), errors.New("health check failed 3 times"), exit("a"), exit("a")},
			[]bool{false, false, false, false, false}},
	}
	// A driver's typed error names its reason itself: whether or not the
	// worker's output had reached the log, it is the same failure.
	refused := func(lines ...string) error {
		return &startFailure{err: fmt.Errorf("worker w1 not ready: %w", reasonedErr{"the token was refused"}), lines: lines}
	}
	tests = append(tests, struct {
		name string
		give []error
		want []bool
	}{"a typed reason, output or not", []error{refused("    at x (a.js:1:2)"), refused(), refused("    at y (a.js:3:4)")},
		[]bool{false, false, true}})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f failures
			for i, err := range tt.give {
				if _, got := f.count(err, 3); got != tt.want[i] {
					t.Errorf("failure %d: failed %v, want %v", i, got, tt.want[i])
				}
			}
		})
	}
}
