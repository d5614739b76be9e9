package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"go.uber.org/zap"

	"github.com/cicada-proxy/cicada/detector"
	"github.com/cicada-proxy/cicada/hotcache"
)

// liveKeys are the settings that change without a restart, through an
// edit of the --config file or POST /config on the local admin listener:
// those marked live in the settings table, in its order.
var liveKeys = func() []string {
	var keys []string
	for _, s := range settings {
		if s.live {
			keys = append(keys, s.key)
		}
	}
	return keys
}()

// fileDebounce is how long a file edit must be quiet before it is read:
// one save can fire several events, the first on a half-written file.
const fileDebounce = 200 * time.Millisecond

// live holds the settings in force and applies changes of liveKeys to the
// running components. Its methods are safe from any goroutine (the file
// watcher's, the admin HTTP handlers'); mu serializes them.
type live struct {
	args, environ []string // as given at start, to load the layers again
	cache         *hotcache.Cache
	adm           *detector.Admission // its read detector's threshold is hot-threshold
	level         zap.AtomicLevel
	log           *zap.Logger

	mu       sync.Mutex // guards the following
	cur      *Config    // the settings in force
	fromFile *Config    // the last load of all layers: a file edit is what differs from it
	debounce *time.Timer
}

// newLive applies cfg's live settings to the components (the cache's
// limits, enablement and deny-list; the detector's threshold is cfg's
// already) and returns the holder of the settings in force.
func newLive(cfg *Config, args, environ []string, cache *hotcache.Cache, adm *detector.Admission, level zap.AtomicLevel, log *zap.Logger) *live {
	l := &live{args: args, environ: environ, cache: cache, adm: adm, level: level, log: log, cur: cfg, fromFile: cfg}
	l.applyCache(cfg)
	return l
}

// applyCache brings the cache in line with c: on only when cache-enabled
// and cache-max-value > 0, then limits and deny-list.
func (l *live) applyCache(c *Config) {
	on := c.CacheEnabled && c.CacheMaxValue > 0
	if on {
		// Validate guarantees capacity and bytes >= 1 when max value > 0.
		_ = l.cache.SetLimits(c.CacheCapacity, c.CacheMaxBytes, c.CacheMaxValue)
		l.adm.SetCapacity(c.CacheCapacity)
	}
	l.cache.SetDenied(denyMatcher(c.CacheDeny))
	l.cache.SetEnabled(on)
}

// changeLocked applies next's live settings, logs each change with its
// source, and makes them the settings in force. next has been validated.
func (l *live) changeLocked(next *Config, source string) []string {
	before, after := l.cur.Redacted(), next.Redacted()
	var changed []string
	for _, k := range liveKeys {
		if !same(before[k], after[k]) {
			changed = append(changed, k)
			// Warn, not Info: a change of the running configuration is
			// worth a line at every log level but error.
			l.log.Warn("configuration changed", zap.String("setting", k), zap.Any("from", before[k]),
				zap.Any("to", after[k]), zap.String("source", source))
		}
	}
	if len(changed) == 0 {
		return nil
	}
	n := *l.cur
	for _, k := range liveKeys {
		setLive(&n, next, k)
	}
	l.adm.Reads().SetThreshold(n.HotThreshold)
	l.applyCache(&n)
	if lvl, err := zapLevel(n.LogLevel); err == nil {
		l.level.SetLevel(lvl)
	}
	l.cur = &n
	return changed
}

// reloadFile loads every layer again (the file re-read) and applies the
// live settings the file changed since the last load; other settings it
// changed to a value other than the one in force (the one Cicada started
// with) are logged as waiting for a restart, so a file edited back to the
// value in force warns no more. A file that does not load or validate
// changes nothing (and a later write of the same file is tried again); an
// empty file is taken for one being rewritten (truncated, not yet
// written) and ignored.
func (l *live) reloadFile(path string) {
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		l.log.Warn("configuration file is empty; the settings in force are kept until it is written", zap.String("path", path))
		return
	}
	next, err := Load(l.args, l.environ)
	if err != nil {
		l.log.Error("configuration file rejected; the settings in force are kept", zap.Error(err))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	before, after, inForce := l.fromFile.Redacted(), next.Redacted(), l.cur.Redacted()
	edited := *l.cur
	edited.origin = next.origin // the values edited came from these layers
	var restart []string
	for _, s := range settings {
		k := s.key
		if same(before[k], after[k]) {
			continue
		}
		if !s.live {
			if !same(inForce[k], after[k]) {
				restart = append(restart, k)
			}
			continue
		}
		setLive(&edited, next, k)
	}
	if err := edited.Validate(); err != nil {
		l.log.Error("configuration file rejected; the settings in force are kept", zap.Error(err))
		return
	}
	for _, k := range restart {
		l.log.Warn("setting changed in the configuration file takes effect at restart", zap.String("setting", k))
	}
	l.fromFile = next
	l.changeLocked(&edited, "file")
}

