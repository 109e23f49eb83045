package modelserver

import (
	"encoding/json"
	"reflect"
	"testing"
)

var fastChunkSeeds = []string{
	`{"id":"c1","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"},"finish_reason":null}]}`,
	`{"choices":[{"delta":{"content":"lo \u00e9\n\"q\""},"finish_reason":null,"logprobs":null}]}`,
	`{"choices":[{"delta":{},"finish_reason":"stop","index":0}],"system_fingerprint":null}`,
	`{"choices":[]}`,
	`{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":2}}`,
	`{"choices":[{"delta":{"content":"a"}}],"Choices":[]}`,
	`{"choices":[{"delta":{"content":"a"},"Delta":{"content":"b"}}]}`,
	`{"choices":[{"delta":{"content":"a","content":"b"}}]}`,
	`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`,
	`{"choices":[{"delta":{"content":["a","b"]}}]}`,
	`{"choices":[{"delta":{"content":"\ud83d\ude00 \/"}}],"created":-1.5e+3}`,
	`{"choices":[{"delta":{"content":"bad \x"}}]}`,
	`{"choices":[{"delta":{"content":"a"}}]} x`,
	`{"choices":[{"delta":{"content":"a"}}],"n":01}`,
	`{"choices":[{"delta":{"content":"a"}}],"extra":{"k":1}}`,
	`{"prompt_tokens":3,"choices":[{"delta":{"content":"a"}}]}`,
	`{"choiceſ":"x"}`,
	`{"id":"c2","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"whole","refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21,"prompt_tokens_details":{"cached_tokens":0}},"system_fingerprint":"fp"}`,
	`{"choices":[{"message":{"content":"a"},"message":{"content":"b"}}]}`,
	`{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}`,
	`{"choices":[],"usage":{"prompt_tokens":"7","completion_tokens":2.0}}`,
	`{"choices":[],"usage":{"prompt_tokens":-3,"completion_tokens":012}}`,
	`{"choices":[],"usage":{"Prompt_Tokens":1,"eval_count":1,"eval_count":2}}`,
	`{"choices":[],"usage":{"prompt_tokens":1234567890123456789}}`,
	`{"choices":[],"usage":{"x":[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]},"y":{"a":[1,{"b":"\u00e9"}],"c":{}}}`,
	`{"choices":[],"usage":{"x":[1,]}}`,
	`{"choices":[],"usage":{"x":{"a" 1}}}`,
}

// The fast reader decodes exactly what encoding/json decodes, whenever it
// takes a chunk at all.
func FuzzFastChunk(f *testing.F) {
	for _, s := range fastChunkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fast chunk
		fast.reset()
		if !fastChunk(b, &fast) {
			return
		}
		var slow chunk
		slow.reset()
		if err := json.Unmarshal(b, &slow); err != nil {
			t.Fatalf("fast reader took %q, encoding/json fails it: %v", b, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast reader = %+v, encoding/json = %+v", b, fast, slow)
		}
	})
}

// The chunks of a plain text stream, and a whole answer of text, take the
// fast path.
func TestFastChunkTakesTextChunks(t *testing.T) {
	for _, s := range append(fastChunkSeeds[:4:4], fastChunkSeeds[17]) {
		var c chunk
		c.reset()
		if !fastChunk([]byte(s), &c) {
			t.Errorf("fastChunk(%s) = false, want true", s)
		}
	}
}
