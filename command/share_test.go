package command

import (
	"strings"
	"testing"
)

// TestSharing: what a shared connection (a lane) may carry, by command.
func TestSharing(t *testing.T) {
	tests := []struct {
		req  string
		want Share
	}{
		{"GET k", ShareAny},
		{"SET k v", ShareAny},
		{"MSET a 1 b 2", ShareAny},
		{"EVAL x 0", ShareAny},
		{"PING", ShareAny},
		{"INFO", ShareAny},
		{"CONFIG SET maxmemory 0", ShareAny},
		{"CLIENT SETNAME app", ShareAny},
		{"XREAD COUNT 1 STREAMS s 0", ShareAny},
		{"XREADGROUP GROUP g c STREAMS s >", ShareAny},
		{"XREADGROUP GROUP g c COUNT 2 NOACK STREAMS s >", ShareAny},
		{"XREADGROUP GROUP streams c BLOCK 1500 STREAMS s >", ShareNone},
		{"XREADGROUP GROUP g streams STREAMS s >", ShareAny},
		{"XREAD COUNT block STREAMS s 0", ShareAny}, // refused: COUNT's value
		{"SCRIPT DEBUG YES", ShareNone},
		{"DEBUG PROTOCOL push", ShareNone},
		{"SELECT 3", ShareSwitch},
		{"SELECT", ShareAny}, // wrong arity: refused, no change
		{"HELLO", ShareAny},
		{"HELLO 3", ShareSwitch},
		{"HELLO 3 SETNAME x", ShareNone},
		{"HELLO 3 AUTH u p", ShareNone},
		{"XREAD BLOCK 0 STREAMS s $", ShareNone},
		{"XREADGROUP GROUP g c BLOCK 10 STREAMS s >", ShareNone},
		{"BLPOP l 0", ShareNone},
		{"WAIT 1 0", ShareNone},
		{"WATCH k", ShareNone},
		{"UNWATCH", ShareNone},
		{"ASKING", ShareNone},
		{"MULTI", ShareNone},
		{"EXEC", ShareNone},
		{"AUTH pw", ShareNone},
		{"RESET", ShareNone},
		{"QUIT", ShareNone},
		{"SUBSCRIBE c", ShareNone},
		{"MONITOR", ShareNone},
		{"READONLY", ShareNone},
		{"CLIENT ID", ShareNone},
		{"CLIENT GETNAME", ShareNone},
		{"CLIENT TRACKING ON", ShareNone},
		{"CLIENT REPLY OFF", ShareNone},
		{"CLIENT NO-EVICT ON", ShareNone},
		{"NOSUCHCOMMAND", ShareNone},
	}
	for _, tt := range tests {
		var args [][]byte
		for _, a := range strings.Fields(tt.req) {
			args = append(args, []byte(a))
		}
		if got := Resolve(args).Sharing(args, int64(len(args))); got != tt.want {
			t.Errorf("%s: got %d, want %d", tt.req, got, tt.want)
		}
	}
	for req, want := range map[string]Share{"CLIENT NOSUCH x": ShareAny, "CONFIG NOSUCH": ShareAny, "NOSUCH x": ShareNone, "CLIENT": ShareNone} {
		var args [][]byte
		for _, a := range strings.Fields(req) {
			args = append(args, []byte(a))
		}
		if got := UnknownSharing(args); got != want {
			t.Errorf("UnknownSharing(%s): got %d, want %d", req, got, want)
		}
	}
	// A name not captured cannot be kept for the client.
	args := [][]byte{[]byte("CLIENT"), []byte("SETNAME"), nil}
	if got := Resolve(args).Sharing(args, 3); got != ShareNone {
		t.Errorf("CLIENT SETNAME with a name too long to capture: got %d, want ShareNone", got)
	}
	// An argument not captured may be BLOCK.
	args = [][]byte{[]byte("XREAD"), nil, []byte("STREAMS"), []byte("s"), []byte("0")}
	if got := Resolve(args).Sharing(args, 5); got != ShareNone {
		t.Errorf("XREAD with an uncaptured option: got %d, want ShareNone", got)
	}
}
