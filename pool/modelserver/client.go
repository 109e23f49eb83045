package modelserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// errBodyLimit caps how much of an error or /v1/models body is read (1 MiB).
const errBodyLimit = 1 << 20

// Client is the worker.Backend of one running OpenAI-compatible worker.
type Client struct {
	d        *Driver
	name     string
	modelURL string
	// conns are the chat connections; head starts each chat request.
	conns *conns
	head  []byte

	// ctx ends when the client is closed; it aborts the turns in flight.
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
}

var _ worker.Backend = (*Client)(nil)

// Capabilities: an OpenAI-compatible server lists its models; it keeps no
// sessions and needs no browser login.
func (c *Client) Capabilities() worker.Capabilities {
	return worker.Capabilities{Models: true, RawModels: true}
}

// LoginURL is unsupported: these servers take a key, not a login.
func (c *Client) LoginURL(context.Context) (string, error) { return "", worker.ErrUnsupported }

// DeleteSession is unsupported: these servers keep no sessions.
func (c *Client) DeleteSession(context.Context, string) error { return worker.ErrUnsupported }

func newClient(d *Driver, name, addr string) *Client {
	c := &Client{d: d, name: name, modelURL: "http://" + addr + "/v1/models",
		conns: newConns(addr, &d.cfg), head: requestHead(addr, d.cfg.APIKey)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

// Close aborts the turns in flight (their answers end with an error at
// their next read, whoever holds them) and makes later calls fail with
// chat.ErrWorkerGone. It does not wait for the answers' readers. It is safe
// to call twice.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.conns.close() // aborts the exchanges in flight
	return nil
}

// begin says whether a turn may start: false once the client is closed.
func (c *Client) begin() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed
}

// Status reports the worker as logged in when GET /v1/models answers 200:
// OpenAI-compatible workers have no login, so this is the health probe.
func (c *Client) Status(ctx context.Context) (worker.AuthState, error) {
	resp, err := c.get(ctx)
	if err != nil {
		return worker.AuthState{}, err
	}
	drain(resp.Body)
	if !c.ready(resp.StatusCode) {
		return worker.AuthState{}, fmt.Errorf("openai %s: GET /v1/models: %w", c.name, statusError(resp, nil))
	}
	return worker.AuthState{LoggedIn: true}, nil
}

// ready says whether a /v1/models status means the worker serves.
func (c *Client) ready(code int) bool {
	return code == http.StatusOK || len(c.d.cfg.Models) > 0 && code < 500
}

// Models returns Config.Models when set, else the ids of GET /v1/models. It
// accepts {"data": [...]}, llama.cpp's and Ollama's {"models": [...]} and a
// bare array, with entries that carry an id, a name or a model.
func (c *Client) Models(ctx context.Context) ([]chat.Model, error) {
	if len(c.d.cfg.Models) > 0 {
		return c.configured(), nil
	}
	_, ms, err := c.RawModels(ctx)
	return ms, err
}

func (c *Client) configured() []chat.Model {
	out := make([]chat.Model, len(c.d.cfg.Models))
	for i, m := range c.d.cfg.Models {
		out[i] = chat.Model{ID: m, Name: m}
	}
	return out
}

// RawModels returns GET /v1/models' body beside the parsed list. With
// Config.Models set, the list is that one and the body is shown when the
// server answers one (nil otherwise).
func (c *Client) RawModels(ctx context.Context) (json.RawMessage, []chat.Model, error) {
	body, err := c.modelsBody(ctx)
	if len(c.d.cfg.Models) > 0 {
		if err != nil || !json.Valid(body) {
			body = nil
		}
		return body, c.configured(), nil
	}
	if err != nil {
		return nil, nil, err
	}
	models, err := parseModels(body)
	if err != nil {
		return nil, nil, fmt.Errorf("openai %s: /v1/models: %w", c.name, err)
	}
	return body, models, nil
}

func (c *Client) modelsBody(ctx context.Context) ([]byte, error) {
	resp, err := c.get(ctx)
	if err != nil {
		return nil, err
	}
	defer drain(resp.Body)
	body, err := io.ReadAll(io.LimitReader(resp.Body, errBodyLimit))
	if err != nil {
		return nil, fmt.Errorf("openai %s: read /v1/models: %w: %w", c.name, chat.ErrWorkerGone, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("openai %s: GET /v1/models: %w", c.name, statusError(resp, body))
	}
	return body, nil
}

type modelEntry struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Model string `json:"model"`
}

