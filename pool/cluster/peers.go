package cluster

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"
	"time"
)

// PeerNetworks are the networks a replica's URL may lead into
// (cluster_peer_networks): a hop or a challenge is never sent to an address
// outside them, whatever the registry in Redis says. The check is made on
// the address dialed, after name resolution, so a host name that resolves
// elsewhere (or is made to, later) does not pass.
type PeerNetworks []netip.Prefix

// Allows reports whether addr is in one of the networks.
func (n PeerNetworks) Allows(addr netip.Addr) bool {
	addr = addr.Unmap()
	return slices.ContainsFunc(n, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// Dialer returns a dialer that connects only to addresses in the networks.
func (n PeerNetworks) Dialer(timeout time.Duration) *net.Dialer {
	return &net.Dialer{Timeout: timeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("hop: dial %s: %w", address, err)
		}
		if !n.Allows(ap.Addr()) {
			return fmt.Errorf("hop: %s is outside the peer networks (cluster_peer_networks): a replica URL there is not used", ap.Addr())
		}
		return nil
	}}
}
