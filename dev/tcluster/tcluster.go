package tcluster

import (
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
)

// Ready starts the line a process of the cluster prints once its services
// run (cmd/ferry/cli, `ferry dev temporal`).
const Ready = "ferry dev temporal: "

// Postgres is where the cluster keeps its state: the server (URL, with its
// maintenance database), the two databases on it and the number of
// history shards, fixed when the databases are set up.
type Postgres struct {
	URL                string
	Database           string
	VisibilityDatabase string
	HistoryShards      int
}

// Member is one process of the cluster.
type Member struct {
	// Address is the frontend's host:port: where the frontend process
	// listens and where the history processes reach it.
	Address string
	// Services are the Temporal services the process runs.
	Services []string
	// Ports are its 7 internal ports (frontend membership, history gRPC and
	// membership, matching gRPC and membership, worker gRPC and
	// membership); it binds only those of its services.
	Ports []int
}

// portsPerMember: the frontend's address (used by the frontend member
// only) and the 7 internal ports.
const portsPerMember = 8

// Layout picks the ports of a cluster of a frontend process and histories
// history processes.
func Layout(histories int) (frontend Member, history []Member) {
	ports := LowPorts(portsPerMember * (1 + histories))
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	frontend = Member{Address: addr, Services: []string{"frontend", "matching", "worker"}, Ports: ports[1:portsPerMember]}
	for i := range histories {
		first := portsPerMember*(i+1) + 1
		history = append(history, Member{Address: addr, Services: []string{"history"}, Ports: ports[first : first+7]})
	}
	return frontend, history
}

// Args are the arguments of `ferry dev temporal` (after the program name)
// that run m on pg.
func (m Member) Args(pg Postgres) []string {
	ports := make([]string, len(m.Ports))
	for i, p := range m.Ports {
		ports[i] = strconv.Itoa(p)
	}
	return []string{"dev", "temporal", "--temporal-address", m.Address, "--services", strings.Join(m.Services, ","),
		"--ports", strings.Join(ports, ","), "--temporal-postgres-url", pg.URL, "--temporal-database", pg.Database,
		"--temporal-visibility-database", pg.VisibilityDatabase, "--temporal-history-shards", strconv.Itoa(pg.HistoryShards)}
}

// HistoryAddress is the host identity a history process owns shards as
// (the owner it writes into the shards table): its history gRPC address,
// the second of its internal ports.
func (m Member) HistoryAddress() string { return "127.0.0.1:" + strconv.Itoa(m.Ports[1]) }

// LowPorts picks n free ports below 32768: the server keeps membership
// ports in a SMALLINT column (and the kernel's ephemeral ports, above it,
// are what other processes get without asking). Free when picked: another
// process may take one before the server binds it, and a start then fails
// and is tried again by the caller.
func LowPorts(n int) []int {
	out := make([]int, 0, n)
	for len(out) < n {
		p := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = ln.Close()
		out = append(out, p)
	}
	return out
}