func parseModels(body []byte) ([]chat.Model, error) {
	var list struct {
		Data   []modelEntry `json:"data"`
		Models []modelEntry `json:"models"`
	}
	var bare []modelEntry
	switch err := json.Unmarshal(body, &list); {
	case err == nil:
		bare = list.Data
		if len(bare) == 0 {
			bare = list.Models
		}
	case json.Unmarshal(body, &bare) != nil:
		return nil, &chat.UpstreamError{Message: "malformed model list: " + clip(body)}
	}
	out := make([]chat.Model, 0, len(bare))
	for _, m := range bare {
		id := cmp(m.ID, m.Model, m.Name)
		if id == "" {
			continue
		}
		out = append(out, chat.Model{ID: id, Name: cmp(m.Name, id)})
	}
	return out, nil
}

// cmp returns the first non-empty string.
func cmp(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// get sends GET /v1/models within ProbeTimeout. The caller closes the body.
func (c *Client) get(ctx context.Context) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.d.cfg.ProbeTimeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.modelURL, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("openai %s: %w", c.name, err)
	}
	c.setAuth(req.Header)
	resp, err := c.d.hc.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("openai %s: GET /v1/models: %w: %w", c.name, chat.ErrWorkerGone, err)
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

func (c *Client) setAuth(h http.Header) {
	if c.d.cfg.APIKey != "" {
		h.Set("Authorization", "Bearer "+c.d.cfg.APIKey)
	}
}

// cancelBody releases a request's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// drain reads what is left of a small body, so that its connection goes back
// to the idle pool, then closes it.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

// chatError maps a failed POST (no response) to the pool's errors.
func (c *Client) chatError(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("openai %s: chat: %w", c.name, ctx.Err())
	case c.ctx.Err() != nil:
		return fmt.Errorf("openai %s: chat: client closed: %w", c.name, chat.ErrWorkerGone)
	case errors.Is(err, errTurnTimeout):
		return fmt.Errorf("openai %s: no answer within %s: %w", c.name, c.d.cfg.RequestTimeout, chat.ErrWorkerGone)
	case errors.Is(err, errHeaderTimeout):
		return fmt.Errorf("openai %s: %w: %w", c.name, err, chat.ErrWorkerGone)
	}
	return fmt.Errorf("openai %s: chat: %w: %w", c.name, chat.ErrWorkerGone, err)
}

// statusError maps a non-2xx answer to the pool's errors: 429 is a
// *chat.RateLimitedError honouring Retry-After, anything else a
// *chat.UpstreamError with the server's message. body is what was read of the
// response (nil: read it here).
func statusError(resp *http.Response, body []byte) error {
	if body == nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, errBodyLimit))
	}
	msg := bodyMessage(body)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return &chat.RateLimitedError{RetryAfter: retryAfter(resp.Header, time.Now()), Message: msg}
	}
	return &chat.UpstreamError{Status: resp.StatusCode, Message: msg}
}

// retryAfter reads Retry-After as seconds or an HTTP date, falling back to
// OpenAI's retry-after-ms; 0 when absent, past or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return clampWait(time.Duration(f * float64(time.Second)))
		}
		if t, err := http.ParseTime(v); err == nil {
			return clampWait(t.Sub(now))
		}
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return clampWait(time.Duration(f * float64(time.Millisecond)))
		}
	}
	return 0
}

// clampWait keeps a server's hint within 0..24h.
func clampWait(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return min(d, 24*time.Hour)
}

// bodyMessage extracts the message of an error body: OpenAI's
// {"error": {"message": ...}}, {"error": "..."}, {"message": ...}, FastAPI's
// {"detail": ...}, or else the start of the raw text.
func bodyMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Message flexText        `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil {
		return clip(body)
	}
	if m := errorMessage(e.Error); m != "" {
		return m
	}
	if e.Message != "" {
		return string(e.Message)
	}
	if len(e.Detail) > 0 {
		var s string
		if json.Unmarshal(e.Detail, &s) == nil {
			return s
		}
		return clip(e.Detail)
	}
	return clip(body)
}

// clipLen is how much of a bad payload an error message quotes.
const clipLen = 200

// clip returns the start of b, trimmed, for error messages.
func clip(b []byte) string {
	s := strings.TrimSpace(string(b[:min(len(b), clipLen+8)]))
	if len(s) > clipLen {
		s = strings.ToValidUTF8(s[:clipLen], "") + "..."
	}
	return s
}
