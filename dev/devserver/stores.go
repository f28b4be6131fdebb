package devserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	sqliteschema "go.temporal.io/server/schema/sqlite"
)

// Data store names in the server's persistence config.
const (
	mainStore       = "sqlite"
	visibilityStore = "sqlite-visibility"
)

// stores are the SQLite databases of one server: workflow state, and
// visibility in a database of its own where the layout has one.
//
// SQLite has one writer per database, and the plugin gives each database
// one connection. With one database, every visibility row (a workflow's
// start, its search attributes, its close: each touching dozens of indexes
// and full-text triggers) waits for, and holds up, history's and the task
// queues' writes. A database of its own lets visibility write beside them.
type stores struct {
	main       *config.SQL
	visibility *config.SQL // nil: visibility lives in main (older data dirs)
	// restart: the main file existed, with the state of an earlier run.
	restart bool
}

// VisibilityPath is where a data dir made by this version keeps
// visibility, beside the database at path.
func VisibilityPath(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + "-visibility" + filepath.Ext(path)
}

// openStores configures the databases for path ("" for in-memory ones),
// creating the schema of a new file. A data dir made before visibility had
// a file of its own keeps it in the main file: moving it would lose the
// visibility rows of the workflows that file holds.
func openStores(path string) (stores, error) {
	if path == "" {
		// The SQLite plugin creates the schema of an in-memory database itself.
		name := "ferry-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		return stores{main: memoryDB(name), visibility: memoryDB(name + "-visibility")}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return stores{}, fmt.Errorf("devserver: create folder for %s: %w", path, err)
	}
	st := stores{main: fileDB(path)}
	if _, err := os.Stat(path); err == nil {
		st.restart = true
		if _, err := os.Stat(VisibilityPath(path)); err == nil {
			st.visibility = fileDB(VisibilityPath(path))
		}
		return st, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return stores{}, fmt.Errorf("devserver: %w", err)
	}
	st.visibility = fileDB(VisibilityPath(path))
	// The visibility file first: a main file without one reads as an
	// older data dir, which is what a crash between the two leaves.
	for _, c := range []*config.SQL{st.visibility, st.main} {
		if err := os.Remove(c.DatabaseName); err != nil && !errors.Is(err, os.ErrNotExist) {
			return stores{}, fmt.Errorf("devserver: %w", err)
		}
		// The schema tool creates both schemas; each file uses its half.
		if err := sqliteschema.SetupSchema(c); err != nil {
			return stores{}, fmt.Errorf("devserver: set up SQLite schema in %s: %w", c.DatabaseName, err)
		}
	}
	return st, nil
}

func memoryDB(name string) *config.SQL {
	return &config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: name,
		ConnectAttributes: map[string]string{"mode": "memory", "cache": "shared"}}
}

func fileDB(path string) *config.SQL {
	return &config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: path, ConnectAttributes: map[string]string{
		"mode": "rwc",
		// WAL: commits append to a log instead of rewriting pages, and a
		// crash of this process (the dev server's common end) loses nothing.
		"journal_mode": "wal",
		"synchronous":  "1",
	}}
}

func (st stores) persistence() config.Persistence {
	p := config.Persistence{
		DefaultStore:     mainStore,
		VisibilityStore:  mainStore,
		NumHistoryShards: 1,
		DataStores:       map[string]config.DataStore{mainStore: {SQL: st.main}},
	}
	if st.visibility != nil {
		p.VisibilityStore = visibilityStore
		p.DataStores[visibilityStore] = config.DataStore{SQL: st.visibility}
	}
	return p
}

// dynamicConfig is the server's dynamic configuration for these stores.
//
// One task queue partition: with the default four, a workflow task
// written to a partition that has no poller waiting sits there until a
// poller's long poll lands on it (up to a minute), which held new
// workflows back for that long under bursts. A single-process server gains
// nothing from partitions. An older data dir may hold tasks in the other
// partitions, so it keeps reading all four and writes only to the first.
//
// history.shardIOConcurrency stays at its default, 1: measured here with
// 4 (medians of 3 interleaved runs of the bench's engine ceiling), the
// rate was no higher (116 against 124 eager starts/s) and the mean
// persistence latency three times as long (10 ms against 3.5 ms): the
// shard's operations then only queue for SQLite's one connection.
func dynamicConfig(st stores) dynamicconfig.StaticClient {
	dc := dynamicconfig.StaticClient{
		// Search attributes registered at start are usable at once, without
		// the cache refresh delay a cluster would have.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		dynamicconfig.FrontendEnableUpdateWorkflowExecution.Key():   true,
		dynamicconfig.MatchingNumTaskqueueWritePartitions.Key():     1,
	}
	if st.visibility != nil {
		// Made by this version, which never wrote to another partition.
		dc[dynamicconfig.MatchingNumTaskqueueReadPartitions.Key()] = 1
	}
	return dc
}
