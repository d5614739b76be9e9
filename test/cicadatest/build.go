package cicadatest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// buildDirPrefix names the directory (in os.TempDir) that holds one test
// process's build of cmd/cicada; the process id follows it.
const buildDirPrefix = "cicadatest-bin-"

// built is the test process's build of cmd/cicada. mu guards the fields;
// the build runs under it, so concurrent first callers wait for one build.
var built struct {
	mu   sync.Mutex
	dir  string // the directory holding it; "" before the first build
	path string // the binary; "" until a build succeeded
	err  error  // the first build's failure, given to every later caller
}

// BuiltBinary returns the path of cmd/cicada built from this source tree,
// building it on the first call of the test process (a test starting six
// sidecars pays one build, not six). A failed build fails t and every later
// caller with the same output. The binary lives in
// $TMPDIR/cicadatest-bin-<pid>, removed by RemoveBuilt (VerifyNoLeaks calls
// it); the first build also removes such directories left by test
// processes that are gone. Safe for concurrent use.
func BuiltBinary(t testing.TB) string {
	t.Helper()
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.path == "" && built.err == nil {
		built.path, built.err = build()
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// RemoveBuilt deletes the binary BuiltBinary made, if any; a later
// BuiltBinary builds it again. For TestMain, after m.Run.
func RemoveBuilt() {
	built.mu.Lock()
	defer built.mu.Unlock()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	built.dir, built.path, built.err = "", "", nil
}

// build runs go build for ./cmd/cicada into a fresh per-process directory.
// Called with built.mu held.
func build() (string, error) {
	removeOrphans()
	dir := filepath.Join(os.TempDir(), buildDirPrefix+strconv.Itoa(os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("cicadatest: build directory: %w", err)
	}
	built.dir = dir
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(dir, "cicada")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/cicada")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("cicadatest: go build: %w\n%s", err, out)
	}
	return bin, nil
}

// removeOrphans deletes the build directories of test processes that no
// longer exist (killed by a -timeout, or without a TestMain calling
// RemoveBuilt).
func removeOrphans() {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), buildDirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(s)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
	}
}
