package doctor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Main is `poolgate doctor [flags]` (args follow "doctor"): it checks the
// worker binary --worker-bin (default $POOLGATE_WORKER_BIN; without one,
// poolgate's bundled simulator, started logged in and using a built-in
// tool in agent mode so that every check runs), prints one line per check
// and where the transcript went, and returns ErrDiffers when a check found
// a difference. env is the worker's base environment (poolgate passes the
// one its workers get), getenv reads poolgate's own.
func Main(ctx context.Context, args, env []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg := Config{Env: env, Out: stdout}
	var bin, workerArgs string
	fs := flag.NewFlagSet("poolgate doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&bin, "worker-bin", getenv("POOLGATE_WORKER_BIN"), "the Lingma worker binary (default $POOLGATE_WORKER_BIN; none: the bundled simulator)")
	fs.StringVar(&workerArgs, "worker-args", "", "extra worker arguments, space-separated")
	fs.StringVar(&cfg.WorkDir, "work-dir", "", "a logged-in work dir whose cache/ is copied for the turns (it is not touched)")
	fs.StringVar(&cfg.Transcript, "transcript", "poolgate-doctor-"+time.Now().UTC().Format("20060102-150405")+".jsonl",
		"where the redacted transcript of the run goes")
	fs.DurationVar(&cfg.StartTimeout, "start-timeout", 30*time.Second, "longest start, to a listening socket")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "longest turn")
	fs.DurationVar(&cfg.FinishWait, "finish-wait", 15*time.Second, "longest wait for chat/finish after a turn's last step callback")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the scratch work dir (the worker's logs)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("doctor: unexpected argument %q", fs.Arg(0))
	}
	cfg.Command, cfg.Args = []string{bin}, strings.Fields(workerArgs)
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("doctor: find own executable for the bundled simulator: %w", err)
		}
		cfg.Command = []string{self, "simworker"}
		cfg.Args = append([]string{"--logged-in", "--builtin-tool=read_file"}, cfg.Args...)
		fmt.Fprintln(stdout, "poolgate doctor: no --worker-bin (or POOLGATE_WORKER_BIN): checking the bundled simulator")
	} else {
		fmt.Fprintf(stdout, "poolgate doctor: checking %s\n", bin)
	}
	results, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	n := map[Verdict]int{}
	for _, r := range results {
		n[r.Verdict]++
	}
	fmt.Fprintf(stdout, "%d hold, %d differ, %d not checked; transcript (redacted, to attach to a bug report): %s\n",
		n[Holds], n[Differs], n[NotChecked], cfg.Transcript)
	if n[Differs] > 0 {
		return fmt.Errorf("%w: %d of %d checks (docs/lingma-protocol.md says what each means)", ErrDiffers, n[Differs], len(results))
	}
	return nil
}
