//go:build !nobadger

package mqttbench

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	badgerhook "github.com/mochi-mqtt/server/v2/hooks/storage/badger"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// mochiOmitted is empty: this build has the mochi peer.
const mochiOmitted = ""

// mochiTarget runs an embedded mochi-mqtt with its Badger storage hook at
// the hook's defaults.
func mochiTarget() Target {
	t := Target{Name: "mochi", Kind: KindMochi,
		Durability: "Badger storage hook at its defaults (SyncWrites off: nothing is fsynced); it stores sessions, " +
			"subscriptions, retained messages and in-flight packet records, never an inbound message: PUBACK and " +
			"PUBREC go out once the message is handed to online subscribers in memory (QoS 2 is delivered at " +
			"PUBLISH, before PUBREL), so a process crash loses every acknowledged message not yet delivered"}
	t.start = func(ctx context.Context, dir string, log *slog.Logger) (*instance, error) {
		return startMochi(ctx, dir, "127.0.0.1:0", log)
	}
	t.startOn = startMochi
	return t
}

// startMochi starts mochi with its listener on addr.
func startMochi(_ context.Context, dir, addr string, log *slog.Logger) (*instance, error) {
	s := mochi.New(&mochi.Options{Logger: log.With("component", "mochi")})
	if err := s.AddHook(new(allowHook), nil); err != nil {
		return nil, fmt.Errorf("mochi: %w", err)
	}
	if err := s.AddHook(new(badgerhook.Hook), &badgerhook.Options{Path: dir}); err != nil {
		return nil, fmt.Errorf("mochi: badger hook: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	if err := s.AddListener(&mochiListener{id: "bench", ln: ln}); err != nil {
		ln.Close()
		_ = s.Close()
		return nil, fmt.Errorf("mochi: %w", err)
	}
	if err := s.Serve(); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("mochi: %w", err)
	}
	return &instance{addr: ln.Addr().String(), stop: s.Close}, nil
}

// mochiListener serves mochi on a listener bound beforehand, so the port
// is known before the first connection. (mochi's own TCP listener shares
// one error variable between its connection goroutines.)
type mochiListener struct {
	id   string
	ln   net.Listener
	once sync.Once
}

func (l *mochiListener) Init(*slog.Logger) error { return nil }
func (l *mochiListener) ID() string              { return l.id }
func (l *mochiListener) Address() string         { return l.ln.Addr().String() }
func (l *mochiListener) Protocol() string        { return "tcp" }

func (l *mochiListener) Serve(establish listeners.EstablishFn) {
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			return
		}
		go func() { _ = establish(l.id, nc) }()
	}
}

func (l *mochiListener) Close(closeClients listeners.CloseFn) {
	l.once.Do(func() {
		closeClients(l.id)
		l.ln.Close()
	})
}

// allowHook lets every client connect and use every topic, as the peers
// run with no authentication either.
type allowHook struct{ mochi.HookBase }

func (h *allowHook) ID() string { return "mqttbench-allow" }

func (h *allowHook) Provides(b byte) bool {
	return slices.Contains([]byte{mochi.OnConnectAuthenticate, mochi.OnACLCheck}, b)
}

func (h *allowHook) OnConnectAuthenticate(*mochi.Client, packets.Packet) bool { return true }

func (h *allowHook) OnACLCheck(*mochi.Client, string, bool) bool { return true }
