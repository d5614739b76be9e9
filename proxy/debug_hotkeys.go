package proxy

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cicada-proxy/cicada/hotcache"
)

// Bounds of /debug/hotkeys?limit=N.
const (
	defaultHotKeysLimit = 100
	maxHotKeysLimit     = 10000
)

// HotKey is one entry of /debug/hotkeys (on the local admin listener): a
// cached GET key or HGET field. Values never appear; Bytes is only a
// length.
type HotKey struct {
	DB  int    `json:"db"`
	Key string `json:"key"`
	// KeyBase64 is the key's exact bytes when they are not valid UTF-8
	// (Key then has U+FFFD in their place).
	KeyBase64 string `json:"key_base64,omitempty"`
	// Field is HGET's field; absent for GET.
	Field       *string `json:"field,omitempty"`
	FieldBase64 string  `json:"field_base64,omitempty"`
	// OpsPerSec is the detector's estimate of the reads per second over
	// the last second (GET key, or HGET key field), all loops together.
	OpsPerSec uint32 `json:"ops_per_sec"`
	// Cached is true while the reply can be served: not past its TTL and
	// the cache not suspended.
	Cached bool `json:"cached"`
	// Bytes is the length of the reply as served in RESP2 (its encoding,
	// value included), which RESP3 clients get too, except for a nil
	// reply: 5 for it ($-1\r\n), served to RESP3 as _\r\n (3 bytes).
	Bytes int `json:"bytes"`
	// Nil is true for a nil reply (GET of a missing key, HGET of a
	// missing field); absent otherwise.
	Nil bool `json:"nil,omitempty"`
}

// HotKeys is the body of /debug/hotkeys.
type HotKeys struct {
	// Total is the number of cached replies; Keys holds the first Limit
	// of them by OpsPerSec, highest first (ties by db, key, field).
	Total     int      `json:"total"`
	Limit     int      `json:"limit"`
	Suspended bool     `json:"suspended"`
	Keys      []HotKey `json:"keys"`
}

// hotKeysHandler serves /debug/hotkeys: the cached hot keys and hash
// fields with their current rate. Runs on the local admin HTTP
// goroutines; it reads the cache (lock-free) and the detector (atomic
// loads).
func (srv *Server) hotKeysHandler(w http.ResponseWriter, r *http.Request) {
	limit := defaultHotKeysLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxHotKeysLimit {
			http.Error(w, "limit must be an integer from 1 to "+strconv.Itoa(maxHotKeysLimit)+"\n", http.StatusBadRequest)
			return
		}
		limit = n
	}
	body := srv.hotKeys(limit)
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(body)
}

// hotKeys lists the cache's replies, highest rate first, at most limit.
func (srv *Server) hotKeys(limit int) HotKeys {
	suspended := srv.cache.Suspended()
	var keys []HotKey
	srv.cache.Items(func(it hotcache.Item) {
		k := HotKey{DB: it.DB, OpsPerSec: srv.det.Estimate(it.Hash), Cached: !it.Expired && !suspended, Bytes: it.Bytes, Nil: it.Nil}
		k.Key, k.KeyBase64 = jsonText(it.Key)
		if it.IsField {
			f, b := jsonText(it.Field)
			k.Field, k.FieldBase64 = &f, b
		}
		keys = append(keys, k)
	})
	slices.SortFunc(keys, func(a, b HotKey) int {
		if c := cmp.Compare(b.OpsPerSec, a.OpsPerSec); c != 0 {
			return c
		}
		if c := cmp.Compare(a.DB, b.DB); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		var fa, fb string
		if a.Field != nil {
			fa = *a.Field
		}
		if b.Field != nil {
			fb = *b.Field
		}
		return strings.Compare(fa, fb)
	})
	out := HotKeys{Total: len(keys), Limit: limit, Suspended: suspended, Keys: keys[:min(limit, len(keys))]}
	if out.Keys == nil {
		out.Keys = []HotKey{}
	}
	return out
}

// jsonText returns s for a JSON string, and its base64 when s is not valid
// UTF-8 (which JSON would alter).
func jsonText(s string) (text, b64 string) {
	if utf8.ValidString(s) {
		return s, ""
	}
	return strings.ToValidUTF8(s, "\uFFFD"), base64.StdEncoding.EncodeToString([]byte(s))
}
