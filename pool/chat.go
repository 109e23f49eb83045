// Package pool admits turns onto the supervisor's workers and routes each
// chat.Request: the admission queue and slots, picking (affinity, spread,
// least busy), the Router with its retries, conversation affinity keys,
// stop sequences and token caps, the operator's tool policy, probes, and
// the request-scoped helpers the protocol handlers use (WithAPI,
// WithForwarder, ErrForwarded). It notes in the request's served record
// (internal/served) the worker that took the turn, then the turn's usage.
// Worker processes belong to pool/supervisor:
// the pool knows a worker only from the reports it subscribes to and asks
// it for changes (a cooldown, a check) through its methods. Drivers for
// concrete workers live in pool/lingma and pool/modelserver.
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
