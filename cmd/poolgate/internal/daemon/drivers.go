package daemon

import (
	"strings"

	"github.com/poolgate/poolgate/pool/drivers"
)

// kinds are the kinds of worker the daemon runs (pool/drivers' table): the
// driver setting picks one by name, and everything the daemon knows of a
// driver (its configuration section, credential layout, agent model names,
// login recipe, how the simulator plays it) comes from its entry.
var kinds = drivers.Kinds()

// kindNames lists the kinds' names for an error: "a, b or c".
func kindNames() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
