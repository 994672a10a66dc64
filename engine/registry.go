package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Param documents one engine-specific option of Options.Params.
type Param struct {
	Name    string
	Default string
	Doc     string
}

// Driver is what a backend registers.
type Driver struct {
	// Open opens an engine with validated generic options.
	Open func(ctx context.Context, opts Options) (Engine, error)
	// Params lists the accepted Options.Params.
	Params []Param
	// Doc is one line saying what the engine is and what it guarantees.
	Doc string
}

var registry = struct {
	sync.RWMutex
	drivers     map[string]Driver
	unavailable map[string]string
}{drivers: map[string]Driver{}, unavailable: map[string]string{}}

// Register makes a driver available under name. It panics if name is
// registered twice, since that is a build mistake, not a runtime condition.
func Register(name string, d Driver) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.drivers[name]; dup {
		panic("engine: Register called twice for " + name)
	}
	if d.Open == nil {
		panic("engine: Register " + name + " without Open")
	}
	registry.drivers[name] = d
	delete(registry.unavailable, name)
}

// RegisterUnavailable records that an engine was left out of this build,
// and why, so Open can say so instead of calling the name unknown.
func RegisterUnavailable(name, reason string) {
	registry.Lock()
	defer registry.Unlock()
	if _, ok := registry.drivers[name]; !ok {
		registry.unavailable[name] = reason
	}
}

// Drivers returns the registered engine names, sorted.
func Drivers() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.drivers))
	for n := range registry.drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Unavailable returns the engines left out of this build and why.
func Unavailable() map[string]string {
	registry.RLock()
	defer registry.RUnlock()
	out := make(map[string]string, len(registry.unavailable))
	for k, v := range registry.unavailable {
		out[k] = v
	}
	return out
}

// Lookup returns the driver registered under name.
func Lookup(name string) (Driver, error) {
	registry.RLock()
	d, ok := registry.drivers[name]
	reason, missing := registry.unavailable[name]
	registry.RUnlock()
	if ok {
		return d, nil
	}
	if missing {
		return Driver{}, fmt.Errorf("%w: %q: %s", ErrUnavailable, name, reason)
	}
	known := Drivers()
	return Driver{}, fmt.Errorf("%w: %q (known engines: %s)", ErrUnknownEngine, name, strings.Join(known, ", "))
}

// Open opens the engine registered under name. It checks opts.Dir and the
// names in opts.Params against the driver before opening anything.
func Open(ctx context.Context, name string, opts Options) (Engine, error) {
	d, err := Lookup(name)
	if err != nil {
		return nil, err
	}
	if opts.Sync > SyncNone {
		return nil, fmt.Errorf("%w: sync mode %d", ErrInvalidOption, opts.Sync)
	}
	for p := range opts.Params {
		if !slices.ContainsFunc(d.Params, func(q Param) bool { return q.Name == p }) {
			names := make([]string, len(d.Params))
			for i, q := range d.Params {
				names[i] = q.Name
			}
			return nil, fmt.Errorf("%w: engine %q has no parameter %q (it takes: %s)",
				ErrInvalidOption, name, p, strings.Join(names, ", "))
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return d.Open(ctx, opts)
}
