package sim

import (
	"encoding/json"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// TestDeviations: each deviation makes the simulator differ from the
// evidence the way it says (and nothing else does).
func TestDeviations(t *testing.T) {
	agent := func(c *client, id, text string) {
		p := askParamsFor(id, "", text, false)
		p["mode"], p["sessionType"] = "agent", "assistant"
		c.result("chat/ask", p, new(map[string]any))
	}
	tests := []struct {
		deviate string
		args    []string
		check   func(t *testing.T, h *harness, c *client)
	}{
		{"errorMsg", nil, func(t *testing.T, _ *harness, c *client) {
			var got map[string]any
			c.result("chat/ask", askParamsFor("r", "", "hi", false), &got)
			if got["errorMsg"] == nil || got["errorMessage"] != nil {
				t.Errorf("logged-out ask = %v, want errorMsg", got)
			}
		}},
		{"no-normal", []string{"--logged-in"}, func(t *testing.T, _ *harness, c *client) {
			p := askParamsFor("r", "", "hi", false)
			p["mode"] = "normal"
			var got map[string]any
			c.result("chat/ask", p, &got)
			if got["success"] != false {
				t.Errorf("mode normal = %v, want refused", got)
			}
		}},
		{"no-finish", []string{"--logged-in"}, func(t *testing.T, _ *harness, c *client) {
			c.ask("r", "", "hi", false)
			for m := c.nextAnswer(); ; m = c.next() {
				c.reply(m)
				var st struct{ Step string }
				if _ = json.Unmarshal(m.Params, &st); st.Step == "step_end" {
					break
				}
			}
			c.quiet(200 * time.Millisecond)
		}},
		{"tool-shape", []string{"--logged-in"}, func(t *testing.T, _ *harness, c *client) {
			agent(c, "r", "x [[sim:builtin=read_file]]")
			var m *lingmarpc.Message
			for m = c.next(); m.Method != "tool/invoke"; m = c.next() {
				c.reply(m)
			}
			var p map[string]any
			_ = json.Unmarshal(m.Params, &p)
			if p["toolName"] != "read_file" || p["name"] != nil || p["async"] != nil {
				t.Errorf("tool/invoke %v, want toolName and no async", p)
			}
		}},
		{"new-session", []string{"--logged-in"}, func(t *testing.T, _ *harness, c *client) {
			sid := c.turn("r1", "", "one", false).finish.SessionID
			if got := c.turn("r2", sid, "two", true).finish.SessionID; got == sid {
				t.Errorf("the follow-up kept session %s", sid)
			}
		}},
		{"extra-listener", nil, func(t *testing.T, h *harness, _ *client) {
			m := regexp.MustCompile(`addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(h.log.String())
			if m == nil {
				t.Fatalf("no extra listener logged:\n%s", h.log.String())
			}
			conn, err := net.Dial("tcp", m[1])
			if err != nil {
				t.Fatalf("extra listener: %v", err)
			}
			_ = conn.Close()
		}},
		{"bare-json", nil, func(t *testing.T, _ *harness, c *client) {
			b, ch := c.frame("initialize", map[string]any{})
			_, body, _ := strings.Cut(string(b), "\r\n\r\n")
			c.sendRaw([]byte(body))
			awaitMsg(t, ch, "an answer to bare JSON")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.deviate, func(t *testing.T) {
			h := startSim(t, append(tt.args, "--deviate="+tt.deviate)...)
			tt.check(t, h, dial(t, h))
		})
	}
	if _, err := ParseArgs([]string{"--workDir=x", "--deviate=kind"}, func(string) string { return "" }, &strings.Builder{}); err == nil {
		t.Error("an unknown deviation was accepted")
	}
}
