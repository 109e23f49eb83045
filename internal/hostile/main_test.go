package hostile_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// modelServerArg, as the first argument, makes the test binary the model
// server of modelServer instead of running the tests: the openai driver's
// workers in the poison tests are this binary, spawned by the real
// supervisor.
const modelServerArg = "poolgate-hostile-modelserver"

func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == modelServerArg {
		modelServer(strings.TrimPrefix(os.Args[2], "--port="))
		return
	}
	os.Exit(m.Run())
}

// poisonExit is the prompt on which the model server answers 200, sends
// its headers and exits: a model server that a request crashes after it
// accepted it.
const poisonExit = "POISON-EXIT"

// modelServer is an OpenAI-compatible model server on 127.0.0.1:port that
// answers "ok" to every chat, streamed or not, except a request that holds
// poisonExit: that one gets its 200 headers, then the process exits.
func modelServer(port string) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m","object":"model"}]}`)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		stream := bytes.Contains(body, []byte(`"stream":true`))
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json")
		}
		if bytes.Contains(body, []byte(poisonExit)) {
			w.WriteHeader(http.StatusOK)
			_ = http.NewResponseController(w).Flush()
			os.Exit(3)
		}
		if stream {
			_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"ok"},"finish_reason":null}]}`+"\n\n"+
				`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
				"data: [DONE]\n\n")
			return
		}
		_, _ = io.WriteString(w, `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	err := http.ListenAndServe("127.0.0.1:"+port, mux)
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
