package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-outbox/ferry/dev/devserver"
	"github.com/ferry-outbox/ferry/workflows"
)

// The embedded server on PostgreSQL (devserver.Config.Postgres), in a
// process of its own on fresh databases: its first start creates them and
// sets up both schemas with the server's own schema files, Ferry runs
// through it, a restart after a SIGKILL finds the schemas up to date and the
// workflows where they were, and a start with another shard count fails,
// naming both counts.
func TestDevserverPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := newTemporalPG(t, 4)
	srv := startPGTemporal(t, pg)
	out := srv.proc.out.String()
	require.Contains(t, out, `created database "`+pg.db+`"`)
	require.Contains(t, out, `database "`+pg.db+`": upgrading schema postgresql/v12/temporal from 0.0 to 1.19`)
	require.Contains(t, out, `database "`+pg.vis+`": upgrading schema postgresql/v12/visibility from 0.0 to 1.14`)

	e := setup(t)
	e.startProcess(t, "run", srv.env()...)
	e.commitN(t, 5, 1)
	msgs := e.br.Collect(t, 5, time.Minute)
	require.Len(t, msgs, 5)
	require.Positive(t, pg.count(t, `SELECT count(*) FROM executions`), "workflow state is in PostgreSQL")
	waitFor(t, 30*time.Second, "the 4 history shards on record", func() bool { return pg.count(t, `SELECT count(*) FROM shards`) == 4 })

	srv.kill()
	srv.start(t)
	out = srv.proc.out.String()
	require.Contains(t, out, `database "`+pg.db+`": schema postgresql/v12/temporal is up to date`)
	require.Contains(t, out, `database "`+pg.vis+`": schema postgresql/v12/visibility is up to date`)
	require.NotContains(t, out, "upgrading")
	_, err := srv.client.DescribeWorkflowExecution(ctx, workflows.WorkflowID(e.aggType, aggID(0)), "")
	require.NoError(t, err, "the aggregate's workflow survived the restart")
	e.commitN(t, 5, 1)
	msgs = e.br.Collect(t, 5, time.Minute)
	require.Len(t, msgs, 5)
	for i, m := range msgs {
		require.Equal(t, int64(6+i), parse(t, m).version, "the aggregate's order went on where it was")
	}

	// ping and status name the Temporal they talk to and its persistence,
	// and no password.
	ferryEnv := append([]string{"FERRY_POSTGRES_URL=" + e.db.URL, "FERRY_AMQP_URL=" + e.br.URL, "FERRY_TASK_QUEUE=" + e.taskQueue}, srv.env()...)
	for _, cmd := range []string{"ping", "status"} {
		code, out := ferry(t, ferryEnv, cmd)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "at "+srv.addr+" (cluster active): persistence SQL (postgres12), visibility postgres12, history shards 4", cmd)
		require.NotContains(t, out, "xxxxx", cmd)
	}

	other := *pg
	other.shards = 8
	code, out := failedTemporalStart(t, &other)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, `Postgres.HistoryShards is 8, but database "`+pg.db+`" was set up with 4 history shards`)
}

// Bad PostgreSQL and cluster settings are refused before anything is
// dialled, with an error that names the setting and never the password.
func TestDevserverRejectsBadPostgresSettings(t *testing.T) {
	t.Parallel()
	pg := func(p devserver.Postgres) *devserver.Postgres { return &p }
	for _, tt := range []struct {
		name string
		cfg  devserver.Config
		want string
	}{
		{"no URL", devserver.Config{Postgres: pg(devserver.Postgres{})}, "Postgres.URL is empty"},
		{"not a PostgreSQL URL", devserver.Config{Postgres: pg(devserver.Postgres{URL: "mysql://u:topsecret@h/db"})}, "Postgres.URL: want postgres://"},
		{"bad port", devserver.Config{Postgres: pg(devserver.Postgres{URL: "postgres://u:topsecret@h:99999/db"})}, `Postgres.URL: port "99999"`},
		{"negative shards", devserver.Config{Postgres: pg(devserver.Postgres{URL: "postgres://h/db", HistoryShards: -1})}, "Postgres.HistoryShards is -1"},
		{"one database for both", devserver.Config{Postgres: pg(devserver.Postgres{URL: "postgres://h/db", Database: "t", VisibilityDatabase: "t"})},
			`Postgres.Database and Postgres.VisibilityDatabase are both "t"`},
		{"a membership port too high for PostgreSQL", devserver.Config{Address: "127.0.0.1:0", Postgres: pg(devserver.Postgres{URL: "postgres://h/db"}),
			InternalPorts: []int{21000, 21001, 40000, 21003, 21004, 21005, 21006}}, "InternalPorts[2] is 40000"},
		{"unknown service", devserver.Config{Services: []string{"history", "archiver"}}, `Services: "archiver" is not one of`},
		{"a part without PostgreSQL", devserver.Config{Services: []string{"history"}}, "that needs Postgres"},
		{"a part without the frontend's address", devserver.Config{Address: "127.0.0.1:0", Services: []string{"history"},
			Postgres: pg(devserver.Postgres{URL: "postgres://h/db"})}, "needs the frontend's fixed address"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := devserver.Start(context.Background(), tt.cfg)
			require.ErrorContains(t, err, tt.want)
			require.NotContains(t, err.Error(), "topsecret")
		})
	}
}
