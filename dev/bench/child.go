package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the bench started: the Temporal server, a Ferry
// process or the plain relay. Its output goes to a log file; a line
// containing the ready text marks it ready.
type child struct {
	name  string
	cmd   *exec.Cmd
	log   *os.File
	ready chan string // receives the ready line once
	done  chan struct{}
	err   error // the exit status; read after done is closed

	mu   sync.Mutex
	tail []string // the last lines of output, for error messages
}

// startChild starts path with args and env added to this process's
// environment. Lines of its stdout and stderr are written to logPath.
func startChild(name, path string, args, env []string, logPath, readyText string) (*child, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("create log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	// Its own process group: a Ctrl-C in the terminal reaches the bench,
	// which then stops its children in order. Pdeathsig: a bench that is
	// killed leaves no Temporal server or relay behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	c := &child{name: name, cmd: cmd, log: f, ready: make(chan string, 1), done: make(chan struct{})}
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		defer f.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(f, line)
			c.mu.Lock()
			c.tail = append(c.tail, line)
			if len(c.tail) > 20 {
				c.tail = c.tail[1:]
			}
			c.mu.Unlock()
			if !sent && strings.Contains(line, readyText) {
				c.ready <- line
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		c.err = cmd.Wait()
		pw.Close()
		<-scanned
		close(c.done)
	}()
	return c, nil
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// waitReady waits for the ready line and returns it.
func (c *child) waitReady(ctx context.Context, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line := <-c.ready:
		return line, nil
	case <-c.done:
		return "", fmt.Errorf("%s exited before it was ready (%v); its last lines (full log %s):\n%s", c.name, c.err, c.log.Name(), c.lastLines())
	case <-t.C:
		return "", fmt.Errorf("%s was not ready within %s; its last lines (full log %s):\n%s", c.name, timeout, c.log.Name(), c.lastLines())
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// exited says whether the child has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

func (c *child) lastLines() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return "  " + strings.Join(c.tail, "\n  ")
}

// stop sends SIGTERM, waits up to grace, then kills. Safe to call twice.
func (c *child) stop(grace time.Duration) error {
	if c.exited() {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s of SIGTERM: killed", c.name, grace)
	}
	var exit *exec.ExitError
	if c.err != nil && !errors.As(c.err, &exit) {
		return fmt.Errorf("%s: %w", c.name, c.err)
	}
	return nil
}
