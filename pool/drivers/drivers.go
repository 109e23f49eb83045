// Package drivers lists the kinds of worker poolgate runs, one entry a
// driver. It is the one place that names the drivers: the daemon, its
// subcommands and the migration read the table, so adding a driver is its
// own package plus one line here.
package drivers

import (
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/pool/claudecode"
	"github.com/poolgate/poolgate/pool/lingma"
	"github.com/poolgate/poolgate/pool/lingma/doctor"
	"github.com/poolgate/poolgate/pool/modelserver"
	"github.com/poolgate/poolgate/pool/qoder"
	"github.com/poolgate/poolgate/pool/worker"
)

// init registers each kind's configuration section, so that a
// configuration read by any program that imports the table has them.
func init() {
	for _, k := range Kinds() {
		if k.Section != nil {
			config.Register(k.Name, k.Section)
		}
	}
}

// Kinds returns the kinds of worker poolgate runs, in the order an error
// listing them names them; the driver setting picks one by name. A kind's
// commands that live in a package of their own (because they import the
// driver) are added here.
func Kinds() []worker.Kind {
	lm := lingma.Kind
	lm.Commands = map[string]worker.Command{"doctor": doctor.Main}
	return []worker.Kind{lm, modelserver.Kind, claudecode.Kind, qoder.Kind}
}
