package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The qoder dialect: `simworker agent-cli qoder ARGS...` plays Qoder CLI
// (qodercli 1.1.52) as it was seen to behave here, offline, and as its
// SDK's types describe what could not be seen (a turn that reaches the
// model). docs/qoder-worker.md lists each point and where it was learnt.
//
//	agent-cli qoder status [-o json|text]   the login state; logged out it
//	                                        lingers after printing, as the real one does
//	agent-cli qoder login                   prints a device login URL (the simulated
//	                                        device page, on loopback) and waits for the browser
//	agent-cli qoder --print --input-format stream-json --output-format stream-json [...]
//	                                        the session
//
// Its login is a personal access token (QODER_PERSONAL_ACCESS_TOKEN; one
// containing "invalid" fails its exchange, as every token fails offline)
// or the stored login of its config dir (.auth/user and .auth/machine_id,
// kept readable here; the real one is encrypted with a key made from
// machine_id, so a login under another machine id does not count).
// Logged out, a session prints its "Not logged in" turn unasked, then
// reads and answers nothing, and exits seconds later (or when its input
// ends); a token it cannot use makes it print nothing at all but the error
// on its standard error and in its run log, and exit the same way.

// DialectQoder names Qoder CLI's dialect.
const DialectQoder = "qoder"

const (
	qoderVersion  = "1.1.52"
	qoderProtocol = "1.4.0"
	// qoderPATEnv holds a personal access token.
	qoderPATEnv = "QODER_PERSONAL_ACCESS_TOKEN"
	// qoderNotLoggedIn is the not-logged-in turn's text.
	qoderNotLoggedIn = "Not logged in · Please run /login"
	// qoderFailed is the text of a turn whose model request failed.
	qoderFailed = "The request could not be completed. Please try again."
	// qoderLinger is how long the status command stays after printing
	// when logged out (the real one stayed about seven seconds).
	qoderLinger = 7 * time.Second
)

// qoder is Qoder CLI's dialect. Its session's lines are qoderVoice's.
var qoder = &dialect{
	name: DialectQoder, version: qoderVersion, options: qoderOptions, aliases: qoderAliases,
	promptArg: "simulator: a prompt argument is not played (%q); send user messages on stdin", check: checkQoder,
	configEnv: "QODER_CONFIG_DIR", configDefault: ".qoder",
	subcommands: map[string]func(*agentEnv, context.Context, []string) error{
		"status": (*agentEnv).status, "login": (*agentEnv).qoderLoginCmd},
	versionFlags: []string{"--version", "-v"},
	defaultModel: "auto",
	defaultTools: []string{"Agent", "Bash", "Edit", "Glob", "Grep", "Read", "WebFetch", "WebSearch", "Write"},
	msgPrefix:    "msg_", msgHex: 12, quiet: true,
	voice: func(s *agentSession) voice {
		return &qoderVoice{agentSession: s, tokens: s.e.getenv("QODER_EXPOSE_TOKEN_USAGE") == "1"}
	},
}

// qoderLoginCmd plays `qodercli login`, which takes no options.
func (e *agentEnv) qoderLoginCmd(ctx context.Context, args []string) error {
	if len(args) > 0 {
		return e.refuse(fmt.Sprintf("error: unknown option '%s'", args[0]))
	}
	return e.deviceLogin(ctx)
}

// qoderOptions are qodercli's options in print mode (from its --help):
// the number of values each takes; aliases map short names to long.
var qoderOptions = map[string]int{"--print": 0, "--input-format": 1, "--output-format": 1,
	"--include-partial-messages": 0, "--tools": 1, "--disable-builtin-skills": 0, "--strict-mcp-config": 0,
	"--permission-mode": 1, "--dangerously-skip-permissions": 0, "--max-model-request-retries": 1,
	"--settings": 1, "--setting-sources": 1, "--system-prompt": 1, "--append-system-prompt": 1, "--model": 1,
	"--resume": 1, "--session-id": 1, "--no-session-persistence": 0, "--config-dir": 1, "--mcp-config": 1,
	"--max-output-tokens": 1, "--debug": 0, "--allowed-tools": 1, "--disallowed-tools": 1, "--output-style": 1,
	"--add-dir": 1, "--fork-session": 0, "--name": 1, "--agent": 1, "--thinking": 1, "--reasoning-effort": 1}

var qoderAliases = map[string]string{"-p": "--print", "-o": "--output-format", "-m": "--model", "-r": "--resume",
	"-d": "--debug", "-n": "--name"}

var qoderPermissionModes = map[string]bool{"default": true, "accept_edits": true, "bypass_permissions": true,
	"dont_ask": true, "auto": true}

// checkQoder refuses the print-mode command lines commander, the CLI's
// parser, refuses, and those the simulator does not play.
func checkQoder(o printOptions) error {
	if m, ok := o["--permission-mode"]; ok && !qoderPermissionModes[m] {
		return fmt.Errorf("error: option '--permission-mode <mode>' argument '%s' is invalid. Allowed choices are default, accept_edits, bypass_permissions, dont_ask, auto", m)
	}
	if s, ok := o["--settings"]; ok && strings.HasPrefix(strings.TrimSpace(s), "{") && !json.Valid([]byte(s)) {
		return errors.New("error: --settings is not valid JSON")
	}
	switch {
	case !o.has("--print"):
		return errors.New("simulator: only --print (-p) sessions are played")
	case o["--input-format"] != "stream-json" || o["--output-format"] != "stream-json":
		return errors.New("simulator: only --input-format stream-json with --output-format stream-json is played")
	}
	return nil
}

