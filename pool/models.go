package pool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/poolgate/poolgate/internal/chat"
)

// Models returns the union of the instances' models, in first-seen order.
// The slice is shared: callers must not modify it.
func (p *Pool) Models() []chat.Model {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.models
}

// setModels records a worker's model list and rebuilds the union (rarely:
// once per worker start), so requests read it without building it.
func (p *Pool) setModels(w *Worker, ms []chat.Model) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.models = ms
	seen := map[string]bool{}
	var out []chat.Model
	for _, w := range p.workers {
		for _, m := range w.models {
			if !seen[m.ID] {
				seen[m.ID] = true
				out = append(out, m)
			}
		}
	}
	p.models = out
}

// Models returns the pool's models.
func (r *Router) Models() []chat.Model { return r.pool.Models() }

// ResolveModel maps a client's model name to a pool model id: an exact id,
// a display name, an alias, else the default model. Clients such as Claude
// Code send their own model names and must still be served.
func (r *Router) ResolveModel(name string) string {
	if a, ok := r.cfg.Aliases[name]; ok {
		name = a
	}
	models := r.pool.Models()
	for _, m := range models {
		if m.ID == name || (m.Name != "" && m.Name == name) {
			return m.ID
		}
	}
	if r.cfg.DefaultModel != "" {
		return r.cfg.DefaultModel
	}
	if len(models) > 0 {
		return models[0].ID
	}
	return name
}

// InstanceModels asks the named instance for its model list now: the
// worker's raw payload (nil when its driver can't show it) and the parsed
// list.
func (p *Pool) InstanceModels(ctx context.Context, name string) (json.RawMessage, []chat.Model, error) {
	w, ok := p.byName[name]
	if !ok {
		return nil, nil, ErrUnknownInstance
	}
	p.mu.Lock()
	be := w.backend
	p.mu.Unlock()
	if be == nil {
		return nil, nil, chat.ErrNoInstance
	}
	if rl, ok := be.(RawModelLister); ok {
		return rl.RawModels(ctx)
	}
	ml, ok := be.(ModelLister)
	if !ok {
		return nil, nil, errors.New("this worker cannot list models")
	}
	ms, err := ml.Models(ctx)
	return nil, ms, err
}
