package e2e

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/persistence"
	"go.temporal.io/server/common/persistence/serialization"

	"github.com/ferry-outbox/ferry/dev/tcluster"
	"github.com/ferry-outbox/ferry/ferrytest"
)

// Temporal on PostgreSQL: a server, or a cluster of server processes, on
// databases of one test's own on the test PostgreSQL.

// temporalPG is a pair of fresh Temporal databases (persistence and
// visibility), dropped at cleanup; nothing else on the server is touched.
type temporalPG struct {
	url, db, vis string // url: the server, its maintenance database
	shards       int
}

// newTemporalPG names the databases (the server creates them at its first
// start) and drops them at cleanup, after the servers registered later.
func newTemporalPG(t *testing.T, shards int) *temporalPG {
	t.Helper()
	u, err := url.Parse(ferrytest.PostgresURL())
	require.NoError(t, err)
	u.Path = "/postgres"
	name := ferrytest.Name("temporal")
	pg := &temporalPG{url: u.String(), db: name, vis: name + "_visibility", shards: shards}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pg.url)
		if err != nil {
			t.Errorf("drop Temporal's databases: %v", err)
			return
		}
		defer conn.Close(ctx)
		for _, db := range []string{pg.db, pg.vis} {
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
				t.Errorf("drop database %s: %v", db, err)
			}
		}
	})
	return pg
}

// layout is pg as the cluster's processes are given it.
func (pg *temporalPG) layout() tcluster.Postgres {
	return tcluster.Postgres{URL: pg.url, Database: pg.db, VisibilityDatabase: pg.vis, HistoryShards: pg.shards}
}

// dbURL connects to database db of the server.
func (pg *temporalPG) dbURL(db string) string {
	u, _ := url.Parse(pg.url)
	u.Path = "/" + db
	return u.String()
}

// count runs a count query in Temporal's persistence database.
func (pg *temporalPG) count(t *testing.T, query string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.dbURL(pg.db))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, query).Scan(&n))
	return n
}

// startPGTemporal starts a whole server (all four services, one process)
// on pg with fixed ports, so that start after kill brings it back as it was.
func startPGTemporal(t *testing.T, pg *temporalPG) *ownTemporal {
	t.Helper()
	ports := tcluster.LowPorts(8)
	o := &ownTemporal{addr: "127.0.0.1:" + strconv.Itoa(ports[0]), namespace: "default", pg: pg, ports: ports[1:]}
	o.start(t)
	t.Cleanup(func() { o.kill() })
	c, err := client.Dial(client.Options{HostPort: o.addr, Namespace: o.namespace, Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	o.client = c
	return o
}

// failedTemporalStart runs a server process on pg that must fail to start,
// and returns its exit code and output.
func failedTemporalStart(t *testing.T, pg *temporalPG) (int, string) {
	t.Helper()
	ports := tcluster.LowPorts(8)
	o := &ownTemporal{addr: "127.0.0.1:" + strconv.Itoa(ports[0]), namespace: "default", pg: pg, ports: ports[1:]}
	cmd := exec.Command(os.Args[0])
	out := &ferrytest.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), o.childEnv()...)
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, out: out, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	t.Cleanup(c.kill)
	c.waitExit(t, 2*time.Minute)
	return cmd.ProcessState.ExitCode(), out.String()
}

// tempCluster is Temporal as a cluster of processes on one PostgreSQL, the
// local stand-in for a real cluster: a frontend process (the frontend,
// matching and the internal worker) and history processes that share the
// history shards. The processes find each other through the
// cluster_membership table (ringpop); each runs on fixed ports, so a test
// can SIGKILL any of them and start it again as it was.
type tempCluster struct {
	pg       *temporalPG
	frontend *ownTemporal
	history  []*ownTemporal
	client   client.Client
}

// startTCluster starts the frontend process (which sets up the databases)
// and then histories history processes.
func startTCluster(t *testing.T, pg *temporalPG, histories int) *tempCluster {
	t.Helper()
	fe, hist := tcluster.Layout(histories)
	c := &tempCluster{pg: pg, frontend: &ownTemporal{addr: fe.Address, namespace: "default", pg: pg,
		services: fe.Services, ports: fe.Ports}}
	for _, h := range hist {
		c.history = append(c.history, &ownTemporal{addr: h.Address, namespace: "default", pg: pg,
			services: h.Services, ports: h.Ports})
	}
	// Cleanups run last-registered first: the histories go before the
	// frontend, all before the databases are dropped.
	t.Cleanup(func() { c.frontend.kill() })
	for _, h := range c.history {
		t.Cleanup(func() { h.kill() })
	}
	c.frontend.start(t)
	for _, h := range c.history {
		h.start(t)
	}
	tc, err := client.Dial(client.Options{HostPort: fe.Address, Namespace: "default", Logger: ferrytest.QuietLogger()})
	require.NoError(t, err)
	t.Cleanup(tc.Close)
	c.client = tc
	c.frontend.client = tc
	return c
}

// env points a ferry process at the cluster's frontend.
func (c *tempCluster) env() []string { return c.frontend.env() }

// members counts the cluster's live members per role, as ringpop keeps
// them in PostgreSQL (role numbers: the server's persistence.ServiceType).
func (c *tempCluster) members(t *testing.T) map[int]int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.pg.dbURL(c.pg.db))
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT role, count(*) FROM cluster_membership
		WHERE last_heartbeat > now() AT TIME ZONE 'UTC' - interval '20 seconds' GROUP BY role`)
	require.NoError(t, err)
	out := map[int]int{}
	for rows.Next() {
		var role, n int
		require.NoError(t, rows.Scan(&role, &n))
		out[role] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// shardOwners maps each history shard on record to the owner the history
// host wrote into it when it acquired it: "host:port-shard-uuid", host:port
// being the host's gRPC address.
func (c *tempCluster) shardOwners(t *testing.T) map[int32]string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.pg.dbURL(c.pg.db))
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT shard_id, data, data_encoding FROM shards`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int32]string{}
	s := serialization.NewSerializer()
	for rows.Next() {
		var (
			id       int32
			data     []byte
			encoding string
		)
		require.NoError(t, rows.Scan(&id, &data, &encoding))
		info, err := s.ShardInfoFromBlob(persistence.NewDataBlob(data, encoding))
		require.NoError(t, err)
		out[id] = info.Owner
	}
	require.NoError(t, rows.Err())
	return out
}

// historyAddr is the host identity a history process owns shards as.
func historyAddr(h *ownTemporal) string { return h.member().HistoryAddress() }

// owned counts the shards owned by h.
func owned(owners map[int32]string, h *ownTemporal) int {
	n := 0
	for _, o := range owners {
		if strings.HasPrefix(o, historyAddr(h)+"-") {
			n++
		}
	}
	return n
}

// pgAdmin is a connection to the PostgreSQL server's maintenance database,
// closed at cleanup.
func (c *tempCluster) pgAdmin(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.pg.url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return conn
}
