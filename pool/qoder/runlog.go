package qoder

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/poolgate/poolgate/pool/agentcli"
)

// qodercli writes a log of each run under its config dir
// (logs/runs/<started>-<id>-p<pid>/, a manifest.json and qodercli.log).
// When it cannot log in with a personal access token it prints nothing on
// its standard output and waits for input it never reads; the reason is
// in that log (and on its standard error, which goes to the worker's log
// as a stack trace whose first line only says what failed). The driver
// reads it from there to fail the start with it.

// runManifest is the part of a run's manifest.json the driver reads.
type runManifest struct {
	StartedAt time.Time `json:"started_at"`
	Argv      []string  `json:"argv"`
}

// maxRunFile bounds what is read of a manifest or a log.
const maxRunFile = 4 << 20

// authFailedRE finds a failed login in a run log: "Error authenticating:
// S2 [NetworkAttemptError]: Network attempt failed at dns" (the word
// before the bracket is a minified class name).
var authFailedRE = regexp.MustCompile(`Error authenticating: (?:\S+ )?(?:\[(\w+)\]:? )?(.+)`)

// authFailure returns why the CLI's login failed, as its run log says,
// for a session process (one reading stream-json input) started no
// earlier than since; "" when no such run logged one.
func authFailure(configDir string, since time.Time) string {
	manifests, _ := filepath.Glob(filepath.Join(configDir, "logs", "runs", "*", "manifest.json"))
	for _, mf := range manifests {
		var m runManifest
		if b, err := readBounded(mf); err != nil || json.Unmarshal(b, &m) != nil {
			continue
		}
		if m.StartedAt.Before(since) || !slices.Contains(m.Argv, "--input-format") {
			continue
		}
		if why := scanAuthFailure(filepath.Join(filepath.Dir(mf), "qodercli.log")); why != "" {
			return why
		}
	}
	return ""
}

func scanAuthFailure(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, maxRunFile))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := authFailedRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		why := strings.TrimSpace(m[2])
		if m[1] != "" {
			why = m[1] + ": " + why
		}
		return agentcli.Clip(why)
	}
	return ""
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRunFile))
}
