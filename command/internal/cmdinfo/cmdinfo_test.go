package cmdinfo

import (
	"bufio"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReadValue(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{"+OK\r\n", "OK"},
		{"-ERR bad\r\n", Error("ERR bad")},
		{":-5\r\n", int64(-5)},
		{"$3\r\nabc\r\n", "abc"},
		{"$0\r\n\r\n", ""},
		{"$-1\r\n", nil},
		{"*-1\r\n", nil},
		{"*2\r\n:1\r\n*1\r\n+x\r\n", []any{int64(1), []any{"x"}}},
	}
	for _, tt := range tests {
		got, err := readValue(bufio.NewReader(strings.NewReader(tt.in)), 0)
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("readValue(%q): got %#v, %v, want %#v, nil", tt.in, got, err, tt.want)
		}
	}
}

func TestReadValueRejects(t *testing.T) {
	tests := []string{
		"$9223372036854775807\r\n",
		"$67108865\r\n",
		"$-2\r\n",
		"*1048577\r\n",
		"$3\r\nabcd\r\n",
		"+OK\n",
		"?x\r\n",
		":1x\r\n",
		"\r\n",
		strings.Repeat("*1\r\n", MaxDepth+2) + ":1\r\n",
		"+" + strings.Repeat("x", 70<<10) + "\r\n",
	}
	for _, in := range tests {
		got, err := readValue(bufio.NewReader(strings.NewReader(in)), 0)
		if !errors.Is(err, ErrProtocol) {
			t.Errorf("readValue(%.40q): got %#v, %v, want ErrProtocol", in, got, err)
		}
	}
}

func TestParseCommands(t *testing.T) {
	get := []any{"GET", int64(2), []any{"readonly", "fast"}, int64(1), int64(1), int64(1),
		[]any{"@read"}, []any{}, []any{[]any{"flags", []any{"RO", "access"}, "begin_search", []any{}}}, []any{}}
	cl := []any{"client", int64(-2), []any{}, int64(0), int64(0), int64(0), []any{}, []any{}, []any{},
		[]any{[]any{"client|id", int64(2), []any{"noscript"}, int64(0), int64(0), int64(0), []any{}, []any{}, []any{}, []any{}}}}
	got, err := ParseCommands([]any{get, cl})
	if err != nil {
		t.Fatalf("ParseCommands: got error %v, want nil", err)
	}
	want := []Command{
		{Name: "get", Arity: 2, Flags: []string{"readonly", "fast"}, First: 1, Last: 1, Step: 1, KeySpecs: []KeySpec{{Flags: []string{"RO", "access"}, BeginSearch: "unknown"}}},
		{Name: "client", Arity: -2, Flags: []string{}, Subcommands: []Command{{Name: "client|id", Arity: 2, Flags: []string{"noscript"}}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseCommands: got %+v, want %+v", got, want)
	}
	flat := Flatten(got)
	var names []string
	for _, c := range flat {
		names = append(names, c.Name)
	}
	if g, w := strings.Join(names, " "), "get client client|id"; g != w {
		t.Errorf("Flatten: got %v, want %v", g, w)
	}
	for _, bad := range []any{"x", []any{"x"}, []any{[]any{"get", "2", []any{}, int64(1), int64(1), int64(1), []any{}, []any{}, []any{}, []any{}}}} {
		if _, err := ParseCommands(bad); !errors.Is(err, ErrShape) {
			t.Errorf("ParseCommands(%v): got %v, want ErrShape", bad, err)
		}
	}
}
