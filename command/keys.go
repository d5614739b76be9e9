package command

import "github.com/cicada-proxy/cicada/resp"

// CurrentDB is the KeyRef.DB of a key in the connection's current database.
const CurrentDB = -1

// KeyRef names one key argument a command may write.
type KeyRef struct {
	// Arg indexes the args passed to WrittenKeys: args[Arg] is the key name.
	Arg int
	// DB is CurrentDB (-1) for the connection's current database, or an
	// explicit database number >= 0 (MOVE's target, COPY ... DB n).
	DB int
}

// keysKind selects how WrittenKeys finds the keys of an EffectKeys command.
type keysKind uint8

const (
	kindLegacy       keysKind = iota // First..Last by Step
	kindMove                         // MOVE key db
	kindCopy                         // COPY src dst [DB n] [REPLACE]
	kindSort                         // SORT key ... [STORE dst]
	kindGeoRadius                    // GEORADIUS / GEORADIUSBYMEMBER ... [STORE k] [STOREDIST k]
	kindStoreNumkeys                 // ZUNIONSTORE dst numkeys key...
	kindNumkeysAt1                   // LMPOP / ZMPOP numkeys key...
	kindNumkeysAt2                   // BLMPOP / BZMPOP timeout numkeys key...
	kindXReadGroup                   // XREADGROUP ... STREAMS key... id...
	kindKeySpecs                     // a learned command: its key specifications (learned.go)
)

// WrittenKeys appends to dst every key the command may modify (create,
// overwrite, delete, rename, move, pop, expire, ...) as indexes into args,
// and reports whether it could. args[0] is the command name (args[1] the
// subcommand for a subcommand spec). An empty key is a non-nil empty slice;
// nil marks an argument the caller did not capture (too big).
//
// It over-approximates: keys a command only reads may be included (every key
// COMMAND GETKEYS returns for a write command is), but no written key is
// missed. ok is false, and dst is returned with its original length, when
// the keys cannot be determined: the spec is nil or its Effect is not
// EffectKeys; an argument needed to find the keys is nil or absent; or a
// numkeys count, database number or option list is malformed or out of range
// (Redis rejects such commands, but the caller cannot count on that). Legacy
// key positions beyond len(args) are clipped, as with a wrong arity.
//
// It never panics and does not allocate when dst has enough capacity.
func (s *Spec) WrittenKeys(args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	if s == nil || s.Effect != EffectKeys {
		return dst, false
	}
	n0 := len(dst)
	var ok bool
	switch s.keys {
	case kindLegacy:
		dst, ok = legacyKeys(s, args, dst)
	case kindMove:
		dst, ok = moveKeys(args, dst)
	case kindCopy:
		dst, ok = copyKeys(args, dst)
	case kindSort:
		dst, ok = sortKeys(args, dst)
	case kindGeoRadius:
		dst, ok = geoRadiusKeys(s, args, dst)
	case kindStoreNumkeys:
		if dst, ok = appendKey(dst, args, 1, CurrentDB); ok {
			dst, ok = numkeysKeys(args, 2, dst)
		}
	case kindNumkeysAt1:
		dst, ok = numkeysKeys(args, 1, dst)
	case kindNumkeysAt2:
		dst, ok = numkeysKeys(args, 2, dst)
	case kindXReadGroup:
		dst, ok = xreadgroupKeys(args, dst)
	case kindKeySpecs:
		dst, ok = specKeys(s, args, dst)
	}
	if !ok {
		return dst[:n0], false
	}
	return dst, true
}

// appendKey appends {i, db} when args[i] exists and is not nil.
func appendKey(dst []KeyRef, args [][]byte, i, db int) ([]KeyRef, bool) {
	if i < 0 || i >= len(args) || args[i] == nil {
		return dst, false
	}
	return append(dst, KeyRef{Arg: i, DB: db}), true
}

// legacyKeys walks First..Last by Step, clipped to len(args).
func legacyKeys(s *Spec, args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	if s.First <= 0 {
		return dst, true
	}
	if s.Step <= 0 {
		return dst, false
	}
	last := s.Last
	if last < 0 {
		last += len(args)
	}
	if last >= len(args) {
		last = len(args) - 1
	}
	for i := s.First; i <= last; i += s.Step {
		if args[i] == nil {
			return dst, false
		}
		dst = append(dst, KeyRef{Arg: i, DB: CurrentDB})
	}
	return dst, true
}

// moveKeys handles MOVE key db: the key leaves the current database and
// appears in db.
func moveKeys(args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	if len(args) < 3 {
		return dst, false
	}
	db, ok := parseDB(args[2])
	if !ok {
		return dst, false
	}
	if dst, ok = appendKey(dst, args, 1, CurrentDB); !ok {
		return dst, false
	}
	return append(dst, KeyRef{Arg: 1, DB: db}), true
}

