package qoder

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/worker"
)

// loginURLRE finds the device login URL `qodercli login` prints (the
// vendor's https://qoder.com/device/selectAccounts?challenge=..., or the
// simulator's page on loopback).
var loginURLRE = regexp.MustCompile(`https?://[^\s"'<>]+/device/selectAccounts\?[^\s"'<>]+`)

// connectLogin waits for the URL the supervised `qodercli login` prints.
// A command that ends without one (it could not reach the vendor, say)
// fails the start with what it printed.
func (d *Driver) connectLogin(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	_ = ep.Stdio.In.Close() // it reads nothing
	u, printed, err := agentcli.ScanURL(ctx, ep.Stdio.Out, loginURLRE)
	switch {
	case err != nil:
		return nil, fmt.Errorf("qoder %s: no device login URL from qodercli login: %w", ep.Name, err)
	case u == "":
		return nil, fmt.Errorf("qoder %s: qodercli login ended without a device login URL: %s", ep.Name,
			agentcli.Clip(strings.Join(strings.Fields(printed), " ")))
	}
	d.log.Info("qodercli waits for its device login", "instance", ep.Name)
	return &Backend{d: d, ep: ep, url: u, loggedOut: true}, nil
}

// LoginURL is the URL the worker's device login printed. A worker that
// runs a session has none: one whose login was refused is ending, and
// its next start runs the device login.
func (b *Backend) LoginURL(context.Context) (string, error) {
	if b.url == "" {
		return "", fmt.Errorf("qoder %s: the worker is restarting for its device login: %w", b.ep.Name, chat.ErrWorkerGone)
	}
	return b.url, nil
}
