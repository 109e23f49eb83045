package daemon

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	anth "github.com/anthropics/anthropic-sdk-go"
	anthopt "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
)

// These run the three protocols against real simulated Lingma workers: tool
// calls go through the prompt contract and are parsed back from real text.

func protoDaemon(t *testing.T) *daemontest.Daemon {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1")
	d.WaitReady(t, 15*time.Second)
	return d
}

func anthClient(d *daemontest.Daemon) anth.Client {
	return anth.NewClient(anthopt.WithBaseURL(d.URL), anthopt.WithAPIKey("sk-1"), anthopt.WithMaxRetries(0))
}

func anthBoth(t *testing.T, c anth.Client, p anth.MessageNewParams) (plain, streamed anth.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got, err := c.Messages.New(ctx, p)
	if err != nil {
		t.Fatalf("messages: %v", err)
	}
	stream := c.Messages.NewStreaming(ctx, p)
	for stream.Next() {
		if err := streamed.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	return *got, streamed
}

func anthText(m anth.Message) string {
	var b strings.Builder
	for _, blk := range m.Content {
		if blk.Type == "text" {
			b.WriteString(blk.Text)
		}
	}
	return b.String()
}

var weatherTool = anth.ToolUnionParam{OfTool: &anth.ToolParam{Name: "get_weather", Description: anth.String("Weather for a city"),
	InputSchema: anth.ToolInputSchemaParam{Properties: map[string]any{"city": map[string]any{"type": "string"}}, Required: []string{"city"}}}}

func TestAnthropicThroughRealWorkers(t *testing.T) {
	d := protoDaemon(t)
	c := anthClient(d)
	user := func(s string) []anth.MessageParam {
		return []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock(s))}
	}

	plain, streamed := anthBoth(t, c, anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256, Messages: user("hello anthropic")})
	if anthText(plain) != "You said: hello anthropic" || anthText(streamed) != anthText(plain) || plain.StopReason != "end_turn" {
		t.Errorf("plain %q (%s), streamed %q", anthText(plain), plain.StopReason, anthText(streamed))
	}

	// The worker streams a word per chunk: "ha be" spans "alpha " and "beta ".
	plain, streamed = anthBoth(t, c, anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256,
		StopSequences: []string{"ha be"}, Messages: user("alpha beta gamma")})
	for _, m := range []anth.Message{plain, streamed} {
		if anthText(m) != "You said: alp" || m.StopReason != "stop_sequence" || m.StopSequence != "ha be" {
			t.Errorf("stop sequence: %q %s %q", anthText(m), m.StopReason, m.StopSequence)
		}
	}

	plain, streamed = anthBoth(t, c, anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 5, Messages: user("long [[sim:words=60]]")})
	for _, m := range []anth.Message{plain, streamed} {
		if m.StopReason != "max_tokens" || m.Usage.OutputTokens > 5 {
			t.Errorf("max_tokens: %s with %d output tokens", m.StopReason, m.Usage.OutputTokens)
		}
	}

	// Tool use on the real path, in both answer forms the workers produce.
	for _, prompt := range []string{"weather in Paris?", "weather in Paris? [[sim:tool_code]]"} {
		params := anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 256, Tools: []anth.ToolUnionParam{weatherTool}, Messages: user(prompt)}
		plain, streamed = anthBoth(t, c, params)
		var call anth.ContentBlockUnion
		for _, m := range []anth.Message{plain, streamed} {
			if m.StopReason != "tool_use" {
				t.Fatalf("%q: stop %s, content %+v", prompt, m.StopReason, m.Content)
			}
			for _, b := range m.Content {
				if b.Type == "tool_use" {
					call = b
				}
			}
			if call.Name != "get_weather" || !strings.Contains(string(call.Input), "city") {
				t.Fatalf("%q: tool_use %+v", prompt, call)
			}
		}
		params.Messages = append(params.Messages, plain.ToParam(),
			anth.NewUserMessage(anth.NewToolResultBlock(call.ID, "18C and sunny", false)))
		final, _ := anthBoth(t, c, params)
		if final.StopReason != "end_turn" || !strings.Contains(anthText(final), "18C and sunny") {
			t.Errorf("after the tool result: %s %q", final.StopReason, anthText(final))
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.Messages.CountTokens(ctx, anth.MessageCountTokensParams{Model: "claude-sonnet-4-5", Messages: user("hello there")})
	if err != nil || n.InputTokens < 2 {
		t.Errorf("count_tokens: %+v, %v", n, err)
	}

	_, err = c.Messages.New(ctx, anth.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 10,
		Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewImageBlockBase64("image/png", "iVBORw0KGgo="))}})
	var apiErr *anth.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(apiErr.Error(), "image") {
		t.Errorf("image block: %v, want a 400 naming the block type", err)
	}
}

