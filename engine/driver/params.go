package driver

import (
	"fmt"
	"strconv"
)

// IntParam reads the integer parameter name of engine eng from
// opts.Params: def when absent or empty, an error wrapping ErrInvalidOption
// that names the engine, the parameter, the value and the allowed range
// when it is not an integer in [lo, hi].
func IntParam(opts Options, eng, name string, def, lo, hi int) (int, error) {
	s, ok := opts.Params[name]
	if !ok || s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, fmt.Errorf("%w: %s parameter %s=%q: want an integer from %d to %d", ErrInvalidOption, eng, name, s, lo, hi)
	}
	return n, nil
}
