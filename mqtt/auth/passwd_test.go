package auth

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Lines written by mosquitto_passwd 2.0.11: alice/secret with the default
// ($7$, PBKDF2-SHA512) and bob/hunter2 with -H sha512 ($6$).
const mosquittoFile = `alice:$7$101$DJL3JI8vLJoKyDyv$wfic6rlIqKEny8lYD9sYFU9jJqCE5wxYv9iBWzBNthNSdDu8PHOryewwW0LlHSkEzUlOhAg9FulXTMyqNm8NJw==
bob:$6$bS9ySA8WMKtJgAnp$DFnYTodGt9MQ8Vh1bfgaishpSl1tDC0DKe1KrtMT9o1Fn66eUiTccoWvSPCKPtUIcw2FjBGqxVqeJdXZbMgNmQ==
`

func TestPasswordsMosquittoFile(t *testing.T) {
	p, err := ParsePasswords(strings.NewReader(mosquittoFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user, pw string
		ok       bool
	}{
		{"alice", "secret", true}, {"alice", "Secret", false}, {"alice", "", false},
		{"bob", "hunter2", true}, {"bob", "hunter3", false},
		{"carol", "secret", false}, {"alice", "hunter2", false},
	} {
		if got := p.Verify(c.user, []byte(c.pw)); got != c.ok {
			t.Errorf("Verify(%q, %q) = %v, want %v", c.user, c.pw, got, c.ok)
		}
	}
}

func TestHashRoundTrip(t *testing.T) {
	for _, alg := range []Algorithm{Argon2id, Bcrypt} {
		h, err := Hash("pässwörd", alg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParsePasswords(strings.NewReader("u:" + h + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		if !p.Verify("u", []byte("pässwörd")) || p.Verify("u", []byte("password")) {
			t.Fatalf("%s: verify does not tell the right password from a wrong one", alg)
		}
	}
	if _, err := Hash("x", "md5"); !errors.Is(err, ErrUnknownHash) {
		t.Fatalf("Hash(md5) = %v, want ErrUnknownHash", err)
	}
}

func TestParsePasswordsErrors(t *testing.T) {
	for _, c := range []struct {
		text string
		line int
		want error
	}{
		{"# comment\n\nalice\n", 3, ErrSyntax},
		{"alice:$1$abc$def\n", 1, ErrUnknownHash},
		{"alice:plain\n", 1, ErrUnknownHash},
		{"a:$7$0$DJL3JI8vLJoKyDyv$wfic6rlIqKEny8lYD9sYFU9jJqCE5wxYv9iBWzBNthNSdDu8PHOryewwW0LlHSkEzUlOhAg9FulXTMyqNm8NJw==\n", 1, ErrUnknownHash},
		{"a:$6$bS9ySA8WMKtJgAnp$c2hvcnQ=\n", 1, ErrUnknownHash},
		{"a:$argon2id$v=19$m=99999999,t=2,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA\n", 1, ErrUnknownHash},
		{mosquittoFile + "alice:$2b$10$abcdefghijklmnopqrstuu5Zl1Bv4JtQ8c8pV3nqKZy0kq1C8oLrG\n", 3, ErrSyntax},
	} {
		_, err := ParsePasswords(strings.NewReader(c.text))
		var le *LineError
		if !errors.As(err, &le) || le.Line != c.line || !errors.Is(err, c.want) {
			t.Errorf("ParsePasswords(%q) = %v, want a line %d error wrapping %v", c.text, err, c.line, c.want)
		}
	}
}

func TestSetAndRemovePassword(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(path, []byte("# users\n"+mosquittoFile), 0o640); err != nil {
		t.Fatal(err)
	}
	h, _ := Hash("new", Bcrypt)
	if err := SetPassword(path, "alice", h); err != nil {
		t.Fatal(err)
	}
	h2, _ := Hash("carols", Argon2id)
	if err := SetPassword(path, "carol", h2); err != nil {
		t.Fatal(err)
	}
	p, err := LoadPasswords(path)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Verify("alice", []byte("new")) || p.Verify("alice", []byte("secret")) || !p.Verify("bob", []byte("hunter2")) || !p.Verify("carol", []byte("carols")) {
		t.Fatal("after SetPassword: alice's new password, bob's and carol's do not all verify")
	}
	if err := RemoveUser(path, "bob"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveUser(path, "bob"); !errors.Is(err, ErrNoSuchUser) {
		t.Fatalf("second RemoveUser = %v, want ErrNoSuchUser", err)
	}
	raw, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(raw), "# users\n") || strings.Contains(string(raw), "bob:") {
		t.Fatalf("file after edits:\n%s", raw)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want the file's 0640 kept", st.Mode().Perm())
	}
	if err := SetPassword(path, "a:b", h); !errors.Is(err, ErrSyntax) {
		t.Fatalf("user with ':' accepted: %v", err)
	}
	fresh := filepath.Join(t.TempDir(), "new")
	if err := SetPassword(fresh, "dave", h); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(fresh); st.Mode().Perm() != 0o600 {
		t.Fatalf("new file mode %v, want 0600", st.Mode().Perm())
	}
}
