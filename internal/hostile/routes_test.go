package hostile_test

import (
	"slices"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/handlers/protocols"
	"github.com/poolgate/poolgate/internal/access"
)

// routes are every route poolgate serves, with its rule: the operator
// surface's table (access.Routes) and the answer APIs' rules, which the
// edge makes from the protocols table.
func routes() []access.Rule {
	return append(slices.Clone(access.Routes), handlers.Routes(protocols.Table(protocols.Config{}, nil))...)
}
