package proxy

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
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

// jsonText returns s for a JSON string, and its base64 when s is not valid
// UTF-8 (which JSON would alter).
func jsonText(s string) (text, b64 string) {
	if utf8.ValidString(s) {
		return s, ""
	}
	return strings.ToValidUTF8(s, "\uFFFD"), base64.StdEncoding.EncodeToString([]byte(s))
}
