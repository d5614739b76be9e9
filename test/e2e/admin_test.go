package e2e

import (
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cicada-proxy/cicada/test/cicadatest"
	"github.com/cicada-proxy/cicada/test/redistest"
)

// publicPages are what the admin listener serves (Prometheus, the
// kubelet); localPages what only the local admin listener serves: they
// list key names, cost CPU on request, or change settings.
var (
	publicPages = []string{"/metrics", "/healthz", "/readyz"}
	localPages  = []string{"/debug/pprof/", "/debug/hotkeys", "/config"}
)

// TestAdminListeners: with the default settings but for the ports (the
// admin listener on every interface, as the default :9121; local-admin on
// its default host), the admin listener answers exactly /metrics, /healthz
// and /readyz and 404s the pages that show key names, profiles or
// settings; the local one answers those, and its socket is bound to
// loopback only.
func TestAdminListeners(t *testing.T) {
	r := redistest.Start(t)
	host := defaultLocalAdminHost(t)
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("default local-admin host %q, want a loopback address", host)
	}
	adminPort, localPort := redistest.FreePort(t), redistest.FreePort(t)
	p := cicadatest.StartBinary(t, r.Addr, "--admin", ":"+strconv.Itoa(adminPort),
		"--local-admin", net.JoinHostPort(host, strconv.Itoa(localPort)))

	for _, path := range publicPages {
		if got := status(t, http.MethodGet, p.Admin, path); got != http.StatusOK {
			t.Errorf("admin GET %s = %d, want 200", path, got)
		}
		if got := status(t, http.MethodGet, p.LocalAdmin, path); got != http.StatusNotFound {
			t.Errorf("local admin GET %s = %d, want 404", path, got)
		}
	}
	for _, path := range append(localPages, "/debug/pprof/goroutine?debug=1", "/debug/pprof/cmdline") {
		if got := status(t, http.MethodGet, p.Admin, path); got != http.StatusNotFound {
			t.Errorf("admin GET %s = %d, want 404", path, got)
		}
		if got := status(t, http.MethodGet, p.LocalAdmin, path); got != http.StatusOK {
			t.Errorf("local admin GET %s = %d, want 200", path, got)
		}
	}
	if got := status(t, http.MethodPost, p.Admin, "/config"); got != http.StatusNotFound {
		t.Errorf("admin POST /config = %d, want 404", got)
	}
	if got := status(t, http.MethodPost, p.LocalAdmin, "/config"); got != http.StatusOK {
		t.Errorf("local admin POST /config = %d, want 200", got)
	}

	socks := listening(t, p.Pid)
	if got, want := socks[localPort], []string{host}; !slices.Equal(got, want) {
		t.Errorf("local admin port %d bound to %q, want %q only", localPort, got, want)
	}
	if got := socks[adminPort]; len(got) != 1 || !net.ParseIP(got[0]).IsUnspecified() {
		t.Errorf("admin port %d bound to %q, want every interface, as --admin :%d asks", adminPort, got, adminPort)
	}
}

// TestLocalAdminOff: local-admin "" serves the pages that show key names,
// profiles or settings nowhere: the admin listener 404s them and Cicada
// listens on no other port than its RESP and admin ones.
func TestLocalAdminOff(t *testing.T) {
	r := redistest.Start(t)
	p := cicadatest.StartBinary(t, r.Addr, "--local-admin", "")
	if p.LocalAdmin != "" {
		t.Fatalf("LocalAdmin %q, want off", p.LocalAdmin)
	}
	for _, path := range localPages {
		if got := status(t, http.MethodGet, p.Admin, path); got != http.StatusNotFound {
			t.Errorf("admin GET %s = %d, want 404", path, got)
		}
	}
	var ports []int
	for port := range listening(t, p.Pid) {
		ports = append(ports, port)
	}
	slices.Sort(ports)
	want := []int{port(t, p.Addr), port(t, p.Admin)}
	slices.Sort(want)
	if !slices.Equal(ports, want) {
		t.Errorf("Cicada listens on ports %v, want only its RESP and admin ports %v", ports, want)
	}
}

// defaultLocalAdminHost returns the host of local-admin's default, as
// cicada --check-config prints it with no settings given.
func defaultLocalAdminHost(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(cicadatest.BuiltBinary(t), "--check-config")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cicada --check-config: %v\n%s", err, out)
	}
	for _, kv := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(kv, "local-admin="); ok {
			host, _, err := net.SplitHostPort(v)
			if err != nil {
				t.Fatalf("default local-admin %q: %v", v, err)
			}
			return host
		}
	}
	t.Fatalf("no local-admin in %s", out)
	return ""
}

// status sends an empty request (a JSON object for POST) to addr and
// returns the response's status code, on a connection closed after it.
func status(t *testing.T, method, addr, path string) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	c := http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, addr, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("address %q: %v %v", addr, err, err2)
	}
	return n
}

// listening returns the TCP sockets process pid listens on: each port
// with the addresses bound to it, from /proc/<pid>/net/tcp and tcp6
// (the sockets of the process's network namespace) restricted to the
// socket inodes among the process's open descriptors.
func listening(t *testing.T, pid int) map[int][]string {
	t.Helper()
	dir := "/proc/" + strconv.Itoa(pid)
	fds, err := os.ReadDir(dir + "/fd")
	if err != nil {
		t.Fatal(err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		if link, err := os.Readlink(dir + "/fd/" + fd.Name()); err == nil {
			if inode, ok := strings.CutPrefix(link, "socket:["); ok {
				inodes[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	socks := map[int][]string{}
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(dir + "/net/" + table)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			hexIP, hexPort, _ := strings.Cut(f[1], ":")
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if err != nil {
				t.Fatalf("%s: %q: %v", table, line, err)
			}
			socks[int(p)] = append(socks[int(p)], procIP(t, hexIP))
		}
	}
	return socks
}

// procIP decodes an address of /proc/net/tcp{,6}: 32-bit words in hex,
// each in the host's (little-endian) byte order.
func procIP(t *testing.T, s string) string {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != 4 && len(b) != 16 {
		t.Fatalf("address %q in /proc/net/tcp: %v", s, err)
	}
	for i := 0; i < len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	return net.IP(b).String()
}
