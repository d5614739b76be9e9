// Package linearizability records concurrent histories of reads and writes
// sent through Cicada and checks them with porcupine
// (github.com/anishathalye/porcupine; Herlihy & Wing's definition, checked
// with the P-compositionality-free algorithm of Lowe, "Testing for
// linearizability", 2017) against a model of the Redis commands involved.
//
// The model (this file) is a small keyspace: string keys a, b, n and a hash
// h with fields f, g, in databases 0 and 1. Keys with a TTL are modelled
// with the window in which Redis's expiry instant must lie, so an
// operation that overlaps it may see the key either way; the model is
// nondeterministic there (porcupine.NondeterministicModel).
package linearizability

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Key indexes: the string keys and the hash.
const (
	keyA = iota
	keyB
	keyN
	keyH
	nKeys
)

var keyNames = [nKeys]string{"a", "b", "n", "h"}

// Hash fields of h.
var fieldNames = [2]string{"f", "g"}

// entry is one key. A string key uses val; the hash h uses fields (the key
// exists while a field does). exp is the window [exp[0], exp[1]] (ns since
// the history started) in which Redis's expiry instant lies; exp[1] == 0
// means no TTL.
type entry struct {
	present bool
	val     string
	fields  [2]string
	has     [2]bool
	exp     [2]int64
}

// State is the whole keyspace: [db][key]. It is comparable with ==.
type State [2][nKeys]entry

// Kind is an operation's command.
type Kind uint8

// The operations a history holds.
const (
	Get Kind = iota
	HGet
	Set
	Del
	Incr
	Append
	GetDel
	MSet // MSET a Val b Val2
	HSet
	HDel
	PExpire // TTL ms
	Rename  // RENAME Key Key2
	Copy    // COPY Key Key2
	Move    // MOVE Key to the other db
	SwapDB
	FlushDB
	FlushAll
	EvalSet // EVAL that SETs Key and DELs Key2, keys undeclared
	FCallSet
	Multi      // MULTI, Batch..., EXEC
	EvalSwapDB // EVAL that runs SWAPDB: no keyspace notification names a key
	SetTTL     // SET Key Val PX TTL (EX TTL/1000 for whole seconds): Cicada writes it through
)

var kindNames = [...]string{"GET", "HGET", "SET", "DEL", "INCR", "APPEND", "GETDEL", "MSET", "HSET", "HDEL",
	"PEXPIRE", "RENAME", "COPY", "MOVE", "SWAPDB", "FLUSHDB", "FLUSHALL", "EVAL", "FCALL", "MULTI", "EVAL", "SET"}

// Input is one operation as a client issued it. DB is the database its
// connection has selected. Call and Return (ns since the history began,
// monotonic clock) repeat porcupine's timestamps; WallCall and WallReturn
// are the same instants by the wall clock (CLOCK_REALTIME, ns since the
// history began), which is the clock Redis's expiry follows (mstime from
// gettimeofday): the expiry windows use them, so a step of the wall clock
// (an NTP or hypervisor correction) moves the windows as it moves Redis's
// expiry.
type Input struct {
	Kind                 Kind
	DB                   int
	Key, Key2            int
	Field                int
	Val, Val2            string
	TTL                  int64 // ms, for PExpire and SetTTL
	Batch                []Input
	Call, Return         int64
	WallCall, WallReturn int64
}

// Output is what Redis (or Cicada) answered: a bulk or status string, a
// nil, an integer, an error's text, or EXEC's array.
type Output struct {
	// Unknown marks a write whose connection failed before its reply: it
	// may or may not have taken effect (its Return is math.MaxInt64).
	Unknown bool
	Str     string
	Nil     bool
	Int     int64
	IsInt   bool
	Err     string
	Items   []Output
}

// ttlSlack widens expiry windows for Redis's millisecond clock (an
// expiry instant is a whole millisecond; the clock is read once per
// command or script).
const ttlSlack = 2_000_000 // ns

// errNotInt is Redis's reply to INCR of a non-integer.
const errNotInt = "ERR value is not an integer or out of range"

// Step returns every state the keyspace can be in after in produced out
// from s; none when out is impossible. With evictable, any key may also
// have vanished before in (maxmemory eviction, a Redis restart that lost
// its data).
func Step(s State, in Input, out Output, evictable bool) []State {
	var next []State
	for _, b := range branches(s, in, evictable) {
		got, after := apply(b, in)
		if equalOutput(got, out) {
			next = appendUnique(next, after)
		}
	}
	return next
}

func appendUnique(states []State, s State) []State {
	for _, t := range states {
		if t == s {
			return states
		}
	}
	return append(states, s)
}

