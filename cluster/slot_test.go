package cluster

import "testing"

// Values from CLUSTER KEYSLOT on redis-server 7.0.15 and the Redis Cluster
// specification's examples (hash tags).
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"":                     0,
		"a":                    15495,
		"b":                    3300,
		"c":                    7365,
		"g":                    7233,
		"foo":                  12182,
		"123456789":            12739, // the CRC16 check value 0x31C3
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"user1000":             3443,
		"foo{}{bar}":           8363, // an empty tag: the whole key
		"foo{{bar}}zap":        4015, // "{bar"
		"foo{bar}{zap}":        5061, // "bar"
		"{":                    4092,
		"}{":                   12793,
	} {
		if got := Slot([]byte(key)); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
