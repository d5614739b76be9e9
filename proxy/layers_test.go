package proxy

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// layers are the package's files by layer, top first, as doc.go draws
// them. A file may use what its own layer and the layers below declare.
var layers = [][]string{
	{"server.go", "admin.go", "metrics.go", "descriptors.go", "debug_hotkeys.go"},
	{"session.go", "limits.go", "half.go", "loop.go", "lane.go", "dial.go", "spare.go", "hotkeys_acl.go", "settle.go"},
	{"conv_state.go", "conversation.go", "conv_reply.go"},
	{"env.go", "identity.go", "ring.go", "latency.go", "hotkeys.go", "through.go"},
}

// transport are the packages only the Server and session layers may
// import: the conversation and what it depends on do no I/O.
var transport = []string{"github.com/panjf2000/gnet/v2", "net", "syscall", "golang.org/x/sys/unix"}

// TestLayers type-checks the package and fails for every use of a
// declaration from a higher layer than the user's, except the one doc.go
// allows: the session layer reads the Server's fields (configuration,
// logger, shared counters), never its methods. The conversation's layer
// and the one below import no transport.
func TestLayers(t *testing.T) {
	layerOf := map[string]int{"doc.go": len(layers)}
	for i, files := range layers {
		for _, f := range files {
			layerOf[f] = i
		}
	}
	out, err := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && v != "" {
			exports[k] = v
		}
	}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		if _, ok := layerOf[n]; !ok {
			t.Errorf("%s is in no layer: add it to layers and to doc.go's drawing", n)
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if layerOf[n] >= 2 {
			for _, im := range f.Imports {
				if p := strings.Trim(im.Path.Value, `"`); slices.Contains(transport, p) {
					t.Errorf("%s, below the session, imports %s: the conversation does no I/O", n, p)
				}
			}
		}
		files = append(files, f)
	}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})}
	pkg, err := conf.Check("github.com/cicada-proxy/cicada/proxy", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]string{}
	check := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			return
		}
		from := filepath.Base(fset.Position(at).Filename)
		to := filepath.Base(fset.Position(obj.Pos()).Filename)
		lf, lt := layerOf[from], layerOf[to]
		if lt >= lf {
			return
		}
		if v, ok := obj.(*types.Var); lf == 1 && lt == 0 && (ok && v.IsField() || obj.Name() == "Server") {
			return
		}
		k := from + " uses " + to
		if !slices.Contains(bad[k], obj.Name()) {
			bad[k] = append(bad[k], obj.Name())
		}
	}
	for id, obj := range info.Uses {
		check(id.Pos(), obj)
	}
	for sel, s := range info.Selections {
		check(sel.Sel.Pos(), s.Obj())
	}
	keys := make([]string, 0, len(bad))
	for k := range bad {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		sort.Strings(bad[k])
		t.Errorf("%s, a higher layer: %s", k, strings.Join(bad[k], ", "))
	}
}
