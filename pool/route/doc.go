// Package route admits turns onto the pool's workers and routes each
// request: routing by model to the accounts that serve it (a pool may mix
// kinds of worker: models.go, kinds.go), the admission room (Pool) and its
// slots, picking (affinity, spread, least busy), the Router with its retries, conversation affinity
// keys, stop sequences and token caps, the operator's tool policy and
// probes. Its entry is Router.Open: a Call in (the request, its API, whether
// it may hop to another replica), an Opened out (the started answer, a
// chat.Answer read on the caller's goroutine; or the replica that holds the
// turn), and, once the answer is over, what was Served. Nothing travels in
// the context.
//
// It sits above the workers: pool/supervisor runs their processes, and
// route owns whether one takes turns (its cooldown after a rate limit, its
// lease fence: the member record). Route knows a worker only from its
// reports, given the pool at the supervisor's construction (Pool.Watch),
// and asks it for nothing but a health check; pool/worker is
// the seam through which it talks to them, implemented by the drivers. pool/cluster sits above it. It knows nothing about HTTP:
// handlers translate wire JSON into chat values and back.
package route

import (
	"slices"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
)

// wantsAgent reports whether req calls for the worker's agent mode: it
// has tools or tool history, or names one of agentModels (the driver's,
// RouterConfig.AgentModels).
func wantsAgent(req *chat.Request, agentModels []string) bool {
	if len(req.Tools) > 0 || slices.Contains(agentModels, strings.ToLower(req.Model)) {
		return true
	}
	for i := range req.Messages {
		if m := &req.Messages[i]; m.Role == chat.RoleTool || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}
