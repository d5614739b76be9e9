package main

import (
	"slices"
	"testing"
)

// TestCheckPattern: what checkPattern refuses (gobwas/glob v1.1.0's
// syntax errors, among them what v0.2.3 compiled and got wrong), and what
// it lets through.
func TestCheckPattern(t *testing.T) {
	for p, want := range map[string]string{
		`x{a,b`:      "glob: syntax error at 5: unclosed `{`",
		`{`:          "glob: syntax error at 1: unclosed `{`",
		`{a,{b,c}`:   "glob: syntax error at 8: unclosed `{`",
		`{user\}:*`:  "glob: syntax error at 9: unclosed `{`",
		`[A-\]{x,y`:  "glob: syntax error at 9: unclosed `{`", // [A-\] is a closed class: the { after it is open
		`a\`:         "glob: syntax error at 2: trailing backslash",
		`[unclosed`:  "glob: syntax error at 9: unexpected end of input",
		`[z-a]`:      "glob: syntax error at 5: range hi character is less than lo",
		"\xff":       "invalid UTF-8 at byte 0",
		"x\\\xff":    "invalid UTF-8 at byte 2", // not a trailing backslash
		"x\\\xc2 ":   "invalid UTF-8 at byte 2",
		"é\xe9":      "invalid UTF-8 at byte 2",
		`x{}`:        "",
		`x{a,}`:      "",
		`{0*,0}`:     "",
		`{a,b}:*`:    "",
		`\{user\}:*`: "",
		`[]-{]`:      "", // the range ] to {
		`[!]-{]`:     "",
		`[{]`:        "",
		`a}`:         "",
		`a\\`:        "",
		"a\x00b":     "",
		`{{a,b},c}`:  "",
	} {
		got := ""
		if err := checkPattern(p); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("checkPattern(%q): %q, want %q", p, got, want)
		}
	}
}

// TestDenyMatcher: which keys a pattern denies: gobwas/glob's syntax, with
// no separators, over whole keys, among them where v0.2.3 panicked (x{} on
// x, {0*,0} on 0) or matched wrongly (0*0 on 0, ? on the empty key).
func TestDenyMatcher(t *testing.T) {
	for _, tt := range []struct {
		pattern string
		yes, no []string
	}{
		{`session:*`, []string{"session:", "session:1/2\n"}, []string{"session", "xsession:1"}},
		{`a?c`, []string{"abc", "aéc", "a\xffc"}, []string{"ac", "abbc"}},
		{`**`, []string{"", "a\nb"}, nil},
		{`x{}`, []string{"x"}, []string{"", "x{}"}},
		{`{}a`, []string{"a"}, []string{"{}a"}},
		{`x{a,}`, []string{"x", "xa"}, []string{"xb"}},
		{`{0*,0}`, []string{"0", "01"}, []string{"", "10"}},
		{`{a,b}:*`, []string{"a:1", "b:"}, []string{"c:1", "{a,b}:1"}},
		{`{user}:*`, []string{"user:1"}, []string{"{user}:1"}},
		{`\{user\}:*`, []string{"{user}:1"}, []string{"user:1"}},
		{`[abc]`, []string{"a", "c"}, []string{"d", "", "ab"}},
		{`[!abc]`, []string{"d", "é"}, []string{"a", ""}},
		{`[a-c]x`, []string{"bx"}, []string{"dx"}},
		{`[!a-c]`, []string{"d"}, []string{"b"}},
		{`[A-\]x`, []string{"Bx", "\\x"}, []string{"]x"}},
		{`[]-{]`, []string{"]", "a", "{"}, []string{"|"}},
		{`[\]]`, []string{"]"}, []string{"\\"}},
		{`a.b+c(`, []string{"a.b+c("}, []string{"aXb+c(", "a.bbc("}},
		{`\*`, []string{"*"}, []string{"a"}},
		{`0*0`, []string{"00", "0a0"}, []string{"0"}},
		{`?`, []string{"a", "é"}, []string{"", "ab"}},
		{"a\x00b", []string{"a\x00b"}, []string{"a", "ab"}},
	} {
		m := denyMatcher([]string{tt.pattern})
		for _, k := range tt.yes {
			if !m([]byte(k)) {
				t.Errorf("%s does not deny %q", tt.pattern, k)
			}
		}
		for _, k := range tt.no {
			if m([]byte(k)) {
				t.Errorf("%s denies %q", tt.pattern, k)
			}
		}
	}
	m := denyMatcher([]string{"a:*", "b"})
	if !m([]byte("a:1")) || !m([]byte("b")) || m([]byte("c")) || m([]byte("ba")) {
		t.Error("a list denies what any of its patterns does, and only that")
	}
	if denyMatcher(nil) != nil {
		t.Error("no patterns, no matcher")
	}
}

// TestSplitPatterns: a list splits where gobwas/glob reads a comma as
// text outside braces, and nowhere else.
func TestSplitPatterns(t *testing.T) {
	for s, want := range map[string][]string{
		`a:*,b:*`:         {`a:*`, `b:*`},
		`user:{a,b}:*,x`:  {`user:{a,b}:*`, `x`},
		`x:[,;],y`:        {`x:[,;]`, `y`},
		`a\,b,c`:          {`a\,b`, `c`},
		`a\\,b`:           {`a\\`, `b`},
		`[A-\],b:*`:       {`[A-\]`, `b:*`}, // a range's ends are taken as they are
		`[]-{],x`:         {`[]-{]`, `x`},
		`[a\]b,c],d`:      {`[a\]b,c]`, `d`}, // \] inside a class's text is escaped
		`[]],x`:           {`[]]`, `x`},
		`x{a,b,session:*`: {`x{a,b,session:*`}, // checkPattern refuses it whole
		`é[é-ü],{ü,a}`:    {`é[é-ü]`, `{ü,a}`},
		`[unclosed,a`:     {`[unclosed,a`},
	} {
		if got := splitPatterns(s); !slices.Equal(got, want) {
			t.Errorf("splitPatterns(%q): %q, want %q", s, got, want)
		}
	}
}

func TestTrimPattern(t *testing.T) {
	for p, want := range map[string]string{
		` session:* `: `session:*`,
		"\tx\n":       `x`,
		`x\ `:         `x\ `, // an escaped space stays
		`x\  `:        `x\ `,
		`x\\ `:        `x\\`, // the backslash is escaped, not the space
		`x\\\ `:       `x\\\ `,
		`\ `:          `\ `,
		" x\u00a0":    `x`,
		"   ":         ``,
		"x\\\u00a0":   "x\\\u00a0",
	} {
		if got := trimPattern(p); got != want {
			t.Errorf("trimPattern(%q) = %q, want %q", p, got, want)
		}
	}
	// The pattern kept matches what it says: a key ending in a space.
	m := denyMatcher([]string{trimPattern(`x\ `)})
	if !m([]byte("x ")) || m([]byte("x")) {
		t.Errorf(`x\  matches "x " %v and "x" %v, want true and false`, m([]byte("x ")), m([]byte("x")))
	}
}

// FuzzDenyPattern: a pattern checkPattern accepts makes a matcher, which
// never panics on any key.
func FuzzDenyPattern(f *testing.F) {
	for _, p := range []string{`x{}`, `x{,}`, `{}a`, `x{{}}`, `{*,}{*,}`, `{0*,0}`, `[A-\]{x,y`, `x{a,}`, `[]-{]`, `a\`, `*{a}?[!b]`, `[]`, `[!]`} {
		f.Add(p, "x")
		f.Add(p, "0")
	}
	f.Fuzz(func(t *testing.T, p, key string) {
		if checkPattern(p) != nil {
			return
		}
		m := denyMatcher([]string{p})
		if m == nil {
			t.Fatalf("checkPattern accepted %q, denyMatcher made nothing of it", p)
		}
		for i := range len(key) + 1 {
			m([]byte(key[:i]))
		}
	})
}
