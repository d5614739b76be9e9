package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// testdata/micro.txt is the output of the go test commands runMicro runs,
// captured on the project's machine.
func TestParseMicro(t *testing.T) {
	out, err := os.ReadFile("testdata/micro.txt")
	if err != nil {
		t.Fatal(err)
	}
	res, err := parseMicro(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2*len(microBenches) {
		t.Fatalf("%d results, want %d", len(res), 2*len(microBenches))
	}
	want := map[string][2]float64{ // medians at -cpu 1 and 2
		"BenchmarkParseGet":        {39.38, 39.19},
		"BenchmarkGetHit":          {9.813, 4.824},
		"BenchmarkHitPath/off":     {1160, 1102},
		"BenchmarkHitPathParallel": {1099, 566.7},
	}
	for _, r := range res {
		if w, ok := want[r.Name]; ok && r.NsPerOp != w[r.CPU-1] {
			t.Errorf("%s -cpu %d: %v ns/op, want %v", r.Name, r.CPU, r.NsPerOp, w[r.CPU-1])
		}
		if r.Runs != 3 || r.Allocs != 0 {
			t.Errorf("%s -cpu %d: %d runs, %v allocs/op; want 3, 0", r.Name, r.CPU, r.Runs, r.Allocs)
		}
	}
	var b bytes.Buffer
	printMicro(&b, res)
	if !strings.Contains(b.String(), "1.94x") { // 1099 / 566.7
		t.Errorf("no hit-path scaling of 1.94x in:\n%s", b.String())
	}
	if _, err := parseMicro(bytes.ReplaceAll(out, []byte("BenchmarkGetHit-2"), []byte("BenchmarkOther-2"))); err == nil {
		t.Error("a missing benchmark gave no error")
	}
}
