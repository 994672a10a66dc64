package certs_test

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tidemark-io/tidemark/internal/certs"
	"github.com/tidemark-io/tidemark/internal/certs/certstest"
)

// TestReload: a handshake after Reload gets the new certificate, a bad
// file keeps the old one, and TLS 1.1 is refused.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca1, ca2 := certstest.NewCA(t, "first"), certstest.NewCA(t, "second")
	certFile, keyFile := certstest.WritePair(t, ca1.Server(), dir, "server")
	s, err := certs.Load(certs.Files{Cert: certFile, Key: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	issuer := func(conf *tls.Config) (string, error) {
		c, err := tls.Dial("tcp", ln.Addr().String(), conf)
		if err != nil {
			return "", err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Issuer.CommonName, nil
	}
	if got, err := issuer(&tls.Config{RootCAs: ca1.Pool()}); err != nil || got != "first" {
		t.Fatalf("before reload: issuer %q, %v", got, err)
	}
	certstest.WritePair(t, ca2.Server(), dir, "server")
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, err := issuer(&tls.Config{RootCAs: ca2.Pool()}); err != nil || got != "second" {
		t.Fatalf("after reload: issuer %q, %v", got, err)
	}
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("a broken key file reloaded")
	}
	if got, err := issuer(&tls.Config{RootCAs: ca2.Pool()}); err != nil || got != "second" {
		t.Fatalf("after a failed reload: issuer %q, %v, want the second certificate kept", got, err)
	}
	if _, err := issuer(&tls.Config{RootCAs: ca2.Pool(), MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("TLS 1.1 handshake succeeded")
	}
}

func TestClientCAFileWithoutCertificate(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := certstest.WritePair(t, certstest.NewCA(t, "ca").Server(), dir, "server")
	empty := filepath.Join(dir, "empty.pem")
	_ = os.WriteFile(empty, []byte("nothing here\n"), 0o600)
	_, err := certs.Load(certs.Files{Cert: certFile, Key: keyFile, ClientCA: empty})
	if !errors.Is(err, certs.ErrNoCertificate) {
		t.Fatalf("Load with an empty client CA file: %v, want ErrNoCertificate", err)
	}
}
