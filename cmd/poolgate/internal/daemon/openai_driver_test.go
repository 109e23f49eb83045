package daemon

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
)

// The openai driver end to end: simworker --protocol openai workers under the
// real supervisor, through the daemon.
func TestOpenAIDriverPool(t *testing.T) {
	env := append(simAccounts(2, map[int][]string{0: {"--ratelimit-every=1"}}), "POOLGATE_DRIVER=openai")
	env[1] = "POOLGATE_WORKER_ARGS=" // the openai simulator has no login
	d := daemontest.StartDaemon(t, env...)
	waitAllReady(t, d, 2, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk(d, "x")

	// acct-1 rate-limits every turn: each request still succeeds (retried
	// before the first byte on acct-2) and acct-1 cools down.
	// (Distinct prompts: new conversations spread by a hash of their text.)
	for i := range 6 {
		prompt := fmt.Sprintf("hello openai %d", i)
		resp, err := client.Chat.Completions.New(ctx, chatParams(prompt))
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := resp.Choices[0].Message.Content; got != "You said: "+prompt {
			t.Errorf("answer %q", got)
		}
	}
	if scrape(t, d, "poolgate_cooldowns_total") < 1 || scrape(t, d, "poolgate_retries_total") < 1 {
		t.Error("the rate-limited instance was neither cooled down nor retried around")
	}

	stream := client.Chat.Completions.NewStreaming(ctx, chatParams("streamed [[sim:chunks=5]]"))
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || !strings.HasPrefix(acc.Choices[0].Message.Content, "You said: streamed") {
		t.Errorf("stream: %+v, %v", acc.Choices, err)
	}

	// Native tool calls pass through.
	params := chatParams("weather in Paris?")
	params.Tools = []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []string{"city"}}})}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.Choices[0].Message.ToolCalls
	if resp.Choices[0].FinishReason != "tool_calls" || len(calls) != 1 || calls[0].Function.Name != "get_weather" {
		t.Fatalf("tool call: %+v", resp.Choices[0])
	}
	params.Messages = append(params.Messages, resp.Choices[0].Message.ToParam(), openai.ToolMessage("18C", calls[0].ID))
	resp, err = client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "stop" || resp.Choices[0].Message.Content == "" {
		t.Errorf("after the tool result: %+v", resp.Choices[0])
	}
}
