package cluster

// Slots is the number of hash slots of Redis Cluster.
const Slots = 16384

// crcTable is CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with (Redis's src/crc16.c).
var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(b []byte) uint16 {
	var c uint16
	for _, x := range b {
		c = c<<8 ^ crcTable[byte(c>>8)^x]
	}
	return c
}

// Slot returns the hash slot (0 to Slots-1) of key as Redis computes it
// (keyHashSlot in Redis's cluster.c): only the part between the first '{'
// and the next '}' is hashed when that part is not empty (a hash tag).
func Slot(key []byte) int {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return int(crc16(key) & (Slots - 1))
			}
		}
		break
	}
	return int(crc16(key) & (Slots - 1))
}
