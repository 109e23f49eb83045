package lingma

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Status codes of chat/finish the driver knows the meaning of (the
// plugin's ChatFinishParams: 200 success, 408 timeout, 500 server error).
// Others are read too: 429 a rate limit, 401 a lost login, anything else
// an upstream error with that status.
const (
	finishOK      = 200
	finishTimeout = 408
)

// askError is the error of a chat/ask answered with success: false.
func (c *Client) askError(msg string) error {
	if c.cfg.LoginText.MatchString(msg) {
		return fmt.Errorf("%w: %s", chat.ErrNotLoggedIn, msg)
	}
	return &chat.UpstreamError{Message: "chat/ask: " + msg}
}

// finishError maps a chat/finish that is not a success to the pool's
// errors. The error text is read from errorMessage (the name the worker
// uses in its replies), errorMsg (the name earlier notes used), else a
// reason other than the plain "success" or "error".
func finishError(m *chatParams, cfg *Config) error {
	code := int(m.StatusCode)
	msg := cmp.Or(m.ErrorMessage, m.ErrorMsg)
	if msg == "" && m.Reason != "" && m.Reason != "success" && m.Reason != "error" {
		msg = m.Reason
	}
	cancelled := strings.EqualFold(m.Reason, "cancelled") || strings.EqualFold(m.Reason, "canceled")
	switch {
	case cancelled:
		// A turn the gateway stopped never reaches here (it is closed
		// first): the worker ended it on its own.
		return &chat.UpstreamError{Status: code, Message: "the worker cancelled the turn"}
	case code == finishOK || code == 0 && msg == "" && m.Reason != "error":
		return nil
	case code == finishTimeout:
		return fmt.Errorf("the upstream timed out (chat/finish %d: %s): %w", code, cmp.Or(msg, "no message"),
			context.DeadlineExceeded)
	case code == 429 || msg != "" && cfg.RateLimitText.MatchString(msg):
		return &chat.RateLimitedError{RetryAfter: seconds(string(m.RetryAfter)), Message: cmpMsg(msg, code)}
	case code == 401 || msg != "" && cfg.LoginText.MatchString(msg):
		return fmt.Errorf("%w: %w", chat.ErrNotLoggedIn, &chat.UpstreamError{Status: code, Message: cmpMsg(msg, code)})
	}
	return &chat.UpstreamError{Status: code, Message: cmpMsg(msg, code)}
}

func cmpMsg(msg string, code int) string {
	if msg != "" {
		return msg
	}
	return "chat/finish status " + strconv.Itoa(code)
}

// seconds parses a retryAfter value in (possibly fractional) seconds. No
// public capture shows a worker sending one; the bundled simulator does
// with its rate-limit fault, and a worker that does is heard.
func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f <= 0 || f > 24*3600 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}
