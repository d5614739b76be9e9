package difftest

import (
	"reflect"
	"testing"
)

// TestSplitAuth: a raw pipeline is split before an AUTH behind another
// request, and bytes that are not RESP arrays of bulk strings are left as
// they are.
func TestSplitAuth(t *testing.T) {
	b := []byte(Commands([]string{"PING"}, []string{"AUTH", "x"}, []string{"GET", "k"}))
	cmds, ends, ok := parseArrays(b)
	if !ok || !reflect.DeepEqual(cmds, [][]string{{"PING"}, {"AUTH", "x"}, {"GET", "k"}}) || ends[2] != len(b) {
		t.Fatalf("parseArrays: got %q %v %v", cmds, ends, ok)
	}
	for _, bad := range []string{"*1\r\n$-1\r\n", "*99999999999\r\n", "PING\r\n", "*1\r\n:1\r\n"} {
		if _, _, ok := parseArrays([]byte(bad)); ok {
			t.Errorf("parseArrays(%q): got ok, want not", bad)
		}
	}
	steps := SplitAuth(Conversation{Steps: []Step{{Raw: b}, {Raw: []byte("PING\r\nAUTH x\r\n")}}}).Steps
	if len(steps) != 3 || string(steps[0].Raw) != Command("PING") || steps[1].Wait != authGap {
		t.Errorf("SplitAuth: got %d steps %+v", len(steps), steps)
	}
}
