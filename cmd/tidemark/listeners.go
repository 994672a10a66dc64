package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/spf13/pflag"
	"github.com/tidemark-io/tidemark/internal/certs"
	"github.com/tidemark-io/tidemark/mqtt"
	"github.com/tidemark-io/tidemark/mqtt/auth"
)

// securityFlags are the listener, TLS and access settings of `serve`.
type securityFlags struct {
	mqtts, ws, wss                      string
	tlsCert, tlsKey, tlsCA, tlsIdentity string
	passwordFile, aclFile               string
	allowAnonymous                      bool
	authDelay                           time.Duration
	maxKeepAlive                        int
}

func (s *securityFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&s.mqtts, "mqtts", "", "MQTT over TLS listen address, e.g. 127.0.0.1:8883 (needs --tls-cert and --tls-key)")
	fs.StringVar(&s.ws, "ws", "", "MQTT over WebSocket listen address, path /mqtt, e.g. 127.0.0.1:8080")
	fs.StringVar(&s.wss, "wss", "", "MQTT over secure WebSocket listen address, path /mqtt (needs --tls-cert and --tls-key)")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "PEM certificate chain of the TLS listeners (reloaded on SIGHUP)")
	fs.StringVar(&s.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&s.tlsCA, "tls-client-ca", "", "PEM CA certificates: TLS clients must present a certificate they signed (mutual TLS)")
	fs.StringVar(&s.tlsIdentity, "tls-identity", "", "with --tls-client-ca: the client certificate's cn or san is the user name, no password asked")
	fs.StringVar(&s.passwordFile, "password-file", "", "password file, one user:hash a line (tidemark passwd; mosquitto_passwd files work); reloaded on SIGHUP")
	fs.StringVar(&s.aclFile, "acl-file", "", "ACL file in mosquitto's acl_file format; reloaded on SIGHUP")
	fs.BoolVar(&s.allowAnonymous, "allow-anonymous", false, "with --password-file or --tls-identity: let clients without a user name connect")
	fs.DurationVar(&s.authDelay, "auth-failure-delay", time.Second, "least time a refused CONNECT waits for its CONNACK (0: none)")
	fs.IntVar(&s.maxKeepAlive, "max-keep-alive", 0, "largest keep alive in seconds a client may use; 5.0 clients asking more or 0 are told it, 3.1.1 ones refused (0: no cap)")
}

// checkListenAddr reports an address a listener could not take: not
// host:port, or a port that is neither a number up to 65535 nor a
// service name.
func checkListenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: %w", port, err)
	}
	return nil
}

