package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tidemark-io/tidemark/internal/certs"
	"github.com/tidemark-io/tidemark/mqtt/auth"
)

// reloadOnHangup reloads the password, ACL and TLS files on each SIGHUP
// until the returned function is called. Connections stay up; a file
// with an error leaves the rules in force as they were, and the log says
// which line and why.
func reloadOnHangup(log *slog.Logger, files *auth.Files, tc *certs.Server) func() {
	if files == nil && tc == nil {
		return func() {}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-hup:
			case <-done:
				return
			}
			if files != nil {
				if err := files.Reload(); err != nil {
					log.Error("reload refused: the password and ACL rules in force are kept", "err", err)
				} else {
					log.Info("password and ACL files reloaded", "users", files.Users())
				}
			}
			if tc != nil {
				if err := tc.Reload(); err != nil {
					log.Error("reload refused: the TLS certificates in force are kept", "err", err)
				} else {
					log.Info("TLS certificates reloaded")
				}
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
	}
}

// logAccess says at startup what protects the broker.
func logAccess(log *slog.Logger, sec *securityFlags, files *auth.Files) {
	switch {
	case files == nil:
		log.Info("access control: none (no --password-file, --acl-file or --tls-identity): every client may connect and do anything")
	default:
		log.Info("access control", "password_file", sec.passwordFile, "users", files.Users(), "acl_file", sec.aclFile,
			"allow_anonymous", sec.allowAnonymous || (sec.passwordFile == "" && sec.tlsIdentity == ""), "tls_identity", sec.tlsIdentity)
	}
}
