package cicadatest

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs a package's tests (call it from TestMain) and fails
// the package if any goroutine outlives them: every in-process Cicada
// (event loops, subscriber, janitor, upstream dials and reconnects) must
// be gone once its test has cleaned up. gnet's process-wide goroutine pool
// (ants) is not Cicada's: its idle workers and janitors live as long as
// the process.
func VerifyNoLeaks(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
		goleak.IgnoreTopFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"))
}
