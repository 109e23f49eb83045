// Package deploy holds poolgate's deployment files: the Dockerfile, the
// nginx configuration for scale-out, Prometheus and Grafana provisioning
// (docker-compose.yml at the repository root ties them together). Its only
// Go code lets tests run those same files: NginxConfig renders
// deploy/nginx.conf for replicas on loopback.
package deploy

import (
	"bytes"
	_ "embed" // nginx.conf
	"errors"
	"fmt"
	"regexp"
	"strings"
)

//go:embed nginx.conf
var nginxConf []byte

var (
	upstreamOpen = regexp.MustCompile(`^\s*upstream\s+\S+\s*\{\s*$`)
	serverLine   = regexp.MustCompile(`^(\s*)server\s+(\S+?)((?:\s+[^;]*)?);\s*$`)
	listenLine   = regexp.MustCompile(`^(\s*)listen\s+[^;]+;\s*$`)
)

// NginxConfig returns deploy/nginx.conf for a test: listening on listen
// (e.g. 127.0.0.1:18080) with the servers of every upstream block replaced by
// upstreams (host:port each), each keeping the parameters (max_fails,
// fail_timeout) of the block's first server. Everything else is the file as
// docker compose uses it. Run it with nginx -p <dir> -g 'pid <dir>/nginx.pid;'.
func NginxConfig(listen string, upstreams []string) ([]byte, error) {
	if len(upstreams) == 0 {
		return nil, errors.New("nginx config: no upstreams")
	}
	var out bytes.Buffer
	inUpstream, wrote, blocks, listens := false, false, 0, 0
	for _, line := range strings.SplitAfter(string(nginxConf), "\n") {
		switch {
		case upstreamOpen.MatchString(line):
			inUpstream, wrote = true, false
			blocks++
		case inUpstream && strings.TrimSpace(line) == "}":
			inUpstream = false
		case inUpstream && serverLine.MatchString(line):
			if !wrote {
				m := serverLine.FindStringSubmatch(line)
				for _, u := range upstreams {
					fmt.Fprintf(&out, "%sserver %s%s;\n", m[1], u, m[3])
				}
				wrote = true
			}
			continue
		case !inUpstream && listenLine.MatchString(line):
			indent := listenLine.FindStringSubmatch(line)[1]
			fmt.Fprintf(&out, "%slisten %s;\n", indent, listen)
			listens++
			continue
		}
		out.WriteString(line)
	}
	if blocks == 0 || listens == 0 {
		return nil, fmt.Errorf("nginx config: found %d upstream blocks and %d listen lines, want at least one of each", blocks, listens)
	}
	return out.Bytes(), nil
}
