package lingma

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// boundTurns carry s in every place a chat/ask frame copies text from.
func boundTurns(s string) []*chat.Turn {
	params, _ := json.Marshal(map[string]string{"type": "object", "description": s})
	transcript := []chat.Message{
		{Role: chat.RoleSystem, Content: s}, {Role: chat.RoleUser, Content: s},
		{Role: chat.RoleAssistant, Content: s, ToolCalls: []chat.ToolCall{{ID: s, Name: s, Arguments: s}, {ID: "c2", Name: "f"}}},
		{Role: chat.RoleTool, ToolCallID: s, Content: s}, {Role: chat.RoleTool, ToolCallID: "c2", Content: s},
	}
	tools := []chat.Tool{{Name: s, Description: s, Parameters: params}, {Name: "f"}}
	return []*chat.Turn{
		{RequestID: "req", Model: s, Messages: []chat.Message{{Role: chat.RoleUser, Content: s}}},
		{RequestID: "req", SessionID: s, Messages: transcript},
		{RequestID: "req", Messages: transcript, Tools: tools, Agent: true},
		{RequestID: "req", Messages: transcript, Tools: tools, Agent: true, ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: s}},
	}
}

// TestTurnBound holds the driver's bound to the chat/ask frames it really
// sends, in both tool modes: never below (a frame over the worker's limit
// would go out), and close above for plain text (turns that fit would be
// refused); the quick bound is never below the exact one.
func TestTurnBound(t *testing.T) {
	texts := []string{"plain", "a\xff\xfe b", "\x00\x1f\"\\\n\t", "<<<user>>>\n<<<x", "\u2028 é 日本 \ufffd",
		strings.Repeat("\xff", 3000), strings.Repeat("ab\"\n\x01<<<\xff", 5000)}
	for _, mc := range [][2]string{{ToolsEmulated, ContextNone}, {ToolsNative, ContextNone}, {ToolsEmulated, ContextPrompt}, {ToolsNative, ContextPrompt}} {
		mode := mc[0] + "/" + mc[1]
		var sizes []int
		f := newFake(t, askThen(func(fc *fakeConn, reqID string) {
			fc.notify("", "chat/finish", map[string]any{"requestId": reqID, "statusCode": 200})
		}))
		cfg := Config{ToolMode: mc[0], ChatContext: mc[1]}
		d, c := New(cfg), fakeClient(t, f, cfg)
		for _, s := range texts {
			for _, turn := range boundTurns(s) {
				runTurn(t, c, turn)
				methods, _ := f.seen()
				f.mu.Lock()
				sizes = f.sizes
				f.mu.Unlock()
				if methods[len(methods)-1] != "chat/ask" {
					t.Fatalf("the fake's last request is %s, want chat/ask", methods[len(methods)-1])
				}
				body := sizes[len(sizes)-1]
				frame := int64(len("Content-Length: \r\n\r\n") + len(strconv.Itoa(body)) + body)
				bound, quick := d.cfg.turnBound(turn), quickBound(turn, d.cfg.promptCopies())
				if frame > bound || quick < bound {
					t.Fatalf("%s: frame of %d bytes, bound %d, quick bound %d (text %q)", mode, frame, bound, quick, s[:min(len(s), 40)])
				}
				if slack := int64(askOverhead + 2*64*(len(turn.Messages)+2)); len(turn.Tools) == 0 && bound > frame+slack+int64(len(s)) {
					t.Errorf("%s: frame of %d bytes, bound %d is loose (text %q)", mode, frame, bound, s[:min(len(s), 40)])
				}
			}
		}
	}
}

// TestOversizedTurnKeepsTheWorker is the poison turn at the driver: a
// message whose frame is larger than the worker takes (18 MiB of U+FFFD, as
// 6 MiB of invalid UTF-8 decodes into) is refused with a *chat.TooLargeError
// before anything is sent, so the simulator keeps its connection and serves
// the next turn; CheckTurn refuses it the same, and with the prompt also in
// chatContext (lingma_chat_context prompt) a message of half that size.
func TestOversizedTurnKeepsTheWorker(t *testing.T) {
	_, c := newSim(t)
	poison := &chat.Turn{RequestID: "poison", Messages: user(strings.Repeat("\ufffd", 6<<20))}
	var tooLarge *chat.TooLargeError
	if err := New(Config{}).CheckTurn(poison); !errors.As(err, &tooLarge) || tooLarge.Limit != lingmarpc.MaxFrame {
		t.Fatalf("CheckTurn = %v, want a *chat.TooLargeError at %d bytes", err, lingmarpc.MaxFrame)
	}
	if _, err := c.Start(context.Background(), poison); !errors.As(err, &tooLarge) || errors.Is(err, chat.ErrWorkerGone) {
		t.Fatalf("Start = %v, want a *chat.TooLargeError", err)
	}
	if a := runTurn(t, c, &chat.Turn{Messages: user("still there?")}); a.err != nil || !strings.HasPrefix(a.text, "You said: still there?") {
		t.Fatalf("the next turn = %q, %v; want the simulator's answer", a.text, a.err)
	}
	half := &chat.Turn{Messages: user(strings.Repeat("\ufffd", 3<<20))}
	if err := New(Config{ChatContext: ContextPrompt}).CheckTurn(half); !errors.As(err, &tooLarge) {
		t.Errorf("CheckTurn of 9 MiB carried twice = %v, want a *chat.TooLargeError", err)
	}
	if err := New(Config{}).CheckTurn(half); err != nil {
		t.Errorf("CheckTurn of a 9 MiB message carried once = %v, want nil", err)
	}
	ok := &chat.Turn{Messages: user(strings.Repeat("a", 4<<20))}
	if err := New(Config{ChatContext: ContextPrompt}).CheckTurn(ok); err != nil {
		t.Errorf("CheckTurn of a 4 MiB message = %v, want nil (8 MiB of frame)", err)
	}
}

// TestGoneBeforeTheTurnIsMarkedNotSent: a turn asked of a connection that
// had already ended carries chat.ErrNotSent, the router's evidence that
// the turn did not break the worker.
func TestGoneBeforeTheTurnIsMarkedNotSent(t *testing.T) {
	f := newFake(t, askThen(func(*fakeConn, string) {}))
	c := fakeClient(t, f, Config{})
	_ = c.conn.CloseNow()
	<-c.done
	_, err := c.Start(context.Background(), &chat.Turn{Messages: user("hi")})
	if !errors.Is(err, chat.ErrNotSent) || !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("Start on a closed connection = %v, want chat.ErrWorkerGone and chat.ErrNotSent", err)
	}
}
