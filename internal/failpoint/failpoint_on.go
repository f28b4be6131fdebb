//go:build failpoints

package failpoint

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Enabled: this build has failpoints (the failpoints build tag).
const Enabled = true

// Inject runs the action configured for name, if any. Without
// FERRY_FAILPOINTS it costs one atomic load after the first call.
func Inject(name string) {
	points := load()
	if points == nil {
		return
	}
	p := points[name]
	if p == nil || p.hits.Add(1) != p.at {
		return
	}
	switch p.action {
	case actExit:
		fmt.Fprintf(os.Stderr, "failpoint %s: killing process %d (hit %d)\n", name, os.Getpid(), p.at)
		kill()
	case actSleep:
		time.Sleep(p.sleep)
	}
}

type action int

const (
	actExit action = iota + 1
	actSleep
)

type point struct {
	action action
	sleep  time.Duration
	at     int64 // fire on this hit, counting from 1
	hits   atomic.Int64
}

var (
	once   sync.Once
	parsed map[string]*point // nil when FERRY_FAILPOINTS is unset or empty
)

func load() map[string]*point {
	once.Do(func() {
		spec := strings.TrimSpace(os.Getenv(EnvVar))
		if spec == "" {
			return
		}
		p, err := parse(spec)
		if err != nil {
			panic(fmt.Sprintf("failpoint: %s=%q: %v", EnvVar, spec, err))
		}
		parsed = p
	})
	return parsed
}

// parse reads "name=action[@n],…".
func parse(spec string) (map[string]*point, error) {
	out := map[string]*point{}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, act, ok := strings.Cut(entry, "=")
		name, act = strings.TrimSpace(name), strings.TrimSpace(act)
		if !ok || name == "" || act == "" {
			return nil, fmt.Errorf("entry %q: want name=action[@n]", entry)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("entry %q: %s is set twice", entry, name)
		}
		p := &point{at: 1}
		if a, n, ok := strings.Cut(act, "@"); ok {
			at, err := strconv.ParseInt(n, 10, 64)
			if err != nil || at < 1 {
				return nil, fmt.Errorf("entry %q: @%s must be a whole number from 1", entry, n)
			}
			act, p.at = a, at
		}
		switch {
		case act == "exit":
			p.action = actExit
		case strings.HasPrefix(act, "sleep(") && strings.HasSuffix(act, ")"):
			d, err := time.ParseDuration(act[len("sleep(") : len(act)-1])
			if err != nil || d < 0 {
				return nil, fmt.Errorf("entry %q: sleep wants a duration such as sleep(2s)", entry)
			}
			p.action, p.sleep = actSleep, d
		default:
			return nil, fmt.Errorf("entry %q: unknown action %q (exit, sleep(DUR))", entry, act)
		}
		out[name] = p
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// kill ends the process as SIGKILL would (os.Process.Kill is SIGKILL on Unix)
// and never returns.
func kill() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	select {} // the signal is asynchronous; nothing after Inject may run
}
