// Command poolgate is the gateway daemon (internal/daemon): it serves until
// SIGINT/SIGTERM and shuts down gracefully; SIGHUP reloads the accounts and
// API keys. With the argument "simworker" it runs the bundled reference
// worker instead, so the default pool needs no second binary; with "migrate"
// it moves a Python gateway deployment over (internal/pycompat/migrate);
// with "doctor" it checks a real worker binary against what the Lingma
// driver relies on (pool/lingma/doctor).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/poolgate/poolgate/internal/daemon"
	"github.com/poolgate/poolgate/internal/pycompat/migrate"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/pool/lingma/doctor"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Environ, hup, os.Stdout, os.Stderr)
	signal.Stop(hup)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "poolgate:", err)
		os.Exit(1)
	}
}

// run is the whole program; main only adds the process's signals, arguments,
// environment and exit code. environ returns the environment now (a reload
// reads it again); hup delivers SIGHUP, the reload signal (nil: none).
func run(ctx context.Context, args []string, environ func() []string, hup <-chan os.Signal, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "simworker" {
		return sim.Main(ctx, args[1:], daemon.Getenv(environ()), stdout, stderr)
	}
	if len(args) > 0 && args[0] == "migrate" {
		return migrate.Run(args[1:], environ(), daemon.Kinds(), stdout, stderr)
	}
	if len(args) > 0 && args[0] == "doctor" {
		return doctor.Main(ctx, args[1:], daemon.ChildEnv(environ()), daemon.Getenv(environ()), stdout, stderr)
	}
	fs := flag.NewFlagSet("poolgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts daemon.Options
	fs.StringVar(&opts.ConfigPath, "config", "", "YAML config file (keys in docs/configuration.md; env POOLGATE_* overrides)")
	fs.StringVar(&opts.EnvFile, "env-file", "", ".env file of KEY=VALUE lines read once at start, below the environment (the Python gateway's .env works)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return daemon.Serve(ctx, opts, environ, hup, stderr)
}
