package anthropic_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay/relaytest"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/tokens"
)

// routerScript answers like the router over a worker: a tool call when tools
// are offered and no result is in yet, text after a tool result, and plain
// text otherwise, cut at a stop sequence the way the router cuts it.
func routerScript(req *chat.Request) ([]chat.Event, error) {
	last := req.Messages[len(req.Messages)-1]
	switch {
	case last.Role == chat.RoleTool:
		return chattest.TextEvents("It is ", last.Content, " in Paris."), nil
	case len(req.Tools) > 0:
		return []chat.Event{
			{Type: chat.EventText, Text: "Let me check."},
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "toolu_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 20, OutputTokens: 7}},
		}, nil
	default:
		return cutAtStop([]string{"Count: 1, 2, ", "3, S", "TOP", ", 4, 5"}, req.Stop), nil
	}
}

// cutAtStop streams chunks, holding back any tail that could start a stop
// sequence, and ends with FinishStopSequence at the first match: what the
// real router does with Stop.
func cutAtStop(chunks, stops []string) []chat.Event {
	var evs []chat.Event
	var pending string
	for _, c := range chunks {
		pending += c
		for _, s := range stops {
			if i := strings.Index(pending, s); i >= 0 {
				if i > 0 {
					evs = append(evs, chat.Event{Type: chat.EventText, Text: pending[:i]})
				}
				return append(evs, chat.Event{Type: chat.EventDone, Finish: chat.FinishStopSequence, StopSequence: s,
					Usage: chat.Usage{InputTokens: 10, OutputTokens: 4}})
			}
		}
		keep := 0
		for _, s := range stops {
			for k := len(s) - 1; k > keep; k-- {
				if strings.HasSuffix(pending, s[:k]) {
					keep = k
				}
			}
		}
		if safe := pending[:len(pending)-keep]; safe != "" {
			evs = append(evs, chat.Event{Type: chat.EventText, Text: safe})
		}
		pending = pending[len(pending)-keep:]
	}
	if pending != "" {
		evs = append(evs, chat.Event{Type: chat.EventText, Text: pending})
	}
	return append(evs, chat.Event{Type: chat.EventDone, Finish: chat.FinishStop, Usage: chat.Usage{InputTokens: 10, OutputTokens: 6}})
}

func newClient(t *testing.T, p relaytest.Source) sdk.Client {
	t.Helper()
	h := anthropic.New(anthropic.Config{}, nil)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/messages", relaytest.Serve(h, p))
	mux.HandleFunc("POST /v1/messages/count_tokens", relaytest.Count(h, nil))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := access.WithCaller(httpx.WithRequestID(r.Context(), "req-1"), access.Caller{Key: &apikey.Key{Secret: r.Header.Get("X-Api-Key")}})
		mux.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return sdk.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("sk-ant-test"), option.WithMaxRetries(0))
}

// both runs params non-streaming and streaming and returns both messages.
func both(t *testing.T, client sdk.Client, params sdk.MessageNewParams) (plain, streamed sdk.Message) {
	t.Helper()
	ctx := context.Background()
	got, err := client.Messages.New(ctx, params)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stream := client.Messages.NewStreaming(ctx, params)
	for stream.Next() {
		if err := streamed.Accumulate(stream.Current()); err != nil {
			t.Fatalf("accumulate: %v", err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return *got, streamed
}

func textOf(m sdk.Message) string {
	var sb strings.Builder
	for _, b := range m.Content {
		if b.Type == "text" {
			sb.WriteString(b.Text)
		}
	}
	return sb.String()
}

func TestSDKStopSequenceStreamEqualsNonStream(t *testing.T) {
	client := newClient(t, &chattest.Source{Script: routerScript})
	plain, streamed := both(t, client, sdk.MessageNewParams{
		Model: "claude-sonnet-4-5", MaxTokens: 100, StopSequences: []string{"STOP"},
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("count"))},
	})
	for _, m := range []sdk.Message{plain, streamed} {
		if got := textOf(m); got != "Count: 1, 2, 3, " {
			t.Errorf("text = %q, want %q (nothing past the stop sequence)", got, "Count: 1, 2, 3, ")
		}
		if m.StopReason != sdk.StopReasonStopSequence || m.StopSequence != "STOP" {
			t.Errorf("stop = %q %q, want stop_sequence STOP", m.StopReason, m.StopSequence)
		}
		if m.Model != "claude-sonnet-4-5" || m.Usage.InputTokens != 10 || m.Usage.OutputTokens != 4 {
			t.Errorf("model %q usage %+v, want the asked model and 10/4 tokens", m.Model, m.Usage)
		}
	}
}

func TestSDKPlainStreamEqualsNonStream(t *testing.T) {
	client := newClient(t, &chattest.Source{Script: routerScript})
	plain, streamed := both(t, client, sdk.MessageNewParams{
		Model: "claude-x", MaxTokens: 100,
		System:   []sdk.TextBlockParam{{Text: "Be terse."}},
		Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("count"))},
	})
	if textOf(plain) != "Count: 1, 2, 3, STOP, 4, 5" || textOf(streamed) != textOf(plain) {
		t.Errorf("stream %q, non-stream %q; want both the whole answer", textOf(streamed), textOf(plain))
	}
	if plain.StopReason != sdk.StopReasonEndTurn || streamed.StopReason != sdk.StopReasonEndTurn {
		t.Errorf("stop reasons %q/%q, want end_turn", plain.StopReason, streamed.StopReason)
	}
}

