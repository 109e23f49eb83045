package route

import (
	"path"
	"slices"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
)

// Routing by model. Every account serves the models its worker lists (or
// its configuration names, which the supervisor reports in their place);
// the pool's catalogue is their union, each model with the kinds whose
// accounts serve it. A request's model name resolves to a target: the
// model its worker is asked for and the accounts that may take the turn
// (resolve; docs/routing.md states the rule). Admission picks, queues and
// backs off among those accounts only.

// catalogue is the pool's models as requests read them: rebuilt when a
// member joins or leaves, lists its models, or another replica's list
// changes (under the pool's lock), and never changed once built, so a
// request reads it without that lock.
type catalogue struct {
	// models is the union, in the order of the members (then the other
	// replicas'), each with the kinds that serve it (chat.Model.Driver);
	// local those of the members alone.
	models, local []chat.Model
	ids           []string
	// kinds are the members' kinds, first seen first; unlisted those of
	// them whose accounts have listed no model yet, here or on another
	// replica (not logged in, not started, leased elsewhere).
	kinds, unlisted []string
	// byKind holds the model ids each kind's accounts list; servedBy
	// the kinds that list each model id.
	byKind   map[string]map[string]bool
	servedBy map[string][]string
	// check is each kind's bound on a turn (its first member's driver's).
	check map[string]func(*chat.Turn) error
}

// find returns the model whose id, else display name, is name.
func (c *catalogue) find(name string) (chat.Model, bool) {
	for _, m := range c.models {
		if m.ID == name {
			return m, true
		}
	}
	for _, m := range c.models {
		if m.Name != "" && m.Name == name {
			return m, true
		}
	}
	return chat.Model{}, false
}

// target is where a request's turn may go: the model the worker is asked
// for, and which members may take it. The zero target admits every member.
type target struct {
	model string
	// listed: only members that list model, or, before a member lists
	// its own, those of a kind whose accounts list it.
	listed bool
	// kinds, when not nil, admits only members of these kinds.
	kinds []string
	// defaulted: the name the client sent took the default model.
	defaulted bool
}

// admits reports whether m may take the target's turns; p.mu held.
func (t *target) admits(m *member, c *catalogue) bool {
	if t == nil {
		return true
	}
	if t.kinds != nil && !slices.Contains(t.kinds, m.kind) {
		return false
	}
	if !t.listed {
		return true
	}
	if m.st.Models != nil {
		return slices.ContainsFunc(m.st.Models, func(md chat.Model) bool { return md.ID == t.model })
	}
	return c.byKind[m.kind][t.model]
}

// key names the target's queue, for its share of the waiting requests.
func (t *target) key() string {
	if t == nil {
		return ""
	}
	return strings.Join(t.kinds, ",") + "\x00" + t.model
}

// Models returns the union of the instances' models (and, in a cluster,
// the other replicas'), in first-seen order, each naming the kinds that
// serve it. The slice is shared: callers must not modify it.
func (p *Pool) Models() []chat.Model { return p.catalogue().models }

// LocalModels returns the models of this replica's own instances, as
// Models lists them: what a replica tells the others it has.
func (p *Pool) LocalModels() []chat.Model { return p.catalogue().local }

// catalogue returns the catalogue in force, without the pool's lock: a
// request reads it twice before admission.
func (p *Pool) catalogue() *catalogue { return p.cat.Load() }

// SetRemoteModels gives the pool the models the other replicas' accounts
// list (pool/cluster's heartbeats): listed alongside this replica's, and
// routed here as any model is (to the accounts here that serve it, or to
// the replica that holds them).
func (p *Pool) SetRemoteModels(ms []chat.Model) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Equal(ms, p.remote) {
		return
	}
	p.remote = slices.Clone(ms)
	p.rebuildModels()
}

