package auth

import (
	"context"
	"crypto/x509"
	"fmt"
	"sync/atomic"
)

// CertIdentity says which part of a verified client certificate is the
// user name.
type CertIdentity string

// The ways of naming a user from its client certificate.
const (
	CertNone CertIdentity = ""    // certificates do not name users
	CertCN   CertIdentity = "cn"  // the subject's common name
	CertSAN  CertIdentity = "san" // the first DNS name, else e-mail address, else URI
)

// Config names the files and the policy of a Files.
type Config struct {
	// PasswordFile is the password file; empty: user names are not
	// checked (a client is who it says it is, unless CertIdentity names
	// it).
	PasswordFile string
	// ACLFile is the ACL file; empty: everything is allowed.
	ACLFile string
	// AllowAnonymous lets clients without a user name connect when a
	// password file or CertIdentity is configured (otherwise they always
	// may).
	AllowAnonymous bool
	// CertIdentity makes a verified client certificate name the user;
	// its password is then not asked for.
	CertIdentity CertIdentity
}

// Files is an Authenticator, Authorizer and
// ClientIDAuthorizer over a password file and an ACL file. It is
// safe for concurrent use; Reload swaps in new rules atomically.
type Files struct {
	cfg   Config
	rules atomic.Pointer[rules]
}

type rules struct {
	pw  *Passwords // nil: no password file
	acl *ACL       // nil: no ACL file
}

var (
	_ Authenticator      = (*Files)(nil)
	_ Authorizer         = (*Files)(nil)
	_ ClientIDAuthorizer = (*Files)(nil)
)

// Open loads the files of cfg.
func Open(cfg Config) (*Files, error) {
	switch cfg.CertIdentity {
	case CertNone, CertCN, CertSAN:
	default:
		return nil, fmt.Errorf("auth: certificate identity %q: use cn or san", cfg.CertIdentity)
	}
	f := &Files{cfg: cfg}
	if err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Reload reads both files again. On any error the rules in force stay
// as they were, both of them, and the error names the file and the line.
func (f *Files) Reload() error {
	var r rules
	var err error
	if f.cfg.PasswordFile != "" {
		if r.pw, err = LoadPasswords(f.cfg.PasswordFile); err != nil {
			return err
		}
	}
	if f.cfg.ACLFile != "" {
		if r.acl, err = LoadACL(f.cfg.ACLFile); err != nil {
			return err
		}
	}
	f.rules.Store(&r)
	return nil
}

// Users returns the number of users in the password file.
func (f *Files) Users() int {
	if pw := f.rules.Load().pw; pw != nil {
		return pw.Len()
	}
	return 0
}

// Authenticate implements Authenticator: a verified client
// certificate names the user under CertIdentity; otherwise the user name
// and password are checked against the password file. A client without
// a user name is anonymous, refused with ErrNotAuthorized where
// credentials are required and AllowAnonymous is off.
func (f *Files) Authenticate(_ context.Context, info ConnInfo) (Identity, error) {
	if f.cfg.CertIdentity != CertNone && info.TLS != nil && len(info.TLS.VerifiedChains) > 0 {
		name := certName(info.TLS.VerifiedChains[0][0], f.cfg.CertIdentity)
		if name == "" {
			return Identity{}, fmt.Errorf("client certificate names no %s: %w", f.cfg.CertIdentity, ErrNotAuthorized)
		}
		return Identity{Username: name}, nil
	}
	pw := f.rules.Load().pw
	required := pw != nil || f.cfg.CertIdentity != CertNone
	if info.Username == "" {
		if required && !f.cfg.AllowAnonymous {
			return Identity{}, fmt.Errorf("anonymous client: %w", ErrNotAuthorized)
		}
		return Identity{}, nil
	}
	if !required {
		return Identity{Username: info.Username}, nil
	}
	if pw == nil || !pw.Has(info.Username) {
		return Identity{}, fmt.Errorf("unknown user: %w", ErrBadCredentials)
	}
	if !info.HasPassword || !pw.Verify(info.Username, info.Password) {
		return Identity{}, fmt.Errorf("wrong password: %w", ErrBadCredentials)
	}
	return Identity{Username: info.Username}, nil
}

func certName(c *x509.Certificate, how CertIdentity) string {
	if how == CertCN {
		return c.Subject.CommonName
	}
	switch {
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	case len(c.EmailAddresses) > 0:
		return c.EmailAddresses[0]
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	}
	return ""
}

// Allow implements Authorizer with the ACL file; without one
// everything is allowed.
func (f *Files) Allow(_ context.Context, id Identity, a Access, name string) bool {
	acl := f.rules.Load().acl
	if acl == nil {
		return true
	}
	return acl.Allow(id.Username, id.ClientID, a, name)
}

// AllowClientID implements ClientIDAuthorizer with the ACL file's
// clientid rules.
func (f *Files) AllowClientID(_ context.Context, id Identity) bool {
	acl := f.rules.Load().acl
	return acl == nil || acl.AllowClientID(id.Username, id.ClientID)
}