func TestSDKToolUseRoundTrip(t *testing.T) {
	chat := &chattest.Source{Script: routerScript}
	client := newClient(t, chat)
	tools := []sdk.ToolUnionParam{{OfTool: &sdk.ToolParam{
		Name: "get_weather", Description: sdk.String("Weather by city"),
		InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}},
	}}}
	ask := sdk.NewUserMessage(sdk.NewTextBlock("weather in Paris?"))
	plain, streamed := both(t, client, sdk.MessageNewParams{Model: "claude-x", MaxTokens: 100, Tools: tools, Messages: []sdk.MessageParam{ask}})
	for _, m := range []sdk.Message{plain, streamed} {
		if len(m.Content) != 2 || m.Content[1].Type != "tool_use" || m.StopReason != sdk.StopReasonToolUse {
			t.Fatalf("content %+v stop %q, want text + tool_use, tool_use", m.Content, m.StopReason)
		}
		if use := m.Content[1]; use.Name != "get_weather" || string(use.Input) != `{"city":"Paris"}` || use.ID != "toolu_1" {
			t.Errorf("tool_use = %s %s %s, want toolu_1 get_weather {\"city\":\"Paris\"}", use.ID, use.Name, use.Input)
		}
	}
	final, err := client.Messages.New(context.Background(), sdk.MessageNewParams{
		Model: "claude-x", MaxTokens: 100, Tools: tools,
		Messages: []sdk.MessageParam{ask, streamed.ToParam(), sdk.NewUserMessage(sdk.NewToolResultBlock("toolu_1", "sunny", false))},
	})
	if err != nil {
		t.Fatalf("final turn: %v", err)
	}
	if got := textOf(*final); got != "It is sunny in Paris." {
		t.Errorf("answer = %q, want %q", got, "It is sunny in Paris.")
	}
	reqs := chat.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 3 || len(msgs[1].ToolCalls) != 1 || msgs[1].ToolCalls[0].Arguments != `{"city":"Paris"}` || msgs[2].ToolCallID != "toolu_1" {
		t.Errorf("router transcript = %+v, want user, assistant with the call, tool result", msgs)
	}
}

// count_tokens counts what the router counts for the usage of the same
// request: each message's text of the transcript the router receives, plus
// four tokens of framing (chat.PromptTokens); tool definitions are not
// part of it, as they are not part of the router's count.
func TestSDKCountTokens(t *testing.T) {
	fake := &chattest.Source{Events: chattest.TextEvents("ok")}
	client := newClient(t, fake)
	ctx := context.Background()
	system := "You are a helpful assistant."
	msgs := []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("Hello, world"))}
	params := sdk.MessageCountTokensParams{
		Model:    "claude-x",
		System:   sdk.MessageCountTokensParamsSystemUnion{OfString: sdk.String(system)},
		Messages: msgs,
	}
	base, err := client.Messages.CountTokens(ctx, params)
	if err != nil {
		t.Fatalf("CountTokens: %v", err)
	}
	// cl100k: "You are a helpful assistant." is 6 tokens, "Hello, world" 3;
	// 4 tokens of framing per message.
	if want := (6 + 4) + (3 + 4); base.InputTokens != int64(want) {
		t.Errorf("input_tokens = %d, want %d", base.InputTokens, want)
	}
	if _, err := client.Messages.New(ctx, sdk.MessageNewParams{Model: "claude-x", MaxTokens: 10,
		System: []sdk.TextBlockParam{{Text: system}}, Messages: msgs}); err != nil {
		t.Fatalf("Messages: %v", err)
	}
	if routed := chat.PromptTokens(fake.Requests()[0].Messages, tokens.Count); base.InputTokens != int64(routed) {
		t.Errorf("input_tokens = %d, but the router counts %d for the same request", base.InputTokens, routed)
	}
	params.Tools = []sdk.MessageCountTokensToolUnionParam{{OfTool: &sdk.ToolParam{
		Name: "get_weather", InputSchema: sdk.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}},
	}}}
	withTools, err := client.Messages.CountTokens(ctx, params)
	if err != nil || withTools.InputTokens != base.InputTokens {
		t.Errorf("with tools = %v, %v; want %d, as the router's usage leaves tools out", withTools, err, base.InputTokens)
	}
}

func TestSDKErrorShape(t *testing.T) {
	client := newClient(t, &chattest.Source{Err: chat.ErrNoInstance})
	_, err := client.Messages.New(context.Background(), sdk.MessageNewParams{
		Model: "claude-x", MaxTokens: 10, Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock("hi"))},
	})
	var apiErr *sdk.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || !strings.Contains(apiErr.RawJSON(), `"overloaded_error"`) {
		t.Fatalf("err = %v, want a 529 overloaded_error", err)
	}
}
