// Package daemon is poolgate's wiring: it loads the configuration, builds the
// pool, the session store, the protocol handlers and the admin surface,
// serves until its context ends and shuts down in order; a SIGHUP reloads the
// accounts and API keys. cmd/poolgate is only the entry point: it dispatches
// the subcommands and hands the daemon the process's signals, arguments and
// environment, so everything here can be run and tested in-process.
package daemon

import (
	"context"
	"io"
	"os"
)

// Options are the daemon's command-line settings; cmd/poolgate parses them.
type Options struct {
	ConfigPath string // YAML config file, read again at each reload ("": none)
	EnvFile    string // .env file of KEY=VALUE lines read once at start, below the environment ("": none)
}

// Serve runs the daemon until ctx ends. environ returns the process
// environment, read again at each reload; hup delivers SIGHUP (nil: none);
// the log goes to stderr.
func Serve(ctx context.Context, opts Options, environ func() []string, hup <-chan os.Signal, stderr io.Writer) error {
	return serve(ctx, opts, environ, hup, stderr)
}

// ChildEnv filters environ down to what a spawned worker process inherits,
// the same filter the daemon applies to its own workers.
func ChildEnv(environ []string) []string { return childEnv(environ) }

// Getenv returns a lookup over environ, a list of KEY=VALUE entries.
func Getenv(environ []string) func(string) string { return getenv(environ) }

func getenv(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		for i := 0; i < len(kv); i++ {
			if kv[i] == '=' {
				m[kv[:i]] = kv[i+1:]
				break
			}
		}
	}
	return func(k string) string { return m[k] }
}
