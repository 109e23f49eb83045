package cluster

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// A new conversation this replica cannot serve goes to a replica with
// room whose ready accounts serve its model, not to any with room; a
// replica that lists no models yet is not ruled out, and a turn for a
// model nobody listed goes to any replica with room.
func TestSpareServesTheModel(t *testing.T) {
	c := &Cluster{cfg: Config{ID: "r1"}, replicas: map[string]Replica{
		"r1": {ID: "r1", URL: "http://r1", Capacity: 9, Models: []chat.Model{{ID: "m-a"}}, Serving: []string{"m-a"}},
		"r2": {ID: "r2", URL: "http://r2", Capacity: 4, Models: []chat.Model{{ID: "m-a"}}, Serving: []string{"m-a"}},
		"r3": {ID: "r3", URL: "http://r3", Capacity: 2, Models: []chat.Model{{ID: "m-a"}, {ID: "m-b"}}, Serving: []string{"m-b"}},
		"r4": {ID: "r4", URL: "http://r4", Capacity: 1}, // an older replica: it says nothing of models
	}}
	tests := []struct {
		give string
		want string
	}{
		{"m-a", "http://r2"}, // r3 lists m-a but serves it on no ready account
		{"m-b", "http://r3"},
		{"m-c", "http://r4"},
		{"", "http://r2"},
	}
	for _, tt := range tests {
		if got, ok := c.Spare(tt.give); got != tt.want || !ok {
			t.Errorf("Spare(%q) = %q, %v; want %q", tt.give, got, ok, tt.want)
		}
	}
}

// A replica's heartbeat carries the models its accounts list and those its
// ready instances serve; its refresh gives the admission room the other
// replicas' models, which the pool then lists beside its own (and never
// hands back as its own).
func TestReplicasShareTheirModels(t *testing.T) {
	f := supervisortest.New()
	f.Models = []chat.Model{{ID: "lm-coder", Name: "Coder"}}
	p := route.New(route.Config{}, nil, slog.New(slog.DiscardHandler))
	wcs := supervisortest.Drive(f, supervisortest.Configs(t, false, "lm-1"))
	wcs[0].Kind = "lingma"
	sup := supervisor.New(p.Watch(supervisor.Config{}), wcs, f, nil, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	sup.Start(ctx)
	t.Cleanup(func() { cancel(); sup.Shutdown() })
	testenv.WaitFor(t, 5*time.Second, "lm-1 ready", func() bool { return p.Serves("lm-1") })

	store := newFakeCluster()
	c := New(Config{ID: "r1", URL: "http://r1", LeaseTTL: 5 * time.Second}, sup, p, store, nil, slog.New(slog.DiscardHandler))
	remote := []chat.Model{{ID: "ms-large", Driver: "openai"}}
	if err := store.Heartbeat(ctx, Replica{ID: "r2", URL: "http://r2", Models: remote, Serving: []string{"ms-large"}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.heartbeat(ctx)
	if err := c.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	own := store.replicas["r1"]
	if want := []chat.Model{{ID: "lm-coder", Name: "Coder", Driver: "lingma"}}; !slices.Equal(own.Models, want) ||
		!slices.Equal(own.Serving, []string{"lm-coder"}) {
		t.Errorf("r1's heartbeat: models %v, serving %v; want %v, [lm-coder]", own.Models, own.Serving, want)
	}
	want := []chat.Model{{ID: "lm-coder", Name: "Coder", Driver: "lingma"}, {ID: "ms-large", Driver: "openai"}}
	if got := p.Models(); !slices.Equal(got, want) {
		t.Errorf("the pool lists %v, want %v", got, want)
	}
	if got := p.LocalModels(); len(got) != 1 {
		t.Errorf("LocalModels = %v, want r1's own model alone", got)
	}
}