// copyKeys handles COPY source destination [DB n] [REPLACE], parsed as
// copyCommand does (the last DB wins); source is included because GETKEYS
// names it.
func copyKeys(args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	if len(args) < 3 {
		return dst, false
	}
	db := CurrentDB
	for j := 3; j < len(args); j++ {
		switch {
		case args[j] == nil:
			return dst, false
		case EqualFold(args[j], "replace"):
		case EqualFold(args[j], "db") && j+1 < len(args):
			n, ok := parseDB(args[j+1])
			if !ok {
				return dst, false
			}
			db = n
			j++
		default:
			return dst, false
		}
	}
	var ok bool
	if dst, ok = appendKey(dst, args, 1, CurrentDB); !ok {
		return dst, false
	}
	return appendKey(dst, args, 2, db)
}

// sortKeys handles SORT key [BY p] [LIMIT o c] [GET p ...] [ASC|DESC]
// [ALPHA] [STORE dst], parsed as sortCommand does. The sorted key is
// included (GETKEYS names it); every STORE target is, though only the last
// one is written.
func sortKeys(args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	var ok bool
	if dst, ok = appendKey(dst, args, 1, CurrentDB); !ok {
		return dst, false
	}
	for j := 2; j < len(args); j++ {
		left := len(args) - j - 1
		a := args[j]
		switch {
		case a == nil:
			return dst, false
		case EqualFold(a, "asc"), EqualFold(a, "desc"), EqualFold(a, "alpha"):
		case EqualFold(a, "limit") && left >= 2:
			j += 2
		case EqualFold(a, "store") && left >= 1:
			j++
			if dst, ok = appendKey(dst, args, j, CurrentDB); !ok {
				return dst, false
			}
		case (EqualFold(a, "by") || EqualFold(a, "get")) && left >= 1:
			j++
		default:
			return dst, false
		}
	}
	return dst, true
}

// geoRadiusKeys handles GEORADIUS key lon lat radius unit [options] and
// GEORADIUSBYMEMBER key member radius unit [options], parsed as
// georadiusGeneric does: the source key and every STORE / STOREDIST target.
func geoRadiusKeys(s *Spec, args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	base := 6 // GEORADIUS: options follow key lon lat radius unit
	if s.Name == "georadiusbymember" {
		base = 5 // key member radius unit
	}
	var ok bool
	if dst, ok = appendKey(dst, args, 1, CurrentDB); !ok {
		return dst, false
	}
	for i := base; i < len(args); i++ {
		more := i+1 < len(args)
		a := args[i]
		switch {
		case a == nil:
			return dst, false
		case EqualFold(a, "withdist"), EqualFold(a, "withhash"), EqualFold(a, "withcoord"),
			EqualFold(a, "any"), EqualFold(a, "asc"), EqualFold(a, "desc"):
		case EqualFold(a, "count") && more:
			i++
		case (EqualFold(a, "store") || EqualFold(a, "storedist")) && more:
			i++
			if dst, ok = appendKey(dst, args, i, CurrentDB); !ok {
				return dst, false
			}
		default:
			return dst, false
		}
	}
	return dst, true
}

// numkeysKeys appends the numkeys keys that follow args[numIdx]. numkeys
// must be at least 1 and the keys must all be present.
func numkeysKeys(args [][]byte, numIdx int, dst []KeyRef) ([]KeyRef, bool) {
	if numIdx >= len(args) {
		return dst, false
	}
	n, ok := resp.ParseInt(args[numIdx])
	if !ok || n < 1 || n > int64(len(args)-numIdx-1) {
		return dst, false
	}
	for i := numIdx + 1; i <= numIdx+int(n); i++ {
		if dst, ok = appendKey(dst, args, i, CurrentDB); !ok {
			return dst, false
		}
	}
	return dst, true
}

// xreadgroupKeys handles XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK]
// STREAMS key... id..., parsed as xreadCommand does: the first half of the
// arguments after STREAMS.
func xreadgroupKeys(args [][]byte, dst []KeyRef) ([]KeyRef, bool) {
	for i := 1; i < len(args); i++ {
		more := len(args) - i - 1
		a := args[i]
		switch {
		case a == nil:
			return dst, false
		case (EqualFold(a, "block") || EqualFold(a, "count")) && more >= 1:
			i++
		case EqualFold(a, "group") && more >= 2:
			i += 2
		case EqualFold(a, "noack"):
		case EqualFold(a, "streams") && more >= 1:
			if more%2 != 0 {
				return dst, false
			}
			var ok bool
			for k := i + 1; k <= i+more/2; k++ {
				if dst, ok = appendKey(dst, args, k, CurrentDB); !ok {
					return dst, false
				}
			}
			return dst, true
		default:
			return dst, false
		}
	}
	return dst, false // no STREAMS: Redis replies with a syntax error
}

// EqualFold reports whether b equals lower (an ASCII lower-case keyword)
// ignoring ASCII case, as Redis's strcasecmp does. No allocation.
func EqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// parseDB parses a database number: a non-negative integer that fits in an
// int32 (Redis checks it against its configured database count later).
func parseDB(b []byte) (int, bool) {
	n, ok := resp.ParseInt(b)
	if !ok || n < 0 || n > 1<<31-1 {
		return 0, false
	}
	return int(n), true
}
