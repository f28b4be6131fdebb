package devserver

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return cmp.Or(host, "127.0.0.1"), port, nil
}

// pickPort is a free port; for PostgreSQL one below 32768: the server
// stores membership ports in a SMALLINT column, and the kernel's
// ephemeral ports (freePort) lie above it.
func pickPort(host string, low bool) (int, error) {
	if !low {
		return freePort(host)
	}
	for range 100 {
		p := 20000 + rand.IntN(12000)
		if portFree(host, p) == nil {
			return p, nil
		}
	}
	return 0, fmt.Errorf("devserver: no free port from 20000 to 31999 on %s", host)
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("devserver: find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func portFree(host string, port int) error {
	l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return err
	}
	return l.Close()
}