// branches resolves the expiry of the keys in touches: a key whose window
// lies before the operation is gone, one whose window lies after it is
// there, and one whose window overlaps it may be either.
func branches(s State, in Input, evictable bool) []State {
	out := []State{s}
	for _, k := range touches(in) {
		var next []State
		for _, st := range out {
			e := &st[k[0]][k[1]]
			first, last := wallSpan(in)
			if !e.present || (e.exp[1] == 0 || last < e.exp[0]) && !evictable {
				next = append(next, st)
				continue
			}
			gone := st
			gone[k[0]][k[1]] = entry{}
			if e.exp[1] != 0 && first > e.exp[1] {
				next = append(next, gone)
				continue
			}
			alive := st
			if e.exp[1] != 0 {
				alive[k[0]][k[1]].exp[0] = max(e.exp[0], first) // expiry not before this call
			}
			next = append(next, alive, gone)
		}
		out = next
	}
	return out
}

// touches lists the [db, key] pairs whose existence decides in's result.
func touches(in Input) [][2]int {
	other := 1 - in.DB
	switch in.Kind {
	case SwapDB, FlushDB, FlushAll, EvalSwapDB:
		return nil
	case Rename, Copy:
		return [][2]int{{in.DB, in.Key}, {in.DB, in.Key2}}
	case Move:
		return [][2]int{{in.DB, in.Key}, {other, in.Key}}
	case MSet:
		return nil
	case EvalSet:
		return [][2]int{{in.DB, in.Key2}}
	case Multi:
		var all [][2]int
		for _, b := range in.Batch {
			b.DB = in.DB
			all = append(all, touches(b)...)
		}
		return all
	}
	return [][2]int{{in.DB, in.Key}}
}

// apply runs in on a state whose expiries are resolved and returns Redis's
// reply and the new state.
func apply(s State, in Input) (Output, State) {
	db := &s[in.DB]
	k := &db[in.Key]
	ok := Output{Str: "OK"}
	switch in.Kind {
	case Get:
		if !k.present {
			return Output{Nil: true}, s
		}
		return Output{Str: k.val}, s
	case HGet:
		if !k.has[in.Field] {
			return Output{Nil: true}, s
		}
		return Output{Str: k.fields[in.Field]}, s
	case Set, FCallSet:
		*k = entry{present: true, val: in.Val}
		return ok, s
	case Del:
		return intOut(del(k)), s
	case GetDel:
		if !k.present {
			return Output{Nil: true}, s
		}
		v := k.val
		*k = entry{}
		return Output{Str: v}, s
	case Incr:
		n := int64(0)
		if k.present {
			var err error
			if n, err = strconv.ParseInt(k.val, 10, 64); err != nil {
				return Output{Err: errNotInt}, s
			}
		}
		k.present, k.val = true, strconv.FormatInt(n+1, 10)
		return intOut(n + 1), s
	case Append:
		k.present, k.val = true, k.val+in.Val
		return intOut(int64(len(k.val))), s
	case MSet:
		db[keyA] = entry{present: true, val: in.Val}
		db[keyB] = entry{present: true, val: in.Val2}
		return ok, s
	case HSet:
		isNew := !k.has[in.Field]
		k.present, k.has[in.Field], k.fields[in.Field] = true, true, in.Val
		return intOut(b2i(isNew)), s
	case HDel:
		if !k.has[in.Field] {
			return intOut(0), s
		}
		k.has[in.Field], k.fields[in.Field] = false, ""
		if !k.has[0] && !k.has[1] {
			*k = entry{}
		}
		return intOut(1), s
	case PExpire:
		if !k.present {
			return intOut(0), s
		}
		k.exp = expiryWindow(in)
		return intOut(1), s
	case SetTTL:
		*k = entry{present: true, val: in.Val, exp: expiryWindow(in)}
		return ok, s
	case Rename:
		if !k.present {
			return Output{Err: "ERR no such key"}, s
		}
		db[in.Key2], *k = *k, entry{}
		return ok, s
	case Copy:
		if !k.present || db[in.Key2].present {
			return intOut(0), s
		}
		db[in.Key2] = *k
		return intOut(1), s
	case Move:
		dst := &s[1-in.DB][in.Key]
		if !k.present || dst.present {
			return intOut(0), s
		}
		*dst, *k = *k, entry{}
		return intOut(1), s
	case SwapDB, EvalSwapDB:
		s[0], s[1] = s[1], s[0]
		return ok, s
	case FlushDB:
		*db = [nKeys]entry{}
		return ok, s
	case FlushAll:
		return ok, State{}
	case EvalSet:
		*k = entry{present: true, val: in.Val}
		del(&db[in.Key2])
		return intOut(1), s
	case Multi:
		out := Output{Items: []Output{}}
		for _, b := range in.Batch {
			b.DB, b.WallCall, b.WallReturn = in.DB, in.WallCall, in.WallReturn
			var o Output
			o, s = apply(s, b)
			out.Items = append(out.Items, o)
		}
		return out, s
	}
	panic("unknown operation kind " + strconv.Itoa(int(in.Kind)))
}

