// Command simworker is poolgate's bundled reference worker: a stand-in for the
// Lingma local agent (or an OpenAI-compatible model server) with a real login
// page and injectable faults. See package internal/sim for its protocol and
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
	err := sim.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "simworker:", err)
		os.Exit(1)
	}
}
