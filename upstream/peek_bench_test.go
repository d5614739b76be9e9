package upstream

import (
	"net"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkAsk is what an event loop's ask of an empty notification
// socket costs (Subscriber.Unapplied when nothing is queued: a peek), next
// to what another way to ask would (epoll_wait with no timeout on an epoll
// instance holding only the socket, with the socket empty and readable)
// and to getpid, the cost of any system call's entry and exit.
// docs/performance.md, scenario 5, has the figures.
func BenchmarkAsk(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var fd int
	if err := raw.Control(func(f uintptr) { fd = int(f) }); err != nil {
		b.Fatal(err)
	}
	b.Run("peek-empty", func(b *testing.B) {
		buf := make([]byte, 4096)
		for b.Loop() {
			if _, errno := peek(fd, buf); errno != unix.EAGAIN {
				b.Fatalf("peek: %v, want EAGAIN", errno)
			}
		}
	})
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(ep)
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
		b.Fatal(err)
	}
	wait := func(b *testing.B, want uintptr) {
		var ev [1]unix.EpollEvent
		for b.Loop() {
			if n, _, errno := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&ev[0])), 1, 0, 0, 0); n != want || errno != 0 {
				b.Fatalf("epoll_wait: %d events (want %d), %v", n, want, errno)
			}
		}
	}
	b.Run("epoll_wait-empty", func(b *testing.B) { wait(b, 0) })
	if _, err := s.Write([]byte("+OK\r\n")); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 16)
	for { // until the bytes are in c's receive queue
		if n, _ := peek(fd, buf); n > 0 {
			break
		}
	}
	b.Run("epoll_wait-readable", func(b *testing.B) { wait(b, 1) })
	b.Run("getpid", func(b *testing.B) {
		for b.Loop() {
			unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
		}
	})
}
