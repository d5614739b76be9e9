package main

import "testing"

func TestFrame(t *testing.T) {
	get := "*2\r\n$3\r\nget\r\n$1\r\nk\r\n"
	tests := []struct {
		in    string
		n     int
		isGet bool
		ok    bool
	}{
		{get, len(get), true, true},
		{get + get, len(get), true, true},
		{"*3\r\n$4\r\nHGET\r\n$1\r\nh\r\n$1\r\nf\r\n", 28, true, true},
		{"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", 27, false, true},
		{"", 0, false, false},
		{"*2\r\n$3\r\nget\r\n$1\r\nk\r", 0, false, false},
		{"*2\r\n$3\r\nget\r\n$1", 0, false, false},
		{"*2", 0, false, false},
		{"PING\r\n", -1, false, false},
		{"*x\r\n", -1, false, false},
		{"*\r\n", -1, false, false},
		{"*1\n", -1, false, false},
		{"*1\r\n+OK\r\n", -1, false, false},
		{"*1\r\n$99999999999999999999\r\n", -1, false, false},
	}
	for _, tt := range tests {
		n, isGet, ok := frame([]byte(tt.in))
		if n != tt.n || isGet != tt.isGet || ok != tt.ok {
			t.Errorf("frame(%q) = %d, %v, %v; want %d, %v, %v", tt.in, n, isGet, ok, tt.n, tt.isGet, tt.ok)
		}
	}
	// Every split point of a request is incomplete, never malformed.
	for i := 0; i < len(get); i++ {
		if n, _, ok := frame([]byte(get[:i])); n != 0 || ok {
			t.Errorf("frame(%q) = %d, %v; want 0, false", get[:i], n, ok)
		}
	}
}
