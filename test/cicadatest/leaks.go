package cicadatest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakGrace is how long goroutines may take to end after the tests: a
// go-redis pool whose dials failed retries in a goroutine that sleeps 1 s
// between dials and sees the pool closed only when it wakes.
const leakGrace = 3 * time.Second

// VerifyNoLeaks runs a package's tests (call it from TestMain) and fails
// the package if any goroutine outlives them by leakGrace: every
// in-process Cicada (event loops, subscriber, janitor, upstream dials and
// reconnects) must be gone once its test has cleaned up. gnet's
// process-wide goroutine pool (ants) is not Cicada's: its idle workers and
// janitors live as long as the process. It also removes the binary
// StartBinary built (RemoveBuilt).
func VerifyNoLeaks(m *testing.M) {
	code := m.Run()
	RemoveBuilt()
	if code == 0 {
		deadline := time.Now().Add(leakGrace)
		for {
			err := goleak.Find(
				goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
				goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
				goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: goroutines outlived the tests by %s: %v\n", leakGrace, err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Exit(code)
}
