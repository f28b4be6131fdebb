package bench

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSourcesDefaultsAndValidation(t *testing.T) {
	t.Parallel()
	c, err := Config{}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, []string{SourcePoll}, c.Sources, "poll by default: make bench stays as it was")
	require.False(t, c.privateCluster())
	require.NotEmpty(t, c.PostgresURL, "the shared server")
	require.Empty(t, c.PostgresBin)

	c, err = Config{Sources: []string{SourceWAL, SourcePoll, SourceWAL}}.WithDefaults()
	require.NoError(t, err)
	require.Equal(t, []string{SourcePoll, SourceWAL}, c.Sources, "fixed order, duplicates dropped")
	require.True(t, c.privateCluster())
	require.Empty(t, c.PostgresURL, "set once the bench's own cluster runs")
	require.Equal(t, defaultPostgresBin, c.PostgresBin)

	_, err = Config{Sources: []string{"cdc"}}.WithDefaults()
	require.ErrorContains(t, err, "Config.Sources")
	_, err = Config{Sources: []string{SourceWAL}, PostgresURL: "postgres://u:secret@db:5432/x"}.WithDefaults()
	require.ErrorContains(t, err, "Config.PostgresURL")
	require.NotContains(t, err.Error(), "secret")
}

func TestEntriesRunFerryOncePerSource(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{Systems: []string{SystemFerry, SystemLane, SystemPlain}, Sources: []string{SourcePoll, SourceWAL}}}
	burst := shapeOf(WorkloadBurst, 1)
	require.Equal(t, []entry{{SystemFerry, SourcePoll}, {SystemFerry, SourceWAL}, {SystemLane, SourcePoll}, {SystemLane, SourceWAL}, {SystemPlain, ""}}, r.entries(burst))
	var names []string
	for _, e := range r.entries(burst) {
		names = append(names, e.name())
	}
	require.Equal(t, []string{"ferry", "ferry-wal", "publish-first", "publish-first-wal", "plain"}, names)
	require.Equal(t, []entry{{SystemFerry, SourcePoll}, {SystemFerry, SourceWAL}, {SystemPlain, ""}}, r.entries(shapeOf(WorkloadBurstStartNoBroker, 1)),
		"the publish-first lane publishes to RabbitMQ: not run without a broker")

	env := r.ferryEnv(SystemFerry, SourceWAL, 7)
	require.Contains(t, env, "FERRY_SOURCE=wal")
	require.Contains(t, env, "FERRY_WAL_SLOT=ferry_bench_7", "a slot per run, dropped after it")
	require.Contains(t, env, "FERRY_LANE=workflow", "set, so that the bench's own environment cannot change the lane")
	require.Contains(t, r.ferryEnv(SystemFerry, SourcePoll, 8), "FERRY_SOURCE=poll")
	require.NotContains(t, r.ferryEnv(SystemFerry, SourcePoll, 8), "FERRY_WAL_SLOT=ferry_bench_8")
	require.Contains(t, r.ferryEnv(SystemLane, SourcePoll, 9), "FERRY_LANE=publish-first")
}

func TestParseLSN(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want uint64
	}{
		{"0/0", 0},
		{"0/16B3748", 0x16B3748},
		{"16/B374D848", 0x16<<32 | 0xB374D848},
	} {
		got, err := parseLSN(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got, tt.in)
	}
	for _, bad := range []string{"", "16", "x/1", "1/100000000"} {
		_, err := parseLSN(bad)
		require.Error(t, err, bad)
	}
	a, _ := parseLSN("0/FFFFFFF0")
	b, _ := parseLSN("1/10")
	require.Equal(t, uint64(0x20), b-a, "the difference crosses the halves")
}

func TestParseStatTimes(t *testing.T) {
	t.Parallel()
	// Fields 4 (ppid) and 14-17 (utime, stime, cutime, cstime); the command
	// name holds a space and a parenthesis.
	stat := []byte("4242 (postgres: x) y) S 4200 4200 4200 0 -1 4194560 100 0 0 0 150 50 700 300 20 0 1 0 12345 1000000 100 18446744073709551615")
	st, err := parseStatTimes(stat)
	require.NoError(t, err)
	require.Equal(t, statTimes{ppid: 4200, self: 2 * time.Second, children: 10 * time.Second}, st)

	_, err = parseStatTimes([]byte("1 (x) S 0 1"))
	require.Error(t, err)
	_, err = parseStatTimes([]byte("no command"))
	require.Error(t, err)
}

func TestClusterCPUOfThisProcessesParent(t *testing.T) {
	t.Parallel()
	// This test process is a child of `go test`'s: the sum over its
	// parent's children includes it, and never goes down.
	b, err := os.ReadFile("/proc/self/stat")
	require.NoError(t, err)
	st, err := parseStatTimes(b)
	require.NoError(t, err)
	first, err := clusterCPU(st.ppid)
	require.NoError(t, err)
	second, err := clusterCPU(st.ppid)
	require.NoError(t, err)
	require.GreaterOrEqual(t, second, first)
	require.Positive(t, second)
}

