package hotkeys

import "container/heap"

// summary is a weighted Space-Saving summary (Metwally, Agrawal and El
// Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data
// Streams", ICDT 2005, section 3; the weighted form adds w instead of 1):
// at most capacity counters. A key that is counted adds its weight to its
// counter; a new key takes a free counter, or replaces the smallest one and
// inherits its count (the inherited part is its error). So every counted
// key's count overestimates its true weight by at most err, which is at most
// total/capacity, and any key whose true weight exceeds total/capacity is
// in the summary.
//
// Owned by one event loop's recorder (see Tracker); not safe for
// concurrent use.
type summary struct {
	capacity int
	idx      map[string]int // key -> position in h
	h        counters       // min-heap by count
	total    uint64         // sum of all weights added
}

type counter struct {
	key   string
	count uint64
	err   uint64 // part of count inherited from the replaced key
}

// counters is a min-heap of counters by count that keeps idx in step.
type counters struct {
	c   []counter
	idx map[string]int
}

func (h *counters) Len() int           { return len(h.c) }
func (h *counters) Less(i, j int) bool { return h.c[i].count < h.c[j].count }
func (h *counters) Swap(i, j int) {
	h.c[i], h.c[j] = h.c[j], h.c[i]
	h.idx[h.c[i].key] = i
	h.idx[h.c[j].key] = j
}
func (h *counters) Push(x any) {
	h.c = append(h.c, x.(counter))
	h.idx[h.c[len(h.c)-1].key] = len(h.c) - 1
}
func (h *counters) Pop() any {
	n := len(h.c) - 1
	v := h.c[n]
	h.c = h.c[:n]
	delete(h.idx, v.key)
	return v
}

func newSummary(capacity int) *summary {
	idx := make(map[string]int, capacity)
	return &summary{capacity: capacity, idx: idx, h: counters{c: make([]counter, 0, capacity), idx: idx}}
}

// add counts weight w for key. A zero weight changes nothing. It allocates
// only when key is not in the summary (a copy of the key).
func (s *summary) add(key []byte, w uint64) {
	if w == 0 {
		return
	}
	s.total += w
	if i, ok := s.idx[string(key)]; ok {
		s.h.c[i].count += w
		heap.Fix(&s.h, i)
		return
	}
	if len(s.h.c) < s.capacity {
		heap.Push(&s.h, counter{key: string(key), count: w})
		return
	}
	min := s.h.c[0]
	delete(s.idx, min.key)
	k := string(key)
	s.h.c[0] = counter{key: k, count: min.count + w, err: min.count}
	s.idx[k] = 0
	heap.Fix(&s.h, 0)
}

// reset empties the summary, keeping its storage.
func (s *summary) reset() {
	clear(s.idx)
	s.h.c = s.h.c[:0]
	s.total = 0
}

// mergeInto adds every counter's count to m, by key.
func (s *summary) mergeInto(m map[string]uint64) {
	for _, c := range s.h.c {
		m[c.key] += c.count
	}
}
