package command

import "strings"

// Effect is what a command can do to cached data.
type Effect uint8

// The effects, from harmless to "drop the whole cache".
const (
	// EffectNone: modifies no key data. Read-only commands, PING, INFO,
	// PUBLISH, CONFIG GET, CLIENT ..., SELECT, AUTH, MULTI, EXEC (the queued
	// commands carry their own effects), WATCH, SCRIPT LOAD, FUNCTION LOAD, ...
	EffectNone Effect = iota
	// EffectKeys: modifies only keys that WrittenKeys names from the
	// arguments.
	EffectKeys
	// EffectUnknown: may modify keys it does not name: EVAL, EVALSHA, FCALL
	// (not the *_RO variants), MIGRATE, MODULE LOAD, commands nobody has
	// reviewed. Resolve returning nil (unknown command) means the same.
	EffectUnknown
	// EffectFlush: replaces data wholesale without per-key keyspace
	// notifications: FLUSHALL, FLUSHDB, SWAPDB, REPLICAOF, SLAVEOF, DEBUG, ...
	EffectFlush
)

// String returns "none", "keys", "unknown" or "flush".
func (e Effect) String() string {
	switch e {
	case EffectNone:
		return "none"
	case EffectKeys:
		return "keys"
	case EffectUnknown:
		return "unknown"
	case EffectFlush:
		return "flush"
	}
	return "Effect(?)"
}

// Spec describes one command or subcommand. Specs live in a static table:
// Resolve returns pointers into it, valid for the life of the program and
// shared by all goroutines; do not modify them.
type Spec struct {
	// Name is lower case; a subcommand is "parent|sub", e.g. "client|reply",
	// "config|set", "xgroup|create".
	Name string
	// Arity is as COMMAND reports it: N means exactly N arguments including
	// the command (and subcommand) name; -N means at least N.
	Arity int
	// Flags are the COMMAND flags.
	Flags Flags
	// First, Last and Step are the legacy key positions from COMMAND: keys
	// are args[First], args[First+Step], ... up to args[Last]; a negative
	// Last counts from the end (-1 is the last argument); First 0 means no
	// keys. For a subcommand they count from args[0] = the parent name.
	First, Last, Step int
	// Effect is what the command can do to cached data.
	Effect Effect
	// Conn is what the command does to the connection that sends it
	// (conn.go); ConnSub is the family of a ConnSubscribe command, ConnOn
	// tells READONLY (true) from READWRITE, ConnVerify marks CONFIG SET,
	// after which notify-keyspace-events must be checked again.
	Conn       ConnEffect
	ConnSub    SubKind
	ConnOn     bool
	ConnVerify bool

	keys      keysKind  // how WrittenKeys finds the keys when Effect is EffectKeys
	container bool      // has subcommands; Resolve looks at args[1]
	keySpecs  []keySpec // kindKeySpecs: the written key specs of a learned command
	idx       uint16    // a built-in spec's index in specs (Learned's overrides)
}

// TableVersion is the redis_version of the server whose COMMAND reply the
// built-in table was generated from ("7.0.15"); newer commands are learned
// from the live server (Learned).
const TableVersion = tableRedisVersion

// maxNameLen bounds the "parent|sub" name Resolve builds; the longest 7.0
// name is 29 bytes ("cluster|count-failure-reports").
const maxNameLen = 64

// index maps every Name in specs to its entry. Built by init, read-only
// afterwards.
var index map[string]*Spec

// init builds index and derives each spec's Effect and key finder from its
// flags and the decisions in effects.go.
func init() {
	index = make(map[string]*Spec, len(specs))
	for i := range specs {
		index[specs[i].Name] = &specs[i]
		specs[i].idx = uint16(i)
	}
	for i := range specs {
		s := &specs[i]
		if parent, _, ok := strings.Cut(s.Name, "|"); ok {
			if p := index[parent]; p != nil {
				p.container = true
			}
		}
		s.Effect, s.keys = decide(s.Name, s.Flags, s.First)
		setConn(s)
	}
}

// Resolve returns the spec for a command given its arguments: args[0] is
// the command name in any case; for a container command (CLIENT, CONFIG,
// OBJECT, XGROUP, XINFO, FUNCTION, SCRIPT, ACL, MEMORY, CLUSTER, COMMAND,
// LATENCY, MODULE, PUBSUB, SLOWLOG) args[1] names the subcommand.
//
// It returns nil for an unknown command, a nil or over-long name, or an
// unknown or nil subcommand; callers treat nil as EffectUnknown. Like Redis,
// it returns the container itself when there is no subcommand argument
// (len(args) == 1): its ArityOK then fails except for a bare COMMAND, which
// is valid. It does not allocate and is safe for concurrent use.
func Resolve(args [][]byte) *Spec {
	if len(args) == 0 {
		return nil
	}
	var buf [maxNameLen]byte
	n := lowerName(buf[:], args[0])
	if n <= 0 {
		return nil
	}
	s := index[string(buf[:n])]
	if s == nil || !s.container || len(args) == 1 {
		return s
	}
	if n+1 >= len(buf) {
		return nil
	}
	buf[n] = '|'
	m := lowerName(buf[n+1:], args[1])
	if m <= 0 {
		return nil
	}
	return index[string(buf[:n+1+m])]
}

// lowerName writes the ASCII lower case of name into dst and returns its
// length, or -1 when it does not fit or contains '|' (which would let
// "client|id" pass as a top-level command).
func lowerName(dst, name []byte) int {
	if len(name) > len(dst) {
		return -1
	}
	for i, c := range name {
		switch {
		case c == '|':
			return -1
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		dst[i] = c
	}
	return len(name)
}

// ArityOK reports whether n arguments (including the command and subcommand
// names) satisfy Arity, exactly as Redis checks it: n == Arity for Arity > 0,
// n >= -Arity for Arity < 0. It is false for a nil spec.
func (s *Spec) ArityOK(n int) bool {
	if s == nil {
		return false
	}
	a := s.Arity
	return !((a > 0 && a != n) || n < -a)
}
