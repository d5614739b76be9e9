package main

import (
	"slices"
	"testing"

	"github.com/gobwas/glob"
)

// TestCheckPattern: what checkPattern refuses and why, and what it lets
// through, gobwas/glob's own errors included.
func TestCheckPattern(t *testing.T) {
	const (
		unclosed = `unclosed {, write \{ for a literal brace`
		empty    = `an empty choice in {...} ({}, {a,}, {,a}), write \{\} for literal braces`
		lone     = `a lone \ at the end, write \\ for a backslash`
	)
	for p, want := range map[string]string{
		`x{a,b`:      unclosed,
		`{`:          unclosed,
		`{a,{b,c}`:   unclosed,
		`{user\}:*`:  unclosed,
		`[A-\]{x,y`:  unclosed, // [A-\] is a closed class: the { after it is open
		`x{}`:        empty,
		`x{,}`:       empty,
		`{}a`:        empty,
		`x{a,{}}`:    empty,
		`x{{}}`:      empty,
		`a\`:         lone,
		`a\\\`:       lone,
		`[unclosed`:  "unexpected end of input",
		`x{a,}`:      empty,
		`{,a}`:       empty,
		`{a,,b}`:     empty,
		`{*,}{*,}`:   empty,
		`{a,b}:*`:    "",
		`\{user\}:*`: "",
		`[]-{]`:      "", // the range ] to {
		`[!]-{]`:     "",
		`[{]`:        "",
		`a}`:         "",
		`a\\`:        "",
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

// TestDenyMatcherHashTag: braces escaped match a Redis Cluster hash
// tag's braces; unescaped they are an alternative, as configuration.md
// says.
func TestDenyMatcherHashTag(t *testing.T) {
	for _, tt := range []struct {
		pattern, key string
		want         bool
	}{
		{`\{user\}:*`, "{user}:1", true},
		{`\{user\}:*`, "user:1", false},
		{`{user}:*`, "user:1", true},
		{`{user}:*`, "{user}:1", false},
		{`{a,b}:*`, "b:1", true},
	} {
		if got := denyMatcher([]string{tt.pattern})([]byte(tt.key)); got != tt.want {
			t.Errorf("%s matches %s: %v, want %v", tt.pattern, tt.key, got, tt.want)
		}
	}
}

// FuzzCheckedPattern: a pattern checkPattern accepts compiles, and its
// matcher neither panics (on an event loop that would end the process)
// on any key. The seeds are the patterns gobwas/glob gets wrong.
func FuzzCheckedPattern(f *testing.F) {
	for _, p := range []string{`x{}`, `x{,}`, `{}a`, `x{{}}`, `[A-\]{x,y`, `x{a,}`, `{a,{b,}}`, `[]-{]`, `a\`, `*{a}?[!b]`} {
		f.Add(p, "x")
		f.Add(p, "")
		f.Add(p, "xa")
	}
	f.Fuzz(func(t *testing.T, p, key string) {
		if checkPattern(p) != nil {
			return
		}
		g, err := glob.Compile(p)
		if err != nil {
			t.Fatalf("checkPattern accepted %q, glob.Compile refused it: %v", p, err)
		}
		g.Match(key)
		for i := range len(key) + 1 {
			g.Match(key[:i])
		}
	})
}
