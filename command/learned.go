package command

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cicada-proxy/cicada/command/internal/cmdinfo"
	"github.com/cicada-proxy/cicada/resp"
)

// Learned completes the built-in table with what a live server's COMMAND
// reply lists and the table does not know: commands added since Redis 7.0
// (WAITAOF, HEXPIRE, HSETEX, CLIENT SETINFO, ...), Valkey's own, and module
// commands (Redis 8's vector sets: VADD, ...). The built-in entries always
// win; a learned entry never changes what a reviewed command does.
//
// A learned command's Effect comes from what the server says of it:
//
//	readonly flag, no write flag           EffectNone (never evicts)
//	key specifications that name every     EffectKeys: the keys of the specs
//	  key it may write                       that are not read-only (RO)
//	no keys, no write flag                 EffectNone (connection or server
//	                                         state: CLIENT SETINFO, WAITAOF)
//	write flag and no keys at all          EffectFlush (data wholesale:
//	                                         Valkey 9's CLUSTER FLUSHSLOT)
//	a spec whose keys cannot be found      EffectUnknown, as an unknown
//	  ("unknown" search, "incomplete"),      command (a fence: the write's
//	  movable keys without specs, neither    keyspace notifications evict)
//	  flag with may_replicate (scripts)
//
// The readonly flag wins over key specifications: a module command declared
// with legacy key positions (Redis 8's VSIM, VCARD, ...) gets a generic
// "RW access update" key spec whatever it does.
//
// A Learned is built once per upstream connection of the control plane
// (upstream.Subscriber) and read-only afterwards: safe for concurrent use.
// The nil *Learned is the built-in table alone.
type Learned struct {
	index map[string]*Spec // learned names only, lower case, "parent|sub"
	// overrides[i] replaces built-in specs[i] on this server (nil: none):
	// a different arity (ZRANK's WITHSCORE, from 7.2), or a write flag a
	// command reviewed as harmless has gained.
	overrides []*Spec
	names     []string // sorted keys of index
	// fieldTTL: the server has hash-field expiration (HPTTL, Redis 7.4+,
	// Valkey 9+).
	fieldTTL bool
	// moduleWrites: a module command may write keys (flag "module" and
	// not readonly).
	moduleWrites bool
	// server is "redis" or "valkey"; version its major, minor and patch
	// (from INFO server; zeros when not given).
	server  string
	version [3]int
}

// Learn builds a Learned from a decoded RESP2 COMMAND (or COMMAND INFO)
// reply: an array of command entries whose strings are Go strings and
// integers int64 (go-redis's Do with Protocol 2, or cmdinfo's reader), and
// the text of INFO server (its redis_version and valkey_version lines; ""
// when unknown). It returns an error wrapping the shape found when the
// reply is not one.
func Learn(reply any, info string) (*Learned, error) {
	cmds, err := cmdinfo.ParseCommands(reply)
	if err != nil {
		return nil, fmt.Errorf("command: learn from COMMAND: %w", err)
	}
	l := &Learned{index: map[string]*Spec{}}
	l.server, l.version = parseServer(info)
	for _, c := range cmdinfo.Flatten(cmds) {
		if c.Name == "hpttl" {
			l.fieldTTL = true
		}
		if b := index[c.Name]; b != nil {
			l.override(b, c)
			continue
		}
		if strings.Count(c.Name, "|") > 1 {
			continue
		}
		s := learnedSpec(c)
		if s.Effect != EffectNone && slices.Contains(c.Flags, "module") {
			l.moduleWrites = true
		}
		l.index[s.Name] = s
		l.names = append(l.names, s.Name)
	}
	for _, n := range l.names {
		if parent, _, ok := strings.Cut(n, "|"); ok {
			if p := l.index[parent]; p != nil {
				p.container = true
			}
		}
	}
	sort.Strings(l.names)
	return l, nil
}

// override records what this server says of built-in b that changes how
// Cicada must treat it: its arity (a request the built-in arity refuses is
// taken as one Redis rejects unexecuted, which evicts nothing), and a write
// flag on a command reviewed as writing nothing (its effect is then
// derived as for a learned command). The built-in effect stands otherwise.
func (l *Learned) override(b *Spec, c cmdinfo.Command) {
	write := slices.Contains(c.Flags, "write")
	upgrade := write && b.Effect == EffectNone && !b.Flags.Has(FlagWrite)
	if c.Arity == b.Arity && !upgrade {
		return
	}
	o := *b
	o.Arity = c.Arity
	if upgrade {
		d := learnedSpec(c)
		o.Effect, o.keys, o.keySpecs = d.Effect, d.keys, d.keySpecs
	}
	if l.overrides == nil {
		l.overrides = make([]*Spec, len(specs))
	}
	l.overrides[b.idx] = &o
}

// Overridden returns the names of the built-in commands this server
// changes (override), in table order.
func (l *Learned) Overridden() []string {
	var out []string
	if l != nil {
		for _, o := range l.overrides {
			if o != nil {
				out = append(out, o.Name)
			}
		}
	}
	return out
}