// same compares two settings as their JSON (a list of patterns included).
func same(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

// setLive copies live setting k from src to dst (a list as a copy). It
// panics for a key that is not live.
func setLive(dst, src *Config, k string) {
	st := lookup(k)
	if st == nil || !st.live {
		panic("setLive: " + k + " is not a live setting")
	}
	if list, ok := st.field(src).(*[]string); ok {
		*st.field(dst).(*[]string) = slices.Clone(*list)
		return
	}
	reflect.ValueOf(st.field(dst)).Elem().Set(reflect.ValueOf(st.field(src)).Elem())
}

// watch follows path (the --config file) until stop is closed: each edit,
// once quiet for fileDebounce, is reloaded. The file may be replaced
// (editors, Kubernetes ConfigMap updates swap a symlink) or removed for a
// while: the watch is set again once it exists.
func (l *live) watch(path string, stop <-chan struct{}) {
	for {
		fp := file.Provider(path)
		lost := make(chan struct{})
		var once sync.Once
		if _, err := os.Stat(path); err == nil {
			err := fp.Watch(func(_ any, err error) {
				if err != nil {
					l.log.Warn("configuration file watch lost; watching again once it exists", zap.Error(err))
					once.Do(func() { close(lost) })
					return
				}
				l.mu.Lock()
				defer l.mu.Unlock()
				if l.debounce != nil {
					l.debounce.Stop()
				}
				l.debounce = time.AfterFunc(fileDebounce, func() { l.reloadFile(path) })
			})
			if err != nil {
				l.log.Warn("cannot watch the configuration file", zap.String("path", path), zap.Error(err))
				once.Do(func() { close(lost) })
			}
		} else {
			once.Do(func() { close(lost) })
		}
		select {
		case <-stop:
			_ = fp.Unwatch()
			return
		case <-lost:
			_ = fp.Unwatch()
		}
		// Wait for the file to come back, then read it: it may have
		// changed while unwatched.
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, err := os.Stat(path); err == nil {
				break
			}
		}
		l.reloadFile(path)
	}
}

// checkText returns where body is not UTF-8 text: an invalid byte, or a
// \u escape of half a surrogate pair in a JSON string. encoding/json
// decodes both as U+FFFD without a word, so a setting would take a value
// its sender did not write; the flag, environment and file layers refuse
// invalid UTF-8.
func checkText(body []byte) error {
	if i := invalidUTF8(string(body)); i >= 0 {
		return fmt.Errorf("invalid UTF-8 at byte %d", i)
	}
	inString := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\' && i+1 < len(body) && body[i+1] == 'u':
			if v, ok := hex4(body, i+2); ok && v >= 0xd800 && v <= 0xdfff {
				lo := 0 // a high half's low half, if an escape follows
				if v <= 0xdbff && i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
					lo, _ = hex4(body, i+8)
				}
				if lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("half a surrogate pair (%s) at byte %d", body[i:i+6], i)
				}
				i += 6 // the low half
			}
			i++ // the u; its hex digits are not quotes nor backslashes
		case c == '\\':
			i++ // the escaped character, a quote perhaps
		}
	}
	return nil
}

// hex4 decodes the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (int, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return int(n), err == nil
}

// ServeHTTP serves /config on the local admin listener: GET returns the
// settings in force as JSON (the password redacted) with the list of live
// ones; POST takes a JSON object of live settings (values as in the YAML
// file), validates all of them and applies them together, or changes
// nothing and answers 400 with the reason, naming the body's key at fault.
// The listener has no authentication, so POST is accepted only from
// loopback, only as application/json, only without an Origin header and
// only for a loopback Host: a web page in a browser on the same machine
// can send none of these (cross-site request forgery, DNS rebinding).
func (l *live) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
	case http.MethodPost:
		if why := refusePost(r); why != "" {
			http.Error(w, "POST /config refused: "+why, http.StatusForbidden)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := checkText(body); err != nil {
			http.Error(w, "body must be UTF-8 text: "+err.Error(), http.StatusBadRequest)
			return
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			http.Error(w, "body must be a JSON object of settings: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := l.post(m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	l.mu.Lock()
	settings := l.cur.Redacted()
	l.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"settings": settings, "live": liveKeys})
}

// post applies the live settings in m, decoded as the file's are.
func (l *live) post(m map[string]any) error {
	k := koanf.New(".")
	if err := k.Load(confmap.Provider(m, ""), nil); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	next := *l.cur
	next.origin = nil // errors name the body's keys
	d := decoder{k: k}
	keys := slices.Sorted(maps.Keys(m)) // the first error is the same at every try
	for _, key := range keys {
		switch s := lookup(key); {
		case s == nil:
			return fmt.Errorf("%s: unknown setting", key)
		case !s.live:
			return fmt.Errorf("%s: not a live setting; it takes a restart (live: %s)", key, strings.Join(liveKeys, ", "))
		}
	}
	for _, key := range keys {
		d.set(&next, key)
	}
	if d.err != nil {
		return d.err
	}
	if err := next.Validate(); err != nil {
		return err
	}
	l.changeLocked(&next, "admin")
	return nil
}

// refusePost says why a POST /config is refused, or "" to accept it.
func refusePost(r *http.Request) string {
	switch {
	case !fromLoopback(r):
		return "accepted only from loopback"
	case r.Header.Get("Origin") != "":
		return "not from a web page (it has an Origin header)"
	case !loopbackHost(r.Host):
		return "the Host must be a loopback address or localhost"
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return "the Content-Type must be application/json"
	}
	return ""
}

// loopbackHost reports whether an HTTP Host header names loopback.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(host, "localhost")
}

// fromLoopback reports whether r came from a loopback address.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

var errNoConfigFile = errors.New("no --config file to watch")

// configPath returns the --config file the layers were loaded from, or
// errNoConfigFile.
func configPath(args, environ []string) (string, error) {
	fs := newFlagSet()
	_ = fs.Parse(args)
	if p, _ := fs.GetString("config"); p != "" {
		return p, nil
	}
	if p := lookupEnv(environ, envPrefix+"CONFIG"); p != "" {
		return p, nil
	}
	return "", errNoConfigFile
}
