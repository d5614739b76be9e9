package hotcache

// Key names what a cached reply answers: GET name in db, or HGET name
// field. Its hashes are computed once, by KeyOf or FieldKeyOf, and its
// fields cannot be set otherwise, so a hash never disagrees with the key
// it stands for. Name and Field alias the caller's bytes: a Key is valid
// while they are (the proxy's Keys alias the request being parsed; what
// outlives it holds a Key of cloned bytes).
type Key struct {
	db      int
	name    []byte
	field   []byte
	isField bool
	hash    uint64 // Hash(db, name): the table's and the fill guard's
	reads   uint64 // the detector's: hash for GET, FieldHash(hash, field) for HGET
}

// KeyOf returns the Key of GET name in db (and of any write to name: a
// write evicts every reply of the key).
func KeyOf(db int, name []byte) Key {
	var k Key
	k.Set(db, name)
	return k
}

// FieldKeyOf returns the Key of HGET name field in db.
func FieldKeyOf(db int, name, field []byte) Key {
	var k Key
	k.SetField(db, name, field)
	return k
}

// Set makes k the Key of GET name in db, in place (KeyOf without a copy,
// for the request path).
func (k *Key) Set(db int, name []byte) {
	h := Hash(db, name)
	k.db, k.name, k.field, k.isField, k.hash, k.reads = db, name, nil, false, h, h
}

// SetField makes k the Key of HGET name field in db, in place.
func (k *Key) SetField(db int, name, field []byte) {
	h := Hash(db, name)
	k.db, k.name, k.field, k.isField, k.hash, k.reads = db, name, field, true, h, FieldHash(h, field)
}

// DB is the key's database.
func (k *Key) DB() int { return k.db }

// Name is the key's name (aliased).
func (k *Key) Name() []byte { return k.name }

// Field is the HGET field (aliased); nil for GET.
func (k *Key) Field() []byte { return k.field }

// IsField reports whether k is an HGET field (whose Field may be empty).
func (k *Key) IsField() bool { return k.isField }

// Hash is Hash(DB, Name): which entry and fill-guard stripe the key uses.
func (k *Key) Hash() uint64 { return k.hash }

// ReadHash is the hash the detector counts the key's reads under: Hash
// for GET, FieldHash(Hash, Field) for HGET, so that GET key and each HGET
// key field become hot on their own.
func (k *Key) ReadHash() uint64 { return k.reads }

// Clone returns k with its own copy of Name and Field, to keep beyond the
// life of the bytes k aliases.
func (k *Key) Clone() Key {
	c := *k
	c.name = cloneBytes(k.name)
	c.field = cloneBytes(k.field)
	return c
}

// Size is what k's Name and Field hold (their capacity): what a cloned
// Key costs beyond its own struct.
func (k *Key) Size() int { return cap(k.name) + cap(k.field) }

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}
