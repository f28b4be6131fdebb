package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PKI is a throwaway certificate authority with one server certificate (for
// 127.0.0.1 and "localhost") and one client certificate, written as PEM
// files to a test's temporary folder.
type PKI struct {
	CAFile         string
	ServerCertFile string
	ServerKeyFile  string
	ClientCertFile string
	ClientKeyFile  string

	ca     *x509.CertPool
	server tls.Certificate
}

// NewPKI creates the CA and both certificates.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ferry test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("create CA: %v", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p := &PKI{CAFile: filepath.Join(dir, "ca.pem"), ca: x509.NewCertPool()}
	p.ca.AddCert(caCert)
	writePEM(t, p.CAFile, "CERTIFICATE", caDER)

	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("create %s certificate: %v", name, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatalf("marshal %s key: %v", name, err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.ServerCertFile, p.ServerKeyFile = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	p.ClientCertFile, p.ClientKeyFile = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	if p.server, err = tls.LoadX509KeyPair(p.ServerCertFile, p.ServerKeyFile); err != nil {
		t.Fatalf("load server certificate: %v", err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return k
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// TLSProxy terminates TLS on a free port of 127.0.0.1 with the PKI's server
// certificate and forwards the plaintext to target: TLS in front of a
// service (RabbitMQ, Temporal) that speaks plaintext here. With
// requireClientCert, only clients with a certificate of the PKI get through
// (mTLS). alpn is offered to clients (gRPC insists on "h2").
type TLSProxy struct {
	addr string
	ln   net.Listener
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// Handshakes counts completed TLS handshakes; Rejected the failed ones.
	handshakes, rejected int
}

// NewTLSProxy starts the proxy; it stops at test cleanup.
func (p *PKI) NewTLSProxy(t testing.TB, target string, requireClientCert bool, alpn ...string) *TLSProxy {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12, NextProtos: alpn}
	if requireClientCert {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = p.ca
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("TLS proxy: listen: %v", err)
	}
	px := &TLSProxy{addr: ln.Addr().String(), ln: ln, conns: map[net.Conn]struct{}{}}
	px.wg.Add(1)
	go func() {
		defer px.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			px.wg.Add(1)
			go func() {
				defer px.wg.Done()
				px.handle(tls.Server(c, cfg), target)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		px.mu.Lock()
		for c := range px.conns {
			_ = c.Close()
		}
		px.mu.Unlock()
		px.wg.Wait()
	})
	return px
}

// Addr is the host:port clients dial.
func (px *TLSProxy) Addr() string { return px.addr }

// Handshakes reports completed and failed TLS handshakes so far.
func (px *TLSProxy) Handshakes() (ok, failed int) {
	px.mu.Lock()
	defer px.mu.Unlock()
	return px.handshakes, px.rejected
}

// track remembers c, so cleanup can close it.
func (px *TLSProxy) track(c net.Conn) {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.conns[c] = struct{}{}
}

func (px *TLSProxy) handle(client *tls.Conn, target string) {
	px.track(client)
	defer client.Close()
	_ = client.SetDeadline(time.Now().Add(10 * time.Second))
	if err := client.Handshake(); err != nil {
		px.mu.Lock()
		px.rejected++
		px.mu.Unlock()
		return
	}
	_ = client.SetDeadline(time.Time{})
	px.mu.Lock()
	px.handshakes++
	px.mu.Unlock()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		return
	}
	px.track(server)
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); _ = server.Close(); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); _ = client.Close(); done <- struct{}{} }()
	<-done
	<-done
}
