package resp

import "testing"

func TestParseInt(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true}, {"1", 1, true}, {"-1", -1, true}, {"42", 42, true},
		{"9223372036854775807", 1<<63 - 1, true}, {"-9223372036854775808", -1 << 63, true},
		{"9223372036854775808", 0, false}, {"-9223372036854775809", 0, false},
		{"18446744073709551616", 0, false}, {"99999999999999999999", 0, false}, {"123456789012345678901", 0, false},
		{"", 0, false}, {"-", 0, false}, {"-0", 0, false}, {"00", 0, false}, {"01", 0, false}, {"+1", 0, false},
		{" 1", 0, false}, {"1 ", 0, false}, {"1a", 0, false}, {"12a", 0, false}, {"1.0", 0, false},
	}
	for _, tt := range tests {
		got, ok := ParseInt([]byte(tt.in))
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseInt(%q): got %d, %v, want %d, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := ParseInt(nil); ok {
		t.Errorf("ParseInt(nil): got ok, want false")
	}
}
