// Command simworker is poolgate's bundled reference worker: a stand-in for the
// Lingma local agent (or an OpenAI-compatible model server, or an agent CLI
// on stdio with `agent-cli DIALECT`) with a real login page and injectable
// faults. See package internal/sim for its protocol and
// directives. The gateway also runs it as `poolgate simworker`.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/poolgate/poolgate/internal/sim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "agent-cli" {
		err = sim.AgentMain(ctx, os.Args[2:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	} else {
		err = sim.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "simworker:", err)
		os.Exit(1)
	}
}
