package status

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/api/workflowservice/v1"
)

// Temporal is the Temporal cluster Ferry talks to, as its frontend
// describes itself (GetClusterInfo). It holds no credentials: the address
// is the configured host:port, and the stores are named, not their
// connection settings.
type Temporal struct {
	Address       string `json:"address"`
	ClusterName   string `json:"cluster_name"`
	ServerVersion string `json:"server_version"`
	// Persistence is the kind of store that keeps workflow state:
	// "SQLite" (the embedded dev server's), "SQL" (PostgreSQL, MySQL),
	// "Cassandra", or the store's own name when none of these.
	Persistence string `json:"persistence"`
	// PersistenceStore and VisibilityStore are the server's own names of
	// its stores (sqlite, postgres12, mysql8, cassandra, elasticsearch).
	PersistenceStore string `json:"persistence_store"`
	VisibilityStore  string `json:"visibility_store"`
	HistoryShards    int32  `json:"history_shards"`
}

// CollectTemporal asks the frontend at address (as configured) about
// itself.
func CollectTemporal(ctx context.Context, ws workflowservice.WorkflowServiceClient, address string) (*Temporal, error) {
	info, err := ws.GetClusterInfo(ctx, &workflowservice.GetClusterInfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("describe the Temporal cluster at %s: %w", hostPort(address), err)
	}
	return &Temporal{
		Address:          hostPort(address),
		ClusterName:      info.GetClusterName(),
		ServerVersion:    info.GetServerVersion(),
		Persistence:      persistenceKind(info.GetPersistenceStore()),
		PersistenceStore: info.GetPersistenceStore(),
		VisibilityStore:  info.GetVisibilityStore(),
		HistoryShards:    info.GetHistoryShardCount(),
	}, nil
}

// String is the one line ping and status print.
func (t *Temporal) String() string {
	return fmt.Sprintf("Temporal %s at %s (cluster %s): persistence %s (%s), visibility %s, history shards %d",
		t.ServerVersion, t.Address, t.ClusterName, t.Persistence, t.PersistenceStore, t.VisibilityStore, t.HistoryShards)
}

// persistenceKind names the kind of the server's persistence store.
func persistenceKind(store string) string {
	switch s := strings.ToLower(store); {
	case s == "sqlite":
		return "SQLite"
	case strings.HasPrefix(s, "postgres"), strings.HasPrefix(s, "mysql"):
		return "SQL"
	case s == "cassandra":
		return "Cassandra"
	default:
		return store
	}
}

// hostPort drops anything before an "@": a frontend address is host:port,
// and one written as user:password@host:port must not be echoed whole.
func hostPort(address string) string {
	if i := strings.LastIndex(address, "@"); i >= 0 {
		return address[i+1:]
	}
	return address
}
