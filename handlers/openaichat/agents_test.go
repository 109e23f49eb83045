package openaichat

import (
	"testing"

	"github.com/poolgate/poolgate/internal/testenv"
)

// What qwen-code, Cline and other chat clients send besides the basics is
// accepted: media in history becomes a note, reasoning and caching hints
// are dropped and reported.
func TestAgentShapes(t *testing.T) {
	body := `{"model":"m","stream":true,"reasoning_effort":"high","enable_thinking":true,"chat_template_kwargs":{"x":1},
	"messages":[
	  {"role":"system","content":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}]},
	  {"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]},
	  {"role":"assistant","content":"I can't see it.","reasoning_content":"hmm"},
	  {"role":"user","content":[{"type":"text","text":"ok"}]}]}`
	req, opt, err := decodeRequest([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := req.Messages[1].Content, "look\n\n"+mediaNotes["image_url"]; got != want {
		t.Errorf("history with an image = %q, want %q", got, want)
	}
	if req.Messages[0].Content != "sys" {
		t.Errorf("system = %q", req.Messages[0].Content)
	}
	testenv.SameFields(t, opt.dropped.Fields(), []string{dropReasoning, dropThinking, dropTemplateKwargs, dropCacheControl, dropImages, dropReasoningContent}, DroppedFields)
}
