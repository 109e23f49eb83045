package responses_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/poolgate/poolgate/handlers/httpx"
	rsp "github.com/poolgate/poolgate/handlers/responses"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
)

// weatherScript answers like a worker with tools: a call when tools are
// offered and no result is in yet, text after a tool result, plain text
// otherwise (split into pieces, as a stream would be).
func weatherScript(req *chat.Request) ([]chat.Event, error) {
	last := req.Messages[len(req.Messages)-1]
	switch {
	case last.Role == chat.RoleTool:
		return chattest.TextEvents("It is ", last.Content, " in Paris."), nil
	case len(req.Tools) > 0:
		return []chat.Event{
			{Type: chat.EventToolCall, ToolCall: chat.ToolCall{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Paris"}`}},
			{Type: chat.EventDone, Finish: chat.FinishToolCalls, Usage: chat.Usage{InputTokens: 20, OutputTokens: 7}},
		}, nil
	default:
		return chattest.TextEvents("Hello", ", ", "wor", "ld!"), nil
	}
}

// newServer serves h on the routes the gin wiring will use, with the
// middleware's context values.
func newServer(t *testing.T, h handler) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/responses", h.Create)
	mux.HandleFunc("GET /v1/responses/{id}", h.Get)
	mux.HandleFunc("DELETE /v1/responses/{id}", h.Delete)
	mux.HandleFunc("GET /v1/responses/{id}/input_items", h.InputItems)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := httpx.WithRequestID(r.Context(), "req-1")
		secret := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		ctx = access.WithCaller(ctx, access.Caller{Key: &apikey.Key{Secret: secret}, Owner: access.OwnerOf(secret)})
		mux.ServeHTTP(w, r.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newClient(srv *httptest.Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0))
}

func TestSDKStreamEqualsNonStream(t *testing.T) {
	fake := &chattest.Source{Script: weatherScript}
	client := newClient(newServer(t, newHandler(rsp.Config{}, fake, newStore())))
	ctx := context.Background()
	params := responses.ResponseNewParams{
		Model: "gpt-test",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("say hello")},
	}
	resp, err := client.Responses.New(ctx, params)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if resp.Status != "completed" || resp.OutputText() != "Hello, world!" {
		t.Fatalf("non-stream: status %q text %q, want completed %q", resp.Status, resp.OutputText(), "Hello, world!")
	}
	if resp.Usage.TotalTokens != resp.Usage.InputTokens+resp.Usage.OutputTokens || resp.Usage.InputTokens != 10 {
		t.Errorf("usage = %+v, want input 10 and a consistent total", resp.Usage)
	}

	stream := client.Responses.NewStreaming(ctx, params)
	var text strings.Builder
	var seq int64 = -1
	var final responses.Response
	terminals := 0
	for stream.Next() {
		ev := stream.Current()
		if ev.SequenceNumber <= seq {
			t.Errorf("sequence_number %d after %d", ev.SequenceNumber, seq)
		}
		seq = ev.SequenceNumber
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete", "response.failed":
			terminals++
			final = ev.Response
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("stream: %v", err)
	}
	if terminals != 1 || final.Status != "completed" {
		t.Fatalf("got %d terminal events, final status %q; want 1, completed", terminals, final.Status)
	}
	if text.String() != resp.OutputText() || final.OutputText() != resp.OutputText() {
		t.Errorf("stream text %q, final %q; want non-stream %q", text.String(), final.OutputText(), resp.OutputText())
	}
}

func TestSDKToolRoundTripAndLifecycle(t *testing.T) {
	fake := &chattest.Source{Script: weatherScript}
	client := newClient(newServer(t, newHandler(rsp.Config{}, fake, newStore())))
	ctx := context.Background()
	tool := responses.ToolUnionParam{OfFunction: &responses.FunctionToolParam{
		Name: "get_weather", Strict: openai.Bool(true),
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
	}}
	first, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-test", Tools: []responses.ToolUnionParam{tool},
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather in Paris?")},
	})
	if err != nil {
		t.Fatalf("first turn: %v", err)
	}
	if len(first.Output) != 1 || first.Output[0].Type != "function_call" {
		t.Fatalf("first output = %+v, want one function_call", first.Output)
	}
	call := first.Output[0].AsFunctionCall()
	if call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` {
		t.Fatalf("call = %s(%s), want get_weather({\"city\":\"Paris\"})", call.Name, call.Arguments)
	}

	second, err := client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-test", PreviousResponseID: openai.String(first.ID), Tools: []responses.ToolUnionParam{tool},
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
			functionCallOutput(call.CallID, "sunny"),
		}},
	})
	if err != nil {
		t.Fatalf("second turn: %v", err)
	}
	if got, want := second.OutputText(), "It is sunny in Paris."; got != want {
		t.Errorf("answer = %q, want %q", got, want)
	}
	if second.PreviousResponseID != first.ID {
		t.Errorf("previous_response_id = %q, want %q", second.PreviousResponseID, first.ID)
	}
	// The router saw the whole conversation rebuilt from the store.
	reqs := fake.Requests()
	msgs := reqs[len(reqs)-1].Messages
	if len(msgs) != 3 || msgs[0].Role != chat.RoleUser || len(msgs[1].ToolCalls) != 1 || msgs[2].ToolCallID != call.CallID || msgs[2].Name != "get_weather" {
		t.Errorf("router transcript = %+v, want user, assistant call, tool result", msgs)
	}
	checkLifecycle(t, client, second.ID, call.CallID)
}

func checkLifecycle(t *testing.T, client openai.Client, id, callID string) {
	t.Helper()
	ctx := context.Background()
	got, err := client.Responses.Get(ctx, id, responses.ResponseGetParams{})
	if err != nil || got.ID != id || got.OutputText() != "It is sunny in Paris." {
		t.Fatalf("Get = %v, %v; want the stored response", got, err)
	}
	page, err := client.Responses.InputItems.List(ctx, id, responses.InputItemListParams{})
	if err != nil {
		t.Fatalf("InputItems: %v", err)
	}
	if len(page.Data) != 1 || page.Data[0].Type != "function_call_output" || page.Data[0].CallID != callID || page.HasMore {
		t.Errorf("input items = %+v, want the one function_call_output", page.Data)
	}
	if err := client.Responses.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = client.Responses.Get(ctx, id, responses.ResponseGetParams{})
	wantNotFound(t, "Get after delete", err)
	_, err = client.Responses.InputItems.List(ctx, id, responses.InputItemListParams{})
	wantNotFound(t, "InputItems after delete", err)
	err = client.Responses.Delete(ctx, id)
	wantNotFound(t, "Delete after delete", err)
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("%s: err = %v, want a 404 API error", what, err)
	}
}

func TestSDKUnknownPreviousResponse(t *testing.T) {
	fake := &chattest.Source{Script: weatherScript}
	client := newClient(newServer(t, newHandler(rsp.Config{}, fake, newStore())))
	_, err := client.Responses.New(context.Background(), responses.ResponseNewParams{
		Model: "gpt-test", PreviousResponseID: openai.String("resp_nope"),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Param != "previous_response_id" {
		t.Fatalf("err = %v, want 404 naming previous_response_id", err)
	}
	if n := len(fake.Requests()); n != 0 {
		t.Errorf("router called %d times, want 0", n)
	}
}

func functionCallOutput(callID, output string) responses.ResponseInputItemUnionParam {
	item := responses.ResponseInputItemParamOfFunctionCallOutput(output)
	item.OfFunctionCallOutput.CallID = openai.String(callID)
	return item
}