// qoderUser is the simulator's stored login (the real one is encrypted).
type qoderUser struct {
	UID         string `json:"uid"`
	Name        string `json:"name"`
	Email       string `json:"email"`
	LoginMethod string `json:"login_method"`
	// MachineID is the machine id the login was stored under: the real
	// CLI's key comes from it, so under another one it does not decrypt.
	MachineID string `json:"machine_id"`
}

func (e *agentEnv) authDir() string { return filepath.Join(e.configDir, ".auth") }

// errPATExchange is a personal access token the CLI could not exchange.
var errPATExchange = errors.New("NetworkAttemptError: Network attempt failed at dns")

// qoderLogin is how the process is logged in: the stored login, a token's
// (u.LoginMethod "token"), or none (ok false); err is a token that
// failed.
func (e *agentEnv) qoderLogin() (u qoderUser, ok bool, err error) {
	if pat := e.getenv(qoderPATEnv); pat != "" {
		if strings.Contains(pat, "invalid") {
			return u, false, errPATExchange
		}
		return qoderUser{UID: "pat-" + randomHex(4), Name: "Token user", LoginMethod: "token"}, true, nil
	}
	b, err := os.ReadFile(filepath.Join(e.authDir(), "user"))
	if err != nil {
		return u, false, nil
	}
	id, _ := os.ReadFile(filepath.Join(e.authDir(), "machine_id"))
	if json.Unmarshal(b, &u) != nil || u.UID == "" || u.MachineID != strings.TrimSpace(string(id)) {
		return qoderUser{}, false, nil // "Stored credentials are corrupt (stage=decrypt)"
	}
	return u, true, nil
}

// machineID returns the config dir's machine id, made when missing.
func (e *agentEnv) machineID() (string, error) {
	p := filepath.Join(e.authDir(), "machine_id")
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	id := newUUID()
	return id, writeAtomic(p, []byte(id)) // which makes the dir
}

// storeLogin writes the stored login of user under the machine id.
func (e *agentEnv) storeLogin(user, account string) error {
	id, err := e.machineID()
	if err != nil {
		return err
	}
	b, _ := json.Marshal(qoderUser{UID: "u-" + randomHex(6), Name: user + " (" + account + ")", Email: user,
		LoginMethod: "device-token", MachineID: id})
	return writeAtomic(filepath.Join(e.authDir(), "user"), b)
}

// status prints the login state as `qodercli status` does.
func (e *agentEnv) status(ctx context.Context, args []string) error {
	format := "text"
	for i := 0; i < len(args); i++ {
		switch {
		case (args[i] == "-o" || args[i] == "--output") && i+1 < len(args):
			i++
			format = args[i]
		default:
			return e.refuse(fmt.Sprintf("error: unknown option '%s'", args[i]))
		}
	}
	u, ok, err := e.qoderLogin()
	if err != nil {
		return e.critical(err)
	}
	st := map[string]any{"logged_in": ok, "version": qoderVersion, "allow_byok": 0}
	if ok {
		st["auth_source"], st["account_type"], st["login_method"] = "local", "user", u.LoginMethod
		st["username"], st["email"] = u.Name, u.Email
		if u.LoginMethod == "token" {
			st["auth_source"] = "env"
		}
	}
	if format == "json" {
		b, _ := json.MarshalIndent(st, "", "  ")
		fmt.Fprintln(e.stdout, string(b))
	} else {
		acct := "Not logged in"
		if ok {
			acct = u.Name
		}
		fmt.Fprintf(e.stdout, "Version: %s\nAccount: %s\n", qoderVersion, acct)
	}
	if !ok {
		_ = sleepCtx(ctx, qoderLinger)
	}
	return nil
}

// critical is how the CLI fails when its login cannot be made: the
// error on its standard error and in its run log, nothing on its standard
// output.
func (e *agentEnv) critical(err error) error {
	e.runLog("Error authenticating: S2 [" + strings.Replace(err.Error(), ": ", "]: ", 1))
	fmt.Fprintf(e.stderr, "An unexpected critical error occurred:%v\n    at r3A.execute (file:///simulated/qodercli.js:2:3371084)\n", err)
	return err
}

// runLog writes a run's manifest and log line under the config dir's
// logs/runs, as the CLI logs each of its runs.
func (e *agentEnv) runLog(line string) {
	dir := filepath.Join(e.configDir, "logs", "runs",
		fmt.Sprintf("%s-%s-p%d", e.started.UTC().Format("2006-01-02T15-04-05.000Z"), randomHex(3), os.Getpid()))
	if os.MkdirAll(dir, 0o700) != nil {
		return
	}
	m, _ := json.Marshal(map[string]any{"started_at": e.started.UTC(), "pid": os.Getpid(), "process_role": "main",
		"cli_version": qoderVersion, "cwd": e.cwd, "argv": append([]string{"node", "qodercli"}, os.Args[1:]...)})
	_ = os.WriteFile(filepath.Join(dir, "manifest.json"), m, 0o600)
	_ = os.WriteFile(filepath.Join(dir, "qodercli.log"),
		[]byte(time.Now().UTC().Format(time.RFC3339Nano)+" ERROR debug.message "+line+"\n"), 0o600)
}
