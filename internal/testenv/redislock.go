package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RedisLock locks a test's Redis servers the way docker-compose.yml locks
// its own: every server, sentinels included, takes one password
// (requirepass, and masterauth for replication) and speaks TLS only, with
// a certificate for 127.0.0.1 signed by a CA the test made. Pass one to
// RedisLocked, RedisSentinelLocked or RedisClusterLocked.
type RedisLock struct {
	// Password holds a '%' and an '@', which a URL must percent-encode.
	Password string
	// PasswordFile holds Password followed by a line break, as an operator
	// writes it (redis_password_file).
	PasswordFile string
	// CAFile is the PEM of the CA that signed the servers' certificate
	// (redis_tls_ca_file).
	CAFile string

	certFile, keyFile string
	roots             *x509.CertPool
}

// NewRedisLock makes a CA, a server certificate and passwords in a
// directory of the test's own.
func NewRedisLock(t testing.TB) *RedisLock {
	t.Helper()
	dir := t.TempDir()
	l := &RedisLock{Password: "d%4t@-" + rand.Text()[:12],
		PasswordFile: filepath.Join(dir, "redis-password"), CAFile: filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "server.pem"), keyFile: filepath.Join(dir, "server-key.pem")}
	if err := os.WriteFile(l.PasswordFile, []byte(l.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "poolgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Servers are clients of each other too (replication, the cluster bus).
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, l.CAFile, "CERTIFICATE", caDER)
	writePEM(t, l.certFile, "CERTIFICATE", leafDER)
	writePEM(t, l.keyFile, "EC PRIVATE KEY", keyDER)
	l.roots = x509.NewCertPool()
	l.roots.AddCert(caCert)
	return l
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TLSConfig is a client's TLS configuration for the servers.
func (l *RedisLock) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: l.roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// serverArgs are a locked server's arguments: TLS on port (the plain port
// off), the password, and TLS for replication and the cluster bus.
func (l *RedisLock) serverArgs(port string) []string {
	return []string{"--port", "0", "--tls-port", port, "--tls-cert-file", l.certFile, "--tls-key-file", l.keyFile,
		"--tls-ca-cert-file", l.CAFile, "--tls-auth-clients", "no", "--tls-replication", "yes", "--tls-cluster", "yes",
		"--requirepass", l.Password, "--masterauth", l.Password}
}

// RedisLocked starts a locked redis-server (see RedisLock), as Redis does.
func RedisLocked(t testing.TB, l *RedisLock) *RedisServer {
	t.Helper()
	return startRedis(t, "", nil, l)
}

// userinfo is the URL's user info for password: percent-encoded.
func userinfo(password string) string {
	return ":" + strings.NewReplacer("%", "%25", "@", "%40").Replace(password) + "@"
}
