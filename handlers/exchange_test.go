package handlers

import (
	"context"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/pool"
)

// chatBody is a chat completion request whose prompt is "the prompt".
const chatBody = `{"model":"m","messages":[{"role":"user","content":"the prompt"}]}`

// fakeRouter stands in for the pool's router. Each Open records its call
// and, unless the turn is another replica's, answers "the answer" as served
// by instance sim-1 of account acct-1 on model m, in a reused session, for
// 7 input and 3 output tokens, with the newest prompt message and the
// answer kept when the call captures them. With holder set, a call that
// may hop is told the turn belongs to the replica there.
type fakeRouter struct {
	holder string

	mu    sync.Mutex
	calls []pool.Call
}

func (f *fakeRouter) Open(ctx context.Context, c pool.Call) (pool.Opened, error) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
	if c.MayHop && f.holder != "" {
		return pool.Opened{Holder: f.holder}, nil
	}
	usage := chat.Usage{InputTokens: 7, OutputTokens: 3}
	s := pool.Served{Instance: "sim-1", Account: "acct-1", Model: "m", Reused: true, Usage: usage}
	if c.Capture {
		s.Prompt, s.Answer = c.Request.Messages[len(c.Request.Messages)-1].Content, "the answer"
	}
	a := chattest.Script(ctx, chat.Event{Type: chat.EventText, Text: "the answer"},
		chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, Usage: usage})
	return pool.Opened{Answer: &servedAnswer{Answer: a, served: s},
		Served: pool.Served{Instance: s.Instance, Account: s.Account, Model: s.Model}}, nil
}

// Calls returns the calls seen so far.
func (f *fakeRouter) Calls() []pool.Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]pool.Call(nil), f.calls...)
}

// servedAnswer is a scripted answer that says how it was served.
type servedAnswer struct {
	*chattest.Answer
	served pool.Served
}

func (a *servedAnswer) Served() pool.Served { return a.served }
