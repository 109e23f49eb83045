package apierr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		give           error
		wantKind       Class
		wantStatus     int
		wantCode       string
		wantParam      string
		wantRetryAfter time.Duration
		wantMessage    string
	}{
		{&RequestError{Param: "n", Code: CodeUnsupValue, Message: "n: only n=1"}, InvalidRequest, 400, CodeUnsupValue, "n", 0, "n: only n=1"},
		{&RequestError{Status: 404, Param: "previous_response_id", Message: "gone"}, NotFound, 404, "", "previous_response_id", 0, "gone"},
		{&chat.ValidationError{Field: "tools", Index: 2, Member: "name", Message: "duplicate"}, InvalidRequest, 400, CodeInvalid, "tools[2].name", 0, "tools[2].name: duplicate"},
		{&chat.ValidationError{Field: "messages", Index: -1, Problem: chat.Missing, Message: "x"}, InvalidRequest, 400, CodeMissing, "messages", 0, "messages: x"},
		{&chat.PolicyError{Message: "no", Param: "tool_choice"}, InvalidRequest, 400, "tool_not_allowed", "tool_choice", 0, "no"},
		{httpx.ErrBodyTooLarge, TooLarge, 413, "request_too_large", "", 0, "request body too large"},
		{fmt.Errorf("turn on acct-1: %w", &chat.TooLargeError{Size: 36 << 20, Limit: 16 << 20}), TooLarge, 413, "request_too_large", "", 0,
			"the conversation is 37748736 bytes as a worker receives it; the workers accept at most 16777216"},
		{httpx.ErrBudget, RateLimited, 429, "overloaded", "", time.Second, "the gateway is at capacity, retry later"},
		{httpx.ErrBodyTimeout, RequestTimeout, 408, "request_timeout", "", 0, httpx.ErrBodyTimeout.Error()},
		{&chat.OverloadedError{RetryAfter: 2100 * time.Millisecond, Reason: "queue full"}, RateLimited, 429, "overloaded", "", 2100 * time.Millisecond, "the gateway is at capacity, retry later"},
		{&chat.OverloadedError{}, RateLimited, 429, "overloaded", "", time.Second, "the gateway is at capacity, retry later"},
		{&chat.RateLimitedError{Message: "quota", RetryAfter: time.Minute}, RateLimited, 429, "rate_limit_exceeded", "", time.Minute, "upstream rate limit: quota"},
		{&chat.RateLimitedError{}, RateLimited, 429, "rate_limit_exceeded", "", 0, "upstream rate limit"},
		{chat.ErrNoInstance, Unavailable, 503, "no_instance", "", 0, "no backend instance is ready to serve"},
		{fmt.Errorf("pick acct-1: %w", chat.ErrNotLoggedIn), Unavailable, 503, "not_logged_in", "", 0, "the backend account is not logged in"},
		// Nothing ready because every account is logged out: the reason wins.
		{fmt.Errorf("%w: %w: every account needs a login", chat.ErrNoInstance, chat.ErrNotLoggedIn), Unavailable, 503, "not_logged_in", "", 0, "the backend account is not logged in"},
		{fmt.Errorf("attempt 2 on acct-1: %w", &chat.UpstreamError{Status: 500, Message: "boom"}), Upstream, 502, "upstream_error", "", 0, "upstream error 500: boom"},
		{fmt.Errorf("read frame: %w", chat.ErrWorkerGone), Upstream, 502, "worker_gone", "", 0, "the backend worker went away"},
		{fmt.Errorf("turn: %w", context.DeadlineExceeded), Timeout, 504, "timeout", "", 0, "the request timed out"},
		{context.Canceled, Canceled, 499, "canceled", "", 0, "the client closed the request"},
		{errors.New("dial 10.0.0.7: secret internals"), Internal, 500, "", "", 0, "internal error"},
	}
	for _, tt := range tests {
		t.Run(tt.give.Error(), func(t *testing.T) {
			p := Classify(tt.give)
			got := fmt.Sprint(p.Class, p.Status, p.Code, p.Param, p.RetryAfter, p.Message)
			want := fmt.Sprint(tt.wantKind, tt.wantStatus, tt.wantCode, tt.wantParam, tt.wantRetryAfter, tt.wantMessage)
			if got != want || p.Err != tt.give {
				t.Errorf("got %s, want %s", got, want)
			}
			// A message never carries the text that wraps a domain error.
			if strings.Contains(p.Message, "acct-1") || strings.Contains(p.Message, "internals") {
				t.Errorf("message %q shows internals", p.Message)
			}
		})
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tt := range []struct {
		give time.Duration
		want int
	}{{0, 0}, {-time.Second, 0}, {time.Millisecond, 1}, {time.Second, 1}, {1500 * time.Millisecond, 2}, {time.Minute, 60}} {
		p := Problem{RetryAfter: tt.give}
		if got := p.RetryAfterSeconds(); got != tt.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tt.give, got, tt.want)
		}
	}
}

func TestForStatus(t *testing.T) {
	tests := []struct {
		give     int
		wantKind Class
		wantCode string
	}{
		{400, InvalidRequest, ""}, {401, Unauthorized, ""}, {404, NotFound, ""}, {405, MethodNotAllowed, ""},
		{408, RequestTimeout, "request_timeout"}, {409, Conflict, ""}, {413, TooLarge, "request_too_large"},
		{429, RateLimited, ""}, {500, Internal, ""}, {502, Upstream, ""}, {503, Unavailable, ""},
		{418, Internal, ""}, // no kind of its own: keeps its status
	}
	for _, tt := range tests {
		p := ForStatus(tt.give, "m")
		if p.Class != tt.wantKind || p.Status != tt.give || p.Code != tt.wantCode || p.Message != "m" {
			t.Errorf("ForStatus(%d) = %+v, want kind %d, status %d, code %q", tt.give, p, tt.wantKind, tt.give, tt.wantCode)
		}
	}
	for k := range statuses {
		if p := ForStatus(Class(k).Status(), ""); p.Class != Class(k) {
			t.Errorf("kind %d's status %d comes back as kind %d", k, Class(k).Status(), p.Class)
		}
	}
}

func TestValidate(t *testing.T) {
	req := &chat.Request{Messages: []chat.Message{{Role: chat.RoleUser}}, Tools: []chat.Tool{{Name: "f"}, {Name: "f"}}}
	err := Validate(req, func(ve *chat.ValidationError) string { return fmt.Sprintf("tools.%d.%s", ve.Index, ve.Member) })
	var re *RequestError
	if !errors.As(err, &re) || re.Param != "tools.1.name" || re.Code != CodeInvalid || !strings.HasPrefix(re.Message, "tools.1.name: duplicate") {
		t.Errorf("got %#v, want a request error naming tools.1.name", err)
	}
	req.Tools = req.Tools[:1]
	if err := Validate(req, nil); err != nil {
		t.Errorf("valid request: %v", err)
	}
}

func TestGone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if Gone(ctx, chat.ErrNoInstance) {
		t.Error("a live request is not gone")
	}
	cancel()
	if !Gone(ctx, chat.ErrNoInstance) || Gone(ctx, fmt.Errorf("read: %w", httpx.ErrBodyTimeout)) {
		t.Error("a cancelled request is gone, unless its body was late (its client waits for the 408)")
	}
	dl, cancel2 := context.WithTimeout(context.Background(), -time.Second)
	defer cancel2()
	if Gone(dl, context.DeadlineExceeded) {
		t.Error("a request past its deadline still gets its 504")
	}
}
