package supervisor

import "testing"

// Commands sent while the run loop is busy are never lost: a check pending
// must not swallow the stop of a lost lease, a drain or a restart the admin
// API has already answered 202 for.
func TestMailboxKeepsEveryIntent(t *testing.T) {
	tests := []struct {
		name string
		give []command
		want command
	}{
		{"check then stop", []command{cmdCheck, cmdStop}, cmdStop},
		{"check then drain", []command{cmdCheck, cmdDrain}, cmdDrain},
		{"check then restart", []command{cmdCheck, cmdRestart}, cmdRestart},
		{"stop then check", []command{cmdStop, cmdCheck}, cmdStop},
		{"drain then restart: start again", []command{cmdDrain, cmdRestart}, cmdRestart},
		{"restart then drain: drained", []command{cmdRestart, cmdDrain}, cmdDrain},
		{"restart then stop", []command{cmdRestart, cmdStop}, cmdStop},
		{"checks coalesce", []command{cmdCheck, cmdCheck}, cmdCheck},
		{"nothing", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMailbox()
			for _, c := range tt.give {
				m.post(c)
			}
			if len(tt.give) > 0 {
				select {
				case <-m.wake:
				default:
					t.Fatal("posting did not wake the loop")
				}
			}
			if got := m.take(); got != tt.want {
				t.Errorf("take() = %v, want %v", got, tt.want)
			}
			if got := m.take(); got != 0 {
				t.Errorf("second take() = %v, want nothing left", got)
			}
		})
	}
}
