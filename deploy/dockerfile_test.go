package deploy

import (
	"debug/elf"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// repoRoot is the repository's top directory (tests run in deploy/).
const repoRoot = ".."

// dockerStages parses the Dockerfile with BuildKit's own parser.
func dockerStages(t *testing.T) ([]instructions.Stage, []instructions.ArgCommand) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ast, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ast.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	stages, args, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	return stages, args
}

// TestDockerfile checks the image's shape: a build stage that compiles a
// static binary, a distroless (or scratch) runtime stage running it as a
// non-root user, the RESP and admin ports exposed, no HEALTHCHECK.
func TestDockerfile(t *testing.T) {
	stages, metaArgs := dockerStages(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(stages))
	}
	goVersion := ""
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Key == "GO_VERSION" && kv.Value != nil {
				goVersion = *kv.Value
			}
		}
	}
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^go (\S+)`).FindSubmatch(mod); m == nil || string(m[1]) != goVersion {
		t.Errorf("ARG GO_VERSION=%s, want go.mod's %s", goVersion, m[1])
	}
	run := stages[len(stages)-1]
	if !strings.HasPrefix(run.BaseName, "gcr.io/distroless/static") && run.BaseName != "scratch" {
		t.Errorf("runtime stage FROM %s, want distroless static or scratch", run.BaseName)
	}
	var user, entry string
	var exposed []string
	for _, st := range stages {
		for _, c := range st.Commands {
			if _, ok := c.(*instructions.HealthCheckCommand); ok {
				t.Errorf("stage %s has a HEALTHCHECK; orchestrators probe /healthz and /readyz", st.Name)
			}
		}
	}
	copied := map[string]string{} // destination in the runtime image -> source in the build stage
	for _, c := range run.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.EntrypointCommand:
			if len(c.CmdLine) > 0 {
				entry = c.CmdLine[0]
			}
			if c.PrependShell {
				t.Error("ENTRYPOINT in shell form: signals would go to a shell, and distroless has none")
			}
		case *instructions.CopyCommand:
			if c.From != stages[0].Name || len(c.SourcePaths) != 1 {
				t.Errorf("COPY %v from %q: want one file from the build stage %q", c.SourcePaths, c.From, stages[0].Name)
				continue
			}
			copied[c.DestPath] = c.SourcePaths[0]
		}
	}
	if uid, _, _ := strings.Cut(user, ":"); uid == "" || uid == "0" || uid == "root" {
		t.Errorf("runtime USER %q, want a non-root user", user)
	}
	listen, admin := defaultPort(t, "listen"), defaultPort(t, "admin")
	slices.Sort(exposed)
	if want := []string{listen, admin}; !slices.Equal(exposed, sorted(want)) {
		t.Errorf("EXPOSE %v, want Cicada's default --listen and --admin ports %v", exposed, want)
	}
	out := buildOutput(t, stages[0])
	if copied[entry] != out {
		t.Errorf("ENTRYPOINT %q runs %q copied from the build stage, want the go build output %q", entry, copied[entry], out)
	}
}

// buildOutput returns the -o path of the build stage's go build.
func buildOutput(t *testing.T, st instructions.Stage) string {
	t.Helper()
	m := regexp.MustCompile(`-o (\S+)`).FindStringSubmatch(goBuild(t, st))
	if m == nil {
		t.Fatal("the go build command has no -o")
	}
	return m[1]
}

// goBuild returns the shell command of the build stage's RUN that runs
// go build.
func goBuild(t *testing.T, st instructions.Stage) string {
	t.Helper()
	for _, c := range st.Commands {
		if r, ok := c.(*instructions.RunCommand); ok && r.PrependShell && strings.Contains(strings.Join(r.CmdLine, " "), "go build") {
			return strings.Join(r.CmdLine, " ")
		}
	}
	t.Fatalf("build stage %q has no RUN ... go build", st.Name)
	return ""
}

func sorted(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }

// defaultPort returns the port of a flag's default address in cicada
// --help (for example 6380 for --listen).
func defaultPort(t *testing.T, flag string) string {
	t.Helper()
	m := regexp.MustCompile(`--` + flag + ` string .*\(default "[^":]*:(\d+)"\)`).FindStringSubmatch(cicadaHelp(t))
	if m == nil {
		t.Fatalf("cicada --help shows no default address for --%s", flag)
	}
	return m[1]
}

// TestDockerfileBuild runs the build stage's go build command as the image
// build would: with sh, in a copy of the build context (the repository
// minus what .dockerignore excludes), with a VERSION build argument. The
// binary must be static (no interpreter, no shared libraries: it runs on
// distroless static) and print that version.
func TestDockerfileBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: this test builds Cicada with the Dockerfile's go build; make test and CI run it")
	}
	stages, _ := dockerStages(t)
	ctx := buildContext(t)
	out := buildOutput(t, stages[0])
	bin := filepath.Join(t.TempDir(), "cicada")
	cmd := exec.Command("sh", "-c", strings.Replace(goBuild(t, stages[0]), "-o "+out, "-o "+bin, 1))
	cmd.Dir = ctx
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-dockerfile-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	v, err := exec.Command(bin, "--version").Output()
	if err != nil || string(v) != "cicada v0.0.0-dockerfile-test\n" {
		t.Errorf("--version printed %q (%v), want %q", v, err, "cicada v0.0.0-dockerfile-test\n")
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary is dynamically linked (program header %v)", p.Type)
		}
	}
}

// buildContext copies to a temporary directory the files of the repository
// that .dockerignore lets into the build context, and returns it.
func buildContext(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	patterns, err := ignorefile.ReadAll(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if rel == "." {
			return nil
		}
		skip, err := pm.MatchesOrParentMatches(filepath.ToSlash(rel))
		switch {
		case err != nil:
			return err
		case skip && d.IsDir():
			return filepath.SkipDir
		case skip:
			return nil
		case d.IsDir():
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		case !d.Type().IsRegular():
			return nil
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{".git", "test", "deploy", "README.md"} {
		if _, err := os.Stat(filepath.Join(dst, gone)); err == nil {
			t.Errorf(".dockerignore lets %s into the build context", gone)
		}
	}
	return dst
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
