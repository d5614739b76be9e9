package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/cicada-proxy/cicada/test/redistest"
)

// TestLocalAdminWarning: the local admin listener on loopback starts
// quietly; on every interface it starts with a warning (and serves); off,
// it is logged as off.
func TestLocalAdminWarning(t *testing.T) {
	const warning = `"msg":"local-admin is not on loopback: whoever reaches it can list hot key names, take CPU profiles and traces, and read the settings"`
	p := startRun(t)
	if logs := p.logs.String(); strings.Contains(logs, warning) || !strings.Contains(logs, `"msg":"local admin listening","addr":"`+p.local+`"`) {
		t.Errorf("local-admin %s: want it logged as listening, without the warning:\n%s", p.local, logs)
	}

	port := strconv.Itoa(redistest.FreePort(t))
	q := startRun(t, "--local-admin", ":"+port)
	if logs := q.logs.String(); !strings.Contains(logs, warning+`,"addr":"[::]:`+port+`"`) && !strings.Contains(logs, warning+`,"addr":"0.0.0.0:`+port+`"`) {
		t.Errorf("local-admin :%s: want the warning:\n%s", port, logs)
	}
	if code, body := httpGet("http://127.0.0.1:" + port + "/debug/hotkeys"); code != 200 {
		t.Errorf("GET /debug/hotkeys on :%s = %d %s, want 200", port, code, body)
	}

	off := startRun(t, "--local-admin", "")
	if logs := off.logs.String(); !strings.Contains(logs, `"msg":"local admin off (local-admin \"\"): no /debug/pprof/, /debug/hotkeys or /config"`) {
		t.Errorf("local-admin \"\": want it logged as off:\n%s", logs)
	}
}

// TestLocalAdminRefusesNamedHosts: the local admin pages answer a Host
// that is an address or localhost, and refuse any other name, so that a
// page whose name resolves to 127.0.0.1 (DNS rebinding) cannot read them
// from a browser on the same machine.
func TestLocalAdminRefusesNamedHosts(t *testing.T) {
	h := refuseNamedHosts(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("page")) }))
	for host, want := range map[string]int{
		"127.0.0.1:9122": 200, "[::1]:9122": 200, "localhost:9122": 200, "LOCALHOST": 200, "10.0.0.5:9122": 200,
		"evil.example:9122": 403, "evil.example": 403, "localhost.evil.example": 403, "127.0.0.1.nip.io:9122": 403, "": 403,
	} {
		r := httptest.NewRequest(http.MethodGet, "/debug/hotkeys", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("GET /debug/hotkeys with Host %q: %d, want %d", host, w.Code, want)
		}
	}
}
