package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gobwas/glob"
)

// The deny-list's patterns (--cache-deny), in gobwas/glob's syntax, with
// its v1.1.0 or later: v0.2.3 compiled a { left open (x{a,b matched xa)
// and a lone \ at the end, and its matchers panicked (x{} on the key x,
// {0*,0} on 0: on an event loop, that ended the process) or matched
// wrongly (0*0 on 0, ? on the empty key). TestCheckPattern and
// TestDenyMatcher hold the library to all of it.

// checkPattern returns glob.Compile's error for p (a *glob.SyntaxError,
// which says where and why), or, first, where p is not UTF-8: the
// library reports a backslash before an invalid byte as a trailing one.
func checkPattern(p string) error {
	if i := invalidUTF8(p); i >= 0 {
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	}
	_, err := glob.Compile(p)
	return err
}

// invalidUTF8 returns the offset of s's first byte that is not UTF-8, or
// -1 if s is UTF-8.
func invalidUTF8(s string) int {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			return i
		}
		i += w
	}
	return -1
}

// splitPatterns splits a comma-separated list of glob patterns at the
// commas gobwas/glob's lexer reads as text outside any {a,b}: not escaped
// (\,), not in a [...] class, not between braces.
func splitPatterns(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '[':
			i = classEnd(s, i+1)
		case '{':
			depth++
		case '}':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// trimPattern drops the spaces around a pattern of a list, but not one a
// backslash escapes (`x\ ` keeps its space: gobwas/glob reads `\ ` as a
// space, and without it the pattern would end in a lone backslash).
func trimPattern(p string) string {
	p = strings.TrimLeftFunc(p, unicode.IsSpace)
	for {
		r, w := utf8.DecodeLastRuneInString(p)
		if w == 0 || !unicode.IsSpace(r) {
			return p
		}
		if escaped(p, len(p)-w) {
			return p
		}
		p = p[:len(p)-w]
	}
}

// escaped reports whether the byte at p[i] (i may be len(p)) follows an
// odd run of backslashes: one that escapes it.
func escaped(p string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && p[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// classEnd returns the index of the ] that closes the [...] class whose
// contents start at s[i], read as gobwas/glob's lexer reads them: an
// optional !, then either lo-hi (two characters taken as they are, a
// backslash or a ] too) or text up to the first ] not escaped. It
// returns len(s) when no ] closes it (checkPattern refuses the pattern).
func classEnd(s string, i int) int {
	if i < len(s) && s[i] == '!' {
		i++
	}
	if i >= len(s) {
		return len(s)
	}
	if _, w := utf8.DecodeRuneInString(s[i:]); i+w < len(s) && s[i+w] == '-' {
		hi := i + w + 1
		if hi >= len(s) {
			return len(s)
		}
		_, w = utf8.DecodeRuneInString(s[hi:])
		if end := hi + w; end < len(s) && s[end] == ']' {
			return end
		}
		return len(s)
	}
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case ']':
			return i
		}
	}
	return len(s)
}

// denyMatcher compiles patterns (checked by checkPattern) into a key
// matcher: whether any of them matches the whole key. nil for none. Safe
// for concurrent use.
func denyMatcher(patterns []string) func([]byte) bool {
	if len(patterns) == 0 {
		return nil
	}
	globs := make([]*glob.Pattern, 0, len(patterns))
	for _, p := range patterns {
		if g, err := glob.Compile(p); err == nil {
			globs = append(globs, g)
		}
	}
	return func(key []byte) bool {
		k := string(key)
		for _, g := range globs {
			if g.Match(k) {
				return true
			}
		}
		return false
	}
}
