package route

import (
	"context"
	"slices"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// Conversations across kinds. A session lives on one worker, so it is
// never continued on a worker of another kind; what is new is saying so.
// The affinity key names no model (keyModel): a follow-up whose model
// moved, to another model of its kind or to another kind, finds its
// conversation's entry, leaves it for the model it was made under, and
// starts a new session with the reason in its turn line (new_session).

// keyModel is the model the affinity keys are made with: none. An entry
// names its model and kind instead (Affinity.Model, Affinity.Kind).
const keyModel = ""

// Why a follow-up that found its conversation's entry starts a new
// session (the turn line's new_session).
const (
	freshKindChanged    = "kind_changed"    // the model moved to another kind, or the account's kind changed
	freshModelChanged   = "model_changed"   // the model moved to another model of the same kind
	freshMoved          = "moved"           // another account of the kind took the turn
	freshNotContinuable = "not_continuable" // the driver's reuse policy keeps this turn out of the session
)

// kindRules applies to rq's turn the rules of the kinds it may go to:
// their agent mode (asked for by model name) and their bounds on a turn,
// besides RouterConfig's own.
func (r *Router) kindRules(rq *request) error {
	cat := r.pool.catalogue()
	kinds := rq.target.targetKinds(cat)
	rq.turn.Agent = wantsAgent(rq.Request, r.cfg.AgentModels)
	for _, k := range kinds {
		rq.turn.Agent = rq.turn.Agent || wantsAgent(rq.Request, r.cfg.KindAgentModels[k])
	}
	// The whole transcript, as a worker without the conversation's session
	// gets it: whichever worker takes the turn, it must fit.
	if r.cfg.CheckTurn != nil {
		if err := r.cfg.CheckTurn(&rq.turn); err != nil {
			return err
		}
	}
	for _, k := range kinds {
		if check := cat.check[k]; check != nil {
			if err := check(&rq.turn); err != nil {
				return err
			}
		}
	}
	return nil
}

// modelMoved handles an entry made under another model than rq's: the
// entry goes back to the store, for the conversation's branch under its
// model, and rq starts a new session, noting why. It reports whether the
// entry was of another model.
func (r *Router) modelMoved(ctx context.Context, rq *request, key AffinityKey, a Affinity) bool {
	if a.Model == "" || a.Model == rq.model {
		return false
	}
	rq.fresh = freshModelChanged
	if a.Kind != "" && !slices.Contains(rq.target.targetKinds(r.pool.catalogue()), a.Kind) {
		rq.fresh = freshKindChanged
	}
	_ = r.store.PutAffinity(context.WithoutCancel(ctx), key, a) // best effort, as every write-back
	rq.conv = r.names.name(rq.owner, rq.model, rq.Messages)
	if r.metrics != nil {
		r.metrics.CacheMisses.Inc()
	}
	return true
}

// hitFits reports whether rq's entry may be continued on slot's worker,
// which is about to take turn; when not, it notes why rq starts a new
// session.
func (r *Router) hitFits(rq *request, slot *turnSlot, turn *chat.Turn) bool {
	switch {
	case rq.hit.Kind != "" && rq.hit.Kind != slot.m.kind:
		rq.fresh = freshKindChanged
	case slot.Instance() != rq.hit.Instance:
		rq.fresh = freshMoved
	case rq.hit.SessionID != "" && !continues(slot.Backend, turn):
		rq.fresh = freshNotContinuable
	default:
		return true
	}
	return false
}

// sessionHolder returns the backend that holds a's upstream session: the
// instance's, unless the instance runs another kind of worker now (a
// reload changed its account's driver), whose sessions a's id is none of.
func (p *Pool) sessionHolder(a Affinity) worker.Backend {
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.byName[a.Instance]
	if !ok || m.st.Backend == nil || (a.Kind != "" && a.Kind != m.kind) {
		return nil
	}
	return m.st.Backend
}
