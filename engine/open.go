package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tidemark-io/tidemark/engine/driver"
	"github.com/tidemark-io/tidemark/engine/internal/dirlock"
)

// Info describes a registered engine.
type Info struct {
	// Name is the name Open takes.
	Name string
	// Doc is one line saying what the engine is and what it guarantees.
	Doc string
	// Params lists the names Options.Params accepts.
	Params []Param
}

// Lookup describes the engine registered under name, or returns an error
// wrapping ErrUnavailable (left out of this build, with the reason) or
// ErrUnknownEngine (naming the known engines).
func Lookup(name string) (Info, error) {
	d, err := driver.Lookup(name)
	if err != nil {
		return Info{}, err
	}
	return Info{Name: name, Doc: d.Doc, Params: slices.Clone(d.Params)}, nil
}

// Drivers returns the names of the engines compiled in, sorted.
func Drivers() []string { return driver.Drivers() }

// DirMarker is the file in a data directory that names the engine whose
// store it holds.
const DirMarker = dirlock.MarkerName

// DirEngine names the engine whose store the data directory dir holds
// (the one that first opened it), or "" when it holds none.
func DirEngine(dir string) (string, error) { return dirlock.Owner(dir) }

// Unavailable returns the engines left out of this build and why.
func Unavailable() map[string]string { return driver.Unavailable() }

// Open opens the engine registered under name. It checks opts.Sync and
// the names in opts.Params against the driver before opening anything;
// the backend checks the values. The Engine it returns makes the checks
// described in the package doc before any call reaches the backend.
func Open(ctx context.Context, name string, opts Options) (Engine, error) {
	d, err := driver.Lookup(name)
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
	e, err := d.Open(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newFront(e), nil
}
