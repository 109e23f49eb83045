package qoder

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

// maxLoginOutput bounds what is kept of the login command's output while
// looking for its URL.
const maxLoginOutput = 64 << 10

// connectLogin waits for the URL the supervised `qodercli login` prints.
// A command that ends without one (it could not reach the vendor, say)
// fails the start with what it printed.
func (d *Driver) connectLogin(ctx context.Context, ep worker.Endpoint) (worker.Backend, error) {
	_ = ep.Stdio.In.Close() // it reads nothing
	found := make(chan string, 1)
	var said strings.Builder
	go func() {
		sc := bufio.NewScanner(ep.Stdio.Out)
		sc.Buffer(make([]byte, 4096), maxLoginOutput)
		sent := false
		for sc.Scan() {
			if u := loginURLRE.FindString(sc.Text()); u != "" && !sent {
				found <- u
				sent = true
			}
			if !sent && said.Len() < maxLoginOutput {
				said.WriteString(strings.TrimSpace(sc.Text()) + " ")
			}
		}
		_, _ = io.Copy(io.Discard, ep.Stdio.Out) // a line too long for the scanner
		if !sent {
			close(found)
		}
	}()
	select {
	case u, ok := <-found:
		if !ok {
			return nil, fmt.Errorf("qoder %s: qodercli login ended without a device login URL: %s", ep.Name,
				agentcli.Clip(strings.TrimSpace(said.String())))
		}
		d.log.Info("qodercli waits for its device login", "instance", ep.Name)
		return &Backend{d: d, ep: ep, url: u, loggedOut: true}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("qoder %s: no device login URL from qodercli login: %w", ep.Name, ctx.Err())
	}
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
