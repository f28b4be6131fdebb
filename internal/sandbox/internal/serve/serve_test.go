package serve

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoop(t *testing.T) {
	t.Parallel()
	var l Loop
	l.Stop(func() { t.Fatal("closeAll ran without Start") })
	require.Empty(t, l.Addr())

	var l2 Loop
	var ln net.Listener
	served := make(chan struct{})
	require.NoError(t, l2.Start(context.Background(), "127.0.0.1:0", func(got net.Listener) error {
		ln = got
		close(served)
		for {
			c, err := got.Accept()
			if err != nil {
				return err
			}
			_ = c.Close()
		}
	}))
	<-served
	require.Equal(t, ln.Addr().String(), l2.Addr())
	c, err := net.DialTimeout("tcp", l2.Addr(), 5*time.Second)
	require.NoError(t, err)
	_ = c.Close()

	closed := 0
	l2.Stop(func() { closed++; _ = ln.Close() })
	l2.Stop(func() { closed++ })
	require.Equal(t, 1, closed, "closeAll runs once")
	_, err = net.DialTimeout("tcp", l2.Addr(), time.Second)
	require.Error(t, err, "stopped: nothing listens")

	err = new(Loop).Start(context.Background(), l2.Addr()+"0", func(net.Listener) error { return nil })
	require.ErrorContains(t, err, "listen on "+l2.Addr()+"0")
}