// validate checks the settings before anything is opened; plain is the
// --mqtt address (empty: no plain listener).
func (s *securityFlags) validate(plain string) error {
	for _, a := range []struct{ flag, addr string }{{"--mqtts", s.mqtts}, {"--ws", s.ws}, {"--wss", s.wss}} {
		if a.addr == "" {
			continue
		}
		if err := checkListenAddr(a.addr); err != nil {
			return fmt.Errorf("%s %q: %w; want host:port, e.g. 127.0.0.1:8883", a.flag, a.addr, err)
		}
	}
	if plain == "" && s.mqtts == "" && s.ws == "" && s.wss == "" {
		return errors.New("no listener: give --mqtt, --mqtts, --ws or --wss an address")
	}
	secure := s.mqtts != "" || s.wss != ""
	switch {
	case secure && (s.tlsCert == "" || s.tlsKey == ""):
		return errors.New("--mqtts and --wss need --tls-cert and --tls-key (PEM files)")
	case !secure && (s.tlsCert != "" || s.tlsKey != "" || s.tlsCA != ""):
		return errors.New("--tls-cert, --tls-key and --tls-client-ca apply to --mqtts and --wss: give one of them an address")
	case s.tlsIdentity != "" && s.tlsIdentity != "cn" && s.tlsIdentity != "san":
		return fmt.Errorf("--tls-identity %q: use cn or san", s.tlsIdentity)
	case s.tlsIdentity != "" && s.tlsCA == "":
		return errors.New("--tls-identity needs --tls-client-ca: only a verified client certificate can name a user")
	case s.allowAnonymous && s.passwordFile == "" && s.tlsIdentity == "":
		return errors.New("--allow-anonymous applies with --password-file or --tls-identity (without them every client may connect)")
	case s.maxKeepAlive < 0 || s.maxKeepAlive > 65535:
		return fmt.Errorf("--max-keep-alive %d: allowed 0 (no cap) to 65535 seconds", s.maxKeepAlive)
	case s.authDelay < 0:
		return fmt.Errorf("--auth-failure-delay %v: must be 0 or positive", s.authDelay)
	}
	for _, f := range []struct{ flag, path string }{{"--tls-cert", s.tlsCert}, {"--tls-key", s.tlsKey}, {"--tls-client-ca", s.tlsCA}, {"--password-file", s.passwordFile}, {"--acl-file", s.aclFile}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	return nil
}

// access loads the password and ACL files into the broker options; nil
// when none is configured.
func (s *securityFlags) access(opts *mqtt.Options) (*auth.Files, error) {
	opts.MaxKeepAlive = time.Duration(s.maxKeepAlive) * time.Second
	opts.AuthFailureDelay = s.authDelay
	if s.authDelay == 0 {
		opts.AuthFailureDelay = -1
	}
	if s.passwordFile == "" && s.aclFile == "" && s.tlsIdentity == "" {
		return nil, nil
	}
	files, err := auth.Open(auth.Config{PasswordFile: s.passwordFile, ACLFile: s.aclFile,
		AllowAnonymous: s.allowAnonymous, CertIdentity: auth.CertIdentity(s.tlsIdentity)})
	if err != nil {
		return nil, err
	}
	opts.Authenticator, opts.Authorizer = files, files
	return files, nil
}

// listener is one open listener and how the logs name it.
type listener struct {
	ln   net.Listener
	kind string // mqtt, mqtts, ws, wss
}

// listen opens every configured listener, or none.
func (s *securityFlags) listen(plain string, tc *certs.Server, log *slog.Logger) ([]listener, error) {
	var out []listener
	fail := func(flag, addr string, err error) ([]listener, error) {
		for _, l := range out {
			l.ln.Close()
		}
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	var tlsConf *tls.Config
	if tc != nil {
		tlsConf = tc.Config()
	}
	for _, l := range []struct {
		flag, kind, addr string
	}{{"--mqtt", "mqtt", plain}, {"--mqtts", "mqtts", s.mqtts}, {"--ws", "ws", s.ws}, {"--wss", "wss", s.wss}} {
		if l.addr == "" {
			continue
		}
		var lc net.ListenConfig
		if l.kind == "mqtt" {
			// MQTT's keep alive finds dead peers; TCP's, on at the
			// listening socket and so on every accepted one without a
			// system call each, finds those of clients that use none
			// (see mqtt.KeepAliveControl).
			lc.KeepAlive = -1
			lc.Control = mqtt.KeepAliveControl
		}
		ln, err := lc.Listen(context.Background(), "tcp", l.addr)
		if err != nil {
			return fail(l.flag, l.addr, err)
		}
		switch l.kind {
		case "mqtts":
			ln = tls.NewListener(ln, tlsConf)
		case "ws":
			ln = mqtt.ListenWebSocket(ln, log)
		case "wss":
			ln = mqtt.ListenWebSocket(tls.NewListener(ln, tlsConf), log)
		}
		out = append(out, listener{ln: ln, kind: l.kind})
	}
	return out, nil
}

// certificates loads the TLS files when a TLS listener is configured.
func (s *securityFlags) certificates() (*certs.Server, error) {
	if s.mqtts == "" && s.wss == "" {
		return nil, nil
	}
	return certs.Load(certs.Files{Cert: s.tlsCert, Key: s.tlsKey, ClientCA: s.tlsCA})
}
