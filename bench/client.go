package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// target is one endpoint under measurement (a worker directly, or poolgate)
// with its own connection pool, sized so that no client ever waits for or
// re-dials a connection (the default transport keeps two idle per host).
type target struct {
	name    string
	url     string
	client  *http.Client
	readers sync.Pool // of *bufio.Reader, for streams
	// key, when set, is sent as the Bearer API key.
	key string
}

func newTarget(name, base string, conns int) *target {
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          conns + 16,
		MaxIdleConnsPerHost:   conns + 16,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true,
		ForceAttemptHTTP2:     false,
	}
	return &target{name: name, url: base + "/v1/chat/completions",
		client:  &http.Client{Transport: tr, Timeout: 2 * time.Minute},
		readers: sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 16<<10) }}}
}

// close drops the target's idle connections.
func (t *target) close() { t.client.CloseIdleConnections() }

// chat posts one chat completion and reads the whole answer. onFirst, when
// set, is called once the first SSE data line arrived.
func (t *target) chat(ctx context.Context, body []byte, stream bool, onFirst func()) outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return outcome{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return outcome{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return outcome{err: fmt.Errorf("%s: status %d: %s", t.name, resp.StatusCode, b)}
	}
	if !stream {
		first := time.Now()
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil && n == 0 {
			err = errors.New("empty body")
		}
		return outcome{firstByte: first, err: err}
	}
	br := t.readers.Get().(*bufio.Reader)
	br.Reset(resp.Body)
	defer func() { br.Reset(nil); t.readers.Put(br) }()
	return readSSE(br, onFirst)
}

// readSSE reads an OpenAI chat stream up to its [DONE], counting data events.
func readSSE(br *bufio.Reader, onFirst func()) outcome {
	var o outcome
	for {
		line, err := br.ReadSlice('\n')
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if o.firstByte.IsZero() {
				o.firstByte = time.Now()
				if onFirst != nil {
					onFirst()
				}
			}
			if string(bytes.TrimSpace(rest)) == "[DONE]" {
				// Read to the end of the body, as SDKs do, so that the
				// connection is reused: a closed-loop client must not pay
				// (and make the server pay) a new connection per stream.
				_, _ = io.Copy(io.Discard, br)
				return o
			}
			o.events++
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			o.err = fmt.Errorf("stream ended after %d events without [DONE]", o.events)
			return o
		default:
			o.err = err
			return o
		}
	}
}

// Bodies. The simulator's directives set the answer's shape; the text before
// them varies where affinity or pool spreading should see distinct
// conversations.

const model = "dashscope_qwen3_coder"

func chatBody(stream bool, messages ...string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"` + model + `","stream":` + strconv.FormatBool(stream) + `,"messages":[`)
	for i, text := range messages {
		if i > 0 {
			b.WriteByte(',')
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		q := strconv.Quote(text) // ASCII-only texts: Go and JSON quoting agree
		b.WriteString(`{"role":"` + role + `","content":` + q + `}`)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// fixed returns the same body for every request.
func fixed(body []byte) func(int) []byte { return func(int) []byte { return body } }

// affinityBodies alternates first turns of new conversations with follow-ups
// of conversations started lag requests earlier (long finished at the
// concurrency used), so about half the requests can reuse an affinity entry.
func affinityBodies(lag int) func(int) []byte {
	return func(seq int) []byte {
		conv := seq / 2
		if seq%2 == 0 || conv < lag {
			p := "bench conversation " + strconv.Itoa(seq)
			return chatBody(false, p)
		}
		p := "bench conversation " + strconv.Itoa(2*(conv-lag))
		return chatBody(false, p, "You said: "+p, "and a follow-up")
	}
}

// requester turns a target and a body source into a requestFunc.
func requester(t *target, stream bool, body func(int) []byte, onFirst func()) requestFunc {
	return func(ctx context.Context, seq int) outcome {
		return t.chat(ctx, body(seq), stream, onFirst)
	}
}
