package doctor

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// check runs the doctor against poolgate's simulator started with args.
func check(t *testing.T, args ...string) ([]Result, string) {
	t.Helper()
	transcript := filepath.Join(t.TempDir(), "doctor.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Command: []string{testenv.PoolgateBin(t), "simworker"}, Args: args,
		Env: []string{"PATH=" + os.Getenv("PATH")}, Transcript: transcript, Timeout: 30 * time.Second, FinishWait: 2 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res, transcript
}

func verdicts(res []Result, v Verdict) []string {
	var out []string
	for _, r := range res {
		if r.Verdict == v {
			out = append(out, r.Check)
		}
	}
	return out
}

// TestDoctorHolds: against the simulator, which behaves as the evidence
// says, every check holds, and the run's transcript is readable and
// redacted.
func TestDoctorHolds(t *testing.T) {
	res, transcript := check(t, "--logged-in", "--builtin-tool=read_file")
	if len(res) != 15 || len(verdicts(res, Holds)) != len(res) {
		t.Errorf("results:\n%s\nwant all 15 to hold", lines(res))
	}
	b, err := os.ReadFile(transcript)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := lingmarpc.ReadTranscript(bytes.NewReader(b))
	if err != nil || len(tr.Entries) < 50 || !strings.Contains(string(b), `"name":"<redacted>"`) || strings.Contains(string(b), `"name":"demo"`) {
		t.Errorf("transcript: %v, %d entries, the account redacted: %v", err, len(tr.Entries), !strings.Contains(string(b), `"name":"demo"`))
	}
}

// TestDoctorReportsDifferences: told to differ from the evidence, the
// simulator is reported as differing, in the checks that see it and no
// others.
func TestDoctorReportsDifferences(t *testing.T) {
	tests := []struct {
		deviate string
		want    []string
	}{
		{"errorMsg", []string{"chat/ask reply"}},
		{"no-normal", []string{"ask mode normal"}},
		{"no-finish", []string{"ask mode normal", "ask mode chat", "chat/finish", "tool/invoke"}},
		{"tool-shape", []string{"tool/invoke"}},
		{"new-session", []string{"reuse"}},
		{"extra-listener", []string{"listeners"}},
		{"bare-json", []string{"bare JSON refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.deviate, func(t *testing.T) {
			res, _ := check(t, "--logged-in", "--builtin-tool=read_file", "--deviate="+tt.deviate)
			if got := verdicts(res, Differs); !slices.Equal(got, tt.want) {
				t.Errorf("differs: %q, want %q\n%s", got, tt.want, lines(res))
			}
		})
	}
}

// TestDoctorLoggedOut: a worker that is not logged in refuses a turn in
// the evidence's shape; the checks that need a turn are not run, and say
// why.
func TestDoctorLoggedOut(t *testing.T) {
	res, _ := check(t)
	if len(verdicts(res, Differs)) > 0 || len(verdicts(res, NotChecked)) != 8 ||
		!slices.Contains(verdicts(res, Holds), "refusal while logged out") {
		t.Errorf("results:\n%s\nwant the refusal to hold and 8 checks not run", lines(res))
	}
}

// TestDoctorCommand: `poolgate doctor` runs the checks and fails when the
// worker differs.
func TestDoctorCommand(t *testing.T) {
	bin := testenv.PoolgateBin(t)
	tests := []struct {
		args     []string
		wantExit int
		wantLine string
	}{
		{nil, 0, "15 hold, 0 differ, 0 not checked"},
		{[]string{"--worker-args=--deviate=new-session"}, 1, "reuse: differs: the follow-up came back in session"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		cmd := exec.Command(bin, append([]string{"doctor", "--finish-wait=2s", "--transcript=" + filepath.Join(dir, "t.jsonl")}, tt.args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		exit := 0
		if errors.As(err, &ee) {
			exit = ee.ExitCode()
		}
		if exit != tt.wantExit || !strings.Contains(string(out), tt.wantLine) {
			t.Errorf("poolgate doctor %q exited %d (want %d):\n%s\nwant a line with %q", tt.args, exit, tt.wantExit, out, tt.wantLine)
		}
		if _, err := os.Stat(filepath.Join(dir, "t.jsonl")); err != nil {
			t.Errorf("no transcript: %v", err)
		}
	}
}

func TestCopyCache(t *testing.T) {
	from, to := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(from, "cache"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "user"} {
		if err := os.WriteFile(filepath.Join(from, "cache", f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyCache(from, to); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"id", "user"} {
		if b, err := os.ReadFile(filepath.Join(to, "cache", f)); err != nil || string(b) != f {
			t.Errorf("cache/%s: %q, %v", f, b, err)
		}
	}
	if err := copyCache(filepath.Join(from, "none"), to); err == nil {
		t.Error("a work dir without cache/ was copied")
	}
}

func lines(res []Result) string {
	var b strings.Builder
	for _, r := range res {
		b.WriteString(r.String() + "\n")
	}
	return b.String()
}

// TestTranscriptIsANewFile: the doctor writes its transcript only to a new
// file: through a link, or over a file, at the path named (a predictable
// default name in a shared directory) it writes nothing, and says so.
func TestTranscriptIsANewFile(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "poolgate-doctor.jsonl")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{link, victim} {
		_, err := Run(context.Background(), Config{Command: []string{"/nonexistent/worker"}, Transcript: path})
		if err == nil || !strings.Contains(err.Error(), "exists already") {
			t.Errorf("Run with the transcript at %s: %v, want a refusal", path, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me" {
		t.Errorf("the file behind the link now holds %q", b)
	}
}