// rebuildModels rebuilds the catalogue (rarely: a member's first list, a
// join or leave), so requests read it without building it; p.mu held.
func (p *Pool) rebuildModels() {
	c := &catalogue{byKind: map[string]map[string]bool{}, servedBy: map[string][]string{},
		check: map[string]func(*chat.Turn) error{}}
	index := map[string]int{}
	add := func(kind string, md chat.Model) {
		if c.byKind[kind] == nil {
			c.byKind[kind] = map[string]bool{}
		}
		if !c.byKind[kind][md.ID] {
			c.byKind[kind][md.ID] = true
			c.servedBy[md.ID] = append(c.servedBy[md.ID], kind)
		}
		if i, ok := index[md.ID]; ok {
			c.models[i].Driver = strings.Join(c.servedBy[md.ID], ",")
			return
		}
		index[md.ID] = len(c.models)
		md.Driver = kind
		c.models = append(c.models, md)
	}
	for _, m := range p.members {
		if !slices.Contains(c.kinds, m.kind) {
			c.kinds = append(c.kinds, m.kind)
			c.check[m.kind] = m.check
		}
		for _, md := range m.st.Models {
			add(m.kind, md)
		}
	}
	c.local = slices.Clone(c.models)
	for _, md := range p.remote {
		for kind := range strings.SplitSeq(md.Driver, ",") {
			md.Driver = ""
			add(kind, md)
		}
	}
	for _, k := range c.kinds {
		if len(c.byKind[k]) == 0 {
			c.unlisted = append(c.unlisted, k)
		}
	}
	for _, md := range c.models {
		c.ids = append(c.ids, md.ID)
	}
	p.cat.Store(c)
}

// Models returns the pool's models.
func (r *Router) Models() []chat.Model { return r.pool.Models() }

// resolve maps a client's model name to a target. In order: an alias
// first rewrites the name; a model some account lists (by id, else
// display name) goes to the accounts that list it; in a pool of one kind
// any other name takes the default model, as before kinds mixed. In a pool
// of several kinds, a kind's agent model name (lingma-agent) goes to that
// kind's accounts; a name matching RouterConfig.DefaultNames (the coding
// agents' own names) takes the default model; a name that kinds whose
// accounts have listed nothing yet might serve goes to them; anything
// else is a *chat.UnknownModelError, naming the pool's models.
func (r *Router) resolve(name string) (target, error) {
	c := r.pool.catalogue()
	asked := name
	if a, ok := r.cfg.Aliases[name]; ok {
		name = a
	}
	if md, ok := c.find(name); ok {
		return target{model: md.ID, listed: true}, nil
	}
	if len(c.kinds) <= 1 {
		return r.defaultTarget(c, name), nil
	}
	if kind, ok := r.agentKind(asked); ok && slices.Contains(c.kinds, kind) {
		return r.kindTarget(c, kind, name), nil
	}
	if r.defaultName(asked) {
		return r.defaultTarget(c, name), nil
	}
	if len(c.unlisted) > 0 {
		return target{model: name, kinds: c.unlisted}, nil
	}
	return target{}, &chat.UnknownModelError{Model: asked, Models: c.ids}
}

// defaultTarget is the default model's target: default_model, else the
// first model listed, else the name as it is (nothing listed yet).
func (r *Router) defaultTarget(c *catalogue, name string) target {
	model := r.cfg.DefaultModel
	if model == "" && len(c.models) > 0 {
		model = c.models[0].ID
	}
	if model == "" {
		return target{model: name}
	}
	_, listed := c.find(model)
	return target{model: model, listed: listed, defaulted: model != name}
}

// kindTarget is a kind's agent model name's target: the kind's accounts,
// with the default model when they list it, else their first model.
func (r *Router) kindTarget(c *catalogue, kind, name string) target {
	t := target{model: name, kinds: []string{kind}, defaulted: true}
	if d := r.cfg.DefaultModel; d != "" && c.byKind[kind][d] {
		t.model = d
		return t
	}
	for _, md := range c.models {
		if c.byKind[kind][md.ID] {
			t.model = md.ID
			break
		}
	}
	return t
}

// agentKind returns the kind whose agent model names include name.
func (r *Router) agentKind(name string) (string, bool) {
	name = strings.ToLower(name)
	for kind, names := range r.cfg.KindAgentModels {
		if slices.Contains(names, name) {
			return kind, true
		}
	}
	return "", false
}

// defaultName reports whether an unknown name takes the default model in
// a pool of several kinds (RouterConfig.DefaultNames).
func (r *Router) defaultName(name string) bool {
	for _, p := range r.cfg.DefaultNames {
		if ok, _ := path.Match(p, strings.ToLower(name)); ok {
			return true
		}
	}
	return false
}

// targetKinds are the kinds a target's turn may go to: its own, the
// kinds serving its model, or every kind of the pool.
func (t *target) targetKinds(c *catalogue) []string {
	switch {
	case t.kinds != nil:
		return t.kinds
	case t.listed:
		return c.servedBy[t.model]
	}
	return c.kinds
}
