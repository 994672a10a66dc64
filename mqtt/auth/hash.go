package auth

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/bcrypt"
)

// ErrUnknownHash reports a password hash in a form this package does not
// read.
var ErrUnknownHash = errors.New("auth: unknown password hash")

// Algorithm names a password hash this package writes.
type Algorithm string

// The algorithms Hash writes; Verify also reads mosquitto_passwd's $7$
// (PBKDF2-SHA512) and $6$ (salted SHA-512) hashes.
const (
	// Argon2id with OWASP's parameters: 19 MiB, 2 passes, 1 lane.
	Argon2id Algorithm = "argon2id"
	// Bcrypt at cost 10.
	Bcrypt Algorithm = "bcrypt"
)

// Argon2id parameters of new hashes, and the bounds of those a password
// file may carry: a file is trusted, but a typo must not make every
// CONNECT allocate gigabytes.
const (
	argonMemory  = 19 * 1024 // KiB
	argonTime    = 2
	argonThreads = 1
	argonKeyLen  = 32

	maxArgonMemory  = 1 << 20 // KiB: 1 GiB
	maxArgonTime    = 64
	maxArgonThreads = 64
	maxPBKDF2Iter   = 10_000_000
)

// Hash returns a new hash of password with alg, in the form a password
// file stores.
func Hash(password string, alg Algorithm) (string, error) {
	switch alg {
	case Argon2id, "":
		salt := make([]byte, 16)
		_, _ = rand.Read(salt)
		key := argon2.IDKey([]byte(password), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
		b64 := base64.RawStdEncoding
		return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, argonMemory, argonTime, argonThreads,
			b64.EncodeToString(salt), b64.EncodeToString(key)), nil
	case Bcrypt:
		h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
		if err != nil {
			return "", fmt.Errorf("auth: bcrypt: %w", err)
		}
		return string(h), nil
	}
	return "", fmt.Errorf("%w %q: use argon2id or bcrypt", ErrUnknownHash, alg)
}

// hash is a parsed password hash; verify compares a password in
// constant time.
type hash interface {
	verify(password []byte) bool
}

// parseHash reads a stored hash: bcrypt ($2a$, $2b$, $2y$), argon2id in
// the PHC form, mosquitto's $7$ and $6$.
func parseHash(s string) (hash, error) {
	switch {
	case strings.HasPrefix(s, "$2a$") || strings.HasPrefix(s, "$2b$") || strings.HasPrefix(s, "$2y$"):
		if _, err := bcrypt.Cost([]byte(s)); err != nil {
			return nil, fmt.Errorf("%w: bcrypt: %w", ErrUnknownHash, err)
		}
		return bcryptHash(s), nil
	case strings.HasPrefix(s, "$argon2id$"):
		return parseArgon2id(s)
	case strings.HasPrefix(s, "$7$"):
		return parseMosquitto7(s)
	case strings.HasPrefix(s, "$6$"):
		return parseMosquitto6(s)
	}
	return nil, fmt.Errorf("%w: want bcrypt ($2b$...), argon2id ($argon2id$...) or mosquitto_passwd ($7$... or $6$...)", ErrUnknownHash)
}

type bcryptHash string

func (h bcryptHash) verify(pw []byte) bool {
	return bcrypt.CompareHashAndPassword([]byte(h), pw) == nil
}

type argon2idHash struct {
	memory    uint32
	time      uint32
	threads   uint8
	salt, key []byte
}

func parseArgon2id(s string) (hash, error) {
	// $argon2id$v=19$m=19456,t=2,p=1$salt$key
	parts := strings.Split(s, "$")
	bad := func(why string) (hash, error) { return nil, fmt.Errorf("%w: argon2id: %s", ErrUnknownHash, why) }
	if len(parts) != 6 || parts[0] != "" {
		return bad("want $argon2id$v=19$m=...,t=...,p=...$salt$hash")
	}
	if parts[2] != fmt.Sprintf("v=%d", argon2.Version) {
		return bad("version " + parts[2] + ", want v=19")
	}
	var h argon2idHash
	var p uint32
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &h.memory, &h.time, &p); err != nil {
		return bad("parameters " + parts[3])
	}
	if h.memory == 0 || h.memory > maxArgonMemory || h.time == 0 || h.time > maxArgonTime || p == 0 || p > maxArgonThreads {
		return bad("parameters out of range (m up to 1048576 KiB, t up to 64, p up to 64)")
	}
	h.threads = uint8(p)
	var err error
	if h.salt, err = base64.RawStdEncoding.DecodeString(parts[4]); err != nil || len(h.salt) == 0 {
		return bad("salt is not base64")
	}
	if h.key, err = base64.RawStdEncoding.DecodeString(parts[5]); err != nil || len(h.key) < 16 {
		return bad("hash is not base64 of 16 bytes or more")
	}
	return &h, nil
}

func (h *argon2idHash) verify(pw []byte) bool {
	k := argon2.IDKey(pw, h.salt, h.time, h.memory, h.threads, uint32(len(h.key)))
	return subtle.ConstantTimeCompare(k, h.key) == 1
}

// mosquittoHash is a mosquitto_passwd hash: $7$ is PBKDF2-SHA512 with
// iter iterations, $6$ (iter 0) one SHA-512 of the password then the
// salt; salt and hash are standard base64.
type mosquittoHash struct {
	iter      int
	salt, key []byte
}

func parseMosquitto7(s string) (hash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 5 {
		return nil, fmt.Errorf("%w: mosquitto $7$: want $7$iterations$salt$hash", ErrUnknownHash)
	}
	iter, err := strconv.Atoi(parts[2])
	if err != nil || iter < 1 || iter > maxPBKDF2Iter {
		return nil, fmt.Errorf("%w: mosquitto $7$: iterations %q", ErrUnknownHash, parts[2])
	}
	return mosquittoParts(iter, parts[3], parts[4])
}

func parseMosquitto6(s string) (hash, error) {
	parts := strings.Split(s, "$")
	if len(parts) != 4 {
		return nil, fmt.Errorf("%w: mosquitto $6$: want $6$salt$hash", ErrUnknownHash)
	}
	return mosquittoParts(0, parts[2], parts[3])
}

func mosquittoParts(iter int, salt, key string) (hash, error) {
	h := &mosquittoHash{iter: iter}
	var err error
	if h.salt, err = base64.StdEncoding.DecodeString(salt); err != nil || len(h.salt) == 0 {
		return nil, fmt.Errorf("%w: mosquitto hash: salt is not base64", ErrUnknownHash)
	}
	if h.key, err = base64.StdEncoding.DecodeString(key); err != nil || len(h.key) != sha512.Size {
		return nil, fmt.Errorf("%w: mosquitto hash: hash is not base64 of 64 bytes", ErrUnknownHash)
	}
	return h, nil
}

func (h *mosquittoHash) verify(pw []byte) bool {
	var k []byte
	if h.iter == 0 {
		d := sha512.New()
		d.Write(pw)
		d.Write(h.salt)
		k = d.Sum(nil)
	} else {
		var err error
		if k, err = pbkdf2.Key(sha512.New, string(pw), h.salt, h.iter, len(h.key)); err != nil {
			return false
		}
	}
	return subtle.ConstantTimeCompare(k, h.key) == 1
}
