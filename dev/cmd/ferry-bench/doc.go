// Command ferry-bench is Ferry's benchmark: `make bench` (full size) and
// `make bench-quick` run it; `ferry-bench -h` lists its flags. The work is
// in dev/bench. Re-executed with FERRY_BENCH_ROLE=relay it is the plain
// relay. It does not link the Temporal server, so the plain relay's memory
// is that of a plain relay: ferry-bench-temporal runs the server.
package main
