package main

import (
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pacer sleeps a goroutine until an absolute time with microsecond
// precision: a timerfd (CLOCK_MONOTONIC, absolute) read through the Go
// netpoller. time.Sleep cannot: on an idle Go process its wake-ups come up
// to 1 ms late (the netpoller's epoll_wait timeout is in whole
// milliseconds; measured here: 880 µs median lateness for a 200 µs
// sleep), which in an open loop timed from intended send times becomes
// latency the server never caused. A timerfd that fires makes its fd
// readable, which wakes epoll_wait at once. One pacer per connection
// goroutine; not safe for concurrent use.
type pacer struct {
	f   *os.File
	fd  int // f's descriptor (f.Fd() would make it blocking)
	buf [8]byte
	// Clock mapping: base is time.Now() when mono (CLOCK_MONOTONIC, ns)
	// was read; Go's monotonic clock is CLOCK_MONOTONIC on Linux.
	base time.Time
	mono int64
}

// newPacer returns a pacer; the caller closes it. Errors are
// timerfd_create's and clock_gettime's.
func newPacer() (*pacer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("loadgen: timerfd_create: %w", err)
	}
	// time.Now first: mono may be read later than base's instant (by tens
	// of ns, or more if the goroutine is descheduled), which only delays
	// wake-ups.
	base := time.Now()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("loadgen: clock_gettime: %w", err)
	}
	return &pacer{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd, base: base, mono: ts.Nano()}, nil
}

// sleepUntil returns at t or just after, never before (t already past: at
// once).
func (p *pacer) sleepUntil(t time.Time) error {
	for time.Now().Before(t) {
		// t is in the future, so at > 0 (0 would disarm the timer).
		at := p.mono + int64(t.Sub(p.base))
		spec := unix.ItimerSpec{Value: unix.NsecToTimespec(at)}
		if err := unix.TimerfdSettime(p.fd, unix.TFD_TIMER_ABSTIME, &spec, nil); err != nil {
			return fmt.Errorf("loadgen: timerfd_settime: %w", err)
		}
		if _, err := p.f.Read(p.buf[:]); err != nil { // parks in the netpoller until the expiry
			return err
		}
	}
	return nil
}

func (p *pacer) Close() error { return p.f.Close() }
