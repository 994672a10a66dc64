package jetstream

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/tidemark-io/tidemark/engine"
	"github.com/tidemark-io/tidemark/internal/certs/certstest"
)

// TestSecuredServer connects to a nats-server that requires TLS and an
// nkey user: refused without the CA or without the seed, then commits and
// reads back with both.
func TestSecuredServer(t *testing.T) {
	dir := t.TempDir()
	ca := certstest.NewCA(t, "nats test CA")
	caFile := ca.WriteCA(dir, "ca.pem")
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := user.Seed()
	pub, _ := user.PublicKey()
	seedFile := filepath.Join(dir, "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherFile := filepath.Join(dir, "other.nk")
	_ = os.WriteFile(otherFile, otherSeed, 0o600)

	srv, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
		JetStream: true, StoreDir: filepath.Join(dir, "js"),
		Nkeys: []*server.NkeyUser{{Nkey: pub}},
		TLS:   true, TLSTimeout: 5,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{ca.Server()}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	url := srv.ClientURL()
	open := func(params map[string]string) (engine.Engine, error) {
		params["url"] = url
		return engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: params})
	}
	for name, params := range map[string]map[string]string{
		"no CA":     {"nkey": seedFile},
		"no seed":   {"tls_ca": caFile},
		"wrong key": {"tls_ca": caFile, "nkey": otherFile},
	} {
		if e, err := open(params); err == nil {
			e.Close()
			t.Fatalf("%s: connected to a server requiring TLS and nkey", name)
		}
	}
	if _, err := open(map[string]string{"tls_ca": filepath.Join(dir, "missing.pem")}); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("missing CA file: %v, want ErrInvalidOption", err)
	}
	if _, err := engine.Open(t.Context(), Name, engine.Options{Dir: t.TempDir(), Params: map[string]string{"nkey": seedFile}}); !errors.Is(err, engine.ErrInvalidOption) {
		t.Fatalf("nkey without url: %v, want ErrInvalidOption", err)
	}
	e, err := open(map[string]string{"tls_ca": caFile, "nkey": seedFile})
	if err != nil {
		t.Fatalf("with CA and seed: %v", err)
	}
	defer e.Close()
	if _, err := engine.Commit(t.Context(), e, new(engine.Batch).Put([]byte("k"), []byte("over tls")).Append([]byte("entry"))); err != nil {
		t.Fatal(err)
	}
	if v, err := engine.Get(t.Context(), e, []byte("k")); err != nil || string(v) != "over tls" {
		t.Fatalf("read back %q, %v", v, err)
	}
}
