package openaichat

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// sdkClient serves h over real loopback HTTP and returns an official SDK
// client pointed at it.
func sdkClient(t *testing.T, h http.HandlerFunc) openai.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func weatherParams() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model: "qwen",
		Messages: []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Be brief."),
			openai.UserMessage("Weather in Paris?"),
		},
		Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name:        "get_weather",
			Description: openai.String("Looks up the weather"),
			Parameters:  shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
		})},
	}
}

func TestSDKStreamMatchesNonStream(t *testing.T) {
	answer := chattest.TextEvents("The ", "weather in \"Paris\"", " is\nmild ☀️", ".")
	chat := &chattest.Source{Events: answer}
	client := sdkClient(t, newTestHandler(t, chat, Config{}))
	ctx := context.Background()
	params := weatherParams()

	whole, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatalf("non-stream: %v", err)
	}

	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}

	want := "The weather in \"Paris\" is\nmild ☀️."
	if got := whole.Choices[0].Message.Content; got != want {
		t.Errorf("non-stream content %q, want %q", got, want)
	}
	if got := acc.Choices[0].Message.Content; got != want {
		t.Errorf("stream content %q, want %q", got, want)
	}
	if got, want := acc.Choices[0].FinishReason, whole.Choices[0].FinishReason; got != want || got != "stop" {
		t.Errorf("finish reasons: stream %q, non-stream %q, want stop", got, want)
	}
	if got, want := acc.Usage.TotalTokens, whole.Usage.TotalTokens; got != want || got != 14 {
		t.Errorf("usage total: stream %d, non-stream %d, want 14", got, want)
	}
	reqs := chat.Requests()
	if len(reqs) != 2 || reqs[0].Stream || !reqs[1].Stream || len(reqs[1].Tools) != 1 {
		t.Errorf("router saw %+v, want a non-stream then a stream request with one tool", reqs)
	}
}

func TestSDKToolCalls(t *testing.T) {
	chat := &chattest.Source{Events: toolAnswer()}
	client := sdkClient(t, newTestHandler(t, chat, Config{}))
	ctx := context.Background()

	whole, err := client.Chat.Completions.New(ctx, weatherParams())
	if err != nil {
		t.Fatalf("non-stream: %v", err)
	}
	stream := client.Chat.Completions.NewStreaming(ctx, weatherParams())
	var acc openai.ChatCompletionAccumulator
	var finished []string
	for stream.Next() {
		acc.AddChunk(stream.Current())
		if tc, ok := acc.JustFinishedToolCall(); ok {
			finished = append(finished, tc.Name+tc.Arguments)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	for _, msg := range []openai.ChatCompletionMessage{whole.Choices[0].Message, acc.Choices[0].Message} {
		calls := msg.ToolCalls
		if len(calls) != 2 {
			t.Fatalf("got %d tool calls, want 2", len(calls))
		}
		got := calls[0].ID + " " + calls[0].Function.Name + calls[0].Function.Arguments + " " + calls[1].Function.Name + calls[1].Function.Arguments
		if want := `call_a get_weather{"city":"Paris"} get_time{"tz":"CET"}`; got != want {
			t.Errorf("got calls %s, want %s", got, want)
		}
	}
	if whole.Choices[0].FinishReason != "tool_calls" || acc.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("got finish %q / %q, want tool_calls", whole.Choices[0].FinishReason, acc.Choices[0].FinishReason)
	}
	if len(finished) != 2 {
		t.Errorf("SDK reported %d finished tool calls %q, want 2", len(finished), finished)
	}
}

func TestSDKErrors(t *testing.T) {
	ctx := context.Background()
	t.Run("overloaded", func(t *testing.T) {
		chat := &chattest.Source{Err: &chat.OverloadedError{RetryAfter: 3e9}}
		client := sdkClient(t, newTestHandler(t, chat, Config{}))
		_, err := client.Chat.Completions.New(ctx, weatherParams())
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "overloaded" {
			t.Errorf("got %v, want a 429 overloaded *openai.Error", err)
		}
	})
	t.Run("bad request", func(t *testing.T) {
		params := weatherParams()
		params.N = openai.Int(3)
		client := sdkClient(t, newTestHandler(t, &chattest.Source{}, Config{}))
		_, err := client.Chat.Completions.New(ctx, params)
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || apiErr.Param != "n" {
			t.Errorf("got %v, want a 400 on param n", err)
		}
	})
	t.Run("mid-stream", func(t *testing.T) {
		chat := &chattest.Source{Events: failingAnswer()}
		client := sdkClient(t, newTestHandler(t, chat, Config{}))
		stream := client.Chat.Completions.NewStreaming(ctx, weatherParams())
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "model crashed") {
			t.Errorf("got stream error %v, want one mentioning the upstream failure", err)
		}
		if got, want := acc.Choices[0].Message.Content, "Half an answer"; got != want {
			t.Errorf("got partial content %q, want %q", got, want)
		}
	})
}
