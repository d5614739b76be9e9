package main

// Decoding: the merged layers' values (strings from the environment and
// flags, YAML scalars, typed defaults) into a Config, one setting at a
// time (decoder.set), each error one line labelled with the layer its
// value came from. Numbers are checked against their setting's bound here
// and again by Validate, in the same words (setting.outside).

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"

	"github.com/cicada-proxy/cicada/cluster"
)

// decode converts the merged values into a Config. Values come as strings
// (environment), YAML scalars or typed flag values; each conversion error
// is labelled with the layer its value came from (origin, see label).
func decode(k *koanf.Koanf, origin map[string]string) (*Config, error) {
	d := decoder{k: k, origin: origin}
	c := &Config{origin: origin}
	for _, s := range settings {
		d.set(c, s.key)
	}
	return c, d.err
}

// decoder reads typed values from k, keeping the first error.
type decoder struct {
	k      *koanf.Koanf
	origin map[string]string // labels of the keys' layers; nil: the keys
	err    error
}

// set decodes setting key into c: the one conversion of each setting,
// used by Load for every key and by POST /config for the body's. Numbers
// are within their field's type: every numeric setting's bound is.
func (d *decoder) set(c *Config, key string) {
	st := lookup(key)
	if st == nil {
		panic("no setting " + key)
	}
	if st.decode != nil {
		switch f := st.field(c).(type) {
		case *string:
			*f, _ = st.decode(d, key).(string)
		case *[]string:
			*f, _ = st.decode(d, key).([]string)
		default:
			panic(fmt.Sprintf("setting %s: decode for a field of type %T", key, f))
		}
		return
	}
	switch f := st.field(c).(type) {
	case *string:
		*f = d.str(key)
	case *bool:
		*f = d.boolean(key)
	case *int:
		*f = int(d.number(key))
	case *uint32:
		*f = uint32(d.number(key))
	case *int64:
		*f = d.number(key)
	case *time.Duration:
		*f = time.Duration(d.number(key))
	default:
		panic(fmt.Sprintf("setting %s: field of type %T", key, f))
	}
}

// lower is str in lower case (log-level, log-format).
func (d *decoder) lower(key string) any { return strings.ToLower(d.str(key)) }

func (d *decoder) fail(key, format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%s: "+format, append([]any{labelOf(d.origin, key)}, args...)...)
	}
}

// str never echoes the value: it may be the password.
func (d *decoder) str(key string) string {
	switch v := d.k.Get(key).(type) {
	case string:
		return v
	default:
		d.fail(key, "must be a string (quote it in YAML), got %s", kindOf(v))
		return ""
	}
}

func (d *decoder) boolean(key string) bool {
	switch v := d.k.Get(key).(type) {
	case bool:
		return v
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			d.fail(key, "invalid boolean %q", v)
		}
		return b
	default:
		d.fail(key, "must be true or false, got %s", kindOf(v))
		return false
	}
}

// list accepts a list of strings, or one string of items split by split
// (from the environment or the flag).
func (d *decoder) list(key string, split func(string) []string) []string {
	switch v := d.k.Get(key).(type) {
	case []string:
		return v
	case []any:
		items := make([]string, 0, len(v))
		for _, x := range v {
			s, ok := x.(string)
			if !ok {
				d.fail(key, "must be a list of strings, got %s in it", kindOf(x))
				return nil
			}
			items = append(items, s)
		}
		return items
	case string:
		return split(v)
	default:
		d.fail(key, "must be a list of strings, got %s", kindOf(v))
		return nil
	}
}

// addrMap accepts what list does, comma-separated; blanks are dropped, and
// the entries must parse with cluster.ParseAddrMap.
func (d *decoder) addrMap(key string) any {
	out := []string{}
	for _, e := range d.list(key, func(s string) []string { return strings.Split(s, ",") }) {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	if _, err := cluster.ParseAddrMap(out); err != nil {
		d.fail(key, "%v", err)
		return nil
	}
	return out
}

// patterns accepts what list does, comma-separated as splitPatterns
// splits; blanks are dropped. Each must pass checkPattern.
func (d *decoder) patterns(key string) any {
	items := d.list(key, splitPatterns)
	out := []string{}
	for _, p := range items {
		if p = trimPattern(p); p == "" {
			continue
		}
		if err := checkPattern(p); err != nil {
			hint := ""
			if escaped(p, len(p)) {
				// A lone backslash at the end: perhaps an escaped space
				// that YAML or ARGS dropped.
				hint = ` (a pattern that ends in a space is written "x\ ", in a YAML file in single quotes)`
			}
			d.fail(key, "bad pattern %q: %v%s", p, err, hint)
			return nil
		}
		out = append(out, p)
	}
	return out
}

// number decodes a numeric setting (an integer, a size or a duration,
// as its default is) and checks its bound; 0 after an error. Values
// beyond int64 get the bound's message too, with the text given.
func (d *decoder) number(key string) int64 {
	s := lookup(key)
	var n int64
	var ok bool
	switch s.def.(type) {
	case time.Duration:
		n, ok = d.duration(key)
	case byteSize:
		n, ok = d.whole(s, "size", parseSize)
	default:
		n, ok = d.whole(s, "integer", func(v string) (int64, error) { return strconv.ParseInt(strings.TrimSpace(v), 10, 64) })
	}
	if !ok {
		return 0
	}
	// 0 may mean the cache off (offZero): Validate, seeing every
	// setting, decides.
	if msg := s.outside(n, true); msg != "" {
		d.fail(key, "%s", msg)
		return 0
	}
	return n
}

// whole converts any integer type, an integral float (YAML 1e6) or a string
// (with parse) to int64.
func (d *decoder) whole(s *setting, kind string, parse func(string) (int64, error)) (int64, bool) {
	key := s.key
	switch v := d.k.Get(key).(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case uint32:
		return int64(v), true
	case uint64:
		if v <= math.MaxInt64 {
			return int64(v), true
		}
		d.fail(key, "%s, got %d", s.overflowText(true), v)
		return 0, false
	case float64:
		if v != math.Trunc(v) || math.IsInf(v, 0) {
			d.fail(key, "invalid %s %v: not a whole number", kind, v)
			return 0, false
		}
		if v < math.MinInt64 || v >= math.MaxInt64 {
			d.fail(key, "%s, got %v", s.overflowText(v > 0), v)
			return 0, false
		}
		return int64(v), true
	case string:
		n, err := parse(v)
		switch {
		case err == nil:
			return n, true
		case errors.Is(err, strconv.ErrRange):
			v = strings.TrimSpace(v)
			d.fail(key, "%s, got %s", s.overflowText(!strings.HasPrefix(v, "-")), v)
		default:
			d.fail(key, "invalid %s %q", kind, v)
		}
		return 0, false
	}
	d.fail(key, "invalid %s: got %s", kind, kindOf(d.k.Get(key)))
	return 0, false
}

// kindOf names the type of a value read from YAML without showing it.
func kindOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case nil:
		return "null"
	}
	return "a number"
}

