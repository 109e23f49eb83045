// Package hostile holds poolgate's hostile-input suite: its test sends every
// malformed or abusive input we know of through a real daemon (real worker
// processes, real Redis) and holds each answer to a bound: a clear error in
// the caller's protocol, within a wall-clock and CPU budget, with no panic,
// no leaked goroutine or process, and the daemon still serving afterwards.
// docs/hostile-inputs.md lists the inputs and their bounds.
package hostile
