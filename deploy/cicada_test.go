package deploy

import (
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	helpOnce sync.Once
	helpText string
	helpErr  error
)

// cicadaHelp returns cicada --help, from a binary built once per test run.
func cicadaHelp(t *testing.T) string {
	t.Helper()
	helpOnce.Do(func() {
		var out []byte
		out, helpErr = exec.Command("go", "run", filepath.Join(repoRoot, "cmd", "cicada"), "--help").CombinedOutput()
		helpText = string(out)
	})
	if helpErr != nil {
		t.Fatalf("cicada --help: %v\n%s", helpErr, helpText)
	}
	return helpText
}