func del(k *entry) int64 {
	if !k.present {
		return 0
	}
	*k = entry{}
	return 1
}

func intOut(n int64) Output { return Output{Int: n, IsInt: true} }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func equalOutput(a, b Output) bool {
	if a.Unknown || b.Unknown {
		return true
	}
	if a.Str != b.Str || a.Nil != b.Nil || a.Int != b.Int || a.IsInt != b.IsInt || a.Err != b.Err || len(a.Items) != len(b.Items) || (a.Items == nil) != (b.Items == nil) {
		return false
	}
	for i := range a.Items {
		if !equalOutput(a.Items[i], b.Items[i]) {
			return false
		}
	}
	return true
}

// expiryWindow is where the expiry instant (wall clock) of a TTL of
// in.TTL ms that in set lies: Redis reads its clock between in's call and
// its return.
func expiryWindow(in Input) [2]int64 {
	ttl := in.TTL * 1e6
	first, last := wallSpan(in)
	return [2]int64{first + ttl - ttlSlack, min(last, math.MaxInt64-ttl-ttlSlack) + ttl + ttlSlack}
}

// wallSpan is the earliest and the latest wall-clock reading Redis can
// have taken for in: its call's and its return's, in either order (the
// wall clock may step back during an operation).
func wallSpan(in Input) (first, last int64) {
	return min(in.WallCall, in.WallReturn), max(in.WallCall, in.WallReturn)
}

// Describe renders an operation for porcupine's visualization.
func Describe(in Input, out Output) string {
	return fmt.Sprintf("db%d %s -> %s", in.DB, describeInput(in), out)
}

func describeInput(in Input) string {
	name := kindNames[in.Kind]
	switch in.Kind {
	case SwapDB, FlushDB, FlushAll:
		return name
	case EvalSwapDB:
		return "EVAL SWAPDB"
	case HGet, HDel:
		return name + " h " + fieldNames[in.Field]
	case HSet:
		return name + " h " + fieldNames[in.Field] + " " + in.Val
	case Set, Append, FCallSet:
		return name + " " + keyNames[in.Key] + " " + in.Val
	case MSet:
		return name + " a " + in.Val + " b " + in.Val2
	case PExpire:
		return name + " " + keyNames[in.Key] + " " + strconv.FormatInt(in.TTL, 10)
	case SetTTL:
		if in.TTL%1000 == 0 {
			return name + " " + keyNames[in.Key] + " " + in.Val + " EX " + strconv.FormatInt(in.TTL/1000, 10)
		}
		return name + " " + keyNames[in.Key] + " " + in.Val + " PX " + strconv.FormatInt(in.TTL, 10)
	case Rename, Copy, EvalSet:
		return name + " " + keyNames[in.Key] + " " + keyNames[in.Key2]
	case Multi:
		parts := make([]string, len(in.Batch))
		for i, b := range in.Batch {
			parts[i] = describeInput(b)
		}
		return "MULTI " + strings.Join(parts, "; ")
	}
	return name + " " + keyNames[in.Key]
}

// String renders an output the way redis-cli would.
func (o Output) String() string {
	switch {
	case o.Err != "":
		return "(error) " + o.Err
	case o.Nil:
		return "(nil)"
	case o.IsInt:
		return "(integer) " + strconv.FormatInt(o.Int, 10)
	case o.Items != nil:
		parts := make([]string, len(o.Items))
		for i, it := range o.Items {
			parts[i] = it.String()
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return strconv.Quote(o.Str)
}

// DescribeState renders a state for porcupine's visualization.
func DescribeState(s State) string {
	var b strings.Builder
	for d := range s {
		fmt.Fprintf(&b, "db%d{", d)
		for k, e := range s[d] {
			if !e.present {
				continue
			}
			if k == keyH {
				fmt.Fprintf(&b, " h:{f:%q g:%q}", e.fields[0], e.fields[1])
			} else {
				fmt.Fprintf(&b, " %s:%q", keyNames[k], e.val)
			}
			if e.exp[1] != 0 {
				fmt.Fprintf(&b, "(ttl)")
			}
		}
		b.WriteString(" } ")
	}
	return b.String()
}
