package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// deviceLogin plays `qodercli login`: it prints the device login URL and
// waits until the browser approved the login, which it then stores. The
// real CLI sends the browser to the vendor's page and polls the vendor
// for the approval; the simulator serves its device page on loopback
// itself (its accounts from SIMWORKER_ACCOUNTS, user:password,...).
func (e *agentEnv) deviceLogin(ctx context.Context) error {
	id, err := e.machineID()
	if err != nil {
		return err
	}
	accounts := map[string]string{}
	for _, a := range strings.Split(e.getenv("SIMWORKER_ACCOUNTS"), ",") {
		if u, p, ok := strings.Cut(strings.TrimSpace(a), ":"); ok && u != "" {
			accounts[u] = p
		}
	}
	approved := make(chan DeviceApproval, 1)
	shown := make(chan struct{}, 1)
	q := url.Values{"challenge": {randomHex(21)}, "challenge_method": {"S256"}, "nonce": {newUUID()},
		"machine_id": {id}, "client_id": {newUUID()}}
	page := &DevicePage{Accounts: accounts, OnApprove: func(a DeviceApproval) error {
		if a.Challenge != q.Get("challenge") || a.MachineID != id {
			return errors.New("this authorization request belongs to another login")
		}
		if err := e.storeLogin(a.User, a.Account); err != nil {
			return err
		}
		select {
		case approved <- a:
		default:
		}
		return nil
	}, OnDone: func() {
		select {
		case shown <- struct{}{}:
		default:
		}
	}}
	port, stop, err := serveLoopback(ctx, func(int) *http.Server {
		return &http.Server{Handler: page, ReadHeaderTimeout: 10 * time.Second}
	})
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(e.stdout, "Starting browser login...\n\nPlease open the following URL in your browser to sign in:\n\n  http://127.0.0.1:%d/device/selectAccounts?%s\n\nWaiting for browser authorization...\n",
		port, q.Encode())
	select {
	case a := <-approved:
		fmt.Fprintf(e.stdout, "\nSigned in as %s.\n", a.User)
		select { // the browser gets its last page before the server goes
		case <-shown:
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
