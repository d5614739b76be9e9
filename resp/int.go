package resp

import "math"

// ParseInt parses b as Redis's util.c string2ll does, the rule Redis
// applies to request lengths, integer arguments (SELECT's db, a key
// count) and the integers it sends: an optional '-', then "0" or digits
// without a leading zero; no '+', no spaces, at most 20 bytes, no
// overflow of int64. nil, empty, over-long and out-of-range inputs report
// false. It is the one integer parser for bytes from the wire: requests,
// replies, notifications.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) >= 21 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		if v > math.MaxUint64-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > uint64(math.MaxInt64)+1 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}
