package supervisor_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain runs the tests, or, re-executed by exec_test.go with helperEnv
// set, the helper worker.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperWorker(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}
