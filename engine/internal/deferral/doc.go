// Package deferral is what the engines share to carry out engine.Batch's
// Defer: which deferred commits wait (Gate), and how a writer holds a
// group of them open for a commit to share a sync with (Linger; the
// engines on engine/internal/group get it from Options.Linger).
package deferral