func TestResponsesThroughRealWorkers(t *testing.T) {
	d := protoDaemon(t)
	c := sdk(d, "sk-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	input := func(s string) responses.ResponseNewParamsInputUnion {
		return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
	}

	first, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Input: input("[[sim:whoami]] one")})
	if err != nil {
		t.Fatal(err)
	}
	w1 := parseWhoami(t, first.OutputText())
	// previous_response_id continues the same upstream session with just the new turn.
	second, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Input: input("[[sim:whoami]] two"),
		PreviousResponseID: openai.String(first.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if w2 := parseWhoami(t, second.OutputText()); w2.session != w1.session || !w2.reply || w2.turn != 2 || second.PreviousResponseID != first.ID {
		t.Errorf("previous_response_id did not continue the session: %+v after %+v", w2, w1)
	}

	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Input: input("stream me")})
	var text strings.Builder
	terminal := 0
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete", "response.failed":
			terminal++
		}
	}
	if err := stream.Err(); err != nil || text.String() != "You said: stream me" || terminal != 1 {
		t.Errorf("stream: %q, %d terminal events, %v", text.String(), terminal, err)
	}

	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{Name: "get_weather",
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}}}}
	call, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Tools: []responses.ToolUnionParam{tool},
		Input: input("weather in Paris?")})
	if err != nil {
		t.Fatal(err)
	}
	var callID string
	for _, it := range call.Output {
		if it.Type == "function_call" && it.Name == "get_weather" {
			callID = it.CallID
		}
	}
	if callID == "" {
		t.Fatalf("no function_call in %+v", call.Output)
	}
	out := responses.ResponseInputItemParamOfFunctionCallOutput("18C and sunny")
	out.OfFunctionCallOutput.CallID = openai.String(callID)
	final, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-5-codex", Tools: []responses.ToolUnionParam{tool},
		PreviousResponseID: openai.String(call.ID), Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{out}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(final.OutputText(), "18C and sunny") {
		t.Errorf("after the function output: %q", final.OutputText())
	}

	got, err := c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != final.OutputText() {
		t.Fatalf("retrieve: %v", err)
	}
	if err := c.Responses.Delete(ctx, final.ID); err != nil {
		t.Fatal(err)
	}
	_, err = c.Responses.Get(ctx, final.ID, responses.ResponseGetParams{})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("GET after DELETE: %v, want 404", err)
	}
}

func TestChatToolCallsThroughRealWorkers(t *testing.T) {
	d := protoDaemon(t)
	c := sdk(d, "sk-1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather", Parameters: shared.FunctionParameters{"type": "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}}}}),
		openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "get_time", Parameters: shared.FunctionParameters{
			"type": "object", "properties": map[string]any{"zone": map[string]any{"type": "string"}}}})}
	params := openai.ChatCompletionNewParams{Model: "m", Tools: tools,
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it? [[sim:tool_code]]")},
		ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfFunctionToolChoice: &openai.ChatCompletionNamedToolChoiceParam{
			Function: openai.ChatCompletionNamedToolChoiceFunctionParam{Name: "get_time"}}}}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	if resp.Choices[0].FinishReason != "tool_calls" || len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "get_time" {
		t.Fatalf("forced tool choice: %+v", resp.Choices[0])
	}
	stream := c.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices[0].Message.ToolCalls) != 1 ||
		acc.Choices[0].Message.ToolCalls[0].Function.Arguments != msg.ToolCalls[0].Function.Arguments {
		t.Errorf("streamed tool call %+v differs from %+v (%v)", acc.Choices, msg.ToolCalls, err)
	}
	params.Messages = append(params.Messages, msg.ToParam(), openai.ToolMessage("12:00", msg.ToolCalls[0].ID))
	resp, err = c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].FinishReason != "stop" || !strings.Contains(resp.Choices[0].Message.Content, "12:00") {
		t.Errorf("after the tool result (still a forced choice): %+v", resp.Choices[0])
	}
}
