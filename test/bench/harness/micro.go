package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// microBench is one Go benchmark the harness runs: its package and name
// (an anchored -bench pattern) and whether it uses b.RunParallel, so that
// its ops/s at -cpu 2 over -cpu 1 is the code's scaling with cores.
type microBench struct {
	Pkg, Name string
	Parallel  bool
	What      string // what it measures, for the table
}

// microBenches are issue 7's micro-benchmarks: request parsing, hit lookup,
// the whole hit path (parse, count, look up, copy), detector counting.
var microBenches = []microBench{
	{"./resp", "BenchmarkParseGet", false, "parse one GET"},
	{"./resp", "BenchmarkParseGetPipeline16", false, "parse 16 pipelined GETs"},
	{"./hotcache", "BenchmarkGetHit", true, "cache lookup, hit"},
	{"./detector", "BenchmarkObserveParallel", true, "detector: count one access"},
	{"./proxy", "BenchmarkHitPath/off", false, "hit path, 16 pipelined GETs"},
	{"./proxy", "BenchmarkHitPathParallel", true, "hit path, 16 GETs, a loop per core"},
}

// microResult is one benchmark's median over -count runs at one -cpu.
type microResult struct {
	Name     string  // as go test prints it, without the -cpu suffix
	CPU      int     // GOMAXPROCS (-cpu)
	NsPerOp  float64 // median ns/op
	BPerOp   float64 // B/op
	Allocs   float64 // allocs/op
	Runs     int     // -count lines seen
	Parallel bool
	What     string
}

// runMicro runs microBenches with go test in module directory dir (-cpu
// 1,2, -benchmem, count runs of benchtime each; one go test per benchmark,
// as a -bench pattern's sub-benchmark level would drop benchmarks without
// sub-benchmarks) and returns the medians. The raw output goes to raw.
func runMicro(dir string, count int, benchtime time.Duration, raw io.Writer) ([]microResult, error) {
	var all []byte
	for _, m := range microBenches {
		top, sub, _ := strings.Cut(m.Name, "/")
		pattern := "^" + top + "$"
		if sub != "" {
			pattern += "/^" + sub + "$"
		}
		args := []string{"test", "-run", "^$", "-bench", pattern, "-benchmem", "-cpu", "1,2",
			"-count", strconv.Itoa(count), "-benchtime", benchtime.String(), m.Pkg}
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		cancel()
		_, _ = raw.Write(out)
		if err != nil {
			return nil, fmt.Errorf("harness: go %s: %w", strings.Join(args, " "), err)
		}
		all = append(all, out...)
	}
	return parseMicro(all)
}

// parseMicro reads go test -bench output and returns the median of each
// of microBenches at each -cpu, in microBenches order; a benchmark that
// is missing is an error.
func parseMicro(out []byte) ([]microResult, error) {
	type key struct {
		name string
		cpu  int
	}
	type runs struct{ ns, b, allocs []float64 }
	seen := map[key]*runs{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		name, cpu := f[0], 1
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if n, err := strconv.Atoi(name[i+1:]); err == nil {
				name, cpu = name[:i], n
			}
		}
		r := seen[key{name, cpu}]
		if r == nil {
			r = &runs{}
			seen[key{name, cpu}] = r
		}
		ns, _ := strconv.ParseFloat(f[2], 64)
		r.ns = append(r.ns, ns)
		for i := 4; i+1 < len(f); i += 2 {
			v, _ := strconv.ParseFloat(f[i], 64)
			switch f[i+1] {
			case "B/op":
				r.b = append(r.b, v)
			case "allocs/op":
				r.allocs = append(r.allocs, v)
			}
		}
	}
	var res []microResult
	for _, m := range microBenches {
		for _, cpu := range []int{1, 2} {
			r := seen[key{m.Name, cpu}]
			if r == nil {
				return nil, fmt.Errorf("harness: no result for %s at -cpu %d", m.Name, cpu)
			}
			res = append(res, microResult{Name: m.Name, CPU: cpu, NsPerOp: median(r.ns), BPerOp: median(r.b),
				Allocs: median(r.allocs), Runs: len(r.ns), Parallel: m.Parallel, What: m.What})
		}
	}
	return res, nil
}

// printMicro prints the micro-benchmarks' medians and, for the
// b.RunParallel ones, the scaling from one core to two (ns/op at -cpu 1
// over ns/op at -cpu 2: RunParallel's ns/op is wall time per operation
// over all goroutines).
func printMicro(w io.Writer, res []microResult) {
	fmt.Fprintln(w, "\nGo micro-benchmarks (medians; -benchmem; -cpu 1 and 2):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "benchmark\tmeasures\tns/op -cpu 1\tns/op -cpu 2\tB/op\tallocs/op\tscaling 1→2\t")
	for i := 0; i+1 < len(res); i += 2 {
		one, two := res[i], res[i+1]
		scaling := "-"
		if one.Parallel {
			scaling = fmt.Sprintf("%.2fx", one.NsPerOp/two.NsPerOp)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.0f\t%.0f\t%s\t\n", one.Name, one.What, one.NsPerOp, two.NsPerOp,
			max(one.BPerOp, two.BPerOp), max(one.Allocs, two.Allocs), scaling)
	}
	tw.Flush()
}