// duration accepts Go syntax (750ms, 2s) in strings, or a
// time.Duration.
func (d *decoder) duration(key string) (int64, bool) {
	switch v := d.k.Get(key).(type) {
	case time.Duration:
		return int64(v), true
	case string:
		t, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			d.fail(key, "invalid duration %q (use Go syntax such as 750ms or 2s)", v)
			return 0, false
		}
		return int64(t), true
	default:
		d.fail(key, "invalid duration: got %s (use Go syntax such as 750ms or 2s, quoted in YAML if need be)", kindOf(v))
		return 0, false
	}
}

// parseSize parses a byte count as redis.conf does: digits, optionally
// followed by a case-insensitive unit: b = 1, k = 1000, kb = 1024,
// m = 1000*1000, mb = 1024*1024, g = 1000*1000*1000, gb = 1024*1024*1024.
// A leading "-" makes it negative, which no size setting accepts: the
// error then states the setting's range. The error wraps strconv.ErrRange
// for a count beyond int64, strconv.ErrSyntax for anything else.
func parseSize(s string) (int64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	digits, unit := s[:i], s[i:]
	mult := map[string]int64{
		"": 1, "b": 1,
		"k": 1000, "kb": 1 << 10,
		"m": 1000 * 1000, "mb": 1 << 20,
		"g": 1000 * 1000 * 1000, "gb": 1 << 30,
	}[unit]
	if digits == "" || mult == 0 {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, strconv.ErrRange // only digits: too many of them
	}
	if neg {
		return -n * mult, nil
	}
	return n * mult, nil
}

// formatSize writes n with the largest binary unit that divides it exactly.
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// outside returns why n is not an accepted value of the numeric setting
// s, or "" when it is. cacheOff (cache-max-value 0) admits 0 for the
// offZero bounds.
func (s *setting) outside(n int64, cacheOff bool) string {
	b := s.bound
	if n >= b.lo && n <= b.hi || b.offZero && cacheOff && n == 0 {
		return ""
	}
	got := strconv.FormatInt(n, 10)
	if _, ok := s.def.(time.Duration); ok {
		got = time.Duration(n).String()
	}
	return s.rangeText() + ", got " + got
}

// rangeText is a numeric setting's bound in the words of every message
// about it: "must be between 1 and 4294967295", "must be >= 1mb
// (1048576), Redis's minimum", "must be > 0" (a duration from 1ns).
func (s *setting) rangeText() string {
	b := s.bound
	_, isDuration := s.def.(time.Duration)
	var r string
	switch {
	case isDuration && b.lo == 1 && b.hi == math.MaxInt64:
		r = "must be > 0"
	case b.hi == math.MaxInt64:
		r = "must be >= " + s.show(b.lo)
	default:
		r = "must be between " + s.show(b.lo) + " and " + s.show(b.hi)
	}
	if b.offZero {
		r += ", or 0 with cache-max-value 0 (the cache off)"
	}
	if b.note != "" {
		r += ", " + b.note
	}
	return r
}

// overflowText is rangeText for a value beyond int64 (positive: above
// it): a setting bound only below says it must be at most the largest
// int64, which its range leaves unsaid.
func (s *setting) overflowText(positive bool) string {
	if positive && s.bound.hi == math.MaxInt64 {
		return "must be at most " + s.show(math.MaxInt64)
	}
	return s.rangeText()
}

// show writes a bound as the setting is written: 1m for a duration,
// "1mb (1048576)" for a size with a unit.
func (s *setting) show(n int64) string {
	switch s.def.(type) {
	case time.Duration:
		t := time.Duration(n).String() // 1h0m0s
		if strings.HasSuffix(t, "m0s") {
			t = strings.TrimSuffix(t, "0s")
		}
		if strings.HasSuffix(t, "h0m") {
			t = strings.TrimSuffix(t, "0m")
		}
		return t
	case byteSize:
		if f := formatSize(n); f != strconv.FormatInt(n, 10) {
			return f + " (" + strconv.FormatInt(n, 10) + ")"
		}
	}
	return strconv.FormatInt(n, 10)
}