// learnedSpec derives the spec of a command the built-in table lacks.
func learnedSpec(c cmdinfo.Command) *Spec {
	s := &Spec{Name: c.Name, Arity: c.Arity, First: c.First, Last: c.Last, Step: c.Step}
	setConn(s)
	mayReplicate := false
	for _, f := range c.Flags {
		if bit, ok := flagByName(f); ok {
			s.Flags |= bit
		}
		mayReplicate = mayReplicate || f == "may_replicate"
	}
	write, readonly := s.Flags.Has(FlagWrite), s.Flags.Has(FlagReadonly)
	s.Effect, s.keys = EffectUnknown, kindLegacy
	switch {
	case readonly && !write:
		s.Effect = EffectNone
	case !write && mayReplicate:
		// Replicated without a write flag: a script, whose writes are not
		// declared.
	case len(c.KeySpecs) > 0:
		var written []keySpec
		for _, ks := range c.KeySpecs {
			k, ok := compileKeySpec(ks)
			if !ok {
				return s // a key it cannot find: EffectUnknown
			}
			if !k.readOnly {
				written = append(written, k)
			}
		}
		switch {
		case len(written) > 0:
			s.Effect, s.keys, s.keySpecs = EffectKeys, kindKeySpecs, written
		case !write:
			s.Effect = EffectNone // reads the keys it names
		}
	case c.First > 0:
		// Keys by legacy positions alone (a module of before 7.0).
		if !s.Flags.Has(FlagMovableKeys) {
			s.Effect = EffectKeys
		}
	case !write && !s.Flags.Has(FlagMovableKeys):
		s.Effect = EffectNone
	case write && !s.Flags.Has(FlagMovableKeys):
		// Writes and names no key: data wholesale, as FLUSHDB does
		// (Valkey 9's CLUSTER FLUSHSLOT).
		s.Effect = EffectFlush
	}
	return s
}

// keySpec is a key specification compiled for WrittenKeys (kindKeySpecs):
// see cmdinfo.KeySpec for the fields.
type keySpec struct {
	keyword            string // "" for a begin search by index
	index, startFrom   int
	keynum             bool // find by key count, else by range
	lastKey, step, lim int
	keyNumIdx, first   int
	readOnly           bool // flags RO and none of RW, OW, RM
}

// compileKeySpec returns ks in usable form, or false when its keys cannot
// be found from the arguments (an unknown search, INCOMPLETE, a step < 1).
func compileKeySpec(ks cmdinfo.KeySpec) (keySpec, bool) {
	var k keySpec
	ro, rw := false, false
	for _, f := range ks.Flags {
		switch strings.ToUpper(f) {
		case "INCOMPLETE":
			return k, false
		case "RO":
			ro = true
		case "RW", "OW", "RM":
			rw = true
		}
	}
	k.readOnly = ro && !rw
	switch ks.BeginSearch {
	case "index":
		if ks.Index < 1 {
			return k, false
		}
		k.index = ks.Index
	case "keyword":
		if ks.Keyword == "" || ks.StartFrom == 0 {
			return k, false
		}
		k.keyword, k.startFrom = strings.ToLower(ks.Keyword), ks.StartFrom
	default:
		return k, false
	}
	switch ks.FindKeys {
	case "range":
		k.lastKey, k.step, k.lim = ks.LastKey, ks.KeyStep, ks.Limit
	case "keynum":
		k.keynum, k.keyNumIdx, k.first, k.step = true, ks.KeyNumIdx, ks.FirstKey, ks.KeyStep
		if k.keyNumIdx < 0 || k.first < 1 {
			return k, false
		}
	default:
		return k, false
	}
	if k.step < 1 || k.lim < 0 {
		return k, false
	}
	return k, true
}

// specKeys appends the keys of every written key spec of s, found from the
// arguments as Redis's getKeysUsingKeySpecs finds them (db.c): the begin
// search gives the first position, then a range or a key count gives the
// rest. A keyword that is absent names no keys; positions past the end are
// clipped (Redis rejects such a command's arity or syntax itself). ok is
// false when a needed argument is nil (not captured) or a key count is not
// a non-negative integer.
func specKeys(s *Spec, args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	argc := len(args)
	for _, k := range s.keySpecs {
		first := k.index
		if k.keyword != "" {
			first = -1
			// As Redis searches: the end position itself is not looked at.
			start, end, dir := k.startFrom, argc-1, 1
			if start < 0 {
				start, end, dir = argc+start, 1, -1
			}
			for i := start; i != end && i >= 1 && i < argc; i += dir {
				if args[i] == nil {
					return dst, false
				}
				if EqualFold(args[i], k.keyword) {
					first = i + 1
					break
				}
			}
			if first < 0 {
				continue
			}
		}
		var last int
		if k.keynum {
			at := first + k.keyNumIdx
			if at >= argc || args[at] == nil {
				return dst, false
			}
			n, ok := resp.ParseInt(args[at])
			if !ok || n < 0 || n > int64(argc) {
				return dst, false
			}
			first += k.first
			last = first + (int(n)-1)*k.step
		} else {
			switch {
			case k.lastKey >= 0:
				last = first + k.lastKey
			case k.lim == 0:
				last = argc + k.lastKey
			default:
				last = first + (argc-first)/k.lim + k.lastKey
			}
		}
		for i := first; i <= last && i < argc; i += k.step {
			if args[i] == nil {
				return dst, false
			}
			dst = append(dst, KeyRef{Arg: i, DB: CurrentDB})
		}
	}
	return dst, true
}

