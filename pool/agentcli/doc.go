// Package agentcli is the kind-neutral driver of agent CLIs as workers:
// coding-agent command-line programs (Claude Code, Qoder CLI) that, run
// with --print and stream-json input and output, read user messages as
// JSON lines on their standard input and print what they do as JSON lines
// on their standard output: a system/init line at the start of each turn,
// Messages API stream events (partial messages), the assistant's message,
// a result that ends the turn with its usage, and control requests and
// responses both ways (initialize, interrupt, set_model).
//
// It sits beside the other drivers under pool/: the supervisor
// (pool/supervisor) starts the CLI on the stdio transport
// (worker.TransportStdio) and hands Connect its pipes; the Backend it
// returns runs turns, answers health checks and hands out the CLI's login
// URL. A turn's neutral messages are rendered into one user message by
// pool/textchat, with the caller's tools as text (the CLI's own tools are
// off), and the answer's text is parsed back into text and tool calls, so
// an agent's tool calls come back as tool calls. Every line a CLI prints
// is read against this package's model of the protocol (Parse, with the
// profile's Vocabulary): a line outside it is logged and counted (Stats),
// never dropped silently. Sessions are described in sessions.go; what the
// package relies on, and where it was learnt, in
// docs/claude-code-worker.md.
//
// # A kind of agent CLI
//
// A kind is a small package (pool/claudecode is one) that fills in a
// Profile and registers a worker.Kind whose New makes this package's
// Driver with it:
//
//   - Args: the CLI's arguments for one long-lived stream-json process (no
//     built-in tools, no permission prompts, the gateway's system prompt,
//     a session to resume, a model);
//   - Env: its environment over the worker's directories (Dirs: HOME,
//     TMPDIR and the CLI's config dir under the work dir), with telemetry
//     and updates off and the account's secret as the CLI's credential;
//   - StatusArgs and ParseStatus: the command that says whether it is
//     logged in, and CredentialFiles, the login it stores; LoginArgs and
//     LoginURL: the command that starts its login and the URL it prints;
//   - Errors, LoginText and RateLimitText: what a failed turn means (a
//     login needed, a cooldown, else an upstream error);
//   - the dialect points: Escape (what keeps a prompt from being read as
//     one of the CLI's commands), Probe (the health check's control
//     request), Models (the models its initialize answer lists),
//     Vocabulary (message types of its own) and SessionGlob (the files of
//     a session's transcript).
//
// The kind's credential layout for session bundles, its settings section
// and its simulator arguments are its worker.Kind's, as for every kind.
package agentcli
