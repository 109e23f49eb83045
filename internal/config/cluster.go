package config

import (
	"fmt"
	"net/netip"
	"net/url"

	"github.com/poolgate/poolgate/internal/redact"
)

// PeerNetworks parses cluster_peer_networks: CIDR prefixes
// ("10.0.0.0/8") or single addresses.
func (c *Config) PeerNetworks() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(c.ClusterPeerNetworks))
	for _, s := range c.ClusterPeerNetworks {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return nil, fmt.Errorf("cluster_peer_networks: %q is not a CIDR prefix such as 10.0.0.0/8, nor an address", s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// validatePeers checks what other replicas dial: advertise_url is a plain
// http(s) base URL (the others forward to it and check that the replica
// answering there proves it holds the cluster key for exactly that URL), and
// the peer networks parse and are not empty.
func (c *Config) validatePeers() []error {
	var errs []error
	u, err := url.Parse(c.AdvertiseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		errs = append(errs, fmt.Errorf("advertise_url %q: an http(s) URL of a host and port, such as http://poolgate-1:8080, "+
			"with no path, user or query", redact.URL(c.AdvertiseURL)))
	}
	nets, err := c.PeerNetworks()
	switch {
	case err != nil:
		errs = append(errs, err)
	case len(nets) == 0:
		errs = append(errs, fmt.Errorf("cluster_peer_networks is empty: no replica could reach another"))
	}
	return errs
}
