package upstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Keyspace notifications say nothing about FLUSHALL and FLUSHDB. Redis does
// tell clients that use server-assisted client-side caching: it sends every
// tracking client a "flush everything" invalidation (a nil payload). So a
// third connection turns tracking on in broadcast mode for a prefix no key
// uses, redirected to the notification connection, which also subscribes to
// the tracking channel. A flush then arrives there as a message with a nil
// payload. (SWAPDB sends nothing, in any form.)

// TrackingChannel is the channel Redis sends redirected invalidations to.
const TrackingChannel = "__redis__:invalidate"

// trackingPrefix is the BCAST prefix: no application key starts with it,
// so only flushes are reported.
const trackingPrefix = "\x00cicada-flush-watch\x00"

// watchFlushes opens a connection with opts and turns on tracking
// redirected to the client with id subID. The returned client must stay
// open for as long as the watch is wanted.
func watchFlushes(ctx context.Context, opts *redis.Options, subID int64) (*redis.Client, error) {
	tr := redis.NewClient(opts)
	err := tr.Do(ctx, "CLIENT", "TRACKING", "ON", "REDIRECT", subID, "BCAST", "PREFIX", trackingPrefix).Err()
	if err != nil {
		_ = tr.Close()
		return nil, fmt.Errorf("upstream: CLIENT TRACKING for flush detection: %w", err)
	}
	return tr, nil
}
