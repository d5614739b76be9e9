package conformance

import (
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

func TestMain(m *testing.M) { cicadatest.VerifyNoLeaks(m) }
