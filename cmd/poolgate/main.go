// Command poolgate is the gateway daemon (cmd/poolgate/internal/daemon): it serves until
// SIGINT/SIGTERM and shuts down gracefully; SIGHUP reloads the accounts and
// API keys. With the argument "simworker" it runs the bundled reference
// worker instead, so the default pool needs no second binary; with "migrate"
// it moves a Python gateway deployment over (internal/pycompat/migrate);
// with the name of a command a driver supplies (worker.Kind's Commands, in
// pool/drivers' table), such as doctor, it runs that command.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/poolgate/poolgate/cmd/poolgate/internal/daemon"
	"github.com/poolgate/poolgate/internal/pycompat/migrate"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/pool/drivers"
	"github.com/poolgate/poolgate/pool/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	err := run(ctx, os.Args[1:], os.Environ, hup, os.Stdin, os.Stdout, os.Stderr)
	signal.Stop(hup)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "poolgate:", err)
		os.Exit(1)
	}
}

// run is the whole program; main only adds the process's signals, arguments,
// environment, standard streams and exit code. environ returns the
// environment now (a reload reads it again); hup delivers SIGHUP, the
// reload signal (nil: none).
func run(ctx context.Context, args []string, environ func() []string, hup <-chan os.Signal, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 1 && args[0] == "simworker" && args[1] == "agent-cli" {
		// The simulator playing an agent CLI, on its standard input and output.
		return sim.AgentMain(ctx, args[2:], daemon.Getenv(environ()), stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "simworker" {
		return sim.Main(ctx, args[1:], daemon.Getenv(environ()), stdout, stderr)
	}
	if len(args) > 0 && args[0] == "migrate" {
		return migrate.Run(args[1:], environ(), daemon.PlainFormat, stdout, stderr)
	}
	if len(args) > 0 {
		if cmd := driverCommand(args[0]); cmd != nil {
			return cmd(ctx, args[1:], daemon.ChildEnv(environ()), daemon.Getenv(environ()), stdout, stderr)
		}
	}
	fs := flag.NewFlagSet("poolgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts daemon.Options
	fs.StringVar(&opts.ConfigPath, "config", "", "YAML config file (keys in docs/configuration.md; env POOLGATE_* overrides)")
	fs.StringVar(&opts.EnvFile, "env-file", "", ".env file of KEY=VALUE lines read once at start, below the environment (the Python gateway's .env works)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		// A mistyped subcommand must not start a gateway instead.
		return fmt.Errorf("unknown command %q: the commands are %s (or none, to serve)", fs.Arg(0), commandNames())
	}
	return daemon.Serve(ctx, opts, environ, hup, stderr)
}

// driverCommand returns the command named name that a driver supplies, nil
// when none does.
func driverCommand(name string) worker.Command {
	for _, k := range drivers.Kinds() {
		if cmd := k.Commands[name]; cmd != nil {
			return cmd
		}
	}
	return nil
}

// commandNames lists the subcommands, the drivers' included.
func commandNames() string {
	names := []string{"simworker", "migrate"}
	for _, k := range drivers.Kinds() {
		for name := range k.Commands {
			names = append(names, name)
		}
	}
	sort.Strings(names[2:])
	return strings.Join(names, ", ")
}
