package lingma

import (
	"encoding/json"

	"github.com/poolgate/poolgate/internal/jsonx"
)

var chatKeys = jsonx.NewNames("requestId", "sessionId", "text", "reason", "statusCode", "fullAnswer", "errorMsg", "retryAfter", "errorMessage")

// readChatParams reads the params of chat/answer, chat/think and
// chat/finish into p, as encoding/json does. The shape the worker sends
// with every piece of an answer is read in one pass; anything else (a
// number in a string, a repeated or variant key) by encoding/json.
func readChatParams(b []byte, p *chatParams) error {
	if readChatFast(b, p) {
		return nil
	}
	*p = chatParams{}
	return json.Unmarshal(b, p)
}

func readChatFast(b []byte, p *chatParams) bool {
	strs := [...]*string{0: &p.RequestID, 1: &p.SessionID, 2: &p.Text, 3: &p.Reason, 5: &p.FullAnswer, 6: &p.ErrorMsg, 8: &p.ErrorMessage}
	s := jsonx.NewScanner(b)
	ok := s.Fields(chatKeys, func(i int) bool {
		if s.Peek() == 'n' {
			return s.Literal("null") // null leaves a field as it is
		}
		var ok bool
		switch i {
		case 4:
			var n int64
			n, ok = s.Int()
			// flexInt goes through a float64, which is exact to 2^53.
			ok = ok && n < 1<<53 && n > -1<<53
			p.StatusCode = flexInt(n)
		case 7:
			var v string
			v, ok = s.String()
			p.RetryAfter = flexString(v)
		default:
			*strs[i], ok = s.String()
		}
		return ok
	})
	return ok && s.End()
}
