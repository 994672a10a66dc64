// Package certs is a TLS server configuration read from PEM files that
// can be read again while the server runs: a handshake after Reload uses
// the new certificate and client CAs, sessions already open keep theirs.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// ErrNoCertificate reports a client CA file with no certificate in it.
var ErrNoCertificate = errors.New("certs: no PEM certificate found")

// Files names the PEM files of a TLS server.
type Files struct {
	// Cert and Key are the server's certificate chain and private key.
	Cert, Key string
	// ClientCA, when set, makes the server require a client certificate
	// signed by one of its certificates (mutual TLS).
	ClientCA string
}

// Server is a reloadable TLS server configuration.
type Server struct {
	files Files
	cur   atomic.Pointer[tls.Config]
}

// Load reads the files; the server then offers TLS 1.2 and later only.
func Load(f Files) (*Server, error) {
	s := &Server{files: f}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again; on error the configuration in force is
// kept and the error names the file.
func (s *Server) Reload() error {
	cert, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("certificate %s, key %s: %w", s.files.Cert, s.files.Key, err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if s.files.ClientCA != "" {
		pem, err := os.ReadFile(s.files.ClientCA)
		if err != nil {
			return fmt.Errorf("client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client CA %s: %w", s.files.ClientCA, ErrNoCertificate)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	s.cur.Store(c)
	return nil
}

// Config returns a configuration for tls.NewListener that picks up every
// Reload at the next handshake.
func (s *Server) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load(), nil
		},
	}
}