func TestPostgresCostIsTheDifference(t *testing.T) {
	t.Parallel()
	start := pgReading{updated: 1000, hotUpdated: 400, lsn: 0xFFFFFF00, cpu: 3 * time.Second, hasCPU: true}
	end := pgReading{updated: 4000, hotUpdated: 2400, lsn: 1<<32 | 0x100, cpu: 4500 * time.Millisecond, hasCPU: true}
	c := postgresCost(start, end)
	require.Equal(t, int64(3000), c.RowsUpdated)
	require.Equal(t, int64(2000), c.HOTUpdated)
	require.Equal(t, int64(0x200), c.WALBytes)
	require.NotNil(t, c.CPUSeconds)
	require.InDelta(t, 1.5, *c.CPUSeconds, 1e-9)

	start.hasCPU, end.hasCPU = false, false
	require.Nil(t, postgresCost(start, end).CPUSeconds, "not the bench's own cluster: no CPU figure")
}

func TestSummarizeSourcesSideBySide(t *testing.T) {
	t.Parallel()
	cpu := func(s float64) *float64 { return &s }
	run := func(sys, src string, rep int, eps float64, p99 time.Duration, pg PostgresCost) RunResult {
		return RunResult{Workload: WorkloadBurst, System: sys, Source: src, Rep: rep, Events: 1000, Throughput: eps,
			Latency: Latency{P50: p99 / 2, P99: p99, N: 1000}, Postgres: &pg}
	}
	res := &Results{Config: Config{Workloads: []string{WorkloadBurst}, Scale: 0.1, Reps: 3, Sources: []string{SourcePoll, SourceWAL}},
		Runs: []RunResult{
			run(SystemFerry, SourcePoll, 1, 400, ms(800), PostgresCost{RowsUpdated: 3000, HOTUpdated: 2000, WALBytes: 2_000_000, CPUSeconds: cpu(2)}),
			run(SystemFerry, SourcePoll, 2, 500, ms(900), PostgresCost{RowsUpdated: 3100, HOTUpdated: 2100, WALBytes: 2_200_000, CPUSeconds: cpu(3)}),
			run(SystemFerry, SourcePoll, 3, 450, ms(700), PostgresCost{RowsUpdated: 3200, HOTUpdated: 2200, WALBytes: 2_400_000, CPUSeconds: cpu(4)}),
			run(SystemFerry, SourceWAL, 1, 900, ms(400), PostgresCost{RowsUpdated: 2000, HOTUpdated: 1500, WALBytes: 1_500_000, CPUSeconds: cpu(1)}),
			run(SystemPlain, "", 1, 2000, ms(100), PostgresCost{RowsUpdated: 1000, WALBytes: 1_000_000}),
		}}
	res.summarize()
	ws := res.workload(WorkloadBurst)
	require.NotNil(t, ws.Ferry)
	require.NotNil(t, ws.FerryWAL)
	require.NotNil(t, ws.Plain)
	require.Equal(t, 3, ws.Ferry.Reps)
	require.Equal(t, 1, ws.FerryWAL.Reps)
	require.InDelta(t, 3.1, ws.Ferry.OutboxUpdatesPerEvent, 1e-9, "the median per event")
	require.InDelta(t, 2.1, ws.Ferry.OutboxHOTUpdatesPerEvent, 1e-9)
	require.InDelta(t, 2200, ws.Ferry.WALBytesPerEvent, 1e-9)
	require.InDelta(t, 3, ws.Ferry.PostgresCPUPer1k, 1e-9)
	require.InDelta(t, 2.0, ws.FerryWAL.OutboxUpdatesPerEvent, 1e-9)
	require.InDelta(t, 1, ws.FerryWAL.PostgresCPUPer1k, 1e-9)
	require.Zero(t, ws.Plain.PostgresCPUPer1k, "no CPU figure in its runs")
	require.InDelta(t, 2.0, ws.WALThroughputRatio, 1e-9, "wal / poll")
	require.InDelta(t, 0.5, ws.WALP99Ratio, 1e-9)
	require.InDelta(t, 0.225, ws.ThroughputRatio, 1e-9, "ferry (poll) / plain, as before")
	require.Empty(t, res.Problems)

	var out bytes.Buffer
	res.WriteTable(&out)
	for _, want := range []string{"ferry-poll", "ferry-wal", "wal/poll", "2.00×", "PostgreSQL per event", "outbox rows updated/ev", "2,200", "1,500"} {
		require.Contains(t, out.String(), want)
	}
	var js bytes.Buffer
	require.NoError(t, res.WriteJSON(&js))
	for _, want := range []string{`"ferry_wal"`, `"source": "wal"`, `"wal_bytes_per_event": 2200`, `"throughput_ratio_wal_over_poll": 2`} {
		require.Contains(t, js.String(), want)
	}
}

func TestRunsWithoutASourceAreFerryPoll(t *testing.T) {
	t.Parallel()
	// results.json of benches before sources: Ferry's runs have none.
	require.Equal(t, SystemFerry, RunResult{System: SystemFerry}.variant())
	require.Equal(t, SystemFerry, RunResult{System: SystemFerry, Source: SourcePoll}.variant())
	require.Equal(t, variantFerryWAL, RunResult{System: SystemFerry, Source: SourceWAL}.variant())
	require.Equal(t, SystemPlain, RunResult{System: SystemPlain}.variant())
	ws := WorkloadSummary{Ferry: &SystemSummary{}}
	require.Equal(t, "ferry", ws.label(SystemFerry), "alone, as before")
	ws.FerryWAL = &SystemSummary{}
	require.Equal(t, "ferry-poll", ws.label(SystemFerry))
}
