package qoder

import (
	"bufio"
	"context"
	"fmt"
	"regexp"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// loginURLRE finds the device login URL `qodercli login` prints (the
// vendor's https://qoder.com/device/selectAccounts?challenge=..., or the
// simulator's page on loopback).
var loginURLRE = regexp.MustCompile(`https?://[^\s"'<>]+/device/selectAccounts\?[^\s"'<>]+`)

// maxLoginOutput bounds what is read of the login command's output while
// looking for its URL.
const maxLoginOutput = 1 << 20

// LoginURL starts `qodercli login`, the CLI's device login, and returns
// the URL it prints. The command keeps running, polling the vendor until
// the browser has approved the login, then stores it and exits (the
// backend's health check then sees the new login); it is stopped by the
// next LoginURL, the backend's Close, or StartTimeout after it printed
// nothing.
func (b *Backend) LoginURL(ctx context.Context) (string, error) {
	b.mu.Lock()
	old := b.login
	b.login = nil
	closed := b.closed
	b.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	if closed {
		return "", chat.ErrWorkerGone
	}
	ch, err := b.ep.Spawn(b.d.command("login"), nil)
	if err != nil {
		return "", fmt.Errorf("qoder %s: login: %w", b.ep.Name, err)
	}
	_ = ch.Stdio().In.Close()
	ctx, cancel := context.WithTimeout(ctx, b.d.cfg.StartTimeout)
	defer cancel()
	u, err := scanLoginURL(ctx, ch)
	if err != nil {
		ch.Stop()
		return "", fmt.Errorf("qoder %s: login: %w", b.ep.Name, err)
	}
	b.mu.Lock()
	closed = b.closed
	if !closed {
		b.login = ch
	}
	b.mu.Unlock()
	if closed {
		ch.Stop()
		return "", chat.ErrWorkerGone
	}
	return u, nil
}

// scanLoginURL reads the login command's output lines until one holds the
// URL; the rest of its output is drained in the background until it
// ends.
func scanLoginURL(ctx context.Context, ch worker.Child) (string, error) {
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(ch.Stdio().Out)
		sc.Buffer(make([]byte, 4096), 64<<10)
		n, sent := 0, false
		for sc.Scan() {
			n += len(sc.Bytes()) + 1
			if u := loginURLRE.FindString(sc.Text()); u != "" && !sent {
				found <- u
				sent = true
			}
			if n > maxLoginOutput && !sent {
				break
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case u, ok := <-found:
		if !ok {
			return "", fmt.Errorf("qodercli login ended without a device login URL: %v", ch.Wait())
		}
		return u, nil
	case <-ctx.Done():
		return "", fmt.Errorf("no device login URL from qodercli login: %w", ctx.Err())
	}
}
