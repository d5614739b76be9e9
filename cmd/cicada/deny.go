package main

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode/utf8"

	"github.com/gobwas/glob"
	"github.com/gobwas/glob/syntax/lexer"
)

// The deny-list's patterns (--cache-deny) are written in gobwas/glob's
// syntax and read with its lexer, then matched as one regular expression
// of Go's regexp package (RE2: linear in the key's length, no panics).
// gobwas/glob v0.2.3's own matchers get some patterns wrong: x{} and
// {0*,0} panic on the keys x and 0 (on an event loop, that ends the
// process); 0*0 matches 0, {}a does not match a, ? matches the empty key.

// checkPattern reports why p cannot be a deny-list pattern: what
// glob.Compile refuses (an unclosed [...] class, [], [z-a], bytes that
// are not UTF-8), so that the syntax stays gobwas/glob's; a { left open
// (gobwas/glob would close it silently at the end: x{a,b matching xa); a
// lone \ at the end (which its lexer drops: a\ matching a); a NUL byte
// (where its lexer stops); regexp's (braces nested beyond its 1,000
// levels).
func checkPattern(p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return errors.New("a NUL byte, which gobwas/glob's lexer takes for the end")
	}
	if err := globCompiles(p); err != nil {
		return err
	}
	_, err := compileDeny([]string{p})
	return err
}

// globCompiles returns glob.Compile's error for p, or its panic's.
func globCompiles(p string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("gobwas/glob fails on it: %v", r)
		}
	}()
	_, err = glob.Compile(p)
	return err
}

// compileDeny compiles patterns into one regular expression matching a
// whole key, its bytes as they are, if any pattern does; nil for none.
// Errors are a pattern's (globRegexp's) or regexp's.
func compileDeny(patterns []string) (*regexp.Regexp, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	var b strings.Builder
	b.WriteString(`\A(?s:`)
	for i, p := range patterns {
		if i > 0 {
			b.WriteByte('|')
		}
		if err := globRegexp(&b, p); err != nil {
			return nil, err
		}
	}
	b.WriteString(`)\z`)
	re, err := regexp.Compile(b.String())
	if se := (*syntax.Error)(nil); errors.As(err, &se) {
		return nil, errors.New(string(se.Code)) // not se.Expr: the translation, not the pattern
	}
	return re, err
}

// globRegexp appends to b a regular expression that matches what the
// glob pattern p matches with no separators: * and ** any characters,
// ? one, [abc] [!abc] [a-z] [!a-z] one of a set, {a,b} any of its
// choices (an empty one too), \x the character x. Characters are runes;
// a byte that is not UTF-8 counts as one. Errors are checkPattern's.
func globRegexp(b *strings.Builder, p string) error {
	if n := len(p) - len(strings.TrimRight(p, `\`)); n%2 == 1 {
		return errors.New(`a lone \ at the end, write \\ for a backslash`)
	}
	lx := lexer.NewLexer(p)
	depth := 0
	b.WriteString("(?:")
	for {
		switch t := lx.Next(); t.Type {
		case lexer.Error:
			return errors.New(t.Raw)
		case lexer.EOF:
			if depth > 0 {
				return errors.New(`unclosed {, write \{ for a literal brace`)
			}
			b.WriteString(")")
			return nil
		case lexer.Text:
			b.WriteString(regexp.QuoteMeta(t.Raw))
		case lexer.Any, lexer.Super:
			b.WriteString(".*")
		case lexer.Single:
			b.WriteString(".")
		case lexer.TermsOpen:
			depth++
			b.WriteString("(?:")
		case lexer.Separator:
			b.WriteString("|")
		case lexer.TermsClose:
			depth--
			b.WriteString(")")
		case lexer.RangeOpen:
			if err := classRegexp(b, lx); err != nil {
				return err
			}
		}
	}
}

// classRegexp appends the character class whose [ the lexer just gave,
// reading it to its ]: [!...] negates, lo-hi is the runes from lo to hi,
// other runes stand for themselves. (glob.Compile refuses [] and hi < lo,
// and so does regexp.)
func classRegexp(b *strings.Builder, lx interface{ Next() lexer.Token }) error {
	b.WriteByte('[')
	for {
		switch t := lx.Next(); t.Type {
		case lexer.Error:
			return errors.New(t.Raw)
		case lexer.Not:
			b.WriteByte('^')
		case lexer.RangeLo:
			fmt.Fprintf(b, `\x{%x}`, []rune(t.Raw)[0])
		case lexer.RangeBetween:
			b.WriteByte('-')
		case lexer.RangeHi:
			fmt.Fprintf(b, `\x{%x}`, []rune(t.Raw)[0])
		case lexer.Text:
			for _, r := range t.Raw {
				fmt.Fprintf(b, `\x{%x}`, r)
			}
		case lexer.RangeClose:
			b.WriteByte(']')
			return nil
		}
	}
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

// denyMatcher compiles patterns (checked by the decoder, as a list too:
// patterns) into a key matcher; nil for none. Safe for concurrent use.
func denyMatcher(patterns []string) func([]byte) bool {
	re, err := compileDeny(patterns)
	if err != nil || re == nil {
		return nil // err: not reached, the decoder refused the list
	}
	return re.Match
}
