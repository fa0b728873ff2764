package harness

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortBelowEphemeralRange: the ports FreePort hands out are free, and, where the
// kernel's ephemeral range leaves room below it, come from there, where no outgoing
// connection can take them before the test listens.
func TestFreePortBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 20 {
		port := FreePort(t)
		if low > minFreePort+1000 && (port < minFreePort || port >= low) {
			t.Errorf("FreePort gave %d, want one in [%d, %d), below the ephemeral range", port, minFreePort, low)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("FreePort gave %d, which cannot be listened on: %v", port, err)
		}
		_ = ln.Close()
	}
}
