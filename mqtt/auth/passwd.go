// Package auth is the broker's access control: the interfaces it calls
// (Authenticator, Authorizer, ClientIDAuthorizer, set in mqtt.Options),
// and a first implementation of them, Files: a password file (one
// user:hash a line; bcrypt, argon2id, and the hashes of mosquitto_passwd,
// so a mosquitto password file works as it is) and an ACL file in
// mosquitto's acl_file format. Files loads both and reloads them
// atomically: a file with an error leaves the rules in force unchanged.
package auth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrSyntax reports a line of a password or ACL file that does not parse;
// it is wrapped in a *LineError naming the file and the line.
var ErrSyntax = errors.New("auth: syntax error")

// LineError is an error at one line of a file.
type LineError struct {
	File string // empty when read from a reader
	Line int
	Err  error
}

// Error names the file, the line and what is wrong with it.
func (e *LineError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("line %d: %v", e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

// Unwrap returns the error at the line (ErrSyntax, ErrUnknownHash, ...).
func (e *LineError) Unwrap() error { return e.Err }

// Passwords is a parsed password file: user name to hash.
type Passwords struct {
	hashes map[string]hash
}

// ParsePasswords reads a password file: one user:hash a line; blank lines
// and lines starting with # are skipped. A user name cannot contain ':'
// and appears once. The first bad line is returned as a *LineError.
func ParsePasswords(r io.Reader) (*Passwords, error) {
	p := &Passwords{hashes: map[string]hash{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		user, h, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, &LineError{Line: n, Err: fmt.Errorf("%w: want user:hash", ErrSyntax)}
		}
		if _, dup := p.hashes[user]; dup {
			return nil, &LineError{Line: n, Err: fmt.Errorf("%w: user %q appears twice", ErrSyntax, user)}
		}
		parsed, err := parseHash(strings.TrimSpace(h))
		if err != nil {
			return nil, &LineError{Line: n, Err: fmt.Errorf("user %q: %w", user, err)}
		}
		p.hashes[user] = parsed
	}
	if err := sc.Err(); err != nil {
		return nil, &LineError{Line: n + 1, Err: err}
	}
	return p, nil
}

// LoadPasswords reads the password file at path.
func LoadPasswords(path string) (*Passwords, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("password file: %w", err)
	}
	defer f.Close()
	p, err := ParsePasswords(f)
	var le *LineError
	if errors.As(err, &le) {
		le.File = path
	}
	return p, err
}

// Len returns the number of users.
func (p *Passwords) Len() int { return len(p.hashes) }

// Has reports whether user is in the file.
func (p *Passwords) Has(user string) bool {
	_, ok := p.hashes[user]
	return ok
}

// Verify reports whether password is user's. An unknown user is false.
func (p *Passwords) Verify(user string, password []byte) bool {
	h, ok := p.hashes[user]
	return ok && h.verify(password)
}

// SetPassword adds user with hash to the password file at path, or
// replaces its line, keeping every other line; the file is created (mode
// 0600) when missing and replaced atomically, so a broker reading it
// concurrently sees the old file or the new one.
func SetPassword(path, user, hashed string) error {
	if user == "" || strings.ContainsAny(user, ":\n\r") {
		return fmt.Errorf("%w: user name %q: must be non-empty, without ':' or line breaks", ErrSyntax, user)
	}
	if _, err := parseHash(hashed); err != nil {
		return err
	}
	return rewrite(path, true, func(lines []string) ([]string, bool) {
		entry := user + ":" + hashed
		for i, l := range lines {
			if u, _, ok := strings.Cut(l, ":"); ok && u == user && !strings.HasPrefix(l, "#") {
				lines[i] = entry
				return lines, true
			}
		}
		return append(lines, entry), true
	})
}

// ErrNoSuchUser reports that a user to remove is not in the file.
var ErrNoSuchUser = errors.New("auth: no such user")

// RemoveUser removes user's line from the password file at path.
func RemoveUser(path, user string) error {
	err := rewrite(path, false, func(lines []string) ([]string, bool) {
		for i, l := range lines {
			if u, _, ok := strings.Cut(l, ":"); ok && u == user && !strings.HasPrefix(l, "#") {
				return append(lines[:i], lines[i+1:]...), true
			}
		}
		return lines, false
	})
	if errors.Is(err, errUnchanged) {
		return fmt.Errorf("%s: %w %q", path, ErrNoSuchUser, user)
	}
	return err
}

var errUnchanged = errors.New("unchanged")

// rewrite applies edit to the lines of path and replaces the file with a
// temporary file renamed over it, keeping its mode.
func rewrite(path string, create bool, edit func([]string) ([]string, bool)) error {
	raw, err := os.ReadFile(path)
	mode := os.FileMode(0o600)
	switch {
	case errors.Is(err, os.ErrNotExist) && create:
	case err != nil:
		return fmt.Errorf("password file: %w", err)
	default:
		if st, err := os.Stat(path); err == nil {
			mode = st.Mode().Perm()
		}
	}
	var lines []string
	if len(raw) > 0 {
		lines = strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	}
	lines, changed := edit(lines)
	if !changed {
		return errUnchanged
	}
	var buf bytes.Buffer
	for _, l := range lines {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("password file: %w", err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("password file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("password file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("password file: %w", err)
	}
	return nil
}
