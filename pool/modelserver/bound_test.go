package modelserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// sizingServer answers every chat request with a one-word answer and
// records each body's size.
type sizingServer struct {
	mu    sync.Mutex
	sizes []int
}

func (s *sizingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		_, _ = io.WriteString(w, `{"data":[{"id":"m"}]}`)
		return
	}
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.sizes = append(s.sizes, len(b))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
}

func (s *sizingServer) requests() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

func sizingClient(t *testing.T, cfg Config) (*sizingServer, *Client) {
	t.Helper()
	s := &sizingServer{}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	port, _ := strconv.Atoi(u.Port())
	return s, connect(t, newDriver(t, cfg), worker.Endpoint{Name: "sizing", Port: port})
}

// TestTurnBound holds the driver's bound to the request bodies it really
// sends: never below, close above for plain text, and the quick bound
// never below the exact one.
func TestTurnBound(t *testing.T) {
	s, c := sizingClient(t, Config{})
	for _, text := range []string{"plain", "a\xff\xfe b", "\x00\x1f\"\\\n\t", "\u2028 é \ufffd", strings.Repeat("\xff", 3000),
		strings.Repeat("ab\"\n\x01<\xff", 5000)} {
		params, _ := json.Marshal(map[string]string{"type": "object", "description": text})
		msgs := []chat.Message{{Role: chat.RoleSystem, Content: text}, {Role: chat.RoleUser, Content: text},
			{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: text, Name: text, Arguments: text}}},
			{Role: chat.RoleTool, ToolCallID: text, Name: text, Content: text}}
		for _, turn := range []*chat.Turn{
			{Model: text, Messages: []chat.Message{{Role: chat.RoleUser, Content: text}}, Whole: true},
			{Model: "m", Messages: msgs, Tools: []chat.Tool{{Name: text, Description: text, Parameters: params}, {Name: "f"}},
				ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: text}, Whole: true},
		} {
			if a := runTurn(t, c, turn); a.err != nil {
				t.Fatalf("turn: %v", a.err)
			}
			sizes := s.requests()
			body, bound, quick := int64(sizes[len(sizes)-1]), turnBound(turn), quickBound(turn)
			if body > bound || quick < bound {
				t.Fatalf("body of %d bytes, bound %d, quick bound %d (text %q)", body, bound, quick, text[:min(len(text), 40)])
			}
			if len(turn.Tools) == 0 && bound > body+requestOverhead+64*int64(len(turn.Messages)) {
				t.Errorf("body of %d bytes, bound %d is loose (text %q)", body, bound, text[:min(len(text), 40)])
			}
		}
	}
}

// TestOversizedTurnIsNotSent: a turn over MaxRequest (control characters
// cost 6 bytes each once escaped) is refused with a *chat.TooLargeError and
// the worker never sees it.
func TestOversizedTurnIsNotSent(t *testing.T) {
	s, c := sizingClient(t, Config{MaxRequest: 64 << 10})
	turn := userTurn(strings.Repeat("\x01", 20<<10)) // 20 KiB, 120 KiB escaped
	var tooLarge *chat.TooLargeError
	if _, err := c.Start(context.Background(), turn); !errors.As(err, &tooLarge) || tooLarge.Limit != 64<<10 {
		t.Fatalf("Start = %v, want a *chat.TooLargeError at 64 KiB", err)
	}
	if err := c.d.CheckTurn(turn); !errors.As(err, &tooLarge) {
		t.Errorf("CheckTurn = %v, want a *chat.TooLargeError", err)
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("the worker got %d chat requests, want none", n)
	}
	if a := runTurn(t, c, userTurn(strings.Repeat("a", 20<<10))); a.err != nil {
		t.Errorf("a 20 KiB plain turn: %v", a.err)
	}
}
