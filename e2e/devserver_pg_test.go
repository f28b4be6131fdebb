package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
