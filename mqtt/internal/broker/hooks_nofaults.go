//go:build !faults

package broker

// HooksEnabled reports whether this build calls Options.Hooks: only a
// build with tag faults does, so a production binary carries no
// fault-injection calls (the compiler drops them as dead code).
const HooksEnabled = false
