package route

import (
	"context"
	"fmt"
	"testing"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// Hot paths of every request: hashing the transcript into its affinity key
// (twice per turn: the lookup and the write-back) and picking a worker.

// transcript is a 20-message conversation of the kind a coding agent sends:
// a system prompt, user turns, assistant turns with tool calls and tool results.
func transcript() []chat.Message {
	msgs := []chat.Message{{Role: chat.RoleSystem, Content: "You are a careful coding assistant. Answer briefly and use the tools when they help."}}
	for i := 0; len(msgs) < 20; i++ {
		switch i % 3 {
		case 0:
			msgs = append(msgs, chat.Message{Role: chat.RoleUser, Content: fmt.Sprintf("  Please look at file %d and tell me what the handler does.  ", i)})
		case 1:
			msgs = append(msgs, chat.Message{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: fmt.Sprintf("call_%d", i),
				Name: "read_file", Arguments: fmt.Sprintf(`{"path": "pkg/file%d.go", "limit": 200, "offset": 0}`, i)}}})
		default:
			msgs = append(msgs, chat.Message{Role: chat.RoleTool, ToolCallID: fmt.Sprintf("call_%d", i-1), Content: "package pkg\n\nfunc Handle() error { return nil }\n"},
				chat.Message{Role: chat.RoleAssistant, Content: "The handler does nothing yet: it returns nil."})
		}
	}
	return msgs[:20]
}

func BenchmarkConversationKey(b *testing.B) {
	msgs := transcript()
	owner := access.OwnerOf("sk-bench").Affinity
	b.Run("20 messages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = newAffinityKey(owner, "dashscope_qwen3_coder", msgs, nil)
		}
	})
}

// benchPool is a pool of n ready fake workers, each taking perWorker turns
// at once.
func benchPool(b *testing.B, n, perWorker int) *Pool {
	b.Helper()
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("w%d", i))
	}
	wcs := supervisortest.Configs(b, false, names...)
	for i := range wcs {
		wcs[i].MaxInFlight = perWorker
	}
	p, _ := startFake(b, Config{MaxInFlight: n * perWorker}, supervisortest.New(), wcs, nil)
	waitReady(b, p, names...)
	return p
}

func BenchmarkAcquireRelease(b *testing.B) {
	for _, bb := range []struct {
		name string
		want preference
	}{
		{"least busy", preference{}},
		{"hint", preference{Hint: textHint("user-42")}},
		{"prefer", preference{Prefer: "w5"}},
		{"retry, 2 excluded", preference{Hint: textHint("user-42"), Exclude: []string{"w5", "w6"}}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			p := benchPool(b, 8, 1)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				s, err := p.acquire(ctx, bb.want)
				if err != nil {
					b.Fatal(err)
				}
				s.release()
			}
		})
	}
}

// BenchmarkAcquireReleaseParallel contends for the pool's lock the way
// concurrent requests do.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	p := benchPool(b, 8, 256)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s, err := p.acquire(context.Background(), preference{})
			if err != nil {
				b.Error(err)
				return
			}
			s.release()
		}
	})
}
