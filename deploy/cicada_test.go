package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	binPath   string
	helpText  string
	buildErr  error
)

// TestMain removes the binary cicadaBinary built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// cicadaBinary returns the path of cmd/cicada, built once per test run.
func cicadaBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cicada-deploy-test")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "cicada")
		out, err := exec.Command("go", "build", "-o", binPath, filepath.Join(repoRoot, "cmd", "cicada")).CombinedOutput()
		if err != nil {
			buildErr = err
			helpText = string(out)
			return
		}
		out, buildErr = exec.Command(binPath, "--help").CombinedOutput()
		helpText = string(out)
	})
	if buildErr != nil {
		t.Fatalf("building cicada: %v\n%s", buildErr, helpText)
	}
	return binPath
}

// cicadaHelp returns cicada --help.
func cicadaHelp(t *testing.T) string {
	t.Helper()
	cicadaBinary(t)
	return helpText
}
