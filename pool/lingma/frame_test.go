package lingma

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// TestAskMessageIsTheEncodedRequest: chat/ask's frame, whole or streamed
// in pieces, holds the same request as encoding/json's, whatever the prompt
// holds (pieces of 7 bytes cut through every kind of character), and is
// exactly the size announced.
func TestAskMessageIsTheEncodedRequest(t *testing.T) {
	for _, prompt := range []string{strings.Repeat("plain ", 1000), strings.Repeat("\"\\\n\x01\x08\x0c<<<é\u2028日\U0001F600", 300),
		strings.Repeat("\xff\xe2\x82", 2000), strings.Repeat("a\xf0\x9f\x98", 1500), strings.Repeat("a", 5000) + promptHole} {
		for _, context := range []bool{true, false} {
			p := askParams{RequestID: "r-1", SessionID: "s", QuestionText: prompt, ChatTask: "FREE_INPUT", Mode: ModeAgent,
				Extra: &askExtra{ModelConfig: &modelConfig{Key: "k"}}}
			if context {
				p.ChatContext = &chatContext{Text: prompt}
			}
			m, ok, err := newAskMessage(7, p)
			if err != nil || !ok {
				t.Fatalf("newAskMessage: %v, %v", ok, err)
			}
			whole := m.bytes()
			var streamed bytes.Buffer
			if err := m.stream(&streamed, 7); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(streamed.Bytes(), whole) {
				t.Fatalf("the streamed frame differs from the whole one (prompt %.20q)", prompt)
			}
			want, _ := requestJSON(7, "chat/ask", p)
			body, rest, err := lingmarpc.Split(whole)
			if err != nil || len(rest) != 0 || len(whole) != m.size || cap(whole) != m.size {
				t.Fatalf("frame of %d bytes (buffer %d), announced %d: %v", len(whole), cap(whole), m.size, err)
			}
			var a, b any
			if json.Unmarshal(body, &a) != nil || json.Unmarshal(want[frameRoom:], &b) != nil {
				t.Fatal("a request is not JSON")
			}
			ja, _ := json.Marshal(a)
			jb, _ := json.Marshal(b)
			if !bytes.Equal(ja, jb) {
				t.Errorf("the request differs from encoding/json's (context %v, prompt %.20q)", context, prompt)
			}
		}
	}
}

// TestLargeTurnIsStreamed: a turn whose frame is larger than streamMin goes
// out as a fragmented WebSocket message, which the simulator reassembles
// and answers.
func TestLargeTurnIsStreamed(t *testing.T) {
	_, c := newSim(t)
	system := strings.Repeat("context é\xff ", streamMin/12+1)
	a := runTurn(t, c, &chat.Turn{Messages: []chat.Message{{Role: chat.RoleSystem, Content: system}, {Role: chat.RoleUser, Content: "hi"}}})
	if a.err != nil || a.text != "You said: hi" {
		t.Errorf("answer %q, %v; want the simulator's", a.text, a.err)
	}
}
