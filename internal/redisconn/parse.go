package redisconn

import (
	"crypto/x509"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/internal/redact"
)

// options parses cfg.URL for cfg.Mode and applies the password and CA
// files: *redis.Options, *redis.FailoverOptions or *redis.ClusterOptions.
func options(cfg Config) (any, error) {
	o, err := parse(cfg.Mode, cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.PasswordFile != "" {
		b, err := os.ReadFile(cfg.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("redis_password_file: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return nil, fmt.Errorf("redis_password_file %s is empty", cfg.PasswordFile)
		}
		var inURL bool
		switch o := o.(type) {
		case *redis.Options:
			inURL, o.Password = o.Password != "", pw
		case *redis.FailoverOptions:
			inURL, o.Password = o.Password != "", pw
			if o.SentinelPassword == "" {
				o.SentinelPassword = pw // one password for all, unless the URL names the sentinels'
			}
		case *redis.ClusterOptions:
			inURL, o.Password = o.Password != "", pw
		}
		if inURL {
			// Which one is right is not for poolgate to guess.
			return nil, errors.New("redis_url carries a password and redis_password_file is set: keep one of them " +
				"(with docker compose, set POOLGATE_REDIS_PASSWORD_FILE= empty for a Redis whose URL has its password)")
		}
	}
	if cfg.CAFile != "" {
		if err := trust(o, cfg.CAFile); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// trust makes the client verify the servers' certificates against the
// certificates in the PEM file at path.
func trust(o any, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("redis_tls_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("redis_tls_ca_file %s holds no PEM certificate", path)
	}
	var tls bool
	switch o := o.(type) {
	case *redis.Options:
		if tls = o.TLSConfig != nil; tls {
			o.TLSConfig.RootCAs = pool
		}
	case *redis.FailoverOptions:
		if tls = o.TLSConfig != nil; tls {
			o.TLSConfig.RootCAs = pool
		}
	case *redis.ClusterOptions:
		if tls = o.TLSConfig != nil; tls {
			o.TLSConfig.RootCAs = pool
		}
	}
	if !tls {
		return errors.New("redis_tls_ca_file is set, but redis_url does not ask for TLS: start it with rediss://")
	}
	return nil
}

// parse parses url with the parser of mode's URL form. net/url and
// go-redis quote the URL, or the piece of it they stumble on, in their
// errors: when the URL does not parse, the error is the one its redacted
// form gives (redact.URL), or, when that one parses, a message naming the
// secret parts, so no password reaches a log.
func parse(mode Mode, url string) (any, error) {
	if url == "" {
		return nil, errors.New("redis_url is empty")
	}
	safe := redact.URL(url)
	o, err := parseAs(mode, url)
	switch {
	case err == nil && validQuery(url):
		return o, nil
	case err == nil, safe != url && parses(mode, safe):
		// go-redis drops a parameter that does not unescape (a password
		// parameter with a bare '%' would be no password at all).
		return nil, fmt.Errorf("redis_url %s: its user name, password or a parameter is not valid in a URL: "+
			"percent-encode its special characters ('%%' as %%25, '@' as %%40, '/' as %%2F, ':' as %%3A, '#' as %%23, "+
			"'?' as %%3F, '&' as %%26), or put the password in redis_password_file", safe)
	case safe == url:
		return nil, err // nothing secret in it
	}
	_, err = parseAs(mode, safe)
	return nil, err
}

// parses reports whether url parses in mode's form.
func parses(mode Mode, url string) bool {
	_, err := parseAs(mode, url)
	return err == nil
}

// validQuery reports whether every parameter of url unescapes.
func validQuery(raw string) bool {
	u, err := neturl.Parse(raw)
	if err != nil {
		return false
	}
	_, err = neturl.ParseQuery(u.RawQuery)
	return err == nil
}

// parseAs parses url with mode's parser, its errors saying what the mode
// expects. Its errors may quote url.
func parseAs(mode Mode, url string) (any, error) {
	switch mode {
	case "", Single:
		o, err := redis.ParseURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis_url for redis_mode single (redis://[[user]:password@]host:port[/db], rediss:// for TLS): %w", err)
		}
		return o, nil
	case Sentinel:
		o, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis_url for redis_mode sentinel (redis://[sentinel-user:sentinel-password@]sentinel1:port[/db]?master_name=NAME&addr=sentinel2:port&addr=sentinel3:port[&username=PRIMARY-USER&password=PRIMARY-PASSWORD], rediss:// for TLS): %w", err)
		}
		if o.MasterName == "" {
			return nil, errors.New("redis_url for redis_mode sentinel needs master_name=NAME, the name the sentinels monitor the primary under")
		}
		return o, nil
	case Cluster:
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("redis_url for redis_mode cluster (redis://[[user]:password@]node1:port?addr=node2:port&addr=node3:port, rediss:// for TLS): %w", err)
		}
		return o, nil
	default:
		return nil, fmt.Errorf("redis_mode %q: use single, sentinel or cluster", mode)
	}
}
