package hotcache

import "sync/atomic"

// Hold is one suspension of the cache: from Cache.Hold until Release, the
// cache answers no hit and keeps no fill (Lookup reports Suspended,
// BeginFill refuses, and a ticket taken before either is void). Holds
// nest: the cache answers again when every Hold taken is released.
//
// A Hold is released exactly once. Ownership passes with the pointer: the
// event loop that took it for a request in flight, or the upstream
// subscriber it was handed to with a fence, is the one that releases it.
// A second Release is a bug that, with a bare counter, would let hits
// through while another write is in flight: here it never resumes the
// cache, counts in Stats.DoubleReleases, and panics when
// Config.StrictHolds is set (tests). Release is safe from any goroutine.
type Hold struct {
	c    *Cache
	done atomic.Bool
}

// Release ends the suspension. See Hold for a second call.
func (h *Hold) Release() {
	if !h.done.CompareAndSwap(false, true) {
		h.c.doubleReleases.Add(1)
		if h.c.strictHolds {
			panic("hotcache: Hold released twice")
		}
		return
	}
	h.c.epoch.Add(1)
	h.c.suspended.Add(-1)
}
