package tcluster

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLayout(t *testing.T) {
	t.Parallel()
	fe, hist := Layout(2)
	require.Len(t, hist, 2)
	seen := map[string]bool{fe.Address: true}
	for _, m := range append([]Member{fe}, hist...) {
		require.Equal(t, fe.Address, m.Address, "every member reaches the same frontend")
		require.Len(t, m.Ports, 7)
		for _, p := range m.Ports {
			require.Less(t, p, 32768)
			addr := "127.0.0.1:" + strconv.Itoa(p)
			require.False(t, seen[addr], "port %d given twice", p)
			seen[addr] = true
		}
	}
	require.Equal(t, []string{"frontend", "matching", "worker"}, fe.Services)
	require.Equal(t, []string{"history"}, hist[1].Services)
	require.Equal(t, "127.0.0.1:"+strconv.Itoa(hist[0].Ports[1]), hist[0].HistoryAddress())
}

func TestArgs(t *testing.T) {
	t.Parallel()
	m := Member{Address: "127.0.0.1:7233", Services: []string{"history"}, Ports: []int{1, 2, 3, 4, 5, 6, 7}}
	args := m.Args(Postgres{URL: "postgres://h/postgres", Database: "t", VisibilityDatabase: "t_vis", HistoryShards: 4})
	require.Equal(t, []string{"dev", "temporal"}, args[:2])
	flag := func(name string) string {
		i := slices.Index(args, name)
		require.Positive(t, i, "%s in %v", name, args)
		return args[i+1]
	}
	require.Equal(t, "1,2,3,4,5,6,7", flag("--ports"))
	require.Equal(t, "history", flag("--services"))
	require.Equal(t, "127.0.0.1:7233", flag("--temporal-address"))
	require.Equal(t, "4", flag("--temporal-history-shards"))
	require.Equal(t, "t_vis", flag("--temporal-visibility-database"))
	require.Equal(t, "t", flag("--temporal-database"))
	require.True(t, strings.HasPrefix(flag("--temporal-postgres-url"), "postgres://"))
}
