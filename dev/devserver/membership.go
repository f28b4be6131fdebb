package devserver

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strconv"
	"time"

	// The SQLite driver the server's own persistence uses.
	_ "modernc.org/sqlite"
)

// forgetDeadMembers deletes the cluster members that an earlier run of the
// server left in its database and that no longer listen. A member is a
// host:port of the server's membership layer; at start the server tries to
// join every member it finds, and waits for dead ones until its maximum
// join duration has passed, so a server restarted within a minute of its
// last stop sat idle for ~50 s (longer than a start's timeout). A member
// whose port still accepts connections is left alone: it may belong to a
// server that still runs on this file. It returns how many it deleted.
func forgetDeadMembers(ctx context.Context, path string) (int, error) {
	// mode=rw: never create a file that is not there (an empty file would
	// pass for a database without a schema on the next start).
	db, err := sql.Open("sqlite", "file:"+path+"?mode=rw&_pragma=busy_timeout(5000)")
	if err != nil {
		return 0, fmt.Errorf("devserver: open %s: %w", path, err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT rpc_address, rpc_port FROM cluster_membership`)
	if err != nil {
		return 0, fmt.Errorf("devserver: read cluster members in %s: %w", path, err)
	}
	type member struct {
		addr string
		port int
	}
	var members []member
	for rows.Next() {
		var m member
		if err := rows.Scan(&m.addr, &m.port); err != nil {
			rows.Close()
			return 0, fmt.Errorf("devserver: read cluster members in %s: %w", path, err)
		}
		members = append(members, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("devserver: read cluster members in %s: %w", path, err)
	}
	deleted := 0
	for _, m := range members {
		if listening(m.addr, m.port) {
			continue
		}
		res, err := db.ExecContext(ctx, `DELETE FROM cluster_membership WHERE rpc_address = ? AND rpc_port = ?`, m.addr, m.port)
		if err != nil {
			return deleted, fmt.Errorf("devserver: forget cluster member %s:%d in %s: %w", m.addr, m.port, path, err)
		}
		n, _ := res.RowsAffected()
		deleted += int(n)
	}
	return deleted, nil
}

// listening says whether something accepts connections on addr:port.
func listening(addr string, port int) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, strconv.Itoa(port)), 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
