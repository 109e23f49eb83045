package openaichat

import (
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/internal/chat"
)

// badRequest is a client mistake found while decoding: a 400 naming param
// ("" when the whole body is at fault) with an OpenAI code.
func badRequest(param, code, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if param != "" {
		msg = param + ": " + msg
	}
	return &apierr.RequestError{Param: param, Code: code, Message: msg}
}

// param is this protocol's name for a neutral field: the same path, except
// that a function's name is under "function" and every stop sequence is
// "stop".
func param(ve *chat.ValidationError) string {
	p := ve.Path()
	switch {
	case ve.Field == "stop":
		return "stop"
	case ve.Field == "tools" && ve.Member == "name",
		ve.Field == "messages" && strings.HasPrefix(ve.Member, "tool_calls[") && strings.HasSuffix(ve.Member, ".name"):
		return strings.TrimSuffix(p, "name") + "function.name"
	}
	return p
}
