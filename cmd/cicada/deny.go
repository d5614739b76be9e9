package main

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/gobwas/glob"
	"github.com/gobwas/glob/syntax/lexer"
)

// The deny-list's patterns (--cache-deny): gobwas/glob v0.2.3 syntax,
// checked with the library's own lexer before they are compiled, since
// it compiles some patterns it then gets wrong.

// checkPattern reports why p cannot be a deny-list pattern: what
// glob.Compile refuses (its error), and what it accepts but gets wrong:
//   - a { left open, which it closes silently at the end (x{a,b matches
//     xa);
//   - an empty choice in {...} ({}, {a,}, {,a}): matchers built with one
//     panic on some keys (x{} on the key x, {*,}{*,} on the key 0: on an
//     event loop, that ends the process) and miss others ({}a on a);
//   - a lone \ at the end, which it drops (a\ matches a).
func checkPattern(p string) error {
	lx := lexer.NewLexer(p)
	var open []bool // for each { still open: whether its current choice has anything in it
	for {
		switch t := lx.Next(); t.Type {
		case lexer.Error:
			_, err := glob.Compile(p)
			return err
		case lexer.EOF:
			if len(open) > 0 {
				return errors.New(`unclosed {, write \{ for a literal brace`)
			}
			if n := len(p) - len(strings.TrimRight(p, `\`)); n%2 == 1 {
				return errors.New(`a lone \ at the end, write \\ for a backslash`)
			}
			_, err := glob.Compile(p)
			return err
		case lexer.TermsOpen:
			open = append(open, false)
		case lexer.Separator, lexer.TermsClose:
			if !open[len(open)-1] {
				return errors.New(`an empty choice in {...} ({}, {a,}, {,a}), write \{\} for literal braces`)
			}
			if t.Type == lexer.Separator {
				open[len(open)-1] = false
			} else {
				open = open[:len(open)-1]
			}
		default:
			for i := range open {
				open[i] = true
			}
		}
	}
}

// splitPatterns splits a comma-separated list of glob patterns at the
// commas gobwas/glob reads as text outside any {a,b} alternative: not
// escaped (\,), not in a [...] class, not between braces.
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

// classEnd returns the index of the ] that closes the [...] class whose
// contents start at s[i], read as gobwas/glob's lexer reads them: an
// optional !, then either lo-hi (two characters taken as they are, a
// backslash or a ] too) or text up to the first ] not escaped. It
// returns len(s) when no ] closes it (glob.Compile refuses the pattern).
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
// matcher; nil for none.
func denyMatcher(patterns []string) func([]byte) bool {
	if len(patterns) == 0 {
		return nil
	}
	globs := make([]glob.Glob, 0, len(patterns))
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
