package jetstream

import (
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/tidemark-io/tidemark/engine/driver"
)

// Parameters that connect to a secured NATS server (with "url").
const (
	paramCreds = "creds"  // a .creds file: user JWT and nkey seed (decentralized auth)
	paramNkey  = "nkey"   // a file holding a user nkey seed (SU...)
	paramTLSCA = "tls_ca" // PEM CA certificates the server's certificate must chain to
)

var secureParams = []driver.Param{
	{Name: paramCreds, Default: "", Doc: "with url: NATS credentials file (user JWT and seed) to authenticate with"},
	{Name: paramNkey, Default: "", Doc: "with url: file with the user nkey seed to authenticate with"},
	{Name: paramTLSCA, Default: "", Doc: "with url: PEM CA file the server's TLS certificate must chain to (implies TLS)"},
}

// secureOptions returns the connect options of the security parameters,
// checking that each file is readable now rather than at the first
// reconnect.
func secureOptions(params map[string]string, url string) ([]nats.Option, error) {
	var out []nats.Option
	for _, p := range []string{paramCreds, paramNkey, paramTLSCA} {
		f := params[p]
		if f == "" {
			continue
		}
		if url == "" {
			return nil, fmt.Errorf("%w: jetstream parameter %s applies to a server given by url; the embedded server needs none", driver.ErrInvalidOption, p)
		}
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%w: jetstream parameter %s: %w", driver.ErrInvalidOption, p, err)
		}
	}
	if f := params[paramCreds]; f != "" {
		out = append(out, nats.UserCredentials(f))
	}
	if f := params[paramNkey]; f != "" {
		o, err := nats.NkeyOptionFromSeed(f)
		if err != nil {
			return nil, fmt.Errorf("%w: jetstream parameter nkey=%s: %w", driver.ErrInvalidOption, f, err)
		}
		out = append(out, o)
	}
	if f := params[paramTLSCA]; f != "" {
		out = append(out, nats.RootCAs(f))
	}
	return out, nil
}
