// Package pool owns poolgate's worker pool: the supervisor that runs one
// worker process per account, the picker and the admission guard, and the
// router that runs a chat.Request on it. Drivers for concrete worker
// protocols live in sub-packages (pool/lingma, pool/modelserver) behind Backend.
//
// pool knows nothing about HTTP frameworks; handlers translate wire JSON into
// chat values and back.
package pool

import (
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
)

// agentModels are model names that ask for the worker's agent mode.
var agentModels = map[string]bool{"lingma-agent": true, "agent": true}

// wantsAgent reports whether req calls for the worker's agent mode.
func wantsAgent(req *chat.Request) bool {
	if len(req.Tools) > 0 || agentModels[strings.ToLower(req.Model)] {
		return true
	}
	for i := range req.Messages {
		if m := &req.Messages[i]; m.Role == chat.RoleTool || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// AuthState is a worker's login state as its backend reports it.
type AuthState struct {
	LoggedIn bool
	// Account is the upstream account name or id, when known.
	Account string
}
