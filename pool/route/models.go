package route

import (
	"github.com/poolgate/poolgate/internal/chat"
)

// Models returns the union of the instances' models, in first-seen order.
// The slice is shared: callers must not modify it.
func (p *Pool) Models() []chat.Model {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.models
}

// rebuildModels rebuilds the union of the workers' model lists (rarely:
// once per worker's first ready), so requests read it without building it;
// p.mu held.
func (p *Pool) rebuildModels() {
	seen := map[string]bool{}
	var out []chat.Model
	for _, m := range p.members {
		for _, md := range m.st.Models {
			if !seen[md.ID] {
				seen[md.ID] = true
				out = append(out, md)
			}
		}
	}
	p.models = out
}

// Models returns the pool's models.
func (r *Router) Models() []chat.Model { return r.pool.Models() }

// resolveModel maps a client's model name to a pool model id: an exact id,
// a display name, an alias, else the default model. Clients such as Claude
// Code send their own model names and must still be served.
func (r *Router) resolveModel(name string) string {
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
