package cluster

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is one GET or SET a load client made, as it saw it.
type op struct {
	Client int
	Key    string
	Write  bool
	// Value is the value written, or the value read; "" for a read of a
	// missing key (written values are never empty).
	Value string
	// Unknown marks a write whose reply did not come (an error, a
	// timeout): it may have taken effect at any time after Call.
	Unknown bool
	// Call and Return are nanoseconds since the load began; Return is
	// math.MaxInt64 for an Unknown write.
	Call, Return int64
	// Phase is the index of the phase in which the operation was called.
	Phase int
}

// staleRead is a read that returned a value no linearizable register
// could have held then.
type staleRead struct {
	Read op
	// Why names the write it returned and the later write it missed, or
	// says that the value was never written.
	Why string
}

// staleReads returns the reads of history that return a value either
// never written (or written only after the read returned), or
// overwritten before the read began: the read returned w1's value while
// some w2 on the same key has w1.Return < w2.Call and w2.Return < read.Call.
// Unknown writes never end (Return math.MaxInt64), so they overwrite
// nothing for sure but may be read at any time after their call.
func staleReads(history []op) []staleRead {
	type keyWrites struct {
		byValue map[string]op
		// byReturn are the known writes sorted by Return, with the
		// latest Call among each prefix.
		byReturn []op
		maxCall  []int64
	}
	keys := map[string]*keyWrites{}
	for _, o := range history {
		if !o.Write {
			continue
		}
		kw := keys[o.Key]
		if kw == nil {
			kw = &keyWrites{byValue: map[string]op{}}
			keys[o.Key] = kw
		}
		kw.byValue[o.Value] = o
		if !o.Unknown {
			kw.byReturn = append(kw.byReturn, o)
		}
	}
	for _, kw := range keys {
		slices.SortFunc(kw.byReturn, func(a, b op) int { return cmp.Compare(a.Return, b.Return) })
		latest := int64(math.MinInt64)
		for _, w := range kw.byReturn {
			latest = max(latest, w.Call)
			kw.maxCall = append(kw.maxCall, latest)
		}
	}
	var stale []staleRead
	for _, r := range history {
		if r.Write {
			continue
		}
		kw := keys[r.Key]
		w1, ok := op{}, false
		if kw != nil {
			w1, ok = kw.byValue[r.Value]
		}
		if !ok {
			stale = append(stale, staleRead{r, fmt.Sprintf("value %q was never written", r.Value)})
			continue
		}
		if w1.Call > r.Return {
			stale = append(stale, staleRead{r, fmt.Sprintf("value %q was written only after the read returned (write called at %v)",
				r.Value, time.Duration(w1.Call))})
			continue
		}
		// The writes that returned before the read began.
		n := sort.Search(len(kw.byReturn), func(i int) bool { return kw.byReturn[i].Return >= r.Call })
		if n == 0 || kw.maxCall[n-1] <= w1.Return {
			continue
		}
		for _, w2 := range kw.byReturn[:n] {
			if w2.Call > w1.Return {
				stale = append(stale, staleRead{r, fmt.Sprintf("value %q (written %v-%v) was overwritten by %q (written %v-%v) before the read began",
					w1.Value, time.Duration(w1.Call), time.Duration(w1.Return), w2.Value, time.Duration(w2.Call), time.Duration(w2.Return))})
				break
			}
		}
	}
	return stale
}

// registerModel is a register per key: SET stores a value, GET returns
// the stored one ("" for none). Operations on different keys are checked
// apart (porcupine's Partition).
var registerModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var order []string
		for _, o := range history {
			k := o.Input.(op).Key
			if _, seen := byKey[k]; !seen {
				order = append(order, k)
			}
			byKey[k] = append(byKey[k], o)
		}
		var parts [][]porcupine.Operation
		for _, k := range order {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() interface{} { return "" },
	Step: func(state, input, output interface{}) (bool, interface{}) {
		in := input.(op)
		if in.Write {
			return true, in.Value
		}
		return output.(op).Value == state.(string), state
	},
	DescribeOperation: func(input, output interface{}) string {
		in := input.(op)
		if in.Write {
			if in.Unknown {
				return fmt.Sprintf("SET %s %s -> ?", in.Key, in.Value)
			}
			return fmt.Sprintf("SET %s %s", in.Key, in.Value)
		}
		return fmt.Sprintf("GET %s -> %q", in.Key, output.(op).Value)
	},
}

// checkLinearizable checks history with porcupine within timeout. When it
// is not linearizable, porcupine's visualization is written to dir and
// its path returned.
//
// Unknown writes whose value no read returned are left out: such a write
// can always be placed after every other operation (or be lost), so the
// verdict is the same, and each one left in would multiply the orders
// porcupine tries (hundreds of them, from a master's outage, made it
// time out after minutes).
func checkLinearizable(history []op, timeout time.Duration, dir, name string) (porcupine.CheckResult, string, error) {
	read := map[[2]string]bool{}
	for _, o := range history {
		if !o.Write {
			read[[2]string{o.Key, o.Value}] = true
		}
	}
	var ops []porcupine.Operation
	for _, o := range history {
		if o.Unknown && !read[[2]string{o.Key, o.Value}] {
			continue
		}
		ops = append(ops, porcupine.Operation{ClientId: o.Client, Input: o, Output: o, Call: o.Call, Return: o.Return})
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, timeout)
	if res != porcupine.Illegal {
		return res, "", nil
	}
	path := filepath.Join(dir, name+".html")
	return res, path, porcupine.VisualizePath(registerModel, info, path)
}

// artifacts is where failing histories are written: $CICADA_ARTIFACTS, or
// the system's temporary directory.
func artifacts() string {
	if d := os.Getenv("CICADA_ARTIFACTS"); d != "" {
		return d
	}
	return os.TempDir()
}
