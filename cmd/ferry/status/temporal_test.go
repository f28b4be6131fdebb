package status

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPersistenceKind(t *testing.T) {
	t.Parallel()
	for store, want := range map[string]string{
		"sqlite": "SQLite", "postgres12": "SQL", "postgres12_pgx": "SQL", "mysql8": "SQL", "cassandra": "Cassandra", "custom": "custom",
	} {
		require.Equal(t, want, persistenceKind(store), store)
	}
}

func TestHostPortDropsCredentials(t *testing.T) {
	t.Parallel()
	require.Equal(t, "127.0.0.1:7233", hostPort("127.0.0.1:7233"))
	require.Equal(t, "temporal:7233", hostPort("user:secret@temporal:7233"))
}
