package resources

import (
	"os"
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

// TestMain removes the Cicada binary the tests built (cicadatest.BuiltBinary).
func TestMain(m *testing.M) {
	code := m.Run()
	cicadatest.RemoveBuilt()
	os.Exit(code)
}