// Resolve is Resolve with the learned commands: the built-in entry when
// there is one (as this server changes it: override), else the learned entry (a learned subcommand of a built-in
// container too, e.g. "client|setinfo"), else nil. On the nil *Learned it
// is Resolve. It allocates only when the built-in table does not know the
// command.
func (l *Learned) Resolve(args [][]byte) *Spec {
	s := Resolve(args)
	if s != nil {
		if l != nil && l.overrides != nil {
			if o := l.overrides[s.idx]; o != nil {
				return o
			}
		}
		return s
	}
	if l == nil || len(l.index) == 0 || len(args) == 0 {
		return s
	}
	var buf [maxNameLen]byte
	n := lowerName(buf[:], args[0])
	if n <= 0 {
		return nil
	}
	name := string(buf[:n])
	p := index[name]
	if p == nil {
		p = l.index[name]
	}
	if p == nil || !p.container || len(args) == 1 {
		return p
	}
	m := lowerName(buf[:], args[1])
	if m <= 0 {
		return nil
	}
	return l.index[name+"|"+string(buf[:m])]
}

// Added returns the learned specs in name order (for logs and tests).
func (l *Learned) Added() []*Spec {
	if l == nil {
		return nil
	}
	out := make([]*Spec, len(l.names))
	for i, n := range l.names {
		out[i] = l.index[n]
	}
	return out
}

// FieldTTL reports whether the server has hash-field expiration (its
// COMMAND lists HPTTL: Redis 7.4 and later, Valkey 9 and later). False on
// the nil *Learned.
func (l *Learned) FieldTTL() bool { return l != nil && l.fieldTTL }

// ModuleWrites reports whether a module command on the server may write
// keys (Redis 8's VADD, VREM, VSETATTR). A module need not send keyspace
// notifications: Redis 8.0's vector sets send none, so a key they create
// on a direct connection is heard of only through the "new key" class
// (n). False on the nil *Learned.
func (l *Learned) ModuleWrites() bool { return l != nil && l.moduleWrites }

// parseServer reads the server name and version from INFO server text:
// valkey_version wins over redis_version (Valkey reports both, the latter
// as 7.2.4 for compatibility).
func parseServer(info string) (name string, v [3]int) {
	for _, line := range strings.Split(info, "\n") {
		k, val, ok := strings.Cut(strings.TrimSuffix(line, "\r"), ":")
		if !ok || (k != "redis_version" && k != "valkey_version") || name == "valkey" {
			continue
		}
		name = strings.TrimSuffix(k, "_version")
		v = [3]int{}
		for i, part := range strings.SplitN(val, ".", 3) {
			n, err := strconv.Atoi(part)
			if err != nil {
				break
			}
			v[i] = n
		}
	}
	return name, v
}

// Server returns the server's name ("redis", "valkey"; "" when unknown)
// and version as "8.0.2".
func (l *Learned) Server() (name, version string) {
	if l == nil || l.server == "" {
		return "", ""
	}
	return l.server, fmt.Sprintf("%d.%d.%d", l.version[0], l.version[1], l.version[2])
}

// AuthErrorsDropped reports whether the server drops the error of a
// failed AUTH (or HELLO ... AUTH) when the client has replies pending in
// its output buffer: Redis 7.2.0 and later, and Valkey (forked from 7.2.4),
// per redis/redis#15640 (reproduced here on Redis 8.0.2 and Valkey 8.1.1;
// Redis 7.0.15 delivers it). Inside MULTI the EXEC reply then announces one
// element more than it sends. False on the nil *Learned and when the
// version is unknown.
func (l *Learned) AuthErrorsDropped() bool {
	if l == nil {
		return false
	}
	switch l.server {
	case "valkey":
		return true
	case "redis":
		return l.version[0] > 7 || (l.version[0] == 7 && l.version[1] >= 2)
	}
	return false
}

// NulVisibleInHeaders reports whether the server finds a multibulk header
// line's end past a NUL byte: Valkey 8 and later (memchr), where Redis
// stops at it (strchr) and waits for more. False on the nil *Learned.
func (l *Learned) NulVisibleInHeaders() bool {
	return l != nil && l.server == "valkey" && l.version[0] >= 8
}
