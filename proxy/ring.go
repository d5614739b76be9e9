package proxy

// ring is a FIFO queue stored in a chain of chunks: the first holds 8
// elements, each next one twice as many as the one before, up to
// ringChunkMax. A chunk is dropped as soon as the queue moves past it
// (one is kept as a spare), so storage follows the backlog up and down
// without the copies and large contiguous allocations of a doubling
// array: a backlog of a million requests costs what it holds, not up to
// five times that in freed but unreturned arrays. Owned by one event loop.
type ring[T any] struct {
	head, tail *ringChunk[T]
	hi, ti     int // next element to pop in head.v; next free element in tail.v
	n          int
	size       int           // elements the chunks (spare included) can hold
	spare      *ringChunk[T] // an emptied chunk, reused before allocating
}

type ringChunk[T any] struct {
	v    []T
	next *ringChunk[T]
}

// ringChunkMax is the largest chunk, in elements (a request chunk is 14 KB).
const ringChunkMax = 256

func (r *ring[T]) len() int { return r.n }

// cap is how many elements the ring's storage holds: what it costs,
// whatever len is.
func (r *ring[T]) cap() int { return r.size }

func (r *ring[T]) push(v T) {
	if r.tail == nil || r.ti == len(r.tail.v) {
		r.addChunk()
	}
	r.tail.v[r.ti] = v
	r.ti++
	r.n++
}

// addChunk appends a chunk to the chain: the spare if there is one, or a
// new one twice the size of the tail.
func (r *ring[T]) addChunk() {
	c := r.spare
	if c != nil {
		r.spare = nil
	} else {
		n := 8
		if r.tail != nil {
			n = min(2*len(r.tail.v), ringChunkMax)
		}
		c = &ringChunk[T]{v: make([]T, n)}
		r.size += n
	}
	if r.tail == nil {
		r.head, r.hi = c, 0
	} else {
		r.tail.next = c
	}
	r.tail, r.ti = c, 0
}

// front returns the oldest element; the ring must not be empty.
func (r *ring[T]) front() *T { return &r.head.v[r.hi] }

// at returns the i-th oldest element, 0 <= i < len(); it walks the chunks
// (at most a few: they double up to ringChunkMax).
func (r *ring[T]) at(i int) *T {
	c := r.head
	i += r.hi
	for i >= len(c.v) {
		i -= len(c.v)
		c = c.next
	}
	return &c.v[i]
}

// pop removes the oldest element; the ring must not be empty.
func (r *ring[T]) pop() T {
	var zero T
	c := r.head
	v := c.v[r.hi]
	c.v[r.hi] = zero
	r.hi++
	r.n--
	switch {
	case r.n == 0:
		// Empty: start over in this chunk (the next ones, if any,
		// are the spare's successor or unused).
		r.hi, r.ti, r.tail = 0, 0, c
		r.dropAfter(c)
	case r.hi == len(c.v):
		r.head, r.hi = c.next, 0
		c.next = nil
		if r.spare == nil && len(c.v) == ringChunkMax {
			r.spare = c
		} else {
			r.size -= len(c.v)
		}
	}
	return v
}

// dropAfter frees the chunks chained after c.
func (r *ring[T]) dropAfter(c *ringChunk[T]) {
	for x := c.next; x != nil; x = x.next {
		r.size -= len(x.v)
	}
	c.next = nil
}

// shrink frees the storage of an empty ring grown past its first chunk
// (for a connection that went idle after a burst); it reports whether it
// freed anything. A non-empty ring is left alone.
func (r *ring[T]) shrink() bool {
	if r.n > 0 || r.size <= 8 {
		return false
	}
	*r = ring[T]{}
	return true
}
