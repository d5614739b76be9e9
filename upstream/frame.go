package upstream

import (
	"errors"

	"github.com/cicada-proxy/cicada/resp"
)

// errFrame is returned by scanFrame for bytes that are not RESP2.
var errFrame = errors.New("upstream: not a RESP2 reply")

// elem is one top-level element of a scanned array.
type elem struct {
	typ  byte   // '$', '*', ':', '+' or '-'
	null bool   // $-1 or *-1
	val  []byte // a bulk string's payload or a line's text; aliases the input
}

// frame is a scanned reply: a line, a bulk string, or an array whose first
// len(elems) elements (at most 4) are kept.
type frame struct {
	elems [4]elem
	n     int // elements kept
	array bool
}

// scanFrame reads one RESP2 reply from the start of b with resp.Scanner
// (resp.ReplyFramer is resumable but keeps only a head of each element; a
// notification's channel holds a key of any length, and the event loops
// scan a peeked copy from its start, so a whole-buffer scan fits better).
// It returns the reply's length in bytes, or 0 when b holds only part of
// it; the elements kept in f alias b. err is errFrame for bytes that are
// not RESP2.
func scanFrame(b []byte, f *frame) (int, error) {
	f.n, f.array = 0, false
	sc := resp.NewScanner(b)
	sc.OnlyRESP2()
	top, st := sc.Next()
	if st == resp.ScanOK && top.Type == resp.TypeArray && !top.Null {
		f.array = true
		for i := 0; i < top.N && st == resp.ScanOK; i++ {
			var t resp.Token
			if t, st = sc.Next(); st != resp.ScanOK {
				break
			}
			if f.n < len(f.elems) {
				f.elems[f.n] = elem{typ: t.Type, null: t.Null, val: t.Data}
				f.n++
			}
			st = sc.SkipRest(t)
		}
	} else if st == resp.ScanOK {
		f.array = top.Type == resp.TypeArray
	}
	switch st {
	case resp.ScanIncomplete:
		return 0, nil
	case resp.ScanInvalid:
		return 0, errFrame
	}
	return sc.Offset(), nil
}

// is reports whether element i is the bulk string s.
func (f *frame) is(i int, s string) bool {
	return i < f.n && f.elems[i].typ == '$' && string(f.elems[i].val) == s
}

// notification classifies a scanned reply on the notification connection:
// a keyspace notification (key in db), a flush (a tracking invalidation
// with a null payload), or neither (confirmations, pongs, tracking messages
// for keys under trackingPrefix, replies to the connection's setup).
func (f *frame) notification() (db int, key []byte, isKey, isFlush bool) {
	switch {
	case f.array && f.n == 4 && f.is(0, "pmessage"):
		db, key, isKey = parseChannel(f.elems[2].val)
		return db, key, isKey, false
	case f.array && f.n == 3 && f.is(0, "message") && f.is(1, TrackingChannel):
		return 0, nil, false, f.elems[2].null
	}
	return 0, nil, false, false
}
