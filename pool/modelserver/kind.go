package modelserver

import "github.com/poolgate/poolgate/pool/worker"

// Kind registers the model-server driver with the daemon. A model server
// keeps no login in its work dir (no credentials, no login recipe of its
// own) and has no agent mode; the bundled simulator speaks its protocol
// with --protocol=openai. Its Command is the whole argv template: the
// configured binary followed by the extra worker arguments.
var Kind = worker.Kind{
	Name:    "openai",
	SimArgs: []string{"start", "--protocol=openai", "--port={port}", "--workDir={workdir}"},
	New: func(s worker.Setup) (worker.Driver, error) {
		template := append(append([]string(nil), s.Command...), s.ExtraArgs...)
		return New(Config{Command: template, APIKey: s.APIKey, IdleConns: s.MaxInFlight, MaxRequest: s.MaxTurnBytes}), nil
	},
}
