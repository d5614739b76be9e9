package upstream

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestWriteToApplies: whatever way bytes are taken off the notification
// connection (io.Copy would use a promoted TCPConn.WriteTo, bypassing
// Read), its notifications are applied.
func TestWriteToApplies(t *testing.T) {
	w, srv, s := fakeWatched(t)
	if _, err := srv.Write([]byte(pmsg("0", "kB"))); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	var out bytes.Buffer
	_ = w.SetReadDeadline(time.Now().Add(time.Second))
	n, _ := io.Copy(&out, w)
	if n != 0 || s.Events() != 1 {
		t.Errorf("io.Copy took one notification off the socket: %d bytes handed on, %d applied; want 0 and 1", n, s.Events())
	}
}
