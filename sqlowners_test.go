package ferry_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sqlOwners names, for each of Ferry's tables, the directories whose
// non-test Go files may hold SQL on it. A table's statements live in the
// package that owns the table, as named constants with their reasons;
// everything else (the CLI, status, metrics, the effect activities) calls
// that package's functions.
var sqlOwners = map[string][]string{
	// outbox inserts the rows (the producer API); relaydb holds the relay's
	// reads and marks, repairdb the repairs' changes; poller claims them
	// (its lease protocol); schema defines them; walrelay publishes the
	// table to its replication slot.
	"outbox_events":     {"outbox", "relaydb", "repairdb", "poller", "schema", "walrelay", "internal/bench", "dev/bench", "ferrytest"},
	"outbox_aggregates": {"relaydb", "repairdb", "poller", "schema", "internal/bench", "dev/bench"},
	// The publish-first lane's ownership: poller takes and gives it in its
	// claims and marks, relaydb holds the workflow side's fenced writes,
	// releases and take-backs (migration 0010). The relays' registry is the
	// poller's; relaydb reads the fleet's lane off it.
	"outbox_owners": {"relaydb", "poller", "schema", "dev/bench"},
	"ferry_relays":  {"relaydb", "poller", "schema", "dev/bench"},
	// The repair audit: repairdb writes it in the transaction of the change
	// to outbox_events it records (repairdb's doc says why the two are one
	// package).
	"ferry_repairs": {"repairdb", "schema"},
	// effects/email owns its sent-ledger (migration 0003).
	"ferry_email_ledger":     {"schema", "effects/email"},
	"inbox_processed_events": {"inbox"},
	"inbox_aggregates":       {"inbox"},
	// The migration bookkeeping tables are named by their sets (schema,
	// inbox) and written only by internal/migrate.
	"ferry_schema_migrations": {"schema", "internal/migrate"},
	"ferry_inbox_migrations":  {"inbox", "internal/migrate"},
}

// Why the owners above that are not the table's package hold SQL on it:
//   - internal/bench (dev/bench): the bench's baseline relay without
//     Temporal and its resets between runs (TRUNCATE, trigger off), which
//     measure Ferry and are not part of it;
//   - ferrytest: the test kit reads the rows a test's transaction wrote,
//     and waits for their publish.

// sqlOnTable matches a table named where SQL names one: after a keyword
// that takes a relation (upper case, as Ferry writes SQL, so prose that
// says "rows of outbox_events" does not match), or as a quoted relation
// name (catalog lookups, pgx.Identifier, pg_total_relation_size).
func sqlOnTable(table string) *regexp.Regexp {
	return regexp.MustCompile(`\b(FROM|INTO|UPDATE|JOIN|TABLE|TRUNCATE|ON)\s+` + table + `\b|['"]` + table + `['"]`)
}

// TestSQLOnFerryTablesOnlyInOwningPackages fails when a non-test Go file
// outside a table's owners holds SQL on that table.
func TestSQLOnFerryTablesOnlyInOwningPackages(t *testing.T) {
	t.Parallel()
	patterns := map[string]*regexp.Regexp{}
	for table := range sqlOwners {
		patterns[table] = sqlOnTable(table)
	}
	var found []string
	seen := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		seen++
		dir := filepath.ToSlash(filepath.Dir(path))
		for table, re := range patterns {
			if !re.Match(b) || slices.ContainsFunc(sqlOwners[table], func(owner string) bool { return dir == owner || strings.HasPrefix(dir, owner+"/") }) {
				continue
			}
			for i, line := range strings.Split(string(b), "\n") {
				if re.MatchString(line) {
					found = append(found, filepath.ToSlash(path)+":"+strconv.Itoa(i+1)+": "+table+": "+strings.TrimSpace(line))
				}
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, seen, 100, "the walk must see the tree's Go files")
	slices.Sort(found)
	require.Empty(t, found, "SQL on a Ferry table outside the packages that own it: call the owner's functions (outbox, relaydb, repairdb, inbox, effects/email)")
}

// The check must catch what it is for: a statement in the CLI.
func TestSQLOnTableMatches(t *testing.T) {
	t.Parallel()
	re := sqlOnTable("outbox_events")
	for _, s := range []string{"SELECT id FROM outbox_events WHERE", "INSERT INTO outbox_events (", "UPDATE outbox_events SET", "pg_total_relation_size('outbox_events')", `pgx.Identifier{s, "outbox_events"}`, "ALTER TABLE outbox_events DISABLE"} {
		require.True(t, re.MatchString(s), s)
	}
	for _, s := range []string{"insert rows into outbox_events to see them flow", "rows of outbox_events updated", "outbox_events_pending_idx", "ferry_outbox_events"} {
		require.False(t, re.MatchString(s), s)
	}
}
