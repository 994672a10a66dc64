package driver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Param documents one engine-specific option of Options.Params. Open
// refuses a name no Param of the driver carries.
type Param struct {
	// Name is the key in Options.Params.
	Name string
	// Default is the value used when the parameter is absent, as shown
	// to users.
	Default string
	// Doc says what the parameter sets and which values it takes.
	Doc string
}

// Driver is what a backend registers.
type Driver struct {
	// Open opens an engine. It is called with a ctx that had not ended,
	// a known SyncMode and only the parameter names Params lists; the
	// backend checks their values and everything else it needs.
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

// Register makes a driver available under name; backends call it from an
// init function. It panics if name is registered twice or d has no Open,
// since those are build mistakes, not runtime conditions.
func Register(name string, d Driver) {
	registry.Lock()
	defer registry.Unlock()
	if _, dup := registry.drivers[name]; dup {
		panic("engine/driver: Register called twice for " + name)
	}
	if d.Open == nil {
		panic("engine/driver: Register " + name + " without Open")
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

// Lookup returns the driver registered under name, or an error wrapping
// ErrUnavailable (left out of this build, with the reason) or
// ErrUnknownEngine (naming the known engines).
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
